"""Offset commits against a broker: the latency of one synchronous commit (each is an fsynced append to
`__consumer_offsets`, as `flush.messages=1` makes it), the commits per second of several committers at once,
and what a commit load costs everyone else: the produce round trip of another client while the committers
run, as a ratio to the same round trip with no commits in the same run (1.0: the commits' fsyncs do not hold
the broker's event loop)."""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.brokerproc import BrokerProcess

from bench.common import print_table

COMMITTERS = 4
SECONDS = 3.0
LATENCY_COMMITS = 300


def _consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})


def _commit_latencies(bootstrap: str, n: int) -> list[float]:
    c = _consumer(bootstrap, "bench-latency")
    c.commit(offsets=[TopicPartition("bench-commits", 0, 0)], asynchronous=False)  # coordinator found
    out = []
    for i in range(n):
        start = time.perf_counter()
        c.commit(offsets=[TopicPartition("bench-commits", 0, i + 1)], asynchronous=False)
        out.append(time.perf_counter() - start)
    c.close()
    return out


def _committer(bootstrap: str, group: str, stop: threading.Event, counts: list[int], i: int) -> None:
    c = _consumer(bootstrap, group)
    n = 0
    while not stop.is_set() and n < 1_000_000:
        c.commit(offsets=[TopicPartition("bench-commits", i % 4, n)], asynchronous=False)
        n += 1
    counts[i] = n
    c.close()


def _produce_round_trips(bootstrap: str, seconds: float) -> list[float]:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1})
    p.produce("bench-other", b"warm")
    p.flush(10)
    out = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and len(out) < 100_000:
        start = time.perf_counter()
        p.produce("bench-other", b"x" * 100)
        p.flush(10)
        out.append(time.perf_counter() - start)
    return out


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-commits-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data", {"offsets.topic.num.partitions": "50"}).start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            for f in admin.create_topics([NewTopic("bench-commits", 4, 1), NewTopic("bench-other", 1, 1)]).values():
                f.result(15)
            lat = _commit_latencies(broker.bootstrap, LATENCY_COMMITS)
            quiet = _produce_round_trips(broker.bootstrap, SECONDS)
            stop, counts = threading.Event(), [0] * COMMITTERS
            threads = [threading.Thread(target=_committer, args=(broker.bootstrap, f"bench-g{i}", stop, counts, i))
                       for i in range(COMMITTERS)]
            for t in threads:
                t.start()
            time.sleep(0.5)  # the committers found their coordinator
            started = time.perf_counter()
            before = list(counts)
            busy = _produce_round_trips(broker.bootstrap, SECONDS)
            stop.set()
            for t in threads:
                t.join(30)
            elapsed = time.perf_counter() - started
        finally:
            broker.stop()
    ms = sorted(x * 1000 for x in lat)
    q, b = statistics.median(quiet) * 1000, statistics.median(busy) * 1000
    print_table([
        ("measure", "value"),
        ("commit p50 (1 committer, sync)", f"{ms[len(ms) // 2]:.2f} ms"),
        ("commit p99", f"{ms[int(len(ms) * 0.99)]:.2f} ms"),
        (f"commits/s ({COMMITTERS} committers, {SECONDS:.0f} s)", f"{(sum(counts) - sum(before)) / elapsed:.0f}"),
        ("produce round trip p50, quiet", f"{q:.2f} ms"),
        ("produce round trip p50, under commits", f"{b:.2f} ms"),
        ("ratio under commits / quiet", f"{b / q:.2f}"),
    ])


if __name__ == "__main__":
    main()
