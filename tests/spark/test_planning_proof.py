"""The path-mode end-offset proof against a brute-force walk over every batch, with the minima sidecars,
without them (scans), and after the log changed under them. No SparkSession: this is driver code."""

from __future__ import annotations

import random

import pytest

from chronolog.config import TopicConfig
from chronolog.records import SimpleRecord, build_batch, iter_batches
from chronolog.spark.planning import _proven_end
from chronolog.storage import PartitionLog
from chronolog.storage.minima import CHUNK_BYTES, MINIMA_SUFFIX

BASE = 1_700_000_000_000
WIDE = {"message.timestamp.after.max.ms": str(2**62), "message.timestamp.before.max.ms": str(2**62),
        "segment.bytes": str(2 * CHUNK_BYTES + 50_000)}


def build(path, seed: int) -> None:
    rng = random.Random(seed)
    plog = PartitionLog.open(path, TopicConfig.from_kafka(WIDE))
    t = 0
    for _ in range(900):
        stamps = []
        for _ in range(rng.randint(1, 60)):
            t += rng.randint(0, 20)
            late = rng.random()
            # Mostly rising; some records late by a little, a few by a lot (replayed lines).
            stamps.append(BASE + t - (rng.randint(0, 2_000) if late < 0.05 else rng.randint(0, 60_000)
                                      if late < 0.06 else 0))
        plog.append(build_batch([SimpleRecord(s, None, b"x" * rng.randint(10, 80)) for s in stamps]))
    plog.close()


def brute_end(path, start: int, window_end: int) -> int:
    """Walk every batch from the newest back: the end is the base offset of the earliest batch after
    `start` from which every record is at or after the window end."""
    batches = [b for seg in sorted(path.glob("*.log")) for b in iter_batches(seg.read_bytes())]
    end = batches[-1].last_offset + 1
    for b in reversed(batches):
        if b.base_offset <= start or min(r.timestamp for r in b.records()) < window_end:
            break
        end = b.base_offset
    return end


def records(path) -> list[tuple[int, int]]:
    return [(r.offset, r.timestamp) for seg in sorted(path.glob("*.log"))
            for b in iter_batches(seg.read_bytes()) for r in b.records()]


@pytest.mark.parametrize("seed", [1, 2])
def test_proven_end_equals_brute_force_with_and_without_sidecars(tmp_path, seed):
    path = tmp_path / "t-0"
    build(path, seed)
    recs = records(path)
    assert len(list(path.glob("*.log"))) >= 3
    assert any(p.name.endswith(MINIMA_SUFFIX) for p in path.iterdir())
    rng = random.Random(seed)
    span = recs[-1][1] - BASE
    cases = [(rng.choice([0, rng.randrange(len(recs))]), BASE + rng.randint(-1000, span + 1000)) for _ in range(40)]
    plog = PartitionLog.open_readonly(path)
    assert sum(e.batches == 0 for e in plog.segments[0].time_minima()) >= 2  # chunks, from the sidecar
    with_sidecars = [_proven_end(plog, s, w) for s, w in cases]
    for p in path.glob("*" + MINIMA_SUFFIX):
        p.unlink()
    scanned = [_proven_end(PartitionLog.open_readonly(path), s, w) for s, w in cases]
    for (start, w), a, b in zip(cases, with_sidecars, scanned, strict=True):
        expected = brute_end(path, start, w)
        assert a == b == expected, (start, w)
        # Soundness, stated directly: nothing at or after the end is below the window end.
        assert all(ts >= w for off, ts in recs if off >= a)


def test_proof_stays_exact_when_late_records_arrive_after_the_sidecar(tmp_path):
    """The active segment's sidecar (clean close) covers a prefix; records appended after it — here a
    very late one — must still stop the proof."""
    path = tmp_path / "t-0"
    build(path, 3)
    plog = PartitionLog.open(path, TopicConfig.from_kafka(WIDE))
    late = BASE - 5_000
    plog.append(build_batch([SimpleRecord(late, None, b"late")]))
    end_offset = plog.log_end_offset
    reader = PartitionLog.open_readonly(path)  # the broker has not closed: the sidecar covers less
    assert _proven_end(reader, 0, BASE + 10) == end_offset
    assert _proven_end(reader, 0, BASE + 10) == brute_end(path, 0, BASE + 10)
    plog.close()
    reader = PartitionLog.open_readonly(path)
    assert _proven_end(reader, 0, BASE + 10) == end_offset


def test_small_ranges_share_tasks_big_ones_keep_their_own():
    from chronolog.spark.options import SourceOptions
    from chronolog.spark.planning import PACK_RECORDS, _pack
    from chronolog.spark.ranges import OffsetRange, RangeGroup

    def r(p, n):
        return OffsetRange("t", p, 0, n, "/d", "path")
    small = [r(p, 100) for p in range(5)]
    opts = SourceOptions.parse({"path": "/d", "subscribe": "t"})
    assert _pack(small, opts) == [RangeGroup(tuple(small))]
    mixed = [r(0, 100), r(1, PACK_RECORDS), r(2, PACK_RECORDS - 50), r(3, 60), r(4, 10)]
    assert _pack(mixed, opts) == [mixed[0], mixed[1], mixed[2], RangeGroup((mixed[3], mixed[4]))]
    for asked in ({"minPartitions": "3"}, {"maxRecordsPerPartition": "1000"}):
        assert _pack(small, SourceOptions.parse({"path": "/d", "subscribe": "t", **asked})) == small


def test_known_parallelism_cuts_the_read_into_equal_tasks():
    """With the session's slots known, three partitions on two slots are two tasks of 1.5 partitions each
    (not two waves of tasks), covering every offset once; a read too small for a task per slot is one task."""
    from chronolog.spark.options import SourceOptions
    from chronolog.spark.planning import PACK_RECORDS, _pack
    from chronolog.spark.ranges import OffsetRange, RangeGroup

    def r(p, n):
        return OffsetRange("t", p, 0, n, "/d", "path")

    def covered(tasks):
        parts = [x for t in tasks for x in (t.ranges if isinstance(t, RangeGroup) else (t,))]
        return sorted((x.partition, o) for x in parts for o in range(x.start, x.end))

    opts = SourceOptions.parse({"path": "/d", "subscribe": "t"})
    big = [r(p, 333_333) for p in range(3)]
    tasks = _pack(big, opts, 2)
    assert len(tasks) == 2 and covered(tasks) == covered(big)
    assert [sum(x.end - x.start for x in t.ranges) for t in tasks] == [500_000, 499_999]
    one = [r(0, 1_000_000)]
    assert [(t.start, t.end) for t in _pack(one, opts, 4)] == [(0, 250_000), (250_000, 500_000),
                                                               (500_000, 750_000), (750_000, 1_000_000)]
    small = [r(p, PACK_RECORDS // 4) for p in range(3)]
    assert _pack(small, opts, 2) == [RangeGroup(tuple(small))]
    assert _pack(big, SourceOptions.parse({"path": "/d", "subscribe": "t", "minPartitions": "3"}), 2) == big
