"""Thousands of partitions on one broker started under a small open-files limit, shared by
`test_many_partitions.py` (which asserts on it) and `bench/bench_partitions.py` (which prints it).

The broker is a subprocess whose RLIMIT_NOFILE (soft and hard, as `ulimit -n` sets them) is set before
exec; a sampler thread reads its open descriptors (/proc/<pid>/fd) and memory (/proc/<pid>/status) every
20 ms. Clients are confluent-kafka (librdkafka): CreateTopics, a producer writing `records` records into
every partition, one ListOffsets by time over all partitions, a consumer assigned every partition from
its start, then a clean restart and a restart after SIGKILL, each timed to the first answered Metadata
and to the broker's line saying every partition is opened (the start is lazy: partitions open in the
background, a request for one not opened yet opens it or waits for it).
"""

from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.brokerproc import answers_metadata, free_port

BASE_TS = 1_700_000_000_000  # record i of every partition has timestamp BASE_TS + i
def nofile_limit(limit: int):
    def preexec() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
    return preexec


@dataclass
class Sample:
    fds: int = 0
    rss_mb: float = 0.0
    hwm_mb: float = 0.0


def sample(pid: int) -> Sample:
    out = Sample()
    try:
        out.fds = len(os.listdir(f"/proc/{pid}/fd"))
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    out.rss_mb = int(line.split()[1]) / 1024
                elif line.startswith("VmHWM:"):
                    out.hwm_mb = int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return out


class LimitedBroker:
    """`chronolog serve` under an open-files limit, with the peak of its open descriptors."""

    def __init__(self, data_dir: Path, limit: int, configs: dict[str, str] | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.limit = limit
        self.configs = {"max.broker.partitions": "100000", "log.retention.check.interval.ms": "300000",
                        "log.retention.ms": "-1",
                        **(configs or {})}
        self.port = free_port()
        self.log_path = self.data_dir.parent / f"broker-{self.port}.log"
        self.proc: subprocess.Popen | None = None
        self.peak_fds = 0
        self.last = Sample()
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 120.0) -> float:
        """Start; seconds from exec to the first answered Metadata request."""
        args = [sys.executable, "-m", "chronolog.cli.main", "serve", "--data-dir", str(self.data_dir),
                "--port", str(self.port)]
        for k, v in self.configs.items():
            args += ["--config", f"{k}={v}"]
        log = open(self.log_path, "ab")
        started = time.perf_counter()
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     preexec_fn=nofile_limit(self.limit))
        log.close()
        self._stop.clear()
        self._sampler = threading.Thread(target=self._sample, args=(self.proc.pid,), daemon=True)
        self._sampler.start()
        deadline = time.monotonic() + timeout
        while not answers_metadata(self.port):
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}: {self.log_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError("the broker did not answer Metadata")
            time.sleep(0.002)
        return time.perf_counter() - started

    def _sample(self, pid: int) -> None:
        while not self._stop.is_set():
            s = sample(pid)
            if s.fds:
                self.last = s
                self.peak_fds = max(self.peak_fds, s.fds)
            self._stop.wait(0.02)

    def opened_all(self, since: int, timeout: float = 300.0) -> tuple[float, str]:
        """Seconds the broker took to open every partition and how ("after a clean shutdown" or "recovered
        from the recovery points"), from its "N partitions opened in S s (how)" line written after byte
        `since` of its log (bounded wait)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(r"\d+ partitions opened in ([0-9.]+) s \((.*)\)", self.log_text()[since:])
            if found:
                return float(found.group(1)), found.group(2)
            if self.proc is not None and self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError("the broker never said every partition was opened")

    def log_size(self) -> int:
        return self.log_path.stat().st_size if self.log_path.exists() else 0

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        os.kill(self.proc.pid, sig)
        try:
            return self.proc.wait(120)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            return self.proc.wait(10)
        finally:
            self._stop.set()
            if self._sampler is not None:
                self._sampler.join(5)


@dataclass
class ManyResult:
    topics: int
    partitions_per_topic: int
    limit: int
    records: int
    create_s: float = 0.0
    produce_s: float = 0.0
    list_offsets_s: float = 0.0
    list_offsets_exact: int = 0
    read_s: float = 0.0
    read_records: int = 0
    read_missing: list = field(default_factory=list)
    fds_after_create: int = 0
    peak_fds: int = 0
    rss_mb: float = 0.0
    hwm_mb: float = 0.0
    clean_stop_s: float = 0.0
    clean_stop_rc: int | None = None  # 0: the SIGTERM stop finished (not killed after the wait)
    clean_restart_s: float = 0.0
    clean_opened_s: float = 0.0  # the broker's own figure: start of the opening to the last partition opened
    clean_opened_how: str = ""  # "after a clean shutdown": the restart trusted the marker the stop wrote
    kill_restart_s: float = 0.0
    kill_opened_s: float = 0.0
    kill_opened_how: str = ""  # "recovered from the recovery points"
    after_restarts_records: int = 0
    errors: list = field(default_factory=list)

    @property
    def partitions(self) -> int:
        return self.topics * self.partitions_per_topic

    def as_dict(self) -> dict:
        return asdict(self)


def topic_names(topics: int) -> list[str]:
    return [f"many-{i:03d}" for i in range(topics)]


def create_all(bootstrap: str, topics: int, per_topic: int, timeout: float = 300) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for batch in range(0, topics, 10):  # ten topics a request: as an operator's script would
        new = [NewTopic(name, per_topic, 1) for name in topic_names(topics)[batch:batch + 10]]
        for fut in admin.create_topics(new, operation_timeout=60, request_timeout=timeout).values():
            fut.result(timeout)


def produce_all(bootstrap: str, topics: int, per_topic: int, records: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "enable.idempotence": True,
                         "queue.buffering.max.messages": 1_000_000, "batch.num.messages": 100_000})
    failed: list = []

    def done(err, msg) -> None:
        if err is not None:
            failed.append(err)

    for name in topic_names(topics):
        for p in range(per_topic):
            for i in range(records):
                producer.produce(name, f"{name}/{p}/{i}".encode(), partition=p, timestamp=BASE_TS + i,
                                 on_delivery=done)
        producer.poll(0)
    left = producer.flush(300)
    if left or failed:
        raise RuntimeError(f"{left} records not delivered, {len(failed)} failed: {failed[:3]}")


def all_partitions(topics: int, per_topic: int) -> list[tuple[str, int]]:
    return [(name, p) for name in topic_names(topics) for p in range(per_topic)]


def list_offsets_by_time(bootstrap: str, topics: int, per_topic: int, records: int) -> tuple[float, int]:
    """One offsets_for_times over every partition (librdkafka sends one ListOffsets request to the
    broker); returns (seconds, how many answered exactly the offset of the record at that time)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "many-lookup", "enable.auto.commit": False})
    try:
        target = records // 2
        tps = [TopicPartition(t, p, BASE_TS + target) for t, p in all_partitions(topics, per_topic)]
        started = time.perf_counter()
        found = consumer.offsets_for_times(tps, timeout=120)
        seconds = time.perf_counter() - started
        return seconds, sum(1 for tp in found if tp.error is None and tp.offset == target)
    finally:
        consumer.close()


def read_all(bootstrap: str, topics: int, per_topic: int, records: int, timeout: float = 300) -> tuple[int, list]:
    """Every partition from its start; returns (records read, the first partitions missing any)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "many-read", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 50, "queued.max.messages.kbytes": 262144})
    seen: dict[tuple[str, int], set[int]] = {}
    want = topics * per_topic * records
    total = 0
    try:
        consumer.assign([TopicPartition(t, p, 0) for t, p in all_partitions(topics, per_topic)])
        deadline = time.monotonic() + timeout
        while total < want and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, timeout=1.0):
                if msg.error() is not None:
                    if msg.error().fatal():
                        raise KafkaException(msg.error())
                    continue
                key = (msg.topic(), msg.partition())
                got = seen.setdefault(key, set())
                if msg.offset() not in got and msg.value() == f"{key[0]}/{key[1]}/{msg.offset()}".encode():
                    got.add(msg.offset())
                    total += 1
    finally:
        consumer.close()
    missing = [key for key in all_partitions(topics, per_topic) if len(seen.get(key, ())) != records]
    return total, missing[:10]


def run(data_dir: Path, *, topics: int, per_topic: int, limit: int, records: int = 10,
        configs: dict[str, str] | None = None, read_back: bool = True) -> ManyResult:
    res = ManyResult(topics, per_topic, limit, records)
    broker = LimitedBroker(data_dir, limit, configs)
    try:
        broker.start()
        t = time.perf_counter()
        create_all(broker.bootstrap, topics, per_topic)
        res.create_s = time.perf_counter() - t
        res.fds_after_create = sample(broker.proc.pid).fds
        t = time.perf_counter()
        produce_all(broker.bootstrap, topics, per_topic, records)
        res.produce_s = time.perf_counter() - t
        res.list_offsets_s, res.list_offsets_exact = list_offsets_by_time(broker.bootstrap, topics, per_topic,
                                                                           records)
        if read_back:
            t = time.perf_counter()
            res.read_records, res.read_missing = read_all(broker.bootstrap, topics, per_topic, records)
            res.read_s = time.perf_counter() - t
        now = sample(broker.proc.pid)
        res.rss_mb, res.hwm_mb = now.rss_mb, now.hwm_mb
        t = time.perf_counter()
        res.clean_stop_rc = broker.stop()
        res.clean_stop_s = time.perf_counter() - t
        mark = broker.log_size()
        res.clean_restart_s = broker.start()
        res.clean_opened_s, res.clean_opened_how = broker.opened_all(mark)
        broker.stop(signal.SIGKILL)
        mark = broker.log_size()
        res.kill_restart_s = broker.start()
        res.kill_opened_s, res.kill_opened_how = broker.opened_all(mark)
        if read_back:
            res.after_restarts_records, missing = read_all(broker.bootstrap, topics, per_topic, records)
            res.read_missing += missing
        res.peak_fds = broker.peak_fds
        if "Too many open files" in broker.log_text():
            res.errors.append("the broker logged 'Too many open files'")
    finally:
        broker.stop()
        res.peak_fds = max(res.peak_fds, broker.peak_fds)
    return res
