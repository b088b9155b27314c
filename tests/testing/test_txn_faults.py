"""Faults on the exactly-once commit path (TxnOffsetCommit, KIP-98/447), seen by librdkafka's transactional
consume-transform-produce loop: per-partition error codes as for OffsetCommit, a retriable one retried
inside send_offsets_to_transaction, an abortable one handed to the application, which aborts, rewinds and
still writes every input once; and a rule the client's settings rule out is reported with why."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

from chronolog.testing import FaultsClient
from tests.consuming import read_messages

pytestmark = pytest.mark.compat

PARTITIONS = 2
TOTAL = 40


def feed(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(TOTAL):
        producer.produce(topic, b"v%d" % i, partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def transform(bootstrap: str, source: str, sink: str, group: str) -> int:
    """KIP-98's loop: read a batch, write it upper-cased in a transaction that also commits the batch's
    offsets; an abortable error aborts the transaction and rewinds to the committed offsets. Returns how
    many transactions were aborted."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{group}-txn", "linger.ms": 5})
    producer.init_transactions(30)
    consumer.subscribe([source])
    done = aborts = 0
    deadline = time.monotonic() + 120  # a bound only for a hung client
    try:
        while done < TOTAL and time.monotonic() < deadline:
            batch = [m for m in consumer.consume(20, 0.5) if m.error() is None]
            if not batch:
                continue
            producer.begin_transaction()
            for m in batch:
                producer.produce(sink, m.value().upper(), partition=m.partition())
            try:
                producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                     consumer.consumer_group_metadata(), 30)
                producer.commit_transaction(30)
                done += len(batch)
            except KafkaException as exc:
                if not exc.args[0].txn_requires_abort():
                    raise
                aborts += 1
                producer.abort_transaction(30)
                for tp in consumer.committed(consumer.assignment(), 30):
                    consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0
                                                 else OFFSET_BEGINNING))
    finally:
        consumer.close()
    assert done == TOTAL, f"{done} of {TOTAL} inputs transformed in committed transactions"
    return aborts


def committed_offsets(bootstrap: str, group: str, topic: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return [tp.offset for tp in consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], 30)]
    finally:
        consumer.close()


def assert_exactly_once(test_broker, source: str, sink: str, group: str) -> None:
    got = read_messages(test_broker.bootstrap, sink, PARTITIONS, "read_committed", timeout=60)
    assert sorted(m.value() for msgs in got.values() for m in msgs) == sorted(b"V%d" % i for i in range(TOTAL))
    assert committed_offsets(test_broker.bootstrap, group, source) == test_broker.end_offsets(source)


def test_a_retriable_txn_offset_commit_error_is_retried_inside_the_transaction(test_broker, faults):
    source, sink = test_broker.create_topic(partitions=PARTITIONS), test_broker.create_topic(partitions=PARTITIONS)
    feed(test_broker.bootstrap, source)
    rule = faults.push_errors("TxnOffsetCommit", "COORDINATOR_LOAD_IN_PROGRESS", count=2, topic=source, partition=0)
    assert transform(test_broker.bootstrap, source, sink, f"g-{source}") == 0  # librdkafka retried, no abort
    assert rule.hits == 2 and rule.remaining == 0
    assert_exactly_once(test_broker, source, sink, f"g-{source}")
    assert faults.unhit() == []


def test_an_abortable_txn_offset_commit_error_reaches_the_application(test_broker, faults):
    """ILLEGAL_GENERATION on one partition (what Kafka answers a zombie member, KIP-447): librdkafka makes it
    an abortable error of send_offsets_to_transaction; the application aborts, rewinds and redoes the batch,
    and the output still holds every input once."""
    source, sink = test_broker.create_topic(partitions=PARTITIONS), test_broker.create_topic(partitions=PARTITIONS)
    feed(test_broker.bootstrap, source)
    rule = faults.push_errors("TxnOffsetCommit", "ILLEGAL_GENERATION", count=1, topic=source, partition=1)
    assert transform(test_broker.bootstrap, source, sink, f"g-{source}") == 1
    assert rule.hits == 1
    assert_exactly_once(test_broker, source, sink, f"g-{source}")


def test_an_offset_commit_rule_under_transactions_is_reported_with_the_reason(test_broker, faults):
    source, sink = test_broker.create_topic(partitions=PARTITIONS), test_broker.create_topic(partitions=PARTITIONS)
    feed(test_broker.bootstrap, source)
    commit = faults.push_errors("OffsetCommit", "COORDINATOR_NOT_AVAILABLE", count=1)
    elsewhere = faults.push_errors("TxnOffsetCommit", "NOT_COORDINATOR", count=1, topic="elsewhere")
    transform(test_broker.bootstrap, source, sink, f"g-{source}")
    assert commit.hits == elsewhere.hits == 0
    first, second = faults.unhit()
    assert first.startswith(f"rule {commit.id} (OffsetCommit: COORDINATOR_NOT_AVAILABLE) never fired: the broker "
                            "got no OffsetCommit request, but ")
    assert "commits its offsets in transactions" in first and first.endswith("push the fault for TxnOffsetCommit instead")
    assert second.startswith(f"rule {elsewhere.id} (TxnOffsetCommit: NOT_COORDINATOR on elsewhere) never fired: ")
    assert f"none for elsewhere (they named ['{source}'])" in second
    assert FaultsClient(test_broker.admin_url).unhit() == [first, second]  # what another process sees
    faults.clear()
    assert faults.unhit() == []
