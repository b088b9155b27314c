"""The console's timeline: time to build a 200-bucket timeline of a topic of `CHRONOLOG_BENCH_CONSOLE_RECORDS`
records (10 million by default; 4 partitions, read from its data dir) as a ratio to reading the same topic
once end to end (every record decoded, as a scan-based count needs), both measured in this run. Target for
a topic whose timestamps are in order: <= 0.01.

Two topics: one in timestamp order (the time index alone answers exactly: 201 lookups per partition) and
one where 1 record in 100 is 5 minutes late (each late record that crosses a bucket edge is found from the
segment minima and placed; every batch holding one is decoded, so the cost grows with the lateness).
Batches of 1,000 records are patched from one template (base and max timestamps, CRC), so building the
topic costs seconds, not minutes.
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
import time
from pathlib import Path

from bench.common import print_table

PARTITIONS = 4
PER_BATCH = 1000
SPACING_MS = 8           # 10 M records over ~22 hours
LATE_EVERY = 100
LATE_BY_MS = 300_000
BASE_TS = 1_700_000_000_000


def _template(late: bool) -> tuple[bytearray, int]:
    from chronolog.records.batch import SimpleRecord
    from chronolog.records.batch_builder import build_batch
    deltas = [i * SPACING_MS - (LATE_BY_MS if late and i % LATE_EVERY == LATE_EVERY - 1 else 0)
              for i in range(PER_BATCH)]
    shift = -min(deltas)  # the first record carries the base timestamp: keep every delta >= 0 from it
    recs = [SimpleRecord(shift + d, None, b"v%09d" % i) for i, d in enumerate(deltas)]
    return bytearray(build_batch(recs)), shift


def _build(directory: Path, records: int, late: bool) -> None:
    from chronolog.records import crc32c
    from chronolog.storage.manager import LogManager
    manager = LogManager(directory)
    manager.startup(background=False)
    manager.create_topic("t", PARTITIONS, {"retention.ms": "-1", "segment.bytes": str(64 << 20)})
    template, shift = _template(late)
    span = PER_BATCH * SPACING_MS
    top = shift + (PER_BATCH - 1) * SPACING_MS
    per_part = records // PARTITIONS // PER_BATCH
    for p in range(PARTITIONS):
        plog = manager.get_log("t", p)
        for b in range(per_part):
            base = BASE_TS + b * span - shift
            struct.pack_into(">qq", template, 27, base, base + top)  # baseTimestamp, maxTimestamp
            struct.pack_into(">I", template, 17, crc32c(bytes(template[21:])))
            plog.append(bytes(template), now=BASE_TS + b * span + 10**9)
    manager.shutdown()


def _read_all(directory: Path) -> tuple[float, int]:
    from chronolog.timetravel.sources import DataDirSource
    source = DataDirSource(directory)
    start = time.perf_counter()
    n = 0
    for p in source.partitions("t"):
        low, high = source.watermarks("t", p)
        for _rec in source.read("t", p, low, high):
            n += 1
    elapsed = time.perf_counter() - start
    source.close()
    return elapsed, n


def _timeline(directory: Path, check_late: bool) -> tuple[float, int, int]:
    """Seconds for the console's whole-topic timeline in 200 buckets: its span (smallest timestamp from
    the segment minima, largest from ListOffsets -3) and the timeline, on a newly opened data dir."""
    from chronolog.console.facts import topic_span
    from chronolog.timetravel.sources import DataDirSource
    from chronolog.timetravel.timeline import build_timeline
    source = DataDirSource(directory)
    start = time.perf_counter()
    first, last = topic_span(source, "t")
    step = -(-(last + 1 - first) // 200)
    tl = build_timeline(source, "t", first, last + 1, step=step, check_late=check_late)
    elapsed = time.perf_counter() - start
    source.close()
    return elapsed, sum(tl.totals), len(tl.edges) - 1


def main() -> None:
    records = int(os.environ.get("CHRONOLOG_BENCH_CONSOLE_RECORDS", 10_000_000))
    rows = [("topic", "timeline", "records", "read end to end", "200-bucket timeline", "buckets", "ratio",
             "target <= 0.01")]
    for late in (False, True):
        where = Path(tempfile.mkdtemp(prefix="chronolog-bench-console-"))
        try:
            _build(where / "data", records, late)
            read_s, n = _read_all(where / "data")
            for check_late in (False, True):
                tl_s, counted, buckets = _timeline(where / "data", check_late)
                if check_late or not late:
                    assert counted == n, (counted, n)  # every record lies in the timeline's span
                ratio = tl_s / read_s
                rows.append(("1% late by 5 min" if late else "in order",
                             "exact (late placed)" if check_late else "time index only", f"{n:,}", f"{read_s:.2f} s",
                             f"{tl_s:.3f} s", str(buckets), f"{ratio:.4f}", "met" if ratio <= 0.01 else "missed"))
        finally:
            shutil.rmtree(where, ignore_errors=True)
    print_table(rows)


if __name__ == "__main__":
    main()
