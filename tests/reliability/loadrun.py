"""A bounded load run against a broker subprocess, shared by `test_load.py` (which asserts on it) and
`bench/bench_load.py` (which prints it): confluent-kafka producer threads write for a fixed time while a
consumer group of confluent-kafka consumers and a kafka-python consumer in a group of its own read; the
broker's memory comes from /proc/<pid>/status (VmRSS now, VmHWM its peak).

Every consumer is assigned its partitions before the first record is produced, so no rebalance happens
during the run and each group must see every acknowledged record exactly once.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer

from tests.brokerproc import BrokerProcess

TOPIC = "load"
PARTITIONS = 4
IDENT = 20  # bytes of a value kept to identify it: "<producer>-<counter>-" and padding, unique per value


@dataclass
class LoadResult:
    producers: int
    group_consumers: int
    kafka_python_consumer: bool
    seconds: float
    value_bytes: int
    rate_per_producer: float | None
    acked: int = 0
    produce_records_per_s: float = 0.0
    produce_mb_per_s: float = 0.0
    drain_seconds: float = 0.0
    consumed: dict[str, int] = field(default_factory=dict)
    duplicates: dict[str, int] = field(default_factory=dict)
    missing: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    broker_vmhwm_mb: float = 0.0
    broker_vmrss_mb: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


def vm_kb(pid: int, name: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(name + ":"):
                return int(line.split()[1])
    raise KeyError(name)


class _GroupReader:
    """One consumer thread; `assigned` is set once it owns partitions (or the group's other member does)."""

    def __init__(self, bootstrap: str, group: str, kind: str, errors: list[str]) -> None:
        self.bootstrap, self.group, self.kind, self.errors = bootstrap, group, kind, errors
        self.values: list[bytes] = []
        self.assigned = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run_kafka_python if kind == "kafka-python" else self._run)

    def _run(self) -> None:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group, "auto.offset.reset": "earliest",
                      "session.timeout.ms": 10_000, "fetch.wait.max.ms": 50})
        c.subscribe([TOPIC], on_assign=lambda _c, parts: self.assigned.set())
        try:
            while not self.stop.is_set():
                for msg in c.consume(500, 0.1):
                    if msg.error():
                        self.errors.append(f"{self.kind} consumer: {msg.error()}")
                    else:
                        self.values.append(msg.value()[:IDENT])
        finally:
            c.close()

    def _run_kafka_python(self) -> None:
        c = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.group,
                          auto_offset_reset="earliest", fetch_max_wait_ms=50, session_timeout_ms=10_000)
        # Subscribe once the client knows the topic's partitions. Subscribed before, kafka-python 3.0.12's
        # leader assigns nothing in generation 1 and rejoins; if a poll returns while that rejoin is in
        # flight the client never applies generation 2's assignment (a client bug: docs/reliability.md,
        # "Known client issue"). The load test is about delivery, not that rejoin.
        deadline = time.monotonic() + 30
        while not c.partitions_for_topic(TOPIC) and time.monotonic() < deadline:
            time.sleep(0.05)
        c.subscribe([TOPIC])
        try:
            while not self.stop.is_set():
                for records in c.poll(timeout_ms=100, max_records=2000).values():
                    self.values.extend(r.value[:IDENT] for r in records)
                if c.assignment():
                    self.assigned.set()
        except Exception as exc:  # reported, not raised: the run's result says what went wrong
            self.errors.append(f"kafka-python consumer: {exc!r}")
        finally:
            c.close()


def _produce(bootstrap: str, n: int, value_bytes: int, rate: float | None, stop, results) -> None:
    """One producer process: produce (at most `rate` records/s) until `stop`, flush, then report
    (acked value ids, errors)."""
    acked: set[bytes] = set()
    errors: list[str] = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "queue.buffering.max.kbytes": 8192})

    def done(err, msg) -> None:
        if err is None:
            acked.add(msg.value()[:IDENT])
        else:
            errors.append(f"producer {n}: {err}")
    p.list_topics(TOPIC, timeout=30)
    results.put("ready")
    pad = b"." * value_bytes
    i = 0
    began = time.monotonic()
    while not stop.is_set():
        if rate is not None and i % 50 == 0 and i > rate * (time.monotonic() - began):
            p.poll(0.01)
            continue
        value = (b"%d-%d-" % (n, i) + pad)[:value_bytes]
        try:
            p.produce(TOPIC, value=value, on_delivery=done)
            i += 1
            p.poll(0)
        except BufferError:
            p.poll(0.005)
    if p.flush(60):
        errors.append(f"producer {n}: records left unflushed after 60 s")
    results.put((acked, errors))


def run_load(data_dir: Path, *, producers: int = 3, group_consumers: int = 2, kafka_python: bool = True,
             seconds: float = 15.0, value_bytes: int = 200, rate: float | None = None,
             drain_timeout: float = 60.0) -> LoadResult:
    """Start a broker, run the load for `seconds` (each producer at most `rate` records/s; None: as fast
    as it can), wait until every group has read every acknowledged record (or `drain_timeout`), stop the
    broker; figures and any errors are in the result."""
    if value_bytes < IDENT:
        raise ValueError(f"values of at least {IDENT} bytes")
    if group_consumers > PARTITIONS:
        raise ValueError(f"at most {PARTITIONS} group consumers: an idle member would never be assigned")
    result = LoadResult(producers, group_consumers, kafka_python, seconds, value_bytes, rate)
    proc = BrokerProcess(data_dir).start()
    errors = result.errors
    readers: list[_GroupReader] = []
    try:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(15)
        readers = [_GroupReader(proc.bootstrap, "load-group", "confluent-kafka", errors)
                   for _ in range(group_consumers)]
        if kafka_python:
            readers.append(_GroupReader(proc.bootstrap, "load-kafka-python", "kafka-python", errors))
        for r in readers:
            r.thread.start()
        # Every member owns partitions (at most PARTITIONS members) once the group's last rebalance is done.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(r.assigned.is_set() for r in readers):
            time.sleep(0.05)
        if not all(r.assigned.is_set() for r in readers):
            errors.append("consumers were not assigned partitions within 30 s")
            return result

        # Producers are processes: in threads beside the consumers they would share one interpreter's GIL
        # and measure it rather than the broker.
        ctx = multiprocessing.get_context("spawn")
        stop = ctx.Event()
        results = ctx.Queue()
        workers = [ctx.Process(target=_produce, args=(proc.bootstrap, n, value_bytes, rate, stop, results))
                   for n in range(producers)]
        for w in workers:
            w.start()
        ready = [results.get(timeout=60) for _ in workers]  # each has connected and fetched metadata
        assert all(r == "ready" for r in ready), ready
        started = time.monotonic()
        stop_at = started + seconds
        while time.monotonic() < stop_at:
            time.sleep(0.05)
        stop.set()
        acked: list[set[bytes]] = []
        for _ in workers:
            values, worker_errors = results.get(timeout=120)
            acked.append(values)
            errors.extend(worker_errors)
        produced_s = time.monotonic() - started
        for w in workers:
            w.join(30)
        every = set().union(*acked)
        result.acked = len(every)
        result.produce_records_per_s = round(len(every) / produced_s, 1)
        result.produce_mb_per_s = round(len(every) * value_bytes / produced_s / 1e6, 2)

        drain_started = time.monotonic()
        groups = {r.group for r in readers}

        def read_by(group: str) -> list[bytes]:
            return [v for r in readers if r.group == group for v in r.values]
        while time.monotonic() - drain_started < drain_timeout:
            if all(len(read_by(g)) >= len(every) for g in groups):
                break
            time.sleep(0.1)
        result.drain_seconds = round(time.monotonic() - drain_started, 2)
        for r in readers:
            r.stop.set()
        for r in readers:
            r.thread.join(30)
        for g in sorted(groups):
            counts = Counter(read_by(g))
            result.consumed[g] = sum(counts.values())
            result.duplicates[g] = sum(1 for v, c in counts.items() if c > 1)
            result.missing[g] = len(every - counts.keys())
        result.broker_vmhwm_mb = round(vm_kb(proc.proc.pid, "VmHWM") / 1024, 1)
        result.broker_vmrss_mb = round(vm_kb(proc.proc.pid, "VmRSS") / 1024, 1)
        return result
    finally:
        for r in readers:
            r.stop.set()
        for r in readers:
            r.thread.join(30)
        proc.stop()
