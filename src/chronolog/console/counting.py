"""What the timeline counts and over which window: the window clamped to the data's span when it reaches
far beyond it, and, over a broker, the time index's estimate made right where it is known to be wrong.

Over the Kafka protocol a bucket's count is the difference of two offsets found by time (ListOffsets), which
counts each record at the running maximum of the timestamps before it: a burst of late records (a replay,
a delayed batch) lands in the bucket of the newest record before it, as one tall bar in the wrong place.
Two remedies, both reading records with the Arrow reader (`timetravel.arrow.read_window`):
- on request (`count=exact`), every record from the window's start to the log end is read and each is
  counted in the bucket its own timestamp names: the counts are then exact, late records shown as such;
- otherwise the few bars far taller than the others are checked (`check_tall_buckets`): the records of
  their offset ranges are read, and those older than the bucket are moved to the bucket of their own time.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from chronolog.errors import ChronologError
from chronolog.timetravel.timefmt import format_time
from chronolog.timetravel.timeline import MAX_BUCKETS, PartitionLine, choose_step

TALL = 4            # a bar this many times the median of the non-empty bars is checked
TALL_MIN = 50       # ... when it holds at least this many records
CHECK_BUDGET = 200_000  # records read per timeline to check tall bars


@dataclass
class Plan:
    """The window a timeline draws, after clamping: [start, end) in buckets of `step` ms."""

    start: int
    end: int
    step: int
    buckets: int
    parts: list[int]
    exact: bool = False                  # over a broker: count by reading the records (on request)
    notes: list[str] = field(default_factory=list)
    asked: tuple[int, int] | None = None  # the window asked for, when it was clamped


def clamp(start: int, end: int, first: int, last_excl: int, step: int | None, buckets: int
          ) -> tuple[int, int, str | None]:
    """The window to draw and why it differs from the one asked. A window reaching beyond the records'
    span [first, last_excl) is cut to it when that gives finer buckets (1970 .. 2036 over a month of logs:
    buckets of hours, not of a year), or, with a given bucket width, when it would need too many buckets.
    A window that holds no record of the span is left as asked."""
    lo, hi = max(start, first), min(end, last_excl)
    if (start >= first and end <= last_excl) or hi <= lo:
        return start, end, None
    if step is None:
        better = choose_step(lo, hi, buckets) < choose_step(start, end, buckets)
    else:
        better = -(-(end - (start - start % step)) // step) > MAX_BUCKETS
    if not better:
        return start, end, None
    return lo, hi, (f"the window asked for, {format_time(start)} .. {format_time(end)}, reaches beyond the "
                    f"topic's records ({format_time(first)} .. {format_time(last_excl - 1)}): the timeline shows "
                    "their span")


def exact_lines(target, topic: str, parts: list[int], edges: list[int], index: list[PartitionLine]
                ) -> list[PartitionLine]:
    """Exact counts over a broker: every record of `parts` from the window's first offset to the log end,
    read by the Arrow reader (timestamps and offsets only), counted in the bucket of its own timestamp. A
    record stored at or after the offset where a later bucket starts is a late record of its own bucket,
    as a data dir's timeline marks it."""
    try:
        import pyarrow.compute as pc
    except ImportError:
        raise ChronologError("exact counts over a broker read the records with pyarrow: "
                             "pip install 'chronolog[arrow]'") from None
    from chronolog.timetravel.arrow import read_window

    n = len(edges) - 1
    by_part = {line.partition: line for line in index}
    lines = {p: PartitionLine(p, by_part[p].offsets, [0] * n, [0] * n, late_checked=True,
                              start_offset=by_part[p].start_offset, end_offset=by_part[p].end_offset)
             for p in parts}
    reader = read_window(target.bootstrap, topic, edges[0], edges[-1], partitions=parts,
                         columns=["partition", "offset", "timestamp"], client_conf=dict(target.conf) or None)
    try:
        for batch in reader:
            stamps = pc.divide(batch.column(2).cast("int64"), 1000).to_pylist()
            for p, off, ts in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), stamps, strict=True):
                line = lines[p]
                own = bisect.bisect_right(edges, ts) - 1
                if not 0 <= own < n:
                    continue
                line.counts[own] += 1
                held = bisect.bisect_right(line.offsets, off) - 1  # the bucket its position gives it
                if held > own:
                    line.late[own] += 1
    finally:
        # its generator (and a consumer it may hold) goes with the reader: here, also when a read failed and
        # a traceback keeps this frame, never later by the garbage collector in another thread
        reader.close()
        del reader
    return [lines[p] for p in parts]


def tall_buckets(totals: list[int]) -> list[int]:
    """Buckets whose bar stands far above the others (candidates for a burst of late records)."""
    filled = sorted(c for c in totals if c > 0)
    if len(filled) < 3:
        return []
    median = filled[len(filled) // 2]
    return [i for i, c in enumerate(totals) if c >= TALL_MIN and c >= TALL * median]


def check_tall_buckets(source, topic: str, edges: list[int], lines: list[PartitionLine],
                       budget: int = CHECK_BUDGET) -> tuple[list[int], int]:
    """Per partition, read the records of its tallest buckets (within `budget` records) and move each
    record older than its bucket to the bucket of its own time (or out of the timeline when it is older
    than its start). Returns the buckets checked and the records moved. `lines` are changed in place."""
    from chronolog.timetravel.arrow import window_records

    checked: set[int] = set()
    moved = 0
    for line in lines:
        for k in sorted(tall_buckets(line.counts), key=lambda i: -line.counts[i]):
            a, b = line.offsets[k], line.offsets[k + 1]
            if b - a > budget:
                continue
            budget -= b - a
            checked.add(k)
            for rec in window_records(source, topic, line.partition, a, b):
                if rec.timestamp >= edges[k]:
                    continue
                line.counts[k] -= 1
                moved += 1
                own = bisect.bisect_right(edges, rec.timestamp) - 1
                if own >= 0:
                    line.counts[own] += 1
                    line.late[own] += 1
    return sorted(checked), moved
