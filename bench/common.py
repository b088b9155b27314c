"""What every benchmark shares: the table it prints."""

from __future__ import annotations


def print_table(rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)), flush=True)


def sequential_read(paths) -> tuple[int, float]:
    """(bytes, seconds) to read files front to back in 1 MiB chunks: the plain-disk baseline."""
    import time

    total = 0
    start = time.perf_counter()
    for path in paths:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                total += len(chunk)
    return total, time.perf_counter() - start
