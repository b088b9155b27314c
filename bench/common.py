"""What every benchmark shares: the table it prints, the best of a few timed runs, reads and page-cache drops."""

from __future__ import annotations

import os
import time
from pathlib import Path


def proc_times(pid: int) -> tuple[float, float, int]:
    """User and system CPU seconds and minor page faults of process `pid` so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick, int(fields[7])


def print_table(rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)), flush=True)


def best_of(fn, repeat: int = 3) -> float:
    """The least wall time of `repeat` calls of `fn`: the run least disturbed by the rest of the machine."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def sequential_read(paths) -> tuple[int, float]:
    """(bytes, seconds) to read files front to back in 1 MiB chunks. From wherever their pages are: files
    just written or read are in the page cache (a copy of memory, GB/s); after `evict` they come from the
    disk, which is what a sequential read of the files means on a disk."""
    total = 0
    start = time.perf_counter()
    for path in paths:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                total += len(chunk)
    return total, time.perf_counter() - start


def time_append(directory, cfg, warm: list[bytes], timed: list[bytes], now: int) -> float:
    """Seconds for the storage engine to append `timed` to a new partition at `directory`, after an untimed
    append of `warm` (a new segment's first index entries pay ext4's first block allocation, about 4 ms per
    index file, once per segment); the partition is deleted afterwards, so no writeback of one run runs
    under the next."""
    import shutil

    from chronolog.storage import PartitionLog

    plog = PartitionLog.open(directory, cfg)
    for b in warm:
        plog.append(b, now=now)
    start = time.perf_counter()
    for b in timed:
        plog.append(b, now=now)
    elapsed = time.perf_counter() - start
    plog.close()
    shutil.rmtree(plog.dir)
    return elapsed


def evict(paths) -> None:
    """Write each file back and drop its pages from the page cache (`posix_fadvise(DONTNEED)` file by
    file, never a global drop of the caches), so that its next read comes from the disk. Only clean pages
    can be dropped: hence the fsync first."""
    import os

    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
