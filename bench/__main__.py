"""`make bench`: run every benchmark module (or the ones named) and print their tables.

Each module `bench/bench_<area>.py` defines `main() -> None`, which measures and prints a table whose
ratios compare chronolog with a baseline measured in the same run. Absolute figures depend on the
machine; the ratios are what docs/benchmarks.md records.
"""

from __future__ import annotations

import importlib
import sys
import time

AREAS = ("records", "storage", "broker", "start", "testing", "peer", "kafka", "spark", "sink", "load", "console", "quotas",
         "cleaner", "partitions", "commits", "tiered", "produce", "consume")


def main(argv: list[str]) -> int:
    wanted = argv or list(AREAS)
    failed = []
    for area in wanted:
        try:
            module = importlib.import_module(f"bench.bench_{area}")
        except ModuleNotFoundError as exc:
            if exc.name == f"bench.bench_{area}":
                continue
            raise
        print(f"\n=== bench: {area} ===", flush=True)
        started = time.perf_counter()
        try:
            module.main()
        except Exception as exc:  # one broken benchmark must not hide the others
            failed.append(area)
            print(f"bench {area} failed: {exc!r}", flush=True)
        print(f"(bench {area}: {time.perf_counter() - started:.1f}s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
