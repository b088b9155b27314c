"""Faults on the share-group APIs (KIP-932): confluent-kafka's preview ShareConsumer meets a retriable error
on ShareGroupHeartbeat, ShareFetch or ShareAcknowledge and still gets every record."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("confluent_kafka", minversion="2.16")
from confluent_kafka import Producer, ShareConsumer  # noqa: E402

from chronolog.testing.faults import API_KEYS  # noqa: E402
from tests.groupconfigs import set_group_configs  # noqa: E402

RECORDS = 30


def _group(bootstrap: str, group: str) -> None:
    """Read from the start; records whose acknowledgement an error lost come back after 15 s (the least allowed)."""
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "15000"})


def test_share_api_names() -> None:
    assert (API_KEYS["ShareGroupHeartbeat"], API_KEYS["ShareFetch"], API_KEYS["ShareAcknowledge"]) == (76, 78, 79)


@pytest.mark.parametrize(("api", "error", "mode"), [
    ("ShareGroupHeartbeat", "COORDINATOR_NOT_AVAILABLE", "implicit"),
    ("ShareFetch", "SHARE_SESSION_NOT_FOUND", "implicit"),
    ("ShareAcknowledge", "SHARE_SESSION_NOT_FOUND", "explicit"),
])
def test_share_consumer_survives_a_retriable_error(chronolog_broker, chronolog_faults, api, error, mode):
    topic = chronolog_broker.create_topic(partitions=2, prefix="shfault")
    group = f"g-{topic}"
    producer = Producer({"bootstrap.servers": chronolog_broker.bootstrap})
    for i in range(RECORDS):
        producer.produce(topic, value=f"r-{i:03d}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    _group(chronolog_broker.bootstrap, group)
    rule = chronolog_faults.push_errors(api, error, count=2)
    consumer = ShareConsumer({"bootstrap.servers": chronolog_broker.bootstrap, "group.id": group,
                              "share.acknowledgement.mode": mode, "log_level": 3})
    seen: set[str] = set()
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 90
        while (len(seen) < RECORDS or rule.hits < 2) and time.monotonic() < deadline:
            msgs = consumer.poll(0.2) or []
            for m in msgs:
                assert m.error() is None, m.error()
                seen.add(m.value().decode())
                if mode == "explicit":
                    consumer.acknowledge(m)
            if msgs and mode == "explicit":
                consumer.commit_sync()  # a ShareAcknowledge; errors come back per partition
    finally:
        consumer.close()
    assert rule.hits == 2
    assert seen == {f"r-{i:03d}" for i in range(RECORDS)}
