"""Thousands of partitions on one broker started under `ulimit -n 1024` (soft and hard): what a partition
costs and how fast the broker comes back.

For 1,000 and 10,000 partitions (10 and 100 topics of 100, made with CreateTopics ten topics a request,
10 records produced into each): create time, open descriptors after the create and their peak over the
run (/proc/<pid>/fd sampled every 20 ms), RSS, one ListOffsets by time over every partition (how many
answers are exact), the clean stop (SIGTERM to exit: every log made durable, the clean-shutdown marker
written; a stop still running after 120 s is SIGKILLed and the column says so), a clean restart and a
restart after SIGKILL, each timed from exec to the first answered Metadata, and (in brackets) the broker's own time to open every partition in the background
(the start is lazy: Metadata is answered before, a request for a partition not opened yet waits for it).
Targets (issue "Thousands of partitions on one broker"): 10,000 partitions under the
limit, clean restart <= 3 s, restart after SIGKILL <= 10 s, RSS <= 300 MB; the ratio is target / measured
(>= 1 met).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from tests.reliability.manypartitions import run

from bench.common import print_table

LIMIT = 1024
CASES = ((10, 100), (100, 100))  # topics x partitions each


def main() -> None:
    rows = [("partitions (ulimit -n 1024)", "create s", "fds after", "peak fds", "RSS MB",
             "ListOffsets s (exact)", "clean stop s", "clean restart s (ratio) [all open s]",
             "SIGKILL restart s (ratio) [all open s]", "RSS ratio")]
    for topics, per_topic in CASES:
        with tempfile.TemporaryDirectory(prefix="chronolog-bench-partitions-") as tmp:
            res = run(Path(tmp) / "data", topics=topics, per_topic=per_topic, limit=LIMIT, read_back=False)
        if res.errors:
            print(f"{res.partitions} partitions: {'; '.join(res.errors)}", flush=True)
        rows.append((f"{res.partitions:,}", f"{res.create_s:.1f}", str(res.fds_after_create), str(res.peak_fds),
                     f"{res.hwm_mb:.0f}", f"{res.list_offsets_s:.2f} ({res.list_offsets_exact:,})",
                     f"{res.clean_stop_s:.2f}" + ("" if res.clean_stop_rc == 0 else f" (killed: exit {res.clean_stop_rc})"),
                     f"{res.clean_restart_s:.2f} ({3 / res.clean_restart_s:.2f}) [{res.clean_opened_s:.1f}]",
                     f"{res.kill_restart_s:.2f} ({10 / res.kill_restart_s:.2f}) [{res.kill_opened_s:.1f}]",
                     f"{300 / res.hwm_mb:.2f}"))
    print_table(rows)


if __name__ == "__main__":
    main()
