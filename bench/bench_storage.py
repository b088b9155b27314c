"""Storage benchmarks (issue: storage engine). Each row compares chronolog with a baseline measured in
the same run on the same bytes.

- append: PartitionLog.append (validation, offset assignment, index upkeep) vs raw write() + CRC-32C, for
  10 records per batch and for batches of 16 KiB and 1 MB (what producers send; the target rows). The
  baseline makes one unbuffered write() per batch, as the log does. The record walk of validation is the C
  one when it was built (then the 1 MB rows are also timed with the Python walk, in the same run);
  CHRONOLOG_PURE_PYTHON=1 measures every row with the Python one.
- offset_for_timestamp: p50 on 100 segments x 10,000 index entries, vs a linear scan of batch headers
  and vs seed 001's segment-mtime method (which is also checked for wrong answers at record granularity).
- index rebuild: LogSegment recovery MB/s vs a plain sequential read of the same `.log`.
"""

from __future__ import annotations

import os
import random
import statistics
import struct
import tempfile
import time
from pathlib import Path

from bench.common import print_table, sequential_read, time_append
from chronolog.config import TopicConfig
from chronolog.records import SimpleRecord, build_batch, crc32c, iter_batches
from chronolog.records import batch as batch_module
from chronolog.records.batch import NATIVE_WALK
from chronolog.storage import LogSegment, PartitionLog

SEGMENTS = 100
PER_SEGMENT = 10_001  # 10,000 indexed batches after the never-indexed first one
T0 = 1_700_000_000_000


APPEND_ROWS = (  # label, record size, records per batch, batches
    ("100 B x 10/batch", 100, 10, 2000),
    ("1 KiB x 10/batch", 1024, 10, 2000),
    ("100 B x 16 KiB batches", 100, 16384 // 110, 300),
    ("1 KiB x 16 KiB batches", 1024, 16384 // 1034, 1200),
    ("100 B x 1 MB batches (target)", 100, 1_000_000 // 110, 34),
    ("1 KiB x 1 MB batches (target)", 1024, 1_000_000 // 1034, 34),
)


def bench_append(tmp: Path) -> list[tuple[str, str, str, str]]:
    """PartitionLog.append vs write() + CRC-32C of the same batches, best of 5 each. librdkafka fills
    batches up to `batch.size` (1,000,000 B in the broker bench, 16 KiB by default in Java clients), so the rows
    with those batch sizes are what producers send; 10 records per batch shows the per-batch overhead."""
    rows = []
    cfg = TopicConfig.from_kafka({"message.timestamp.after.max.ms": str(2**62), "segment.bytes": str(1 << 30)})
    for label, size, n_records, n_batches in APPEND_ROWS:
        batches = [build_batch([SimpleRecord(T0 + i * n_records + j, None, os.urandom(size))
                                for j in range(n_records)]) for i in range(n_batches)]
        # The first two batches of every run are an untimed warm-up on both sides: they pay the new files'
        # first block allocations (for a segment, whose first index entry comes with its second batch,
        # ~4 ms per index file on ext4, once per segment, i.e. per GiB by default).
        warm, timed = batches[:2], batches[2:]
        total = sum(len(b) for b in timed)
        raw_s = ours_s = pure_s = float("inf")
        with_pure = NATIVE_WALK and "target" in label
        for rep in range(5):
            base = tmp / f"raw-{size}-{n_records}-{rep}"
            with open(base, "wb", buffering=0) as f:  # a raw write() per batch, as the log makes
                for b in warm:
                    f.write(b)
                    crc32c(b)
                start = time.perf_counter()
                for b in timed:
                    f.write(b)
                    crc32c(b)
                raw_s = min(raw_s, time.perf_counter() - start)
            base.unlink()
            ours_s = min(ours_s, time_append(tmp / f"append{size}x{n_records}r{rep}-0", cfg, warm, timed, T0))
            if with_pure:
                native, batch_module._native_scan = batch_module._native_scan, None
                try:
                    pure_s = min(pure_s, time_append(tmp / f"pure{size}x{n_records}r{rep}-0", cfg, warm, timed, T0))
                finally:
                    batch_module._native_scan = native
        target = " (target >= 0.5)" if "target" in label else ""
        rows.append((f"append {label}", f"{total / ours_s / 1e6:.1f} MB/s", f"{total / raw_s / 1e6:.1f} MB/s",
                     f"{raw_s / ours_s:.3f}{target}"))
        if with_pure:
            rows.append(("... with the pure-Python walk", f"{total / pure_s / 1e6:.1f} MB/s", "same",
                         f"{raw_s / pure_s:.3f}"))
    return rows


def build_big_partition(directory: Path) -> list[tuple[int, int]]:
    """100 segments of 10,001 one-record batches, `.log`/`.index`/`.timeindex` written directly (an index
    entry for every batch after the first, as index.interval.bytes=0 gives). Timestamps rise with jitter
    (out of order within +-500 ms). Returns per segment (base offset, largest timestamp)."""
    directory.mkdir(parents=True)
    template = bytearray(build_batch([SimpleRecord(0, None, b"x" * 60)]))
    rng = random.Random(7)
    info = []
    offset = 0
    for _s in range(SEGMENTS):
        base = offset
        log = bytearray()
        idx = bytearray()
        tidx = bytearray()
        running = -1
        for i in range(PER_SEGMENT):
            ts = T0 + offset * 10 + rng.randint(-500, 500)
            struct.pack_into(">q", template, 0, offset)
            struct.pack_into(">qq", template, 27, ts, ts)
            struct.pack_into(">I", template, 17, crc32c(memoryview(template)[21:]))
            if i > 0:
                idx += struct.pack(">ii", offset - base, len(log))
                if ts > running:
                    tidx += struct.pack(">qi", ts, offset - base)
            running = max(running, ts)
            log += template
            offset += 1
        if struct.unpack_from(">q", tidx, len(tidx) - 12)[0] < running:
            tidx += struct.pack(">qi", running, offset - 1 - base)  # the final entry written on roll
        name = f"{base:020d}"
        (directory / f"{name}.log").write_bytes(log)
        (directory / f"{name}.index").write_bytes(idx)
        (directory / f"{name}.timeindex").write_bytes(tidx)
        os.utime(directory / f"{name}.log", (running / 1000, running / 1000))
        info.append((base, running))
    return info


def bench_lookup(tmp: Path) -> list[tuple[str, str, str, str]]:
    directory = tmp / "big-0"
    seg_info = build_big_partition(directory)
    plog = PartitionLog.open_readonly(directory)
    end = T0 + SEGMENTS * PER_SEGMENT * 10
    rng = random.Random(3)
    targets = [rng.randint(T0, end) for _ in range(2000)]
    timings = []
    answers = {}
    for t in targets:
        start = time.perf_counter()
        found = plog.offset_for_timestamp(t)
        timings.append(time.perf_counter() - start)
        answers[t] = found.offset if found else None
    p50 = statistics.median(timings)

    def linear(t: int) -> int | None:
        for seg in plog.segments:
            for _pos, batch in seg.batches_from(0):
                if batch.max_timestamp >= t:
                    for rec in batch.records():
                        if rec.timestamp >= t:
                            return rec.offset
        return None
    lin_targets = targets[:5]
    start = time.perf_counter()
    for t in lin_targets:
        assert linear(t) == answers[t]
    lin = (time.perf_counter() - start) / len(lin_targets)

    # Seed 001: getOffsetsBefore(T) answered with the base offset of the newest segment whose mtime < T.
    mtimes = [(base, int(os.stat(directory / f"{base:020d}.log").st_mtime * 1000)) for base, _ in seg_info]
    wrong = 0
    start = time.perf_counter()
    for t in targets:
        older = [base for base, m in mtimes if m < t]
        legacy = older[-1] if older else None  # None = the empty answer that crashed clients
        wrong += legacy != answers[t]
    mtime_s = (time.perf_counter() - start) / len(targets)
    return [
        ("offset_for_timestamp p50", f"{p50 * 1e6:.1f} us", "-", "(target <= 30 us)"),
        ("  vs linear scan", f"{p50 * 1e6:.1f} us", f"{lin * 1e6:.0f} us", f"{lin / p50:.0f}x faster"),
        ("  vs seed-001 mtime method", f"{p50 * 1e6:.1f} us", f"{mtime_s * 1e6:.1f} us",
         f"{mtime_s / p50:.2f}; mtime wrong for {wrong}/{len(targets)} targets"),
    ]


def bench_rebuild(tmp: Path) -> list[tuple[str, str, str, str]]:
    """Recovery of 10 segments of 108-byte batches: with an index entry per batch (index.interval.bytes 0,
    as these segments were written for the lookup rows: one Python index append per batch) and with
    Kafka's default 4096 (the C walk of recovery does nearly all the work)."""
    directory = tmp / "big-0"
    logs = sorted(directory.glob("*.log"))[:10]
    total, read_s = sequential_read(logs)
    rows = []
    for interval in (0, 4096):
        copy = tmp / f"rebuild{interval}-0"
        copy.mkdir()
        for p in logs:
            os.link(p, copy / p.name)
        start = time.perf_counter()
        for p in logs:
            seg = LogSegment(copy, int(p.stem), index_interval_bytes=interval, rebuild_missing=False)
            seg.recover()
            seg.close()
        ours_s = time.perf_counter() - start
        assert sum(1 for _ in iter_batches((copy / logs[0].name).read_bytes())) == PER_SEGMENT
        rows.append((f"index rebuild (recover), index.interval.bytes {interval}", f"{total / ours_s / 1e6:.1f} MB/s",
                     f"{total / read_s / 1e6:.0f} MB/s", f"{read_s / ours_s:.3f}"))
    return rows


def main() -> None:
    walker = "C (chronolog.records._walk)" if NATIVE_WALK else "pure Python (no C extension or CHRONOLOG_PURE_PYTHON=1)"
    print(f"record walk of append validation: {walker}")
    with tempfile.TemporaryDirectory(prefix="chronolog-bench-") as tmp:
        rows = [("measure", "chronolog", "baseline", "ratio / note")]
        rows += bench_append(Path(tmp))
        rows += bench_lookup(Path(tmp))
        rows += bench_rebuild(Path(tmp))
        print_table(rows)


if __name__ == "__main__":
    main()
