"""How fast a broker starts: exec -> first answered Metadata request, which is what a test fixture or a
developer waits for.

Rows: `chronolog serve` on an empty data dir, an `EmbeddedBroker` in a fresh process, `serve` with 400
partitions after a clean stop and after a SIGKILL (recovery). Targets (issue "Start like a native broker"):
<= 0.15 s empty, <= 0.5 s with 400 partitions after a clean stop; the ratio is target / measured (>= 1 met).
The floor beside them: a Python process that only starts the interpreter and imports asyncio and socket,
the least any Python broker pays before its first answer.
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.brokerproc import answers_metadata, free_port

from bench.common import print_table

TRIES = 5
def first_metadata_seconds(proc: subprocess.Popen, port: int, started: float, timeout: float = 120) -> float:
    """Seconds from `started` (just before exec) until a Metadata v0 request to `port` is answered; polled
    every millisecond, so the figure is at most about a millisecond late."""
    deadline = time.monotonic() + timeout
    while not answers_metadata(port):
        if proc.poll() is not None:
            raise RuntimeError(f"the broker exited with {proc.returncode} before answering")
        if time.monotonic() > deadline:
            raise RuntimeError("the broker did not answer Metadata")
        time.sleep(0.001)
    return time.perf_counter() - started


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _serve(data_dir: Path, port: int) -> list[str]:
    return [sys.executable, "-m", "chronolog.cli.main", "serve", "--data-dir", str(data_dir), "--port", str(port)]


def _embedded(data_dir: Path, port: int) -> list[str]:
    code = ("import sys, threading; from chronolog.server.embedded import EmbeddedBroker; "
            f"EmbeddedBroker({str(data_dir)!r}, port={port}).start(); threading.Event().wait()")
    return [sys.executable, "-c", code]


def timed_start(args_for, data_dir: Path, *, kill: bool = False, env: dict | None = None) -> float:
    port = free_port()
    started = time.perf_counter()
    proc = subprocess.Popen(args_for(data_dir, port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, env=env)
    try:
        return first_metadata_seconds(proc, port, started)
    finally:
        proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        proc.wait(60)


def uncompiled_env(tmp: Path) -> dict:
    """An environment whose `chronolog` is a copy of the package without bytecode caches, which Python may
    not write: every start compiles its modules from source, as the first start after an edit does (or
    every start, where PYTHONDONTWRITEBYTECODE is set and nothing byte-compiled the package: `make`
    does, as pip does for an installed package)."""
    import chronolog

    copy = tmp / "uncompiled"
    shutil.copytree(Path(chronolog.__file__).parent, copy / "chronolog",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}


def python_floor() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import asyncio, socket"], check=True)
    return time.perf_counter() - started


def fill(data_dir: Path, partitions: int = 400) -> None:
    """40 topics of 10 partitions, 10 records in each partition, through a real client; stopped cleanly."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    port = free_port()
    proc = subprocess.Popen(_serve(data_dir, port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL)
    try:
        first_metadata_seconds(proc, port, time.perf_counter())
        bootstrap = f"127.0.0.1:{port}"
        topics = [f"t{i}" for i in range(partitions // 10)]
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic(t, 10, 1) for t in topics]).values():
            future.result(60)
        del admin
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        for t in topics:
            for part in range(10):
                for i in range(10):
                    p.produce(t, value=b"v%d" % i, partition=part)
        assert p.flush(60) == 0
        del p  # destroyed before the broker stops, so it does not retry it
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


def main() -> None:
    rows = [("start (exec -> first Metadata)", "median s", "best s", "target s", "ratio target/median")]
    floor = statistics.median(python_floor() for _ in range(TRIES))
    with tempfile.TemporaryDirectory(prefix="chronolog-bench-start-") as tmpdir:
        tmp = Path(tmpdir)
        cases = []
        empty = [timed_start(_serve, Path(tempfile.mkdtemp(dir=tmp))) for _ in range(TRIES)]
        cases.append(("serve, empty data dir", empty, 0.15))
        env = uncompiled_env(tmp)
        uncompiled = [timed_start(_serve, Path(tempfile.mkdtemp(dir=tmp)), env=env) for _ in range(TRIES)]
        cases.append(("serve, empty, package not byte-compiled", uncompiled, None))
        embedded = [timed_start(_embedded, Path(tempfile.mkdtemp(dir=tmp))) for _ in range(TRIES)]
        cases.append(("EmbeddedBroker in a new process, empty", embedded, 0.15))
        full = tmp / "400"
        fill(full)
        clean = [timed_start(_serve, full) for _ in range(TRIES)]
        cases.append(("serve, 400 partitions, after a clean stop", clean, 0.5))
        crashed = []
        for _ in range(3):
            timed_start(_serve, full, kill=True)  # a SIGKILL once it answers: the next start recovers
            crashed.append(timed_start(_serve, full))
        cases.append(("serve, 400 partitions, after a SIGKILL", crashed, None))
    for label, times, target in cases:
        med = statistics.median(times)
        rows.append((label, f"{med:.3f}", f"{min(times):.3f}", f"{target}" if target else "-",
                     f"{target / med:.2f}" if target else "-"))
    rows.append(("floor: python -c 'import asyncio, socket'", f"{floor:.3f}", "-", "-", "-"))
    print_table(rows)
