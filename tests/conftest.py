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
# Its background tasks run as in Kafka's integration tests: retention checked every 500 ms from the start, the
# cleaner looking for dirty logs every 200 ms (Kafka's defaults: 5 min after a first wait of 30 s, and 15 s).
# tests/differential starts chronolog with these settings too.
KAFKA_TEST_CONFIGS = {
    "log.retention.check.interval.ms": "500",
    "log.initial.task.delay.ms": "0",
    "log.cleaner.backoff.ms": "200",
}


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory):
    from chronolog.testing.kafka import KafkaBroker, kafka_available

    reason = kafka_available()
    if reason:
        pytest.skip(f"Apache Kafka cannot run here: {reason}")
    broker = KafkaBroker(configs=KAFKA_TEST_CONFIGS, base=tmp_path_factory.mktemp("kafka"))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop(clean=False)  # its data is deleted with the session's tmp dir


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
        cluster.stop(clean=False)
