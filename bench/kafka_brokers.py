"""The two brokers of the Kafka bench, and what it measures of a broker process: start to the first answered
Metadata, CPU and RSS of its process tree (from /proc), a SIGKILL and a stop."""

from __future__ import annotations

import resource
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tests.brokerproc import free_port

from bench.common import proc_times

KAFKA_CONFIGS = {"num.partitions": "1", "log.retention.ms": "-1"}
WAIT = 300  # seconds: the bound of any one wait on a broker


# -- the measures every broker gets -----------------------------------------------------------------------

# Metadata v4 (KIP-896 removed v0-v3 from Kafka 4.x; chronolog answers any), no topics, header v1.
_METADATA_V4 = struct.pack(">hhih", 3, 4, 1, 5) + b"bench" + struct.pack(">ib", 0, 0)


def answers_metadata(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(struct.pack(">i", len(_METADATA_V4)) + _METADATA_V4)
            head = b""
            while len(head) < 8:
                chunk = s.recv(8 - len(head))
                if not chunk:
                    return False
                head += chunk
            return struct.unpack(">i", head[4:8])[0] == 1
    except OSError:
        return False


def first_metadata(proc: subprocess.Popen, port: int, started: float, timeout: float = WAIT) -> float:
    """Seconds from `started` (just before exec) until Metadata is answered on `port` (polled each ms)."""
    deadline = time.monotonic() + timeout
    while not answers_metadata(port):
        if proc.poll() is not None:
            raise RuntimeError(f"the broker exited with {proc.returncode} before answering")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the broker did not answer Metadata within {timeout} s")
        time.sleep(0.001)
    return time.perf_counter() - started


def tree_pids(pid: int) -> list[int]:
    """`pid` and all its descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return out


def cpu_tree_s(pid: int) -> float:
    """User + system CPU seconds of `pid` and its descendants so far (every thread: a JVM's GC and JIT too)."""
    total = 0.0
    for p in tree_pids(pid):
        try:
            user, system, _faults = proc_times(p)
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += user + system
    return total


def cpu_self_s() -> float:
    """User + system CPU seconds of this process and of its children that have ended, so far: the Python
    loop and librdkafka's threads, a kcat, a perf tool's JVM (the brokers run until the end)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def rss_tree_mb(pid: int) -> float:
    """VmRSS of `pid` and all its descendants, MB."""
    total = 0
    for p in tree_pids(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total / 1024


# -- the two brokers --------------------------------------------------------------------------------------

class Broker:
    """What the steps need of a broker under test."""

    name = ""
    proc: subprocess.Popen
    port: int

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> float:
        """Exec, then seconds to the first Metadata."""
        raise NotImplementedError

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(60)

    def stop(self) -> None:
        raise NotImplementedError


class Chronolog(Broker):
    name = "chronolog"

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir

    def start(self) -> float:
        self.port = free_port()
        started = time.perf_counter()
        self.proc = subprocess.Popen([sys.executable, "-m", "chronolog.cli.main", "serve", "--data-dir",
                                      str(self.data_dir), "--port", str(self.port)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            return first_metadata(self.proc, self.port, started)
        except BaseException:
            self.kill()
            raise

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


class Kafka(Broker):
    name = "Kafka 4.4"

    def __init__(self, base: Path) -> None:
        from chronolog.testing.kafka import BENCH_JVM_OPTS, KafkaBroker

        self.cluster = KafkaBroker(configs=KAFKA_CONFIGS, jvm_opts=BENCH_JVM_OPTS, base=base)
        self.node = self.cluster.nodes[0]
        self.port = self.node.port
        self.formatted = False

    def start(self) -> float:
        if not self.formatted:
            self.node.format(self.cluster.cluster_id)
            self.formatted = True
        started = time.perf_counter()
        self.node.start()
        self.proc = self.node.proc
        try:
            return first_metadata(self.proc, self.port, started)
        except BaseException:
            self.node.kill()
            raise

    def kill(self) -> None:
        self.node.kill()

    def stop(self) -> None:
        self.node.stop(30)


def best_start(make: Callable[[], Broker], tries: int) -> float:
    best = float("inf")
    for _ in range(tries):
        broker = make()
        try:
            best = min(best, broker.start())
        finally:
            broker.stop()
    return best
