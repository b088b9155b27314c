"""`chronolog produce` against `kcat -P -l` (issue #39, "the tools at the speed of the C tool"): the same
syslog file (200,000 lines, about 21 MB) into the same chronolog broker, one record per line.

kcat stamps each record with the time of sending; chronolog reads each line's own syslog time and makes it
the record's CreateTime, which is the point of the tool. Each run is a new process, as a user starts it
(the interpreter's start and imports included), into a topic of its own with one partition; median of
`TRIES` runs of each, interleaved. Rows: wall seconds and the CPU seconds of the process, and the ratio
kcat / chronolog (>= 0.5 is the target). Then both topics are read back with kcat and compared byte for
byte with the file, and chronolog's timestamps with the syslog reader's.

CHRONOLOG_BENCH_PRODUCE_LINES sets the number of lines (the test of this module uses a few thousand).
"""

from __future__ import annotations

import functools
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.brokerproc import BrokerProcess

from bench.common import print_table

LINES = int(os.environ.get("CHRONOLOG_BENCH_PRODUCE_LINES", "200000"))
TRIES = 3
YEAR = 2024
_PROGRAMS = ("sshd(pam_unix)[{pid}]: authentication failure; logname= uid=0 euid=0 tty=NODEVssh ruser= rhost={ip}",
             "sshd[{pid}]: Failed password for invalid user admin from {ip} port {port} ssh2",
             "kernel: audit({n}.{pid}:{port}): avc: denied {{ read }} for pid={pid} comm=\"cron\"",
             "CRON[{pid}]: pam_unix(cron:session): session opened for user root by (uid=0)",
             "systemd[1]: Started Session {n} of user root.",
             "su(pam_unix)[{pid}]: session closed for user news")


def syslog_file(path: Path, count: int, seed: int = 39) -> None:
    """BSD syslog lines (RFC 3164, as loghub's Linux sample), a few per second, times never going back."""
    rng = random.Random(seed)
    t = datetime(YEAR, 3, 1, tzinfo=UTC)
    out = []
    for n in range(count):
        t += timedelta(milliseconds=rng.randint(0, 250))
        msg = rng.choice(_PROGRAMS).format(pid=rng.randint(100, 32000), n=n, port=rng.randint(1024, 65535),
                                           ip=f"{rng.randint(1, 223)}.{rng.randint(0, 255)}.{rng.randint(0, 255)}."
                                              f"{rng.randint(1, 254)}")
        out.append(f"{t:%b} {t.day:2d} {t:%H:%M:%S} combo {msg}\n")
    path.write_text("".join(out))


def timed(args: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, timeout=600)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{args[0]} failed: {proc.stderr.decode(errors='replace')[-500:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


@functools.cache
def _compile_once() -> None:
    import compileall

    import chronolog
    compileall.compile_dir(Path(chronolog.__file__).parent, quiet=1)


def chronolog_command() -> list[str]:
    """The installed command, as a user runs it, with its package's bytecode compiled first: an install
    compiles it, but a working tree under PYTHONDONTWRITEBYTECODE would compile every edited module again
    in every timed run (20 ms of a 90 ms start)."""
    _compile_once()
    script = Path(sys.executable).with_name("chronolog")
    return [str(script)] if script.exists() else [sys.executable, "-m", "chronolog.cli.main"]


def read_back(bootstrap: str, topic: str, fmt: str) -> bytes:
    out = subprocess.run(["kcat", "-C", "-b", bootstrap, "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q",
                          "-f", fmt], capture_output=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"kcat -C failed: {out.stderr.decode(errors='replace')[-500:]}")
    return out.stdout


def main() -> None:
    if shutil.which("kcat") is None:
        print("kcat is not installed: nothing to compare with (apt-get install kcat)")
        return
    from confluent_kafka.admin import AdminClient, NewTopic

    from chronolog.timetravel.syslog import syslog_timestamp

    tmp = Path(tempfile.mkdtemp(prefix="bench-produce-"))
    proc = BrokerProcess(tmp / "data").start()
    try:
        lines = tmp / "syslog.log"
        syslog_file(lines, LINES)
        size = lines.stat().st_size
        b = proc.bootstrap
        names = [f"{who}-{i}" for i in range(TRIES) for who in ("kcat", "chronolog")]
        admin = AdminClient({"bootstrap.servers": b})
        for f in admin.create_topics([NewTopic(n, 1, 1, config={"retention.ms": "-1"}) for n in names]).values():
            f.result(30)
        kcat, ours = [], []
        for i in range(TRIES):  # interleaved, so a change in the machine's load falls on both
            kcat.append(timed(["kcat", "-P", "-b", b, "-t", f"kcat-{i}", "-p", "0", "-l", str(lines)]))
            ours.append(timed([*chronolog_command(), "produce", f"chronolog-{i}", str(lines), "--time-format",
                               "syslog", "--year", str(YEAR), "-b", b]))
        k_wall, k_cpu = (statistics.median(x[j] for x in kcat) for j in (0, 1))
        c_wall, c_cpu = (statistics.median(x[j] for x in ours) for j in (0, 1))
        data = lines.read_bytes()
        same = read_back(b, "kcat-0", "%s\n") == data and read_back(b, "chronolog-0", "%s\n") == data
        want = [syslog_timestamp(line, YEAR) for line in data.decode().splitlines()]
        stamps = [int(x) for x in read_back(b, "chronolog-0", "%T\n").split()]
        print_table([
            ("", "wall s (median)", "CPU s", "lines/s"),
            (f"kcat -P -l, {LINES:,} syslog lines ({size / 1e6:.1f} MB)", f"{k_wall:.3f}", f"{k_cpu:.3f}",
             f"{LINES / k_wall:,.0f}"),
            ("chronolog produce --time-format syslog", f"{c_wall:.3f}", f"{c_cpu:.3f}", f"{LINES / c_wall:,.0f}"),
            ("ratio kcat / chronolog (>= 0.5 target)", f"{k_wall / c_wall:.2f}x", f"{k_cpu / c_cpu:.2f}x", ""),
            ("values byte for byte as the file (both)", "yes" if same else "NO", "", ""),
            ("chronolog's timestamps = each line's syslog time", "yes" if stamps == want else "NO", "", ""),
        ])
        del admin  # before the broker stops: no librdkafka lines about a closed connection
        if not same or stamps != want:
            raise RuntimeError("the records read back differ from the file")
    finally:
        proc.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
