"""Load: the bounded run of `tests/reliability/test_load.py` (confluent-kafka producers with acks=all for a fixed
time, a group of confluent-kafka consumers and a kafka-python consumer reading meanwhile) against a baseline
of one producer and one consumer measured in the same run. Records/s and MB/s count acknowledged records
over the producing time; "drain" is how long the consumers needed after the last acknowledgement to have
read everything; peak RSS is the broker's VmHWM."""

from __future__ import annotations

import tempfile
from pathlib import Path

from tests.reliability.loadrun import run_load

from bench.common import print_table

SECONDS = 10.0


def main() -> None:
    runs = [("1 producer, 1 consumer", {"producers": 1, "group_consumers": 1, "kafka_python": False}),
            ("3 producers, 2 group + 1 kafka-python consumers",
             {"producers": 3, "group_consumers": 2, "kafka_python": True})]
    rows = [("run", "records/s", "MB/s", "vs baseline", "drain s", "peak RSS MB", "exactly once")]
    base = None
    for label, kwargs in runs:
        with tempfile.TemporaryDirectory() as tmp:
            r = run_load(Path(tmp) / "data", seconds=SECONDS, **kwargs)
        base = base or r.produce_records_per_s
        exact = not r.errors and not any(r.missing.values()) and not any(r.duplicates.values())
        rows.append((label, f"{r.produce_records_per_s:,.0f}", f"{r.produce_mb_per_s:.2f}",
                     f"{r.produce_records_per_s / base:.2f}x", f"{r.drain_seconds:.2f}", f"{r.broker_vmhwm_mb:.0f}",
                     "yes" if exact else f"NO ({(r.errors or [''])[0][:60]})"))
    print(f"({SECONDS:.0f} s of producing per run, producers as fast as they can, 200-byte values, "
          "4 partitions, producers in their own processes)")
    print_table(rows)


if __name__ == "__main__":
    main()
