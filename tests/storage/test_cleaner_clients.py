"""A compacted topic written by confluent-kafka (librdkafka) with keys, updates and tombstones, compacted by
the broker's cleaner thread while it runs: a plain and a read_committed consumer read each key's last value
at its original offset and timestamp, tombstones go after `delete.retention.ms`, lookups by time match
brute force before and after cleaning, keyless records are INVALID_RECORD and DeleteRecords is
POLICY_VIOLATION, as in Kafka."""

from __future__ import annotations

import random
import time

import pytest

from chronolog.storage.checkpoints import read_checkpoint
from chronolog.storage.cleaner import CLEANER_CHECKPOINT
from tests.brokerproc import BrokerProcess
from tests.waiting import poll_until

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

TOPIC = "changelog"


@pytest.fixture
def cleaner_broker(tmp_path):
    proc = BrokerProcess(tmp_path / "data", {"log.cleaner.backoff.ms": "50"}).start()
    yield proc
    proc.stop()


def produce(bootstrap: str, items: list[tuple[bytes | None, bytes | None, int]]) -> list[tuple]:
    """(offset, timestamp, key, value) of each record, as acknowledged."""
    acked: list[tuple] = []
    errors: list = []

    def report(err, msg):
        if err is not None:
            errors.append(err)
        else:
            acked.append((msg.offset(), msg.timestamp()[1], msg.key(), msg.value()))
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True, "batch.size": 1500})
    for key, value, ts in items:
        p.produce(TOPIC, key=key, value=value, timestamp=ts, on_delivery=report)
        p.poll(0)
    assert p.flush(30) == 0
    assert not errors, errors
    return sorted(acked)


def consume_all(bootstrap: str, isolation: str) -> list[tuple]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{isolation}-{random.random()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "isolation.level": isolation,
                  "enable.partition.eof": True})
    c.assign([TopicPartition(TOPIC, 0, 0)])
    out = []
    deadline = time.monotonic() + 120  # only ends a hung run: reading to the end returns at once
    try:
        while time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return out
                raise KafkaException(msg.error())
            out.append((msg.offset(), msg.timestamp()[1], msg.key(), msg.value()))
        raise AssertionError(f"the end of {TOPIC}-0 not reached in 120 s ({len(out)} records read)")
    finally:
        c.close()


def lookups(bootstrap: str, times: list[int]) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "lookups"})
    try:
        return [c.offsets_for_times([TopicPartition(TOPIC, 0, t)], timeout=15)[0].offset for t in times]
    finally:
        c.close()


def brute(records: list[tuple], t: int) -> int:
    return min((off for off, ts, _k, _v in records if ts >= t), default=-1)


def checkpoint(data_dir) -> int:
    return read_checkpoint(data_dir / CLEANER_CHECKPOINT).get((TOPIC, 0), -1)


def settled(data_dir) -> bool:
    """The cleaner has cleaned up to the active segment: it has nothing more to do until new data comes."""
    bases = [int(p.name[:20]) for p in (data_dir / f"{TOPIC}-0").glob("*.log")]
    return checkpoint(data_dir) == max(bases)


def latest(records) -> dict:
    out = {}
    for _o, _t, k, v in records:
        out[k] = v
    return {k: v for k, v in out.items() if v is not None}


def test_compacted_topic_written_and_read_by_librdkafka(cleaner_broker, tmp_path):
    bootstrap = cleaner_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # min.compaction.lag.ms holds the cleaner off (the records are an hour old) until it is lowered below
    configs = {"cleanup.policy": "compact", "segment.bytes": "8192", "min.cleanable.dirty.ratio": "0.01",
               "delete.retention.ms": "0", "min.compaction.lag.ms": str(7 * 86_400_000)}
    admin.create_topics([NewTopic(TOPIC, 1, 1, config=configs)])[TOPIC].result(15)
    rng = random.Random(4)
    base = int(time.time() * 1000) - 3_600_000
    items = []
    for i in range(1500):
        key = f"key-{rng.randrange(60)}".encode()
        value = None if rng.random() < 0.1 else f"value-{i}-".encode() * 3
        items.append((key, value, base + i * 1000 + rng.randrange(-5000, 5000)))  # not in order
    written = produce(bootstrap, items)
    times = sorted({ts for _o, ts, _k, _v in written})[::37] + [base - 10_000, base + 2_000_000]
    before = consume_all(bootstrap, "read_uncommitted")
    assert lookups(bootstrap, times) == [brute(before, t) for t in times]

    data_dir = cleaner_broker.data_dir
    assert checkpoint(data_dir) == -1  # held off by min.compaction.lag.ms
    resource = ConfigResource(ConfigResource.Type.TOPIC, TOPIC, incremental_configs=[
        ConfigEntry("min.compaction.lag.ms", "60000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(15)
    assert poll_until(lambda: settled(data_dir), 300), "the cleaner did not run"
    first = checkpoint(data_dir)
    plain = consume_all(bootstrap, "read_uncommitted")
    committed = consume_all(bootstrap, "read_committed")
    assert plain == committed
    assert set(plain) <= set(written)  # offsets, timestamps, keys and values unchanged
    assert latest(plain) == latest(written)
    cleaned = [r for r in plain if r[0] < first]
    assert len({r[2] for r in cleaned}) == len(cleaned) < first  # one record per key below the checkpoint
    assert any(r[3] is None for r in cleaned)  # tombstones stay until their delete horizon
    assert lookups(bootstrap, times) == [brute(plain, t) for t in times]

    # more updates: the next cleaning is past the tombstones' horizon (delete.retention.ms=0): they go
    more = produce(bootstrap, [(f"new-{i}".encode(), b"x" * 50, base + 2_000_000 + i) for i in range(200)])
    assert poll_until(lambda: checkpoint(data_dir) > more[0][0] and settled(data_dir), 300)
    after = consume_all(bootstrap, "read_uncommitted")
    assert not [r for r in after if r[0] < first and r[3] is None]
    assert latest(after) == latest(written + more)
    assert lookups(bootstrap, times) == [brute(after, t) for t in times]

    # the same after a restart (the cleaned segments and their indexes as they are on disk)
    cleaner_broker.restart()
    assert consume_all(bootstrap, "read_committed") == after
    # and to kafka-python and aiokafka, which meet the emptied batches and offset gaps too
    assert consume_python_clients(bootstrap, after[-1][0] + 1) == (after, after)


def consume_python_clients(bootstrap: str, end: int) -> tuple[list, list]:
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATP
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    kc = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=60_000)
    kc.assign([KTP(TOPIC, 0)])
    kc.seek_to_beginning()
    got_k = []
    for msg in kc:
        got_k.append((msg.offset, msg.timestamp, msg.key, msg.value))
        if msg.offset + 1 >= end:
            break
    kc.close()

    async def aio() -> list:
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
        await c.start()
        out = []
        try:
            c.assign([ATP(TOPIC, 0)])
            await c.seek_to_beginning(ATP(TOPIC, 0))
            deadline = time.monotonic() + 120
            while (not out or out[-1][0] + 1 < end) and time.monotonic() < deadline:
                for msgs in (await c.getmany(timeout_ms=500)).values():
                    out += [(m.offset, m.timestamp, m.key, m.value) for m in msgs]
        finally:
            await c.stop()
        return out
    return got_k, asyncio.run(aio())


def test_keyless_records_and_delete_records_refused(cleaner_broker):
    bootstrap = cleaner_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1, config={"cleanup.policy": "compact"})])[TOPIC].result(15)
    errors = []
    p = Producer({"bootstrap.servers": bootstrap, "retries": 0})
    p.produce(TOPIC, value=b"no key", on_delivery=lambda err, msg: errors.append(err))
    p.flush(15)
    assert [e.code() for e in errors] == [KafkaError.INVALID_RECORD]
    produce(bootstrap, [(b"k", b"v", int(time.time() * 1000))])
    result = admin.delete_records([TopicPartition(TOPIC, 0, 1)])
    with pytest.raises(KafkaException) as info:
        next(iter(result.values())).result(15)
    assert info.value.args[0].code() == KafkaError.POLICY_VIOLATION


def test_broker_sigkilled_while_cleaning_keeps_the_latest_values(tmp_path):
    """A throttled cleaner (so that each cleaning takes a while) in a broker SIGKILLed at random moments,
    restarted each time: the topic always reads back each key's last value at its offset, no record that
    was not written, and the cleaning goes on from where it got."""
    proc = BrokerProcess(tmp_path / "data", {"log.cleaner.backoff.ms": "20",
                                              "log.cleaner.io.max.bytes.per.second": "40000"}).start()
    try:
        bootstrap = proc.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1, config={
            "cleanup.policy": "compact", "segment.bytes": "8192", "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": "0"})])[TOPIC].result(15)
        rng = random.Random(9)
        base = int(time.time() * 1000) - 3_600_000
        written: list[tuple] = []
        for wave in range(4):
            written += produce(bootstrap, [(f"key-{rng.randrange(40)}".encode(),
                                            None if rng.random() < 0.1 else f"w{wave}-{i}".encode() * 4,
                                            base + wave * 100_000 + i) for i in range(300)])
            time.sleep(rng.uniform(0.1, 0.8))  # a random moment of the cleaning this wave started
            proc.kill()
            proc.start()
            got = consume_all(bootstrap, "read_committed")
            assert latest(got) == latest(written)
            assert set(got) <= set(written)
            assert [r[0] for r in got] == sorted({r[0] for r in got})
        assert poll_until(lambda: settled(proc.data_dir), 300)
        final = consume_all(bootstrap, "read_uncommitted")
        assert latest(final) == latest(written)
        cleaned = [r for r in final if r[0] < checkpoint(proc.data_dir)]
        assert len({r[2] for r in cleaned}) == len(cleaned)
        assert "swapped in cleaned segment" in proc.log_path.read_text()  # it was cleaning while it was killed
    finally:
        proc.stop()
