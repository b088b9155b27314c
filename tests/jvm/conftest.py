"""One chronolog broker per module for Kafka's tools (each tool run is a JVM of its own, 1-2 s)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def chronolog(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    from chronolog.testing.kafka import kafka_available
    from chronolog.testing.runner import TestBroker

    reason = kafka_available()
    if reason:
        pytest.skip(f"Kafka's tools cannot run here: {reason}")
    broker = TestBroker(tmp_path_factory.mktemp("jvm") / "data", keep_data=False)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
