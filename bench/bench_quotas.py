"""Noisy neighbour: two apps on one broker. App A (client id `app-a`, its own process) produces 10 KiB records
flat out under a `producer_byte_rate` quota; app B (`app-b`) produces 100 records a second and measures each
record's produce latency (produce() to delivery report, acks=all).

Rows: A's acknowledged payload bytes per window of the quota's own span as a ratio to its quota (target
0.9-1.1; payload only, so the request framing A also pays, about 1%, is not counted), and B's p99 latency with
A running as a ratio to B alone, measured first in the same run (target <= 2). Without the quota, the same A
row shows what A takes when nothing holds it back.

The windows are the quota's own span, `quota.window.num` x `quota.window.size.seconds`, and the broker runs
with `quota.window.num=10` so that span is the issue's 10 s. With Kafka's default of 11 samples a client held
at its quota is let through one span's worth (11 s of quota) in a burst once per span (`Rate` spreads what it
saw over the N-1 full samples plus the current one), so any 10 s window holds one such burst and reads 1.10
by construction while the server is exactly at its quota over time; measured against its own span it reads
1.00-1.09 (docs/benchmarks.md). The "per 10 s window" column is kept beside it."""

from __future__ import annotations

import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from tests.brokerproc import BrokerProcess

from bench.common import print_table

QUOTA = 2 * 1024 * 1024  # bytes/s for app A
RECORD = 10 * 1024
# librdkafka batches up to 1 MB: with several such requests in flight, each recorded before it is checked,
# A overshoots by their size; 64 KiB batches (the Java client uses 16 KiB) keep that small.
BATCH = 64 * 1024
QUOTA_SAMPLES, QUOTA_SAMPLE_S = 10, 1  # quota.window.num (Kafka's default 11), quota.window.size.seconds
WINDOW_S = QUOTA_SAMPLES * QUOTA_SAMPLE_S
WINDOWS = 3
# A without a quota writes some 200 MB/s: retention keeps the data dir within a few hundred MB.
BOUNDED_DISK = {"log.segment.bytes": str(64 << 20), "log.retention.bytes": str(128 << 20),
                "log.retention.check.interval.ms": "1000", "log.segment.delete.delay.ms": "0"}
B_ALONE_S = 10


def _app_a(bootstrap: str, seconds: float, out) -> None:
    """Produce flat out for `seconds`; send back the acknowledged payload bytes per whole second."""
    acked: dict[int, int] = {}
    start = time.monotonic()

    def on_delivery(err, msg) -> None:
        if err is None:
            second = int(time.monotonic() - start)
            acked[second] = acked.get(second, 0) + len(msg.value())

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "app-a", "linger.ms": 5, "batch.size": BATCH,
                         "queue.buffering.max.kbytes": 8192, "message.timeout.ms": 120000})
    value = b"a" * RECORD
    while time.monotonic() - start < seconds:
        try:
            producer.produce("noisy-a", value, on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.01)
            continue
        producer.poll(0)
    producer.flush(30)
    out.send(acked)


def _app_b(bootstrap: str, seconds: float) -> list[float]:
    """100 records a second for `seconds`; each record's produce latency in ms."""
    latencies: list[float] = []
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "app-b", "linger.ms": 0, "acks": "all"})
    start = time.monotonic()
    sent = 0
    while time.monotonic() - start < seconds:
        due = start + sent / 100.0
        if time.monotonic() >= due:
            t0 = time.monotonic()
            producer.produce("quiet-b", b"b" * 100,
                             on_delivery=lambda err, msg, t0=t0: err is None and latencies.append(
                                 (time.monotonic() - t0) * 1000))
            sent += 1
        producer.poll(max(0.0, min(0.005, due - time.monotonic())))
    producer.flush(30)
    return latencies


def _p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) >= 100 else max(values)


def _run(with_quota: bool) -> tuple[list[float], list[float], float, float]:
    with tempfile.TemporaryDirectory(prefix="chronolog-bench-quotas-") as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        if with_quota:
            from chronolog.security.quotas import CLIENT_ID, QuotaStore, entity
            QuotaStore(data).alter([(entity([(CLIENT_ID, "app-a")]), {"producer_byte_rate": float(QUOTA)})])
        proc = BrokerProcess(data, {"quota.window.num": str(QUOTA_SAMPLES),
                                    "quota.window.size.seconds": str(QUOTA_SAMPLE_S), **BOUNDED_DISK}).start()
        try:
            warm = Producer({"bootstrap.servers": proc.bootstrap})
            for topic in ("noisy-a", "quiet-b"):
                warm.produce(topic, b"warm")
            warm.flush(30)
            del warm  # its connection closed now, not after the broker stopped
            alone = _app_b(proc.bootstrap, B_ALONE_S)
            receive, send = multiprocessing.Pipe(duplex=False)
            seconds = WINDOW_S * WINDOWS
            child = multiprocessing.Process(target=_app_a, args=(proc.bootstrap, seconds, send))
            child.start()
            together = _app_b(proc.bootstrap, seconds)
            acked = receive.recv() if receive.poll(120) else {}
            child.join(60)
        finally:
            proc.stop()
    return _ratios(acked, WINDOW_S), _ratios(acked, 10), _p99(alone), _p99(together)


def _ratios(acked: dict[int, int], window_s: int) -> list[float]:
    """Acknowledged bytes per whole `window_s` window of the run, as a ratio to the quota."""
    count = WINDOW_S * WINDOWS // window_s
    return [sum(acked.get(s, 0) for s in range(w * window_s, (w + 1) * window_s)) / window_s / QUOTA
            for w in range(count)]


def main() -> None:
    rows = [("run", f"A rate / quota per {WINDOW_S} s window (target 0.9-1.1)", "per 10 s window",
             "B p99 alone ms", "B p99 with A ms", "ratio (target <= 2)")]
    for with_quota in (True, False):
        windows, tens, alone, together = _run(with_quota)
        rows.append((f"A {'with' if with_quota else 'without'} a {QUOTA // 1024} KiB/s quota",
                     " ".join(f"{w:.2f}" for w in windows), " ".join(f"{w:.2f}" for w in tens),
                     f"{alone:.1f}", f"{together:.1f}", f"{together / alone:.2f}"))
    print_table(rows)
    print_table(_fetch_rows())


FETCHES = 20_000


def _fetch_rows() -> list[tuple]:
    """A consumer with no quota of its own on a broker where another client id has one: Kafka charges it
    nothing, and it keeps the planned Fetch path (its quotas resolved once per connection). The same raw
    Fetch loop (one record per request, so the broker's cost per request is most of its work) with no quota
    file and with a quota for another client id, alternated on one broker, best of 3 each: the broker's CPU
    time per Fetch (/proc; steadier than the loop's wall time on a shared machine) and requests a second."""
    from bench.bench_broker import cpu_seconds, raw_fetch
    from chronolog.security.quotas import CLIENT_ID, QuotaStore, entity

    with tempfile.TemporaryDirectory(prefix="chronolog-bench-quotas-") as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        proc = BrokerProcess(data).start()
        try:
            producer = Producer({"bootstrap.servers": proc.bootstrap, "linger.ms": 5, "batch.num.messages": 1})
            for _ in range(FETCHES):
                while True:
                    try:
                        producer.produce("fetched", b"f" * 100, partition=0)
                        break
                    except BufferError:
                        producer.poll(0.01)
            assert producer.flush(60) == 0
            del producer
            store, other = QuotaStore(data), entity([(CLIENT_ID, "someone-else")])
            seconds = {"none": float("inf"), "other": float("inf")}
            cpu = {"none": float("inf"), "other": float("inf")}
            for _ in range(3):
                for case in ("none", "other"):
                    store.alter([(other, {"producer_byte_rate": 1e6 if case == "other" else None})])
                    cpu_before = cpu_seconds(proc.proc.pid)
                    seconds[case] = min(seconds[case], raw_fetch(proc.port, "fetched", FETCHES, partition_max_bytes=1))
                    cpu[case] = min(cpu[case], cpu_seconds(proc.proc.pid) - cpu_before)
        finally:
            proc.stop()
    us = {case: value / FETCHES * 1e6 for case, value in cpu.items()}
    return [("raw Fetch loop, one record per request", "broker CPU us/Fetch: no quotas",
             "a quota on another client id", "ratio (target <= 1.05)", "req/s: no quotas", "with the quota"),
            ("", f"{us['none']:.1f}", f"{us['other']:.1f}", f"{us['other'] / us['none']:.2f}",
             f"{FETCHES / seconds['none']:,.0f}", f"{FETCHES / seconds['other']:,.0f}")]

if __name__ == "__main__":
    main()
