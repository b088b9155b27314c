"""chronolog beside Apache Kafka 4.4, in one run, with the same clients and the same bytes.

Kafka runs as `chronolog.testing.kafka.KafkaBroker` (one combined KRaft node on loopback) with
`BENCH_JVM_OPTS` (the 1 GiB heap of `kafka-server-start.sh`, G1); chronolog as `chronolog serve`. Each
broker runs in a session of its own (as the fixture starts Kafka): where the kernel groups CPU time by
session (`sched_autogroup`), a broker sharing the bench's session would share one CPU share with its
clients and everything else started there, while the other had a share of its own. Both
run side by side, and every measured run is taken on one broker then the other (chronolog, Kafka,
chronolog, Kafka, ...), so that the load of a shared machine at a moment hits both sides of a ratio
alike; each run is one client against one broker, the other idle. The steps:

- start: exec -> first answered Metadata (v4, no topics) on an empty data dir, best of `starts` (the
  first of them the start of the broker the rest runs on); for Kafka
  the storage dir is formatted first (`kafka-storage format`, not timed), as an installation does once;
- idle RSS, and RSS after the load below, of the whole process tree (the JVM for Kafka);
- the same warm-up on each broker, untimed: one acks=1 produce of `records` and one pass reading it back;
- produce `records` x 1 KiB through confluent-kafka (librdkafka) from one Python loop, acks=1 and acks=all
  (a new topic each run), MB/s, median of `runs`;
- consume the acks=1 topic back through confluent-kafka from offset 0, again and again until at least
  `consume_seconds` have passed (a single read of a few hundred MB takes well under a second and varies
  threefold), MB/s, median of `runs`;
- the same produce and consume through kcat (librdkafka from C, no Python loop per record): `kcat -P -l` of
  a file of the same records (a new topic each run; kcat's start included), and `kcat -C -e -o beginning`
  of the acks=1 topic to /dev/null, one kcat after another until `consume_seconds` have passed, MB/s,
  median of `runs`; beside them kcat -P against librdkafka's mock broker in the kcat process (its ceiling);
- beside each consume row (confluent-kafka, kcat -C, the perf tool), the same loop against chronolog's
  batches answered from memory by a replay of recorded answers: the client's ceiling (bench/kafka_ceiling.py);
- the broker alone, the client's per-record work taken away: one prebuilt batch of 1,000 x 1 KiB sent again
  and again in raw Produce requests (5 in flight, as the Java producer), then that topic read back with raw
  1 MiB Fetches one at a time (as the Java consumer), MB/s, median of `runs`;
- Kafka's own perf tools, each in a JVM of its own (`run_tool`): `kafka-producer-perf-test` of
  `perf_records` x 1 KiB, acks=1, its summary line's MB/sec; `kafka-consumer-perf-test` reading them back,
  its `fetch.MB.sec` (the rate once the group is joined); median of `runs`;
- ListOffsets by time over late records (batches of 10 whose CreateTimes are shuffled inside the batch):
  one lookup per record's own timestamp, p50 of the round trips, and how many answers equal the
  brute-force answer (the first offset whose timestamp is >= the asked time: Kafka's rule);
- restart after a SIGKILL with an active segment of `kill_bytes` (1 KiB records, acks=1, one segment):
  exec -> first Metadata, and exec -> the log end offset served again (the whole segment recovered);
- restart after a SIGKILL with `partitions` partitions (topics of up to 100, one 1 KiB record in each),
  each broker on a data dir of its own and alone on the machine: exec -> first Metadata, and exec -> the
  first fetch that returns the record of the last partition created.

Beside each produce and consume rate, the broker's CPU seconds per GB moved (user + system time of its
process tree over the runs, from /proc): unlike a rate, it hardly moves with the load of the machine, and
it says how much of a rate is the broker's own work. Beside the confluent-kafka rates, the client's CPU per
GB too (this process: the Python loop and librdkafka's threads), and Kafka's client + broker CPU over
chronolog's: the ratio the rates tend to where the machine's CPU decides, the most a broker could show
while the client's part stays as it is. Ratios are chronolog/Kafka as the issue states them:
for rates chronolog's over Kafka's (> 1: chronolog faster), for times, CPU and memory chronolog's over
Kafka's (< 1: chronolog better); each beside its target.

The setting is CHRONOLOG_BENCH_KAFKA: `default`, `long` (a 1 GiB active segment, 10,000 partitions, more
records), or `tiny` (seconds; what the test of this module runs).
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import statistics
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import print_table
from bench.kafka_brokers import (
    WAIT,
    Broker,
    Chronolog,
    Kafka,
    best_start,
    cpu_self_s,
    cpu_tree_s,
    first_metadata,
    rss_tree_mb,
)
from bench.kafka_ceiling import ConsumeCeiling, ceiling_rows

SIZE = 1024
T0 = 1_700_000_000_000
# Both brokers keep every record whatever its timestamp (the late records are from 2023).
TOPIC_CONFIG = {"retention.ms": "-1", "retention.bytes": "-1", "message.timestamp.after.max.ms": str(2**62)}


@dataclass(frozen=True)
class Setting:
    records: int  # librdkafka produce, per run
    runs: int
    consume_seconds: float
    perf_records: int  # Kafka's perf tools, per run
    lookups: int
    kill_bytes: int
    starts: int
    partitions: int  # the many-partitions restart


SETTINGS = {
    "tiny": Setting(records=3_000, runs=1, consume_seconds=0.2, perf_records=3_000, lookups=20,
                    kill_bytes=4 << 20, starts=1, partitions=20),
    "default": Setting(records=200_000, runs=3, consume_seconds=3.0, perf_records=200_000, lookups=200,
                       kill_bytes=256 << 20, starts=3, partitions=1_000),
    "long": Setting(records=500_000, runs=3, consume_seconds=5.0, perf_records=500_000, lookups=200,
                    kill_bytes=1 << 30, starts=3, partitions=10_000),
}
MANY_WAIT = 1200  # ... and of the many-partitions step's waits (Kafka took 4 minutes to lead 10,000 at load 20)


def setting() -> Setting:
    name = os.environ.get("CHRONOLOG_BENCH_KAFKA", "default").strip().lower() or "default"
    if name not in SETTINGS:
        raise ValueError(f"CHRONOLOG_BENCH_KAFKA={name!r}: use one of {', '.join(SETTINGS)}")
    return SETTINGS[name]


def create(bootstrap: str, topic: str, configs: dict[str, str] | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(topic, 1, 1, config={**TOPIC_CONFIG, **(configs or {})})])[topic].result(60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # a leader to produce to (Kafka elects it just after the answer)
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and md.partitions and md.partitions[0].leader >= 0:
            return
        time.sleep(0.05)
    raise RuntimeError(f"topic {topic}: no leader within 60 s")


def delete(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})  # alive until the answer
    admin.delete_topics([topic])[topic].result(60)


def produce_mb_s(bootstrap: str | None, topic: str, count: int, acks: str) -> float:
    """confluent-kafka from one Python loop, one `produce()` per 1 KiB record, flushed: MB/s. With no
    bootstrap, to librdkafka's own mock broker inside the client (C, keeping the batches in memory): a
    broker that costs next to nothing, the client's ceiling."""
    from confluent_kafka import Producer

    where = {"bootstrap.servers": bootstrap} if bootstrap else {"test.mock.num.brokers": 1}
    p = Producer({**where, "linger.ms": 5, "batch.size": 1_000_000, "acks": acks,
                  "queue.buffering.max.messages": 1_000_000, "log_level": 0})
    payload = random.Random(1).randbytes(SIZE)
    start = time.perf_counter()
    deadline = time.monotonic() + WAIT
    for _ in range(count):
        while True:
            try:
                p.produce(topic, value=payload, partition=0)
                break
            except BufferError:
                p.poll(0.01)
                if time.monotonic() > deadline:
                    raise RuntimeError("produce: the broker stopped taking records") from None
    left = p.flush(WAIT)
    elapsed = time.perf_counter() - start
    if left:
        raise RuntimeError(f"produce: {left} records not acknowledged within {WAIT} s")
    return count * SIZE / elapsed / 1e6


def consume_mb_s(bootstrap: str, topic: str, count: int, min_seconds: float) -> float:
    """confluent-kafka reading the `count` records of `topic` from offset 0, whole passes until at least
    `min_seconds` have passed: MB/s over all passes."""
    return consume_passes(bootstrap, topic, count, min_seconds)[0]


def consume_passes(bootstrap: str, topic: str, count: int, min_seconds: float) -> tuple[float, int]:
    """`consume_mb_s`'s (MB/s, bytes of record values read). The clock starts at the first record (as
    `kafka-consumer-perf-test`'s fetch.MB.sec starts after the join): the client's own start is not the
    broker's rate. `fetch.wait.max.ms` is 10: at the end of a pass librdkafka has a Fetch at the log end
    in flight, which either broker holds for that long, and the next pass's first Fetch waits behind it
    (500 ms by default: a stall of a fifth of a pass, the same on both sides, that dilutes the ratio).
    `fetch.queue.backoff.ms` is 100: once its queue holds `queued.min.messages` (100,000) librdkafka stops
    fetching for that long, 1 s by default: a stall longer than a whole pass, which comes when a broker outruns
    the Python loop, so it fell on the faster broker more and decided the ratio."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-kafka", "enable.auto.commit": False,
                  "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760, "fetch.wait.max.ms": 10,
                  "fetch.queue.backoff.ms": 100, "log_level": 0})
    nbytes = 0
    start = None
    deadline = time.monotonic() + WAIT
    try:
        while True:
            c.assign([TopicPartition(topic, 0, 0)])
            got = 0
            while got < count:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"consume: {got} of {count} records within {WAIT} s")
                for m in c.consume(min(10_000, count - got), 1.0):  # never waiting past the last
                    if m.error() is None:
                        if start is None:
                            start = time.perf_counter()
                        got += 1
                        nbytes += len(m.value())
            elapsed = time.perf_counter() - start
            if elapsed >= min_seconds:
                return nbytes / elapsed / 1e6, nbytes
    finally:
        c.close()


# kcat with the settings of the Python loops above: the same batches, and no 500 ms wait for the empty
# Fetch at the log end that ends each `kcat -e` (a fixed cost per pass on both brokers that dilutes a ratio);
# Debian's kcat has librdkafka 2.0, before `fetch.queue.backoff.ms` (its queue-full wait is shorter).
KCAT_PRODUCE = ["-X", "linger.ms=5", "-X", "batch.size=1000000", "-X", "acks=1",
                "-X", "queue.buffering.max.messages=1000000"]
KCAT_CONSUME = ["-X", "fetch.wait.max.ms=10", "-X", "fetch.max.bytes=52428800",
                "-X", "max.partition.fetch.bytes=10485760"]


def kcat_lines(path: Path, count: int) -> Path:
    """A file of `count` lines of 1 KiB (printable, so that no record holds a newline): kcat -P's records."""
    rng = random.Random(1)
    path.write_bytes((bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(SIZE)) + b"\n") * count)
    return path


def kcat_produce_mb_s(bootstrap: str | None, topic: str, lines: Path, count: int) -> float:
    """`kcat -P -l` of `lines` (`count` records of 1 KiB) to partition 0, acks=1, kcat's start included:
    MB/s. With no bootstrap, to librdkafka's mock broker inside the kcat process: the client's ceiling."""
    where = ["-b", bootstrap] if bootstrap else ["-b", "127.0.0.1:1", "-X", "test.mock.num.brokers=1"]
    start = time.perf_counter()
    out = subprocess.run(["kcat", "-P", *where, "-t", topic, "-p", "0", "-l", str(lines), *KCAT_PRODUCE],
                         capture_output=True, timeout=WAIT)
    elapsed = time.perf_counter() - start
    if out.returncode != 0:
        raise RuntimeError(f"kcat -P: exit {out.returncode}: {out.stderr[-500:]!r}")
    return count * SIZE / elapsed / 1e6


def kcat_consume_passes(bootstrap: str, topic: str, count: int, min_seconds: float) -> tuple[float, int]:
    """`kcat -C -e -o beginning` of partition 0 to /dev/null, one kcat after another until at least
    `min_seconds` have passed, each kcat's start included (a pass of a few hundred MB takes a few tenths
    of a second): (MB/s of record values, their bytes). Not quiet (-q): kcat's "Reached end ... at offset
    N" line on stderr shows that each pass read all `count` records."""
    nbytes, elapsed = 0, 0.0
    while elapsed < min_seconds:
        start = time.perf_counter()
        with open(os.devnull, "wb") as sink:
            out = subprocess.run(["kcat", "-C", "-b", bootstrap, "-t", topic, "-p", "0", "-o", "beginning", "-e",
                                  *KCAT_CONSUME], stdout=sink, stderr=subprocess.PIPE, timeout=WAIT)
        elapsed += time.perf_counter() - start
        if out.returncode != 0 or f"at offset {count}".encode() not in out.stderr:
            raise RuntimeError(f"kcat -C: exit {out.returncode}, not at offset {count}: {out.stderr[-500:]!r}")
        nbytes += count * SIZE
    return nbytes / elapsed / 1e6, nbytes


RAW_BATCH = 1000  # records of 1 KiB per batch: what librdkafka sends with batch.size 1000000
RAW_IN_FLIGHT = 5  # Produce requests: the Java producer's max.in.flight.requests.per.connection
RAW_FETCH_BYTES = 1 << 20  # one Fetch at a time of this much: the Java consumer's max.partition.fetch.bytes


def _read_frame(sock: socket.socket) -> bytes:
    """One size-prefixed response frame, without its prefix."""
    def exact(n: int) -> bytearray:
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            k = sock.recv_into(view[got:])
            if not k:
                raise RuntimeError("the broker closed the connection")
            got += k
        return buf
    return bytes(exact(struct.unpack(">i", exact(4))[0]))


def raw_produce_mb_s(bootstrap: str, topic: str, count: int) -> float:
    """The broker's own produce rate, with no per-record work in the client: one v2 batch of `RAW_BATCH` x
    1 KiB built once and sent again and again in Produce v8 requests (acks=1) from a plain socket, up to
    `RAW_IN_FLIGHT` unanswered, `count` records in all: MB/s of record values."""
    from chronolog.protocol import produce_client
    from chronolog.records.batch import SimpleRecord
    from chronolog.records.batch_builder import build_batch

    batch = build_batch([SimpleRecord(int(time.time() * 1000), None, random.Random(3).randbytes(SIZE))] * RAW_BATCH)
    requests = count // RAW_BATCH
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=WAIT) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        start = time.perf_counter()
        sent = answered = 0
        while answered < requests:
            while sent < requests and sent - answered < RAW_IN_FLIGHT:
                sent += 1
                sock.sendall(b"".join(produce_client.produce_request(8, sent, "bench", 1, 30_000, {topic: {0: batch}})))
            answered += 1
            answer = produce_client.read_produce(8, _read_frame(sock), answered)[(topic, 0)]
            if answer.error_code:
                raise RuntimeError(f"raw produce: error {answer.error_code} ({answer.message})")
        elapsed = time.perf_counter() - start
    return requests * RAW_BATCH * SIZE / elapsed / 1e6


def raw_fetch_passes(bootstrap: str, topic: str, count: int, min_seconds: float) -> tuple[float, int]:
    """The broker's own fetch rate: Fetch v11 of `RAW_FETCH_BYTES` from a plain socket, one at a time (as
    the Java consumer has one per broker), from offset 0 to `count`, whole passes until at least
    `min_seconds` have passed; the client only finds the next offset in the batches' headers. (MB/s of
    record values, their bytes.)"""
    from chronolog.protocol import fetch_client

    host, port = bootstrap.rsplit(":", 1)
    nbytes = correlation = 0
    with socket.create_connection((host, int(port)), timeout=WAIT) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        start = time.perf_counter()
        while True:
            offset = 0
            while offset < count:
                correlation += 1
                sock.sendall(fetch_client.fetch_request(11, correlation, "bench", topic, 0, offset,
                                                        max_bytes=RAW_FETCH_BYTES, isolation_level=0,
                                                        max_wait_ms=500))
                part = fetch_client.read_fetch(11, _read_frame(sock), correlation, topic, 0)
                if part.error_code:
                    raise RuntimeError(f"raw fetch at {offset}: error {part.error_code}")
                records, pos, last = part.records, 0, offset - 1
                while pos + 12 <= len(records):  # base offset, length, ..., last offset delta at 23
                    base, length = struct.unpack_from(">qi", records, pos)
                    if pos + 12 + length > len(records):
                        break
                    last = base + struct.unpack_from(">i", records, pos + 23)[0]
                    pos += 12 + length
                nbytes += (last + 1 - offset) * SIZE
                offset = last + 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_seconds:
                return nbytes / elapsed / 1e6, nbytes


def late_lookups(bootstrap: str, topic: str, count: int) -> tuple[float, int]:
    """`count` records in batches of 10 whose timestamps are shuffled inside each batch, then one ListOffsets
    by time per record's own timestamp: (p50 ms, how many answers equal the brute-force answer)."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    rng = random.Random(7)
    stamps = []
    for base in range(0, count, 10):
        block = [T0 + 1000 * (base + j) for j in range(min(10, count - base))]
        rng.shuffle(block)
        stamps += block
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1000, "batch.num.messages": 10, "acks": 1,
                  "log_level": 0})
    for base in range(0, count, 10):
        for ts in stamps[base:base + 10]:
            p.produce(topic, value=b"late", partition=0, timestamp=ts)
        if p.flush(60):
            raise RuntimeError("late records not acknowledged within 60 s")
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-kafka-late", "log_level": 0})
    timings = []
    exact = 0
    try:
        c.offsets_for_times([TopicPartition(topic, 0, T0)], timeout=30)  # the connection, untimed
        for ts in stamps:
            want = next(i for i, s in enumerate(stamps) if s >= ts)  # brute force over every record
            start = time.perf_counter()
            (answer,) = c.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=30)
            timings.append(time.perf_counter() - start)
            exact += answer.offset == want
    finally:
        c.close()
    return statistics.median(timings) * 1000, exact


def producer_perf(bootstrap: str, topic: str, count: int) -> float:
    """`kafka-producer-perf-test`, acks=1: its summary line's MB/sec."""
    import re

    from chronolog.testing.kafka import run_tool

    proc = run_tool("kafka-producer-perf-test", "--topic", topic, "--num-records", str(count), "--record-size",
                    str(SIZE), "--throughput", "-1", "--producer-props", f"bootstrap.servers={bootstrap}", "acks=1",
                    "linger.ms=5", "batch.size=1000000", timeout=WAIT)
    lines = re.findall(r"(\d+) records sent, [\d.]+ records/sec \(([\d.]+) MB/sec\)", proc.stdout)
    if proc.returncode != 0 or not lines or int(lines[-1][0]) != count:
        raise RuntimeError(f"kafka-producer-perf-test: exit {proc.returncode}: {(proc.stderr or proc.stdout)[-800:]}")
    return float(lines[-1][1])


def consumer_perf(bootstrap: str, topic: str, count: int, group: str) -> float:
    """`kafka-consumer-perf-test` of `count` records: its fetch.MB.sec (after the group's join)."""
    from chronolog.testing.kafka import run_tool

    proc = run_tool("kafka-consumer-perf-test", "--bootstrap-server", bootstrap, "--topic", topic, "--num-records",
                    str(count), "--group", group, "--timeout", "60000", timeout=WAIT)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    try:
        header = [h.strip() for h in lines[-2].split(",")]
        values = [v.strip() for v in lines[-1].split(",")]
        row = dict(zip(header, values, strict=True))
        if int(row["data.consumed.in.nMsg"]) < count:
            raise ValueError(f"{row['data.consumed.in.nMsg']} of {count} records")
        return float(row["fetch.MB.sec"])
    except (IndexError, KeyError, ValueError) as exc:
        raise RuntimeError(f"kafka-consumer-perf-test: exit {proc.returncode} ({exc}): "
                           f"{(proc.stderr or proc.stdout)[-800:]}") from None


def end_offset(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-kafka-end", "log_level": 0})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        c.close()


def fill_active_segment(bootstrap: str, nbytes: int) -> int:
    """A topic whose one segment holds `nbytes` of 1 KiB records (acks=1): the records' count."""
    count = nbytes // SIZE
    create(bootstrap, "big", {"segment.bytes": str(min(2**31 - 1, nbytes + (64 << 20)))})
    produce_mb_s(bootstrap, "big", count, "1")
    return count


def fill_partitions(bootstrap: str, partitions: int) -> tuple[str, int]:
    """`partitions` partitions in topics of up to 100 (CreateTopics ten topics a request), one 1 KiB record
    produced into each (acks=1): the last partition created, (topic, partition)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    sizes = [min(100, partitions - start) for start in range(0, partitions, 100)]
    topics = [(f"many{i}", n) for i, n in enumerate(sizes)]
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    for start in range(0, len(topics), 10):
        futures = admin.create_topics([NewTopic(t, n, 1, config=TOPIC_CONFIG) for t, n in topics[start:start + 10]],
                                      request_timeout=WAIT)
        for future in futures.values():
            future.result(WAIT)
    # every partition led before the first record: librdkafka fails a record at once (not retried) when
    # its partition is not in the topic's metadata yet, which Kafka's broker may still lag behind the
    # controller's answer by minutes for thousands of partitions
    deadline = time.monotonic() + MANY_WAIT
    want = dict(topics)
    while True:
        known = admin.list_topics(timeout=60).topics
        led = sum(1 for t, n in want.items() if t in known and known[t].error is None and len(known[t].partitions) == n
                  and all(pm.leader >= 0 for pm in known[t].partitions.values()))
        if led == len(want):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{led} of {len(want)} topics fully led within {MANY_WAIT} s of their creation")
        time.sleep(0.5)
    del admin
    failed: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(f"{msg.topic()}-{msg.partition()}: {err}")

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "acks": 1, "message.timeout.ms": WAIT * 1000,
                  "log_level": 0})
    payload = random.Random(2).randbytes(SIZE)
    for t, n in topics:
        for part in range(n):
            p.produce(t, value=payload, partition=part, on_delivery=delivered)
        p.poll(0)
    left = p.flush(WAIT)
    if left or failed:
        raise RuntimeError(f"{left} of {partitions} records not acknowledged within {WAIT} s, {len(failed)} "
                           f"failed (first: {failed[:1]})")
    del p
    return topics[-1][0], topics[-1][1] - 1


def first_fetch(bootstrap: str, topic: str, partition: int, deadline: float) -> None:
    """Returns when a fetch of `partition` from offset 0 has returned its record; librdkafka's backoffs
    after an error (the broker not yet leading the partition) are cut to 10 ms so they add little."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-kafka-many", "enable.auto.commit": False,
                  "fetch.error.backoff.ms": 10, "retry.backoff.ms": 10, "retry.backoff.max.ms": 10,
                  "reconnect.backoff.ms": 10, "reconnect.backoff.max.ms": 10,
                  "topic.metadata.refresh.interval.ms": 100, "log_level": 0})
    try:
        c.assign([TopicPartition(topic, partition, 0)])
        while time.monotonic() < deadline:
            m = c.poll(0.05)
            if m is not None and m.error() is None:
                return
        raise RuntimeError(f"no record of {topic}-{partition} fetched by the deadline after the restart")
    finally:
        c.close()


def many_partitions_restart(broker: Broker, partitions: int) -> tuple[float, float]:
    """`broker` started on an empty data dir, filled with `partitions` partitions, SIGKILLed and started
    again: (exec -> first Metadata, exec -> the last partition's record fetched), seconds."""
    broker.start()
    try:
        last = fill_partitions(broker.bootstrap, partitions)
    finally:
        broker.kill()
    begun = time.perf_counter()
    broker.start()
    try:
        metadata = first_metadata(broker.proc, broker.port, begun, MANY_WAIT)
        first_fetch(broker.bootstrap, *last, time.monotonic() + MANY_WAIT)
        return metadata, time.perf_counter() - begun
    finally:
        broker.stop()


def run_both(brokers: dict[str, Broker], s: Setting) -> dict[str, dict[str, float]]:
    """Both brokers up side by side, each measured run taken on one then the other (chronolog, Kafka,
    chronolog, ...), so that the machine's load of the moment hits both sides of a ratio alike."""
    out: dict[str, dict[str, float]] = {name: {} for name in brokers}
    started: list[Broker] = []
    ceiling = None
    try:
        for name, broker in brokers.items():
            out[name]["start"] = broker.start()
            started.append(broker)
        time.sleep(1)  # the start's own allocations settle (a JVM's heap is reserved, not yet touched)
        for name, broker in brokers.items():
            out[name]["idle_rss"] = rss_tree_mb(broker.proc.pid)
        for broker in brokers.values():  # the same warm-up, untimed: Kafka's JIT compiles its hot paths here
            warm_up(broker.bootstrap, s)

        def each(key: str, measure: Callable[[Broker, int], tuple[float, int]], runs: int = s.runs,
                 then: Callable[[], None] | None = None) -> None:
            """`measure` gives (rate, bytes moved); beside the rate's median, the broker's CPU seconds per
            GB moved over the same runs (its whole process tree, from before the run to after it), and the
            client's (this process: for the perf tools, whose clients are JVMs of their own, only the
            bench's own idling). `then` after each run of both brokers: a run of the client's ceiling."""
            figures: dict[str, list[float]] = {name: [] for name in brokers}
            cpu: dict[str, list[float]] = {name: [] for name in brokers}
            client: dict[str, list[float]] = {name: [] for name in brokers}
            for run in range(runs):
                for name, broker in brokers.items():
                    before, ours = cpu_tree_s(broker.proc.pid), cpu_self_s()
                    rate, moved = measure(broker, run)
                    cpu[name].append((cpu_tree_s(broker.proc.pid) - before) / (moved / 1e9))
                    client[name].append((cpu_self_s() - ours) / (moved / 1e9))
                    figures[name].append(rate)
                if then is not None:
                    then()
            for name in brokers:
                out[name][key] = statistics.median(figures[name])
                out[name][key + "_cpu"] = statistics.median(cpu[name])
                out[name][key + "_client_cpu"] = statistics.median(client[name])

        def produce_run(acks: str) -> Callable[[Broker, int], tuple[float, int]]:
            def measure(broker: Broker, run: int) -> tuple[float, int]:
                topic = f"load-{acks}-{run}"
                create(broker.bootstrap, topic)
                figure = produce_mb_s(broker.bootstrap, topic, s.records, acks)
                if not (acks == "1" and run == 0):  # the one the consumers read
                    delete(broker.bootstrap, topic)
                return figure, s.records * SIZE
            return measure

        each("produce_1", produce_run("1"))
        # the client's ceiling, right after: what the same loop reaches when the broker costs nothing
        out["ceiling"] = {"produce_1": statistics.median(produce_mb_s(None, f"ceiling-{run}", s.records, "1")
                                                         for run in range(s.runs))}
        each("produce_all", produce_run("all"))
        # each consume loop's ceiling, its runs between the brokers': chronolog's batches replayed from memory
        ceiling = ConsumeCeiling(brokers["chronolog"].bootstrap, create)
        replayed = ceiling.recorded("load-1-0", lambda b: consume_passes(b, "load-1-0", s.records, 0),
                                    lambda b: consume_passes(b, "load-1-0", s.records, s.consume_seconds))
        each("consume", lambda broker, run: consume_passes(broker.bootstrap, "load-1-0", s.records,
                                                           s.consume_seconds), then=replayed)
        out["ceiling"]["consume"] = replayed.result()
        if shutil.which("kcat"):
            lines = kcat_lines(Path(tempfile.mkdtemp()) / "lines", s.records)
            try:
                def kcat_produce_run(broker: Broker, run: int) -> tuple[float, int]:
                    create(broker.bootstrap, f"kcat-{run}")
                    figure = kcat_produce_mb_s(broker.bootstrap, f"kcat-{run}", lines, s.records)
                    delete(broker.bootstrap, f"kcat-{run}")
                    return figure, s.records * SIZE

                each("kcat_produce", kcat_produce_run)
                out["ceiling"]["kcat_produce"] = statistics.median(
                    kcat_produce_mb_s(None, "ceiling", lines, s.records) for _ in range(s.runs))
            finally:
                shutil.rmtree(lines.parent, ignore_errors=True)
            replayed = ceiling.recorded("load-1-0", lambda b: kcat_consume_passes(b, "load-1-0", s.records, 1e-9),
                                        lambda b: kcat_consume_passes(b, "load-1-0", s.records, s.consume_seconds))
            each("kcat_consume", lambda broker, run: kcat_consume_passes(broker.bootstrap, "load-1-0", s.records,
                                                                         s.consume_seconds), then=replayed)
            out["ceiling"]["kcat_consume"] = replayed.result()
        for name, broker in brokers.items():
            out[name]["loaded_rss"] = rss_tree_mb(broker.proc.pid)

        def raw_produce_run(broker: Broker, run: int) -> tuple[float, int]:
            create(broker.bootstrap, f"raw-{run}")
            return raw_produce_mb_s(broker.bootstrap, f"raw-{run}", s.records), s.records // RAW_BATCH * RAW_BATCH * SIZE

        each("raw_produce", raw_produce_run)
        each("raw_fetch", lambda broker, run: raw_fetch_passes(broker.bootstrap, f"raw-{run}",
                                                               s.records // RAW_BATCH * RAW_BATCH, s.consume_seconds))
        for broker in brokers.values():
            for run in range(s.runs):
                delete(broker.bootstrap, f"raw-{run}")

        def perf_run(broker: Broker, run: int) -> tuple[float, int]:
            topic = f"perf-{run}"
            create(broker.bootstrap, topic)
            return producer_perf(broker.bootstrap, topic, s.perf_records), s.perf_records * SIZE

        each("perf_produce", perf_run)
        replayed = ceiling.recorded(  # one group in every run: the same requests
            "perf-0", lambda b: consumer_perf(b, "perf-0", s.perf_records, "perf-ceiling"),
            lambda b: (consumer_perf(b, "perf-0", s.perf_records, "perf-ceiling"), s.perf_records * SIZE))
        each("perf_consume", lambda broker, run: (consumer_perf(broker.bootstrap, f"perf-{run}", s.perf_records,
                                                                f"perf-group-{run}"), s.perf_records * SIZE),
             then=replayed)
        out["ceiling"]["perf_consume"] = replayed.result()
        ceiling.close()
        ceiling = None  # its broker gone before the restarts below, which run alone on the machine
        for name, broker in brokers.items():
            create(broker.bootstrap, "late")
            out[name]["lookup_p50"], out[name]["exact"] = late_lookups(broker.bootstrap, "late", s.lookups)
        counts = {name: fill_active_segment(broker.bootstrap, s.kill_bytes) for name, broker in brokers.items()}
        for broker in brokers.values():
            broker.kill()
        started.clear()
        for name, broker in brokers.items():  # one at a time: a restart alone on the machine
            begun = time.perf_counter()
            broker.start()  # times from its own exec; the end offset below from the same `begun`
            started.append(broker)
            out[name]["restart"] = first_metadata(broker.proc, broker.port, begun)
            deadline = time.monotonic() + WAIT
            while (end := _end_or_none(broker.bootstrap)) != counts[name]:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name} after a SIGKILL: log end {end}, {counts[name]} records acknowledged")
                time.sleep(0.01)
            out[name]["restart_end"] = time.perf_counter() - begun
            broker.stop()
            started.remove(broker)
    finally:
        for broker in started:
            broker.kill()
        if ceiling is not None:
            ceiling.close()
    return out


def warm_up(bootstrap: str, s: Setting) -> None:
    """One acks=1 produce of `s.records` and one pass reading them back, untimed, then the topic deleted.
    Without it the first measured runs were Kafka's first produce after its start, interpreted and compiled
    as they ran (CPU per GB produced 2-3x that of its later runs): the acks=1 ratio came out inflated and
    acks=all, measured after it, looked like a gap of its own."""
    create(bootstrap, "warm-up")
    produce_mb_s(bootstrap, "warm-up", s.records, "1")
    consume_passes(bootstrap, "warm-up", s.records, 0)
    delete(bootstrap, "warm-up")


def _end_or_none(bootstrap: str) -> int | None:
    try:
        return end_offset(bootstrap, "big")
    except Exception:  # not served yet
        return None


def main() -> None:
    from chronolog.testing.kafka import kafka_available

    reason = kafka_available()
    if reason:
        print(f"kafka bench skipped: Apache Kafka cannot run here ({reason})", flush=True)
        return
    s = setting()
    with tempfile.TemporaryDirectory(prefix="chronolog-bench-kafka-") as tmpdir:
        tmp = Path(tmpdir)
        # the first start of run_both is one of the tries
        starts = {"chronolog": best_start(lambda: Chronolog(Path(tempfile.mkdtemp(dir=tmp))), s.starts - 1),
                  "kafka": best_start(lambda: Kafka(Path(tempfile.mkdtemp(dir=tmp))), s.starts - 1)}
        results = run_both({"chronolog": Chronolog(tmp / "chronolog"), "kafka": Kafka(tmp / "kafka")}, s)
        for name, make in (("chronolog", Chronolog), ("kafka", Kafka)):  # one at a time, fresh data dirs
            broker = make(tmp / f"{name}-many")
            results[name]["many_restart"], results[name]["many_fetch"] = many_partitions_restart(broker, s.partitions)
            shutil.rmtree(tmp / f"{name}-many", ignore_errors=True)
    ours, theirs = results["chronolog"], results["kafka"]
    ours["start"] = min(ours["start"], starts["chronolog"])
    theirs["start"] = min(theirs["start"], starts["kafka"])
    rows = [("measure", "chronolog", "Kafka 4.4", "chronolog/Kafka", "target")]

    def row(label: str, key: str, fmt: str, target: str) -> None:
        a, b = ours[key], theirs[key]
        ratio = a / b if b else None
        shown = "-" if ratio is None else f"{ratio:.2f}x" if ratio >= 0.1 else f"{ratio:.3f}x"  # 10,000 partitions
        rows.append((label, fmt.format(a), fmt.format(b), shown, target))

    def cpu_bound(key: str) -> None:
        """Kafka's client + broker CPU per GB over chronolog's: the rate ratio where the machine's CPU decides
        (both processes sharing the cores), which no broker change can pass while the client's part stays."""
        total = {name: results[name][key + "_cpu"] + results[name][key + "_client_cpu"] for name in results
                 if name != "ceiling"}
        rows.append(("  client + broker CPU per GB, s (Kafka's over chronolog's: the rate ratio if CPU decides)",
                     f"{total['chronolog']:.2f}", f"{total['kafka']:.2f}",
                     f"{total['kafka'] / total['chronolog']:.2f}x" if total["chronolog"] else "-", "-"))

    mb = s.records * SIZE // 1_000_000
    row(f"exec -> first Metadata, empty (best of {s.starts}), s", "start", "{:.3f}", "<= 0.1x")
    row("idle RSS, process tree, MB", "idle_rss", "{:.0f}", "-")
    row(f"produce {s.records:,} x 1 KiB, confluent-kafka acks=1, MB/s", "produce_1", "{:.0f}", ">= 1.5x")
    row("  broker CPU per GB produced, s", "produce_1_cpu", "{:.2f}", "-")
    row("  client CPU per GB produced (the Python loop and librdkafka), s", "produce_1_client_cpu", "{:.2f}", "-")
    cpu_bound("produce_1")
    ceiling = results["ceiling"]["produce_1"]
    rows.append(("  client ceiling: the same loop to librdkafka's in-process mock broker, MB/s", f"{ceiling:.0f}", "-",
                 f"{ceiling / theirs['produce_1']:.2f}x", "(the most any broker reaches)"))
    row("  the same, acks=all, MB/s", "produce_all", "{:.0f}", ">= 1.5x")
    row(f"consume {mb} MB, confluent-kafka, passes >= {s.consume_seconds:g} s, MB/s", "consume", "{:.0f}", ">= 1.5x")
    row("  broker CPU per GB consumed, s", "consume_cpu", "{:.2f}", "-")
    row("  client CPU per GB consumed (the Python loop and librdkafka), s", "consume_client_cpu", "{:.2f}", "-")
    cpu_bound("consume")
    rows.extend(ceiling_rows(results, "consume"))
    if "kcat_produce" in ours:
        row(f"produce {s.records:,} x 1 KiB, kcat -P -l (librdkafka in C), acks=1, MB/s", "kcat_produce", "{:.0f}",
            ">= 1.5x")
        row("  broker CPU per GB produced, s", "kcat_produce_cpu", "{:.2f}", "-")
        row("  kcat's CPU per GB produced, s", "kcat_produce_client_cpu", "{:.2f}", "-")
        cpu_bound("kcat_produce")
        ceiling = results["ceiling"]["kcat_produce"]
        rows.append(("  client ceiling: the same kcat -P to librdkafka's mock broker in the kcat process, MB/s",
                     f"{ceiling:.0f}", "-", f"{ceiling / theirs['kcat_produce']:.2f}x", "(the most any broker reaches)"))
        row(f"consume {mb} MB, kcat -C -e to /dev/null, passes >= {s.consume_seconds:g} s, MB/s", "kcat_consume",
            "{:.0f}", ">= 1.5x")
        row("  broker CPU per GB consumed, s", "kcat_consume_cpu", "{:.2f}", "-")
        row("  kcat's CPU per GB consumed, s", "kcat_consume_client_cpu", "{:.2f}", "-")
        cpu_bound("kcat_consume")
        rows.extend(ceiling_rows(results, "kcat_consume"))
    row("RSS after that load, process tree, MB", "loaded_rss", "{:.0f}", "<= 0.15x")
    row(f"the broker alone: raw Produce of a prebuilt {RAW_BATCH:,}-record batch, {RAW_IN_FLIGHT} in flight, MB/s",
        "raw_produce", "{:.0f}", "-")
    row("  broker CPU per GB produced, s", "raw_produce_cpu", "{:.2f}", "-")
    row(f"the broker alone: raw Fetch of {RAW_FETCH_BYTES >> 20} MiB, one at a time, passes >= {s.consume_seconds:g} s, "
        "MB/s", "raw_fetch", "{:.0f}", "-")
    row("  broker CPU per GB fetched, s", "raw_fetch_cpu", "{:.2f}", "-")
    row(f"kafka-producer-perf-test {s.perf_records:,} x 1 KiB acks=1, MB/sec", "perf_produce", "{:.1f}", ">= 1.5x")
    row("  broker CPU per GB produced (the tool's JVM start included), s", "perf_produce_cpu", "{:.2f}", "-")
    row("  the tool's CPU per GB produced (its JVM), s", "perf_produce_client_cpu", "{:.2f}", "-")
    row("kafka-consumer-perf-test, fetch.MB.sec", "perf_consume", "{:.1f}", ">= 1.5x")
    row("  broker CPU per GB consumed (the tool's JVM start and group join included), s", "perf_consume_cpu",
        "{:.2f}", "-")
    row("  the tool's CPU per GB consumed (its JVM), s", "perf_consume_client_cpu", "{:.2f}", "-")
    rows.extend(ceiling_rows(results, "perf_consume", "{:.1f}"))
    row(f"ListOffsets by time p50 over {s.lookups} late records, ms", "lookup_p50", "{:.2f}", "<= 0.8x")
    rows.append((f"  answers equal to brute force, of {s.lookups}", str(int(ours["exact"])), str(int(theirs["exact"])),
                 "-", "all exact"))
    big = f"{s.kill_bytes / (1 << 20):.0f} MiB"
    row(f"SIGKILL, {big} active segment: exec -> first Metadata, s", "restart", "{:.3f}", "-")
    row("  exec -> its log end offset served, s", "restart_end", "{:.3f}", "-")
    row(f"SIGKILL, {s.partitions:,} partitions: exec -> first Metadata, s", "many_restart", "{:.3f}", "-")
    row("  exec -> the last partition's record fetched, s", "many_fetch", "{:.3f}", "-")
    print_table(rows)
    runs = f"median of {s.runs}" if s.runs > 1 else "1 run"
    print(f"(rates {runs}, runs interleaved; confluent-kafka {__import__('confluent_kafka').libversion()[0]}, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; for rates > 1x means chronolog faster, "
          f"for times and memory < 1x means chronolog smaller)", flush=True)
    missed = [r[0].strip() for r in rows[1:] if _missed(r[3], r[4])]
    if ours["exact"] != s.lookups:
        missed.append("chronolog's ListOffsets answers are not all exact")
    if missed:
        print("targets missed: " + "; ".join(missed), flush=True)


def _missed(ratio: str, target: str) -> bool:
    if ratio == "-" or target[:2] not in (">=", "<="):
        return False
    value, bound = float(ratio.rstrip("x")), float(target[3:].rstrip("x"))
    return value < bound if target.startswith(">=") else value > bound


if __name__ == "__main__":
    main()
