"""A test broker for the fault tests (chronolog.testing.broker, the context manager the plugin builds on),
and small client helpers."""

from __future__ import annotations

import itertools
import json
import logging
import os
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition

import chronolog.testing


def python_path(*first) -> str:
    """PYTHONPATH for a child process: `first`, then what this one has (no empty entry: that would be the cwd)."""
    parts = [str(p) for p in first] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(parts)


@pytest.fixture(scope="module")
def test_broker() -> Iterator[chronolog.testing.TestBroker]:
    with chronolog.testing.broker(admin_api=True) as b:
        yield b


@pytest.fixture
def faults(test_broker) -> Iterator:
    yield test_broker.faults
    test_broker.faults.clear()


def read_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 30.0) -> list:
    """Every record of the topic from the start (librdkafka consumer, assigned), until `expected` arrived."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                out.append(msg)
        return out
    finally:
        consumer.close()


class Stats:
    """librdkafka's statistics (statistics.interval.ms), the last report kept."""

    def __init__(self) -> None:
        self.last: dict = {}

    def __call__(self, raw: str) -> None:
        self.last = json.loads(raw)

    def broker(self) -> dict:
        """The stats of the one real broker (not the bootstrap or internal pseudo-brokers)."""
        for b in self.last.get("brokers", {}).values():
            if b.get("nodeid", -1) >= 0:
                return b
        return {}


class LogLines(logging.Handler):
    """librdkafka's log lines (its `logger` setting), kept."""

    _ids = itertools.count()

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.logger = logging.getLogger(f"tests.rdkafka.{next(self._ids)}")
        self.logger.setLevel(logging.DEBUG)
        self.logger.propagate = False
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
