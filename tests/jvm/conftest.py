"""One chronolog broker per module for Kafka's tools (each tool run is a JVM of its own, 1-2 s), and the two
steps every module here starts with: compile its Java sources against Kafka's jars, start a broker of its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

JAVA = Path(__file__).parent / "java"


def java_classes(tmp_path_factory: pytest.TempPathFactory, what: str, *sources: str, folder: str = "classes") -> Path:
    """`sources` (file names in java/) compiled into a fresh folder; the test skips where `what` (Kafka's
    client, Streams, Connect) cannot run: no Java or no Kafka jars."""
    from chronolog.testing.kafka import compile_java, kafka_available

    reason = kafka_available()
    if reason:
        pytest.skip(f"{what} cannot run here: {reason}")
    return compile_java(tmp_path_factory.mktemp(folder), *(JAVA / s for s in sources))


def own_broker(tmp_path_factory: pytest.TempPathFactory, name: str, configs: dict[str, str] | None = None) -> Iterator:
    """A chronolog broker of the module's own (`yield from` it in a module fixture), with `configs` where
    the session's broker's defaults do not fit; its data goes with it."""
    from chronolog.testing.runner import TestBroker

    broker = TestBroker(tmp_path_factory.mktemp(name) / "data", configs=configs, keep_data=False)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def chronolog(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    from chronolog.testing.kafka import kafka_available

    reason = kafka_available()
    if reason:
        pytest.skip(f"Kafka's tools cannot run here: {reason}")
    yield from own_broker(tmp_path_factory, "jvm")
