"""`chronolog consume --from T1 --to T2 --format raw` against `kcat -C -o s@T1 -o e@T2 -e` (issue #39, "the
tools at the speed of the C tool"): the same window of the same topic of the same chronolog broker written
to stdout, each record's value and a newline, compared byte for byte.

The topic holds `bench_produce`'s syslog file (one record per line, each with its line's own syslog time as
CreateTime, one partition, uncompressed; and the same lines zstd-compressed); the window is the middle half
of its time span. Each run is a new process, as a user starts it (the interpreter's start, imports,
metadata and ListOffsets included), its stdout a pipe read to the end; median of `TRIES` interleaved runs of
each. Rows: wall and CPU seconds, and the ratio kcat / chronolog (>= 0.5 is the target). The empty-window
row shows what a run costs before its first record (start, metadata, ListOffsets): the part of chronolog's
time that does not shrink with the window. A second, larger file (`BIG` lines) shows the ratio when the
bytes dominate.

CHRONOLOG_BENCH_CONSUME_LINES sets the lines of the first file, CHRONOLOG_BENCH_CONSUME_BIG of the second
(0: no second file; the test of this module uses a few thousand and none).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

from tests.brokerproc import BrokerProcess

from bench.bench_produce import YEAR, chronolog_command, syslog_file, timed
from bench.common import print_table

LINES = int(os.environ.get("CHRONOLOG_BENCH_CONSUME_LINES", "200000"))
BIG = int(os.environ.get("CHRONOLOG_BENCH_CONSUME_BIG", "1000000"))
TRIES = 3


def load(bootstrap: str, topic: str, lines: Path, codec: str) -> tuple[int, int]:
    """Each line of the file a record with its own syslog time; (first, last) timestamp."""
    from confluent_kafka import Producer

    from chronolog.timetravel.syslog import syslog_timestamp

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                  "queue.buffering.max.messages": 2_000_000, "compression.type": codec})
    stamps = []
    with open(lines, "rb") as f:
        for n, line in enumerate(f):
            ts = syslog_timestamp(line.decode(), YEAR)
            stamps.append(ts)
            p.produce(topic, line.rstrip(b"\n"), partition=0, timestamp=ts)
            if n % 100_000 == 0:
                p.poll(0)
    if p.flush(120):
        raise RuntimeError("the topic could not be loaded")
    return stamps[0], stamps[-1]


def kcat(bootstrap: str, topic: str, t1: int, t2: int) -> list[str]:
    return ["kcat", "-C", "-b", bootstrap, "-t", topic, "-o", f"s@{t1}", "-o", f"e@{t2}", "-e", "-q"]


def ours(bootstrap: str, topic: str, t1: int, t2: int) -> list[str]:
    return [*chronolog_command(), "consume", topic, "--from", str(t1), "--to", str(t2), "--format", "raw",
            "-b", bootstrap]


def output(args: list[str]) -> bytes:
    proc = subprocess.run(args, capture_output=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{args[0]} failed: {proc.stderr.decode(errors='replace')[-500:]}")
    return proc.stdout


def race(bootstrap: str, topic: str, t1: int, t2: int) -> tuple[tuple[float, float], tuple[float, float], bool, int]:
    """((kcat wall, CPU), (chronolog wall, CPU), identical output, bytes)."""
    want = output(kcat(bootstrap, topic, t1, t2))
    same = output(ours(bootstrap, topic, t1, t2)) == want
    k, c = [], []
    for _ in range(TRIES):  # interleaved, so a change in the machine's load falls on both
        k.append(timed(kcat(bootstrap, topic, t1, t2)))
        c.append(timed(ours(bootstrap, topic, t1, t2)))
    med = [tuple(statistics.median(x[j] for x in runs) for j in (0, 1)) for runs in (k, c)]
    return med[0], med[1], same, len(want)


def main() -> None:
    if shutil.which("kcat") is None:
        print("kcat is not installed: nothing to compare with (apt-get install kcat)")
        return
    from confluent_kafka.admin import AdminClient, NewTopic

    tmp = Path(tempfile.mkdtemp(prefix="bench-consume-"))
    proc = BrokerProcess(tmp / "data").start()
    try:
        b = proc.bootstrap
        rows = [("", "kcat wall s", "chronolog wall s", "kcat / chronolog (>= 0.5)", "CPU s kcat / chronolog",
                 "same bytes")]
        sets = [(LINES, "none"), (LINES, "zstd")] + ([(BIG, "none")] if BIG else [])
        admin = AdminClient({"bootstrap.servers": b})
        names = {f"lines-{n}-{codec}" for n, codec in sets}
        for f in admin.create_topics([NewTopic(n, 1, 1, config={"retention.ms": "-1"}) for n in names]).values():
            f.result(30)
        files: dict[int, Path] = {}
        ok = True
        for n, codec in sets:
            if n not in files:
                files[n] = tmp / f"syslog-{n}.log"
                syslog_file(files[n], n)
            topic = f"lines-{n}-{codec}"
            first, last = load(b, topic, files[n], codec)
            t1, t2 = first + (last - first) // 4, first + 3 * (last - first) // 4
            (kw, kc), (cw, cc), same, size = race(b, topic, t1, t2)
            ok &= same
            rows.append((f"window: middle half of {n:,} lines ({size / 1e6:.1f} MB out), {codec}", f"{kw:.3f}",
                         f"{cw:.3f}", f"{kw / cw:.2f}x", f"{kc:.2f} / {cc:.2f}", "yes" if same else "NO"))
            if (n, codec) == sets[0]:
                (kw, kc), (cw, cc), same, _ = race(b, topic, last + 1, last + 2)
                rows.append(("empty window (start, metadata, ListOffsets)", f"{kw:.3f}", f"{cw:.3f}",
                             f"{kw / cw:.2f}x", f"{kc:.2f} / {cc:.2f}", "yes" if same else "NO"))
        print_table(rows)
        del admin  # before the broker stops: no librdkafka lines about a closed connection
        if not ok:
            raise RuntimeError("chronolog consume's output differs from kcat's")
    finally:
        proc.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
