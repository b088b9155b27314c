"""Property test: `PartitionLog.read` (the fetch path, found from batch headers and the offset index)
against a plain list of the batches each segment holds, and against the batch-parsing path it falls back
to for segments with corrupt ranges."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chronolog.config import TopicConfig
from chronolog.records import SimpleRecord, build_batch, iter_batches
from chronolog.storage import PartitionLog

NOW = 1_700_000_000_000


def expected(layout, start: int, max_bytes: int, limit: int, min_one: bool):
    """Kafka's `LocalLog.read`: the first segment with a batch whose last offset is >= start, then whole
    batches of that segment while they fit `max_bytes` (at least one with min_one) and start below limit."""
    for batches in layout:
        first = next((i for i, (_p, _s, _b, last) in enumerate(batches) if last >= start), None)
        if first is None:
            continue
        pos, size, base, _ = batches[first]
        if size > max_bytes and not min_one:
            return None
        total = size
        for _p, s, b, _l in batches[first + 1:]:
            if b >= limit or total + s > max_bytes:
                break
            total += s
        return pos, total, base
    return None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(1, 40), min_size=1, max_size=40),  # records per batch
       st.integers(1, 300),  # value size (batches up to ~12 KB)
       st.integers(0, 3000),  # index.interval.bytes
       st.sampled_from([14000, 40000, 1 << 20]),  # segment.bytes
       st.lists(st.tuples(st.floats(0, 1), st.integers(0, 20000), st.booleans(), st.floats(0, 1.2)),
                min_size=1, max_size=20))
def test_read_equals_the_batch_list(per_batch, value_size, interval, segment_bytes, reads):
    with tempfile.TemporaryDirectory() as tmp:
        cfg = TopicConfig.from_kafka({"segment.bytes": str(segment_bytes), "index.interval.bytes": str(interval),
                                      "message.timestamp.before.max.ms": str(2**62),
                                      "message.timestamp.after.max.ms": str(2**62)})
        plog = PartitionLog.open(Path(tmp) / "t-0", cfg)
        for n in per_batch:
            plog.append(build_batch([SimpleRecord(NOW + j, None, b"v" * value_size) for j in range(n)]), now=NOW)
        for reopen in (False, True):
            if reopen:
                plog.close()
                plog = PartitionLog.open(Path(tmp) / "t-0", cfg)
            layout = [[(p, b.size_in_bytes, b.base_offset, b.last_offset) for p, b in seg.batches_from(0)]
                      for seg in plog.segments]
            end = plog.log_end_offset
            for where, max_bytes, min_one, cap in reads:
                start = min(int(where * end), end - 1)
                max_offset = None if cap > 1 else max(start + 1, int(cap * end))
                limit = end if max_offset is None else min(max_offset, end)
                got = plog.read(start, max_bytes, max_offset=max_offset, min_one_message=min_one)
                want = expected([s for s in layout if s], start, max_bytes, limit, min_one)
                assert (None if got is None else (got.position, got.size, got.first_offset)) == want
                if got is not None:
                    data = got.read_bytes()
                    batches = list(iter_batches(data))
                    assert sum(b.size_in_bytes for b in batches) == len(data) == got.size
                    assert batches[0].base_offset <= start <= batches[0].last_offset or batches[0].base_offset > start
                    seg = next(s for s in plog.segments if s.log_path == got.file_path)
                    parsed = plog._read_parsing(seg, start, max_bytes, limit, min_one)
                    assert (parsed.position, parsed.size, parsed.first_offset) == (got.position, got.size,
                                                                                   got.first_offset)
            assert plog.read(end, 1 << 20) is None
        plog.close()
