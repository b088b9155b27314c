"""Fixtures shared by every test package."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = (REPO.parent / "shared" / "data").resolve()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real inputs nobody here wrote: loghub syslog, Kafka-written segments, legacy v0 sets."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found beside the repo ({SHARED_DATA})")
    return SHARED_DATA


@pytest.fixture(scope="session")
def kafka_segments_dir(shared_data: Path) -> Path:
    return shared_data / "kafka-segments" / "timeindex_test"


# -- Apache Kafka 4.4, the oracle -------------------------------------------------------------------------
# One Kafka broker per test session (per xdist worker): it takes seconds to start and hundreds of MB.
# Tests that need their own settings start a KafkaBroker themselves.
@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory):
    from chronolog.testing.kafka import KafkaBroker, kafka_available

    reason = kafka_available()
    if reason:
        pytest.skip(f"Apache Kafka cannot run here: {reason}")
    broker = KafkaBroker(base=tmp_path_factory.mktemp("kafka"))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory):
    """Three combined KRaft nodes, for tests that need partitions led by different brokers."""
    from chronolog.testing.kafka import KafkaCluster, kafka_available

    reason = kafka_available()
    if reason:
        pytest.skip(f"Apache Kafka cannot run here: {reason}")
    cluster = KafkaCluster(3, base=tmp_path_factory.mktemp("kafka3"))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
