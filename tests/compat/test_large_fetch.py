"""Fetches large enough to be sent as file regions (sendfile) read by every client we test with:
librdkafka (confluent-kafka and kcat), kafka-python and aiokafka, across segment boundaries and with a
compressed topic beside a plain one."""

from __future__ import annotations

import asyncio
import random
import subprocess
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.brokerproc import BrokerProcess
from tests.compat.test_clients import create_topic

pytestmark = pytest.mark.compat
COUNT = 3000
# Two segments: 1 MiB fetches (file regions, sent with sendfile) in the first, a shorter one (read at once)
# at its end, then the next segment.
SEGMENT_BYTES = 2_000_000


def _values(topic: str) -> list[bytes]:
    rng = random.Random(topic)
    return [b"%s-%06d-" % (topic.encode(), i) + rng.randbytes(rng.randint(200, 1800)) for i in range(COUNT)]


@pytest.fixture(scope="module")
def topics(tmp_path_factory):
    """A broker with two topics, one partition each, ~3 MB: "big" uncompressed, "bigz" with zstd batches."""
    broker = BrokerProcess(tmp_path_factory.mktemp("large-fetch") / "data").start()
    for name, codec in (("big", "none"), ("bigz", "zstd")):
        create_topic(broker.bootstrap, name, 1, {"segment.bytes": str(SEGMENT_BYTES)})
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, "batch.size": 200_000,
                      "compression.type": codec})
        for v in _values(name):
            p.produce(name, value=v, partition=0)
        assert p.flush(30) == 0
    yield broker
    broker.stop()


@pytest.mark.parametrize("topic", ["big", "bigz"])
def test_confluent_kafka_reads_everything(topics, topic):
    c = Consumer({"bootstrap.servers": topics.bootstrap, "group.id": f"g-{topic}", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < COUNT and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None:
            assert not m.error(), m.error()
            got.append((m.offset(), m.value()))
    c.close()
    assert [o for o, _ in got] == list(range(COUNT))
    assert [v for _, v in got] == _values(topic)


def test_kcat_reads_everything(topics):
    out = subprocess.run(["kcat", "-b", topics.bootstrap, "-C", "-t", "big", "-p", "0", "-o", "beginning", "-e",
                          "-q", "-f", "%o %S\n"], capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr[-500:]
    assert out.stdout.decode().splitlines() == [f"{i} {len(v)}" for i, v in enumerate(_values("big"))]


@pytest.mark.parametrize("topic", ["big", "bigz"])
def test_kafka_python_reads_everything(topics, topic):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    consumer = KafkaConsumer(bootstrap_servers=topics.bootstrap, enable_auto_commit=False,
                             max_partition_fetch_bytes=1 << 20)
    consumer.assign([KTP(topic, 0)])
    consumer.seek(KTP(topic, 0), 0)
    got = []
    deadline = time.monotonic() + 30
    while len(got) < COUNT and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got.extend((r.offset, r.value) for r in records)
    consumer.close()
    assert [o for o, _ in got] == list(range(COUNT))
    assert [v for _, v in got] == _values(topic)


@pytest.mark.parametrize("topic", ["big", "bigz"])
def test_aiokafka_reads_everything(topics, topic):
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATP

    async def read() -> list:
        c = AIOKafkaConsumer(bootstrap_servers=topics.bootstrap, enable_auto_commit=False)
        await c.start()
        got = []
        try:
            c.assign([ATP(topic, 0)])
            c.seek(ATP(topic, 0), 0)
            deadline = time.monotonic() + 30
            while len(got) < COUNT and time.monotonic() < deadline:
                for records in (await c.getmany(timeout_ms=500)).values():
                    got.extend((r.offset, r.value) for r in records)
        finally:
            await c.stop()
        return got

    got = asyncio.run(read())
    assert [o for o, _ in got] == list(range(COUNT))
    assert [v for _, v in got] == _values(topic)
