"""ListOffsets after the log changed under it: segment rolls (by size and by record time), retention by time
and by size, DeleteRecords, compaction and an open transaction, against chronolog and Kafka 4.4.

Segments roll at Kafka 4.4's smallest `segment.bytes` (1 MiB, KIP-1030) with records of 200 kB, or by
`segment.ms` over record timestamps far apart (`LogSegment.shouldRoll` measures from the segment's first
batch's timestamp), so each broker rolls at the same offsets; the segment files' base offsets are compared
too."""

from __future__ import annotations

import pytest

from tests.differential.conftest import normalise
from tests.differential.steps import (
    consume,
    list_offsets_admin,
    now_ms,
    observe_offsets,
    produce,
    time_queries,
    wait_until,
)

BIG = 200_000
MIB = "1048576"


def segment_bases(side, topic: str, partition: int = 0) -> list[int]:
    """The base offsets of the partition's segments (its .log files that are not being deleted)."""
    return sorted(int(p.name[:-4]) for p in side.partition_dir(topic, partition).glob("*.log"))


def _big(i: int, ts: int, key: bytes | None = None) -> tuple:
    return (key if key is not None else f"k{i}".encode(), bytes([65 + i % 26]) * BIG, ts)


ROLLS = {
    # one 200 kB record a batch under 1 MiB segments: five a segment
    "by_size": ({"segment.bytes": MIB}, [0, 5000, 1000, 7000, 2000, 9000, 3000, 3000, 11000, 4000, 8000, 6000], True),
    # 60 s segments by record time: a batch 70 s after the segment's first rolls, late batches do not
    "by_time": ({"segment.ms": "60000"}, [0, 30_000, 70_000, 10_000, 150_000, 160_000, 90_000, 240_000,
                                          200_000, 320_000], False),
}


@pytest.mark.parametrize("roll", sorted(ROLLS))
def test_offsets_after_segment_rolls(both, roll):
    configs, deltas, big = ROLLS[roll]
    base = (now_ms() - 3_000_000) // 1000 * 1000
    stamps = [base + d for d in deltas]
    batches = [[_big(i, ts) if big else (f"k{i}".encode(), b"v", ts)] for i, ts in enumerate(stamps)]

    def steps(side):
        topic = side.create_topic(configs=configs)
        produce(side, topic, batches)
        return {"segments": segment_bases(side, topic), **observe_offsets(side, topic, 1, time_queries(stamps))}

    obs = both.same(steps)
    assert len(obs["segments"]) > 2


RETENTION = {
    # segments whose newest record is older than retention.ms go (Kafka checks each segment's largest
    # timestamp, UnifiedLog.deleteRetentionMsBreachedSegments): the two old segments
    "by_time": ({"retention.ms": "3600000"}, 10),
    # the oldest segments go while the log stays at or above retention.bytes without them
    # (deleteRetentionSizeBreachedSegments): 2.6 MB over 1.5 MB loses the first segment only
    "by_size": ({"retention.bytes": "1500000"}, 5),
}


def alter_topic(side, topic: str, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    for fut in side.admin().incremental_alter_configs([res]).values():
        fut.result(20)


@pytest.mark.parametrize("policy", sorted(RETENTION))
def test_offsets_after_retention(both, policy):
    """Records produced without retention, then retention set: the next check deletes the old segments (set
    before producing, a check between two batches would delete the active segment and move the rolls)."""
    configs, earliest = RETENTION[policy]
    now = now_ms()
    old = [now - 3 * 3_600_000 + i * 1000 for i in range(10)]
    new = [now - 60_000 + i * 1000 for i in range(3)]
    stamps = old + new
    batches = [[_big(i, ts)] for i, ts in enumerate(stamps)]

    def steps(side):
        topic = side.create_topic(configs={"segment.bytes": MIB, "retention.ms": "-1"})
        produce(side, topic, batches)
        before = segment_bases(side, topic)
        alter_topic(side, topic, configs)
        wait_until(lambda: list_offsets_admin(side, topic, 1, ["earliest"])[(0, "earliest")][0] >= earliest,
                   what=f"{side.kind}: retention of the old segments")
        return {"before": before, "segments": segment_bases(side, topic),
                **observe_offsets(side, topic, 1, time_queries(stamps))}

    obs = both.same(steps)
    assert obs["list_offsets"][(0, "earliest")][0] == earliest and obs["before"] == [0, 5, 10]


@pytest.mark.parametrize("to", [0, 3, 5, 7, -1])
def test_offsets_after_delete_records(both, to):
    """DeleteRecords to the start, into a batch, to a batch's start, past the last batch's start, and to the
    high watermark (-1)."""
    from confluent_kafka import TopicPartition

    base = (now_ms() - 600_000) // 1000 * 1000
    stamps = [base + d for d in (3000, 1000, 2000, 6000, 5000, 4000, 8000, 7000)]
    batches = [[(b"a", b"1", stamps[0]), (b"b", b"2", stamps[1]), (b"c", b"3", stamps[2])],
               [(b"d", b"4", stamps[3]), (b"e", b"5", stamps[4])], [(b"f", b"6", stamps[5])],
               [(b"g", b"7", stamps[6]), (b"h", b"8", stamps[7])]]

    def steps(side):
        topic = side.create_topic()
        produce(side, topic, batches)
        fut = side.admin().delete_records([TopicPartition(topic, 0, to)], request_timeout=10)
        done = list(fut.values())[0].result(20)
        return {"low_watermark": done.low_watermark, "records": [r["offset"] for r in consume(side, topic)],
                **observe_offsets(side, topic, 1, time_queries(stamps))}

    both.same(steps)


def test_offsets_after_compaction(both):
    """A compacted topic rolled by record time: once the cleaner has been over the closed segments, lookups
    by time land on the records it kept."""
    base = (now_ms() - 3_000_000) // 1000 * 1000
    keys = [b"a", b"b", b"a", b"c", b"b", b"a", b"d", b"c", b"a", b"e"]
    stamps = [base + i * 40_000 for i in range(len(keys))]
    batches = [[(k, f"v{i}".encode(), ts)] for i, (k, ts) in enumerate(zip(keys, stamps, strict=True))]
    configs = {"cleanup.policy": "compact", "segment.ms": "60000", "min.cleanable.dirty.ratio": "0.01",
               "min.compaction.lag.ms": "0"}

    def steps(side):
        topic = side.create_topic(configs=configs)
        produce(side, topic, batches)
        closed = segment_bases(side, topic)[-1]  # the active segment is never cleaned

        def cleaned():
            got = consume(side, topic)
            older = [r["key"] for r in got if r["offset"] < closed]
            return got if len(older) == len(set(older)) else None

        got = wait_until(cleaned, 60, f"{side.kind}: the cleaner's pass")
        return {"kept": [(r["offset"], r["key"], r["timestamp"]) for r in got],
                **observe_offsets(side, topic, 1, time_queries(stamps))}

    obs = both.same(steps)
    assert len(obs["kept"]) < len(keys)


def test_latest_offset_read_committed_with_open_transaction(both):
    """read_committed's latest offset is the last stable offset while a transaction is open, and the log end
    once it commits (Partition.fetchOffsetForTimestamp); lookups by time do not pass the LSO."""
    from confluent_kafka import Producer

    base = (now_ms() - 600_000) // 1000 * 1000

    def steps(side):
        topic = side.create_topic()
        produce(side, topic, [[(b"a", b"1", base + 1000), (b"b", b"2", base + 2000)]])
        producer = Producer(side.client_config(**{"transactional.id": f"tx-{topic}", "linger.ms": 0}))
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(topic, key=b"c", value=b"3", partition=0, timestamp=base + 3000)
        producer.flush(30)
        specs = ["earliest", "latest", "max_timestamp", base + 1500, base + 2500]
        open_ = {"committed": list_offsets_admin(side, topic, 1, specs, isolation="read_committed"),
                 "uncommitted": list_offsets_admin(side, topic, 1, specs)}
        producer.commit_transaction(30)
        # Kafka writes the markers after EndTxn answers: the LSO reaches the log end a moment later
        wait_until(lambda: list_offsets_admin(side, topic, 1, ["latest"], isolation="read_committed")
                   [(0, "latest")][0] == 4, what=f"{side.kind}: the commit marker")
        after = list_offsets_admin(side, topic, 1, specs[:-3] + specs[-2:], isolation="read_committed")
        marker = list_offsets_admin(side, topic, 1, ["max_timestamp"])[(0, "max_timestamp")]
        return {"open": open_, "after": after, "max_is_the_marker": marker[0] == 3 and marker[1] > base + 3000}

    obs = both.same(steps)
    assert obs["open"]["committed"][(0, "latest")][0] == 2


def test_internal_segment_bytes(broker):
    """docs/differences.md: Kafka 4.x accepts the test-only topic config internal.segment.bytes (segments
    below segment.bytes' 1 MiB floor); chronolog refuses it as unknown, its segment.bytes taking small
    values itself."""
    from confluent_kafka import KafkaException

    if broker.kind == "kafka":
        broker.create_topic(configs={"internal.segment.bytes": "1024"})
    else:
        with pytest.raises(KafkaException, match="INVALID_CONFIG"):
            broker.create_topic(configs={"internal.segment.bytes": "1024"})
        broker.create_topic(configs={"segment.bytes": "1024"})


def test_lookup_where_compaction_left_an_empty_batch(both):
    """Producer 1's only batch (key a, the segment's newest timestamp) is overwritten by producer 2 in the
    next segment: the cleaner keeps it as an empty batch (its producer's last sequence) and the segment's
    largest timestamp stays its. A lookup by a time only that batch reached: Kafka searches that segment
    alone (UnifiedLog.searchOffsetInLocalLog) and answers none; chronolog goes on to the next segments and
    answers the first record at or after that time (docs/differences.md). Every other answer is equal."""
    from confluent_kafka import Producer

    base = (now_ms() - 3_000_000) // 1000 * 1000
    configs = {"cleanup.policy": "compact", "segment.bytes": MIB, "segment.ms": "60000",
               "min.cleanable.dirty.ratio": "0.01"}
    big = b"x" * 600_000

    def send(side, topic, producer, key, value, ts):
        producer.produce(topic, key=key, value=value, partition=0, timestamp=ts)
        assert producer.flush(30) == 0

    def steps(side):
        topic = side.create_topic(configs=configs)
        p1, p2 = (Producer(side.client_config(**{"enable.idempotence": True, "linger.ms": 0}))
                  for _ in range(2))
        send(side, topic, p2, b"x", big, base)
        send(side, topic, p1, b"a", b"first", base + 50_000)
        send(side, topic, p2, b"a", b"second", base + 70_000)
        send(side, topic, p2, b"y", big, base + 80_000)
        send(side, topic, p2, b"z", b"last", base + 200_000)

        def cleaned():
            return [r["offset"] for r in consume(side, topic)] == [0, 2, 3, 4]

        wait_until(cleaned, 60, f"{side.kind}: the cleaner's pass")
        return {"segments": segment_bases(side, topic),
                **observe_offsets(side, topic, 1, [base + 10_000, base + 40_000, base + 60_000, base + 75_000])}

    c, k = (normalise(o) for o in both.run(steps))
    assert c["segments"] == k["segments"] == [0, 2, 4]
    for ts in (base + 10_000, base + 40_000):  # only the emptied batch reaches them in segment 0
        assert k["list_offsets"].pop((0, ts)) == (-1, -1) and k["offsets_for_times"].pop((0, ts)) == -1
        assert k["kafka_python"].pop((0, ts)) is None
        assert c["list_offsets"].pop((0, ts)) == (2, base + 70_000) and c["offsets_for_times"].pop((0, ts)) == 2
        assert c["kafka_python"].pop((0, ts)) == (2, base + 70_000)
    assert c == k
