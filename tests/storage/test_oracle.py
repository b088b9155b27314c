"""Property test: the partition log against a plain list of (offset, timestamp)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chronolog.config import TopicConfig
from chronolog.records import CompressionType, SimpleRecord, build_batch
from chronolog.storage import PartitionLog

NOW = 1_700_000_000_000

batches_strategy = st.lists(
    st.tuples(st.lists(st.integers(0, 2000), min_size=1, max_size=5),  # timestamps (out of order, duplicates)
              st.sampled_from([CompressionType.NONE, CompressionType.GZIP, CompressionType.LZ4])),
    min_size=1, max_size=60)


def expected_time_index(plog: PartitionLog, truth: list[tuple[int, int, int]]) -> None:
    """Every time-index entry is (running max of the segment, last offset of the batch that raised it)."""
    for seg in plog.segments:
        entries = [seg.time_index.entry(i) for i in range(seg.time_index.entries)]
        assert all(a.timestamp < b.timestamp and a.offset <= b.offset for a, b in zip(entries, entries[1:], strict=False))
        for ts, off in entries:
            in_segment = [(o, t, last) for o, t, last in truth if seg.base_offset <= o <= off]
            assert max(t for _, t, _ in in_segment) == ts
            assert any(last == off for _, _, last in in_segment)


def _append_all(plog: PartitionLog, batches, truth: list[tuple[int, int, int]]) -> None:
    for timestamps, codec in batches:
        raw = build_batch([SimpleRecord(NOW + t, None, b"x" * 30) for t in timestamps], compression=codec)
        info = plog.append(raw, now=NOW + 2000)
        truth += [(info.first_offset + i, NOW + t, info.last_offset) for i, t in enumerate(timestamps)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches_strategy, st.integers(300, 1500), st.integers(0, 400), st.integers(0, 3000),
       st.lists(st.integers(-5, 2100), min_size=1, max_size=25),
       st.one_of(st.none(), st.tuples(st.floats(0, 1), batches_strategy)))
def test_offset_for_timestamp_equals_the_oracle(batches, segment_bytes, interval, segment_ms, targets, truncate):
    with tempfile.TemporaryDirectory() as tmp:
        cfg = TopicConfig.from_kafka({"segment.bytes": str(segment_bytes), "index.interval.bytes": str(interval),
                                      "segment.ms": str(max(1, segment_ms)), "file.delete.delay.ms": "0",
                                      "message.timestamp.before.max.ms": str(2**62)})
        plog = PartitionLog.open(Path(tmp) / "t-0", cfg)
        truth: list[tuple[int, int, int]] = []  # offset, timestamp, last offset of its batch
        _append_all(plog, batches, truth)
        if truncate is not None:
            # Truncation cuts whole batches (the batch holding the cut offset goes) and the log end offset
            # becomes the cut, as in Kafka's LocalLog.truncateTo.
            fraction, more = truncate
            cut = int(fraction * len(truth))
            plog.offset_for_timestamp(NOW)  # warm any cached per-segment state before changing the log
            plog.truncate_to(cut)
            truth = [row for row in truth if row[2] < cut]
            assert plog.log_end_offset == cut
            _append_all(plog, more, truth)
        for reopen in (False, True):
            if reopen:
                plog.close()
                plog = PartitionLog.open(Path(tmp) / "t-0", cfg, recover=True)
            for target in targets:
                want = next(((o, t) for o, t, _ in truth if t >= NOW + target), None)
                got = plog.offset_for_timestamp(NOW + target)
                assert (None if got is None else (got.offset, got.timestamp)) == want
            expected_time_index(plog, truth)
            assert [r.offset for r in plog.read_records(0)] == [o for o, _, _ in truth]
        plog.close()
