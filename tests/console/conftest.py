"""A real broker loaded with the loghub samples (each line's syslog time as its CreateTime, so the CSV
beside each sample is the ground truth) and a topic of records that arrive late at random; consoles
started as the `chronolog` command in front of it, over the Kafka protocol and over a copy of its data dir.
"""

from __future__ import annotations

import csv
import os
import random
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.brokerproc import BrokerProcess, free_port
from tests.waiting import poll_until

LINUX_PARTS = 2
LATE_PARTS = 2
LATE_BASE = 1_700_000_000_000


def loghub_rows(shared: Path) -> list[tuple[str, int, str]]:
    """(line id, CreateTime, raw line) of Linux_2k, times from loghub's own CSV parse (year 2005, UTC)."""
    lines = (shared / "loghub" / "Linux_2k.log").read_text(encoding="utf-8", errors="replace").splitlines()
    out = []
    with open(shared / "loghub" / "Linux_2k.log_structured.csv", newline="", encoding="utf-8") as f:
        for row, line in zip(csv.DictReader(f), lines, strict=True):
            when = datetime.strptime(f"2005 {row['Month']} {row['Date']} {row['Time']}", "%Y %b %d %H:%M:%S")
            out.append((row["LineId"], int(when.replace(tzinfo=UTC).timestamp() * 1000), line))
    return out


SPIKE_BASE = LATE_BASE + 10 * 86_400_000


def spike_stamps() -> list[int]:
    """Two hours of one record every 10 s, then a burst of 500 records from its first ten minutes (a
    replayed batch), then the clock goes on: the time index counts the burst at the newest time before it."""
    steady = [SPIKE_BASE + i * 10_000 for i in range(720)]
    burst = [SPIKE_BASE + (i * 1_200) % 600_000 for i in range(500)]
    after = [SPIKE_BASE + 7_200_000 + i * 10_000 for i in range(30)]
    return steady + burst + after


def late_stamps(seed: int = 7, count: int = 1500) -> list[int]:
    """Timestamps in arrival order, about one in eight up to 10 minutes late."""
    rng = random.Random(seed)
    t, out = LATE_BASE, []
    for _ in range(count):
        t += rng.randint(0, 4000)
        out.append(t - (rng.randint(1, 600_000) if rng.random() < 0.125 else 0))
    return out


@dataclass
class Loaded:
    broker: BrokerProcess
    truth: dict[str, dict[int, list[int]]]   # topic -> partition -> timestamps in offset order
    lines: dict[str, dict[int, list[bytes]]]  # topic -> partition -> values in offset order


@pytest.fixture(scope="package")
def loaded(tmp_path_factory, shared_data) -> Loaded:
    proc = BrokerProcess(tmp_path_factory.mktemp("console") / "data",
                         {"log.segment.bytes": "16384"}).start()
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    for name, parts in (("linux", LINUX_PARTS), ("late", LATE_PARTS)):
        admin.create_topics([NewTopic(name, parts, 1, config={"retention.ms": "-1"})])[name].result(15)
    truth: dict[str, dict[int, list[int]]] = {"linux": {p: [] for p in range(LINUX_PARTS)},
                                              "late": {p: [] for p in range(LATE_PARTS)}}
    values: dict[str, dict[int, list[bytes]]] = {"linux": {p: [] for p in range(LINUX_PARTS)},
                                                 "late": {p: [] for p in range(LATE_PARTS)}}
    failed = []

    def delivered(err, _msg) -> None:
        if err is not None:
            failed.append(err)

    producer = Producer({"bootstrap.servers": proc.bootstrap, "linger.ms": 5, "enable.idempotence": True, "batch.size": 8192,
                         "on_delivery": delivered})
    for i, (line_id, ts, line) in enumerate(loghub_rows(shared_data)):
        p = i % LINUX_PARTS
        producer.produce("linux", value=line.encode(), key=line_id.encode(), partition=p, timestamp=ts,
                         headers=[("line", line_id.encode())])
        truth["linux"][p].append(ts)
        values["linux"][p].append(line.encode())
    for i, ts in enumerate(late_stamps()):
        p = i % LATE_PARTS
        value = b'{"n": %d}' % i
        producer.produce("late", value=value, partition=p, timestamp=ts)
        truth["late"][p].append(ts)
        values["late"][p].append(value)
        if i % 10 == 9:
            producer.flush(30)
    admin.create_topics([NewTopic("spike", 1, 1, config={"retention.ms": "-1"})])["spike"].result(15)
    truth["spike"], values["spike"] = {0: []}, {0: []}
    for i, ts in enumerate(spike_stamps()):
        producer.produce("spike", value=b"s%d" % i, partition=0, timestamp=ts)
        truth["spike"][0].append(ts)
        values["spike"][0].append(b"s%d" % i)
        if i % 50 == 49:
            producer.flush(30)
    admin.create_topics([NewTopic("appended", 1, 1, config={"message.timestamp.type": "LogAppendTime",
                                                             "retention.ms": "-1"})])["appended"].result(15)
    for i in range(5):
        producer.produce("appended", value=b"a%d" % i, partition=0, timestamp=LATE_BASE)
    assert producer.flush(30) == 0 and not failed, failed[:3]
    yield Loaded(proc, truth, values)
    proc.stop()


class ConsoleProcess:
    """`chronolog console ...` on a free loopback port, stopped by its own pid."""

    def __init__(self, *args: str, log: Path) -> None:
        self.port = free_port()
        self.log = log
        self._out = open(log, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "chronolog.cli.main", "console", *args,
                                      "--port", str(self.port)], stdout=self._out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL,
                                     env={**os.environ, "PYTHONFAULTHANDLER": "1"})  # a crash leaves its stacks
        wait_http(self.url("/static/console.css"), self.proc)  # a page that needs no broker

    def url(self, path: str, **query) -> str:
        q = {k: v for k, v in query.items() if v is not None}
        return f"http://127.0.0.1:{self.port}{path}" + ("?" + urllib.parse.urlencode(q) if q else "")

    def stop(self) -> None:
        if self.proc.poll() is not None and self.proc.returncode < 0:  # died of a signal: say so, with its log
            self._out.flush()
            tail = self.log.read_text(errors="replace")[-6000:]
            sys.stderr.write(f"console died of signal {-self.proc.returncode}; the end of its log:\n{tail}\n")
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._out.close()


def wait_http(url: str, proc: subprocess.Popen | None = None, timeout: float = 60) -> None:
    def up() -> bool:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"console exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=5):
                return True
        except urllib.error.HTTPError:
            return True
        except OSError:
            return False
    assert poll_until(up, timeout, interval=0.1), f"{url} never answered"


def get(url: str, data: dict | None = None) -> tuple[int, str]:
    """(status, body) of a GET, or of a form POST when `data` is given."""
    body = urllib.parse.urlencode(data).encode() if data is not None else None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=120) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def csrf_of(page: str) -> str:
    m = re.search(r'name="csrf" value="([^"]+)"', page)
    assert m, "no CSRF token on the page"
    return m.group(1)


@pytest.fixture(scope="package")
def broker_console(loaded, tmp_path_factory):
    c = ConsoleProcess("--bootstrap-server", loaded.broker.bootstrap,
                       log=tmp_path_factory.mktemp("consolelog") / "broker-console.log")
    yield c
    c.stop()


@pytest.fixture(scope="package")
def data_copy(loaded, tmp_path_factory) -> Path:
    """A copy of the data dir taken while the broker runs (readers never need the lock)."""
    copy = tmp_path_factory.mktemp("copy") / "data"
    shutil.copytree(loaded.broker.data_dir, copy, ignore=shutil.ignore_patterns(".lock"))
    return copy


@pytest.fixture(scope="package")
def dir_console(data_copy, tmp_path_factory):
    c = ConsoleProcess("--data-dir", str(data_copy), log=tmp_path_factory.mktemp("consolelog") / "dir-console.log")
    yield c
    c.stop()
