"""Lookups by time through the per-batch timestamp tables (`TimeTableCache`): big batches with
out-of-order and duplicate timestamps, asked the same targets again and again (scan, then table build,
then bisection), with the log start offset inside a batch, and after a truncation rewrote the bytes at
the same positions. Every answer must be Kafka's: the first record in offset order with timestamp >= T."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chronolog.config import TopicConfig
from chronolog.records import CompressionType, Record, RecordBatch, SimpleRecord, build_batch
from chronolog.storage import PartitionLog
from chronolog.storage.time_lookup import STANDALONE, TimeTableCache

NOW = 1_700_000_000_000
CFG = {"message.timestamp.before.max.ms": str(2**62), "message.timestamp.after.max.ms": str(2**62),
       "segment.bytes": str(1 << 20), "index.interval.bytes": "4096"}


def oracle(truth: list[tuple[int, int]], target: int, start: int = 0) -> tuple[int, int] | None:
    return next(((o, t) for o, t in truth if t >= target and o >= start), None)


def lookups(plog: PartitionLog, truth, targets, start: int = 0) -> None:
    for _round in range(3):  # scan, build the table, bisect
        for target in targets:
            got = plog.offset_for_timestamp(NOW + target)
            assert (None if got is None else (got.offset, got.timestamp)) == oracle(truth, NOW + target, start)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.integers(0, 500), min_size=TimeTableCache.MIN_RECORDS, max_size=300),
                min_size=1, max_size=4),
       st.sampled_from([CompressionType.NONE, CompressionType.LZ4]),
       st.lists(st.integers(-5, 510), min_size=1, max_size=30), st.floats(0, 1))
def test_repeated_lookups_in_big_batches_equal_the_oracle(batches, codec, targets, start_fraction):
    with tempfile.TemporaryDirectory() as tmp:
        plog = PartitionLog.open(Path(tmp) / "t-0", TopicConfig.from_kafka(CFG))
        truth: list[tuple[int, int]] = []
        for stamps in batches:
            info = plog.append(build_batch([SimpleRecord(NOW + t, None, b"v") for t in stamps], compression=codec),
                               now=NOW)
            truth += [(info.first_offset + i, NOW + t) for i, t in enumerate(stamps)]
        lookups(plog, truth, targets)
        # DeleteRecords moves the log start offset, usually into the middle of a batch.
        start = int(start_fraction * (len(truth) - 1))
        plog.delete_records_before(start)
        lookups(plog, truth, targets, start)
        plog.close()


def test_a_truncation_that_rewrites_the_same_positions_is_never_answered_from_an_old_table(tmp_path):
    plog = PartitionLog.open(tmp_path / "t-0", TopicConfig.from_kafka(CFG))
    plog.append(build_batch([SimpleRecord(NOW, None, b"a")]), now=NOW)
    first = [(NOW + 100 + i) for i in range(200)]
    plog.append(build_batch([SimpleRecord(t, None, b"b") for t in first]), now=NOW)
    for _ in range(3):
        assert plog.offset_for_timestamp(NOW + 150).offset == 51
    plog.truncate_to(1)
    # Same base offset, same length, same position: only the timestamps differ.
    second = [(NOW + 100 + (199 - i)) for i in range(200)]
    plog.append(build_batch([SimpleRecord(t, None, b"b") for t in second]), now=NOW)
    for _ in range(3):
        assert plog.offset_for_timestamp(NOW + 150).offset == 1
        assert plog.offset_for_timestamp(NOW + 299).offset == 1
    plog.close()


def test_the_cache_is_bounded_by_records(tmp_path):
    cache = TimeTableCache(max_records=500)
    plog = PartitionLog.open(tmp_path / "t-0", TopicConfig.from_kafka(CFG))
    for b in range(6):
        plog.append(build_batch([SimpleRecord(NOW + b * 1000 + i, None, b"x") for i in range(200)]), now=NOW)
    seg = plog.active
    for _ in range(2):
        for b in range(6):
            found = seg.find_offset_by_timestamp(NOW + b * 1000 + 150, tables=cache, key=("bounded",))
            assert found.offset == b * 200 + 150
    assert cache._records <= 500 and len(cache._tables) == 2
    plog.close()
    assert STANDALONE.time_tables.max_records >= 100_000


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3), st.integers(0, 300)), min_size=1, max_size=120),
       st.integers(-10, 320), st.integers(0, 200), st.sampled_from([CompressionType.NONE, CompressionType.ZSTD]))
def test_timestamp_table_answers_like_the_scan(gaps, target, min_delta, codec):
    """Offsets with gaps (as after compaction), out-of-order and duplicate timestamps."""
    offsets = [1000 + sum(g for g, _ in gaps[:i + 1]) for i in range(len(gaps))]
    raw = build_batch([Record(o, 1_000 + ts, None, b"x") for o, (_, ts) in zip(offsets, gaps, strict=True)],
                      base_offset=1000, compression=codec)
    batch = RecordBatch(raw)
    table = batch.timestamp_table()
    assert list(table.offsets) == offsets and list(table.timestamps) == [1_000 + ts for _, ts in gaps]
    want = next(((r.offset, r.timestamp) for r in batch.records()
                 if r.timestamp >= 1_000 + target and r.offset >= 1000 + min_delta), None)
    assert table.first_at_or_after(1_000 + target, 1000 + min_delta) == want
    assert batch.first_at_or_after(1_000 + target, 1000 + min_delta) == want
