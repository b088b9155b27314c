"""Committed offsets in `__consumer_offsets` with real clients: confluent-kafka (librdkafka) and
kafka-python commit as group members, the broker is SIGKILLed, and after the restart both groups find the
last commits the broker acknowledged. The internal topic is listed as Kafka lists it (is_internal) and a
client cannot produce to it."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.brokerproc import BrokerProcess
from tests.waiting import poll_until

pytestmark = pytest.mark.compat

TOPIC = "orders"
PARTITIONS = 2
RECORDS = 40


def _setup(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS)])[TOPIC].result(15)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(RECORDS):
        producer.produce(TOPIC, key=b"k%d" % i, value=b"v%d" % i, partition=i % PARTITIONS)
    assert producer.flush(15) == 0


def _confluent_commits(bootstrap: str, group: str) -> dict[int, int]:
    """Member of `group`: reads everything, committing (synchronously) after every 3rd record; the offsets
    of the last acknowledged commit."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "session.timeout.ms": 6000})
    consumer.subscribe([TOPIC])
    acked: dict[int, int] = {}
    seen = 0
    deadline = time.monotonic() + 60
    try:
        while seen < RECORDS - 1 and time.monotonic() < deadline:  # the last record is left uncommitted
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            seen += 1
            if seen % 3 == 0 or seen == RECORDS - 1:
                done = consumer.commit(message=msg, asynchronous=False)
                for tp in done:
                    assert tp.error is None
                    acked[tp.partition] = tp.offset
        assert seen == RECORDS - 1
    finally:
        consumer.close()
    return acked


def _kafka_python_commits(bootstrap: str, group: str) -> dict[int, int]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                             auto_offset_reset="earliest", api_version=(2, 5), session_timeout_ms=6000,
                             consumer_timeout_ms=1000)
    consumer.subscribe([TOPIC])
    acked: dict[int, int] = {}
    seen = 0
    deadline = time.monotonic() + 60
    try:
        while seen < RECORDS // 2 and time.monotonic() < deadline:
            for records in consumer.poll(500).values():
                for rec in records:
                    if seen >= RECORDS // 2:
                        break
                    seen += 1
                    offsets = {KTP(TOPIC, rec.partition): OffsetAndMetadata(rec.offset + 1, "kp", -1)}
                    consumer.commit(offsets)  # synchronous: raises unless the broker acknowledged it
                    acked[rec.partition] = rec.offset + 1
        assert seen == RECORDS // 2
    finally:
        consumer.close(autocommit=False)
    return acked


def _committed(bootstrap: str, group: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        got = consumer.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=15)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in got if tp.offset >= 0}


def test_commits_of_real_clients_survive_a_sigkill(tmp_path):
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        _setup(broker.bootstrap)
        assert not (tmp_path / "data" / "__consumer_offsets-0").exists()  # created on the first group write
        ck = _confluent_commits(broker.bootstrap, "ck-group")
        kp = _kafka_python_commits(broker.bootstrap, "kp-group")
        assert ck and kp
        assert (tmp_path / "data" / "__consumer_offsets-0").is_dir()
        broker.kill()
        broker.start()
        assert _committed(broker.bootstrap, "ck-group") == ck
        assert _committed(broker.bootstrap, "kp-group") == kp
        # the group's records are in Kafka's schemas in its partition: a consumer of the internal topic reads them
        from chronolog.records.group_records import GroupMetadataKey, OffsetCommitKey, read_key
        from chronolog.server.txn_log import partition_for
        reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "reader", "enable.auto.commit": False})
        reader.assign([TopicPartition("__consumer_offsets", partition_for("ck-group", 50), 0)])
        keys = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (
                GroupMetadataKey("ck-group") in keys
                and any(isinstance(k, OffsetCommitKey) and k.group == "ck-group" for k in keys)):
            msg = reader.poll(0.5)
            if msg is not None and not msg.error():
                keys.append(read_key(msg.key()))
        reader.close()
        assert OffsetCommitKey("ck-group", TOPIC, 0) in keys or OffsetCommitKey("ck-group", TOPIC, 1) in keys
        assert GroupMetadataKey("ck-group") in keys  # written when its rebalance completed
    finally:
        broker.stop()


def test_the_internal_topic_is_listed_as_internal_and_refuses_producers(tmp_path):
    from kafka.admin import KafkaAdminClient

    broker = BrokerProcess(tmp_path / "data").start()
    try:
        _setup(broker.bootstrap)
        assert not (tmp_path / "data" / "__consumer_offsets-0").exists()  # no group yet: nothing created
        # a Metadata request naming it (a producer's: auto-creation allowed) has the coordinator create it,
        # with offsets.topic.num.partitions, never num.partitions (AutoTopicCreationManager)
        asked = Producer({"bootstrap.servers": broker.bootstrap}).list_topics("__consumer_offsets", timeout=15)
        assert poll_until(lambda: (tmp_path / "data" / "__consumer_offsets-49").is_dir(), 60)
        assert len(asked.topics["__consumer_offsets"].partitions) == 50
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g", "enable.auto.commit": False})
        consumer.commit(offsets=[TopicPartition(TOPIC, 0, 3)], asynchronous=False)
        consumer.close()
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, api_version=(2, 5))
        try:
            described = admin.describe_topics(["__consumer_offsets"])
        finally:
            admin.close()
        assert described[0]["is_internal"] is True and len(described[0]["partitions"]) == 50
        errors = []
        producer = Producer({"bootstrap.servers": broker.bootstrap, "message.send.max.retries": 0})
        producer.produce("__consumer_offsets", value=b"x", partition=0, on_delivery=lambda err, _m: errors.append(err))
        producer.flush(15)
        assert poll_until(lambda: errors, 60)
        assert errors[0] is not None and errors[0].code() == KafkaError.TOPIC_EXCEPTION
    finally:
        broker.stop()


def test_looking_for_a_group_coordinator_creates_the_topic(tmp_path):
    """KafkaApis.handleFindCoordinatorRequest creates `__consumer_offsets` when a client first looks for a
    group's coordinator, before the group's first rebalance needs it (here in a thread, off the event loop:
    a rebalance under load timed out while 50 partitions were made inside SyncGroup)."""
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        _setup(broker.bootstrap)
        assert not (tmp_path / "data" / "__consumer_offsets-0").exists()
        _committed(broker.bootstrap, "g")  # FindCoordinator, then OffsetFetch: nothing committed
        assert poll_until(lambda: (tmp_path / "data" / "__consumer_offsets-49").is_dir(), 60)
        assert TOPIC in Producer({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=15).topics
    finally:
        broker.stop()
