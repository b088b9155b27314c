"""The same tiered scenario against chronolog and Apache Kafka 4.4 with its own local-directory tier
(`LocalTieredStorage`, kafka-storage's test fixtures): produce the same batches with late CreateTime,
roll, tier, expire locally; then the records read from offset 0, ListOffsets by time over the tiered data
and the specials -1/-2/-3/-4/-5 (ListOffsets v9) must be equal."""

from __future__ import annotations

import random
import time

import pytest

from chronolog.testing import broker
from chronolog.testing.kafka import KafkaBroker, jars_dir
from tests.differential.admin_wire import request

ck = pytest.importorskip("confluent_kafka")
pytestmark = [pytest.mark.slow, pytest.mark.differential]

TOPIC = {"remote.storage.enable": "true", "segment.bytes": str(1 << 20), "local.retention.ms": "1000",
         "retention.ms": "-1"}
GROUPS, PER_GROUP = 60, 100  # 6000 records of ~400 bytes: about 2.4 MB, 3 segments


def produce(bootstrap: str, now: int, seed: int = 11) -> list[tuple[int, bytes]]:
    """One batch per group of records (linger long, then flush): the same batches, so the same segments, on
    both brokers. Returns (timestamp, value) in offset order."""
    rng = random.Random(seed)
    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 60_000, "batch.size": 1 << 20,
                            "enable.idempotence": False, "compression.type": "none"})
    sent = []
    for g in range(GROUPS):
        for i in range(PER_GROUP):
            ts = now + g * 10_000 + i * 10 - rng.randrange(30_000)
            value = f"{g}:{i}:".encode() + rng.randbytes(380)
            producer.produce("tiered", value, timestamp=ts)
            sent.append((ts, value))
        assert producer.flush(30) == 0
    return sent


REQUEST_TIMED_OUT = 7


def list_offsets(port: int, timestamp: int, version: int = 9) -> tuple[int, int, int]:
    """One lookup, asked again (as a client retries) while Kafka's read of its remote tier times out, which
    it does under load."""
    for _ in range(5):
        body = request(port, 2, version, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "tiered", "partitions": [{"partition_index": 0, "timestamp": timestamp,
                                               "current_leader_epoch": -1}]}]})
        p = body["topics"][0]["partitions"][0]
        if p["error_code"] != REQUEST_TIMED_OUT:
            break
    return p["error_code"], p["timestamp"], p["offset"]


def settled(port: int, end: int) -> bool:
    """Everything tiered and expired locally: -5 is the last offset and -4 the log end."""
    return list_offsets(port, -5)[2] == end - 1 and list_offsets(port, -4)[2] == end


def observe(bootstrap: str, port: int, sent) -> dict:
    end = len(sent)
    deadline = time.monotonic() + 120
    while not settled(port, end):
        assert time.monotonic() < deadline, ("never settled", [list_offsets(port, s) for s in (-4, -5)])
        time.sleep(0.5)
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "cmp", "enable.auto.commit": False})
    consumer.assign([ck.TopicPartition("tiered", 0, 0)])
    records = []
    deadline = time.monotonic() + 60
    while len(records) < end and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            records.append((msg.offset(), msg.timestamp()[1], msg.value()))
    consumer.close()
    rng = random.Random(3)
    lo, hi = min(t for t, _v in sent) - 10, max(t for t, _v in sent) + 10
    targets = [lo, hi, *sorted(rng.randrange(lo, hi) for _ in range(40))]
    return {"records": records,
            "by_time": [list_offsets(port, t) for t in targets],
            "specials": {s: list_offsets(port, s) for s in (-1, -2, -3, -4, -5)},
            "v8_latest_tiered": list_offsets(port, -5, version=8)[0]}


@pytest.fixture(scope="module")
def kafka_tiered(tmp_path_factory):
    if not list(jars_dir().glob("kafka-storage-*-test-fixtures.jar")):
        pytest.skip("kafka-storage test-fixtures (LocalTieredStorage) not resolved: run make")
    tier = tmp_path_factory.mktemp("kafka-tier")
    configs = {"remote.log.storage.system.enable": "true",
               "remote.log.storage.manager.class.name":
                   "org.apache.kafka.server.log.remote.storage.LocalTieredStorage",
               "remote.log.storage.manager.impl.prefix": "rsm.config.", "rsm.config.dir": str(tier),
               "remote.log.metadata.manager.listener.name": "PLAINTEXT",
               "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
               "rlmm.config.remote.log.metadata.topic.num.partitions": "1",
               "remote.log.manager.task.interval.ms": "1000", "log.retention.check.interval.ms": "1000"}
    try:
        kafka = KafkaBroker(configs=configs).start()
    except Exception as exc:  # no Java, no jars
        pytest.skip(f"Kafka 4.4 with LocalTieredStorage cannot start here: {exc}")
    try:
        yield kafka
    finally:
        kafka.stop()


def test_same_answers_as_kafka_local_tiered_storage(kafka_tiered, tmp_path):
    kafka_tiered.create_topic("tiered", 1, TOPIC)
    now = int(time.time() * 1000) - 3_600_000
    sent = produce(kafka_tiered.bootstrap, now)
    theirs = observe(kafka_tiered.bootstrap, kafka_tiered.nodes[0].port, sent)
    configs = {"remote.log.storage.system.enable": "true", "remote.log.storage.dir": str(tmp_path / "tier"),
               "remote.log.manager.task.interval.ms": "1000", "log.retention.check.interval.ms": "1000"}
    with broker(tmp_path / "data", configs=configs) as b:
        b.create_topic("tiered", 1, TOPIC)
        assert produce(b.bootstrap, now) == sent
        ours = observe(b.bootstrap, b.port, sent)
    assert [r[0] for r in theirs["records"]] == list(range(len(sent)))
    assert ours["records"] == theirs["records"]
    assert ours["by_time"] == theirs["by_time"]
    # -3 (max timestamp, KIP-734): Kafka looks only at the local segments (none left with records here: -1/-1);
    # chronolog answers over the whole log, tiered segments included (docs/differences.md).
    top = max(t for t, _v in sent)
    assert theirs["specials"].pop(-3) == (0, -1, -1)
    assert ours["specials"].pop(-3) == (0, top, min(o for o, (t, _v) in enumerate(sent) if t == top))
    assert ours["specials"] == theirs["specials"]
    assert theirs["specials"][-4][1:] == (-1, len(sent)) and theirs["specials"][-5][1:] == (-1, len(sent) - 1)
    assert ours["v8_latest_tiered"] == theirs["v8_latest_tiered"] != 0
