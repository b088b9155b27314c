"""The real broker (a subprocess) driven by clients we did not write: librdkafka (confluent-kafka, kcat),
kafka-python and aiokafka. Timestamps are chosen out of order on purpose."""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from tests.brokerproc import BrokerProcess, broker  # noqa: F401  (fixture)

pytestmark = pytest.mark.compat
BASE = 1_700_000_000_000


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])
    futures[name].result(15)


def produce(bootstrap: str, topic: str, items: list[tuple[int, bytes, int]], codec: str = "none") -> None:
    """items: (partition, value, timestamp); one librdkafka producer, waits for every ack."""
    p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5})
    errors = []
    for partition, value, ts in items:
        p.produce(topic, value=value, partition=partition, timestamp=ts,
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert p.flush(30) == 0 and not errors


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 60) -> list:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{random.random()}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < expected and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            out.append(m)
    c.close()
    return out


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_create_time_round_trip_and_offsets_for_times_per_codec(broker, codec):  # noqa: F811
    topic = f"ct-{codec}"
    create_topic(broker.bootstrap, topic, 2)
    rng = random.Random(codec)
    items = [(i % 2, b"%s-%d" % (codec.encode(), i), BASE + rng.randint(0, 10_000)) for i in range(300)]
    produce(broker.bootstrap, topic, items, codec)
    msgs = consume_all(broker.bootstrap, topic, 2, len(items))
    assert sorted((m.partition(), m.value(), m.timestamp()[1]) for m in msgs) == sorted(items)
    assert all(m.timestamp()[0] == 1 for m in msgs)  # TIMESTAMP_CREATE_TIME
    truth: dict[int, list[tuple[int, int]]] = {0: [], 1: []}
    for m in msgs:
        truth[m.partition()].append((m.offset(), m.timestamp()[1]))
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "oft"})
    for target in (BASE - 1, BASE + 2500, BASE + 7777, BASE + 10_001):
        answer = c.offsets_for_times([TopicPartition(topic, p, target) for p in (0, 1)], timeout=10)
        for tp in answer:
            want = min((o for o, ts in truth[tp.partition] if ts >= target), default=-1)
            assert tp.offset == want, (target, tp)
    c.close()


def test_log_append_time_topic(broker):  # noqa: F811
    create_topic(broker.bootstrap, "lat", 1, {"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    produce(broker.bootstrap, "lat", [(0, b"a", BASE), (0, b"b", BASE + 5)], "gzip")
    after = int(time.time() * 1000)
    msgs = consume_all(broker.bootstrap, "lat", 1, 2)
    assert [m.value() for m in msgs] == [b"a", b"b"]
    for m in msgs:
        kind, ts = m.timestamp()
        assert kind == 2 and before <= ts <= after  # TIMESTAMP_LOG_APPEND_TIME, the broker's clock


def test_kcat_time_window_is_exact(broker):  # noqa: F811
    create_topic(broker.bootstrap, "win", 1)
    stamps = [BASE + s for s in (0, 10, 5, 20, 30, 25, 40, 50, 45, 60)]
    produce(broker.bootstrap, "win", [(0, b"r%d" % i, ts) for i, ts in enumerate(stamps)])
    t1, t2 = BASE + 20, BASE + 45
    out = subprocess.run(["kcat", "-b", broker.bootstrap, "-C", "-t", "win", "-o", f"s@{t1}", "-o", f"e@{t2}",
                          "-f", "%o %T\\n", "-e", "-q"], capture_output=True, text=True, timeout=30)
    got = [tuple(map(int, line.split())) for line in out.stdout.splitlines() if line.strip()]
    start = next(i for i, ts in enumerate(stamps) if ts >= t1)
    end = next(i for i, ts in enumerate(stamps) if ts >= t2)
    # kcat reads from the first offset at/after T1 up to (not including) the first offset at/after T2.
    assert got == [(i, stamps[i]) for i in range(start, end)]


def test_kafka_python_and_aiokafka_offsets_for_times(broker):  # noqa: F811
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    stamps = [BASE + s for s in (300, 100, 200, 500, 400)]
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)  # idempotent by default: InitProducerId
    for i, ts in enumerate(stamps):
        producer.send("kp", value=b"v%d" % i, partition=0, timestamp_ms=ts)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    tp = KTP("kp", 0)
    for target, want in ((BASE + 150, 0), (BASE + 350, 3), (BASE + 450, 3), (BASE + 501, None)):
        answer = consumer.offsets_for_times({tp: target})[tp]
        assert (answer.offset if answer else None) == want
    consumer.close()

    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATP

    async def check() -> None:
        c = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap)
        await c.start()
        try:
            answer = await c.offsets_for_times({ATP("kp", 0): BASE + 250})
            assert answer[ATP("kp", 0)].offset == 0 and answer[ATP("kp", 0)].timestamp == BASE + 300
        finally:
            await c.stop()
    asyncio.run(check())


def test_group_commit_survives_a_broker_restart(tmp_path):
    from kafka import KafkaConsumer, KafkaProducer

    proc = BrokerProcess(tmp_path / "data").start()
    try:
        producer = KafkaProducer(bootstrap_servers=proc.bootstrap)
        for i in range(30):
            producer.send("grp", value=b"m%d" % i, timestamp_ms=BASE + i)
        producer.flush()
        producer.close()

        def take(n: int) -> list[int]:
            c = KafkaConsumer("grp", bootstrap_servers=proc.bootstrap, group_id="etl", auto_offset_reset="earliest",
                              enable_auto_commit=False, consumer_timeout_ms=60_000)
            got = []
            for m in c:
                got.append(m.offset)
                if len(got) == n:
                    break
            c.commit()
            c.close()
            return got

        assert take(10) == list(range(10))
        proc.restart()
        assert take(10) == list(range(10, 20))
        proc.kill()  # an unclean stop: the committed offset must survive too
        proc.start()
        assert take(5) == list(range(20, 25))
    finally:
        proc.stop()


def test_time_retention_deletes_expired_segments(tmp_path):
    proc = BrokerProcess(tmp_path / "data", {"log.retention.check.interval.ms": "200"}).start()
    try:
        create_topic(proc.bootstrap, "old", 1, {"retention.ms": "3600000", "segment.bytes": "2000",
                                                 "file.delete.delay.ms": "0"})
        now = int(time.time() * 1000)
        expired = [(0, b"x" * 200, now - 3 * 3600_000 + i) for i in range(20)]
        fresh = [(0, b"y" * 200, now + i) for i in range(5)]
        for item in expired + fresh:  # one batch each, so segments roll on size
            produce(proc.bootstrap, "old", [item])
        c = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": "r"})
        deadline = time.monotonic() + 120  # only ends a hung run: retention runs every 200 ms
        low = 0
        while time.monotonic() < deadline:
            low, high = c.get_watermark_offsets(TopicPartition("old", 0), timeout=30)
            if low > 0:
                break
            time.sleep(0.3)
        time.sleep(1.0)  # more retention passes must not delete the segment holding fresh records
        low, high = c.get_watermark_offsets(TopicPartition("old", 0), timeout=30)
        c.close()
        segments = sorted((tmp_path / "data" / "old-0").glob("*.log"))
        # Whole segments go, oldest first; the first one left is the one holding the first fresh record.
        assert 0 < low <= 20 and high == 25
        assert int(segments[0].stem) == low
        bases = [int(p.stem) for p in segments]
        assert len(bases) == 1 or bases[1] > 20
    finally:
        proc.stop()


def test_topic_config_change_takes_effect(broker):  # noqa: F811
    create_topic(broker.bootstrap, "cfg", 1)
    produce(broker.bootstrap, "cfg", [(0, b"before", BASE)])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, "cfg", incremental_configs=[
        ConfigEntry("message.timestamp.type", "LogAppendTime", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(15)
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "cfg")])
    configs = list(described.values())[0].result(15)
    assert configs["message.timestamp.type"].value == "LogAppendTime"
    produce(broker.bootstrap, "cfg", [(0, b"after", BASE)])
    msgs = consume_all(broker.bootstrap, "cfg", 1, 2)
    assert [(m.value(), m.timestamp()[0]) for m in msgs] == [(b"before", 1), (b"after", 2)]
    assert msgs[1].timestamp()[1] > BASE


def test_bad_input_does_not_hurt_the_broker_or_other_clients(broker):  # noqa: F811
    create_topic(broker.bootstrap, "safe", 1)
    produce(broker.bootstrap, "safe", [(0, b"keep", BASE)])
    host, port = broker.bootstrap.split(":")
    attacks = [struct.pack(">i", 2**31 - 1) + b"\0" * 8,                  # a 2 GiB size prefix
               struct.pack(">i", 20) + b"\0\x03\0\x09",                    # a truncated frame
               struct.pack(">ihhi", 10, 999, 0, 1) + b"\0\0",              # an unknown API key
               struct.pack(">ihhi", 10, 3, 99, 1) + b"\0\0",               # an unknown version
               struct.pack(">ihhi", 30, 0, 9, 7) + b"\xff" * 22]           # garbage produce body
    for frame in attacks:
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(frame)
            s.shutdown(socket.SHUT_WR)
            s.settimeout(5)
            try:
                while s.recv(4096):
                    pass
            except (ConnectionError, TimeoutError):
                pass
    bad_crc_producer_ok = consume_all(broker.bootstrap, "safe", 1, 1)
    assert [m.value() for m in bad_crc_producer_ok] == [b"keep"]
    produce(broker.bootstrap, "safe", [(0, b"still works", BASE + 1)])


def test_unknown_topic_is_an_error_not_a_hang(broker):  # noqa: F811
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x", "allow.auto.create.topics": False})
    with pytest.raises(KafkaException):
        c.offsets_for_times([TopicPartition("nope", 0, BASE)], timeout=5)
    c.close()
