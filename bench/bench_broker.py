"""Broker benchmarks, each against a baseline measured in the same run:
- produce through the broker with librdkafka vs the storage engine's in-process append of similar batches;
- consume vs reading the same segment bytes from disk (page cache), three ways: kcat with its defaults (its
  run ends with one Fetch at the log end that waits `fetch.wait.max.ms`, 500 ms, as Kafka's DelayedFetch
  does), kcat with `fetch.wait.max.ms=10` (the same minus most of that wait), and a minimal raw Fetch v12
  loop over one socket (the broker's own ceiling, no client work per record);
- ListOffsets by timestamp round trip p50/p99 (target p50 <= 1 ms on loopback).
"""

from __future__ import annotations

import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.brokerproc import BrokerProcess

from bench.common import print_table, sequential_read
from chronolog.config import TopicConfig
from chronolog.records import SimpleRecord, build_batch
from chronolog.storage import PartitionLog

T0 = 1_700_000_000_000


def produce(bootstrap: str, topic: str, size: int, count: int) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1_000_000, "acks": 1,
                  "queue.buffering.max.messages": 1_000_000})
    payload = b"x" * size
    start = time.perf_counter()
    for i in range(count):
        while True:
            try:
                p.produce(topic, value=payload, partition=0, timestamp=T0 + i)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(120) == 0
    return time.perf_counter() - start


def in_process(tmp: Path, size: int, count: int) -> float:
    plog = PartitionLog.open(tmp / f"inproc{size}-0", TopicConfig.from_kafka(
        {"message.timestamp.after.max.ms": str(2**62), "segment.bytes": str(256 << 20)}))
    per_batch = max(1, 16384 // (size + 10))
    batches = [build_batch([SimpleRecord(T0 + i + j, None, b"x" * size) for j in range(per_batch)])
               for i in range(0, count, per_batch)]
    start = time.perf_counter()
    for b in batches:
        plog.append(b, now=T0)
    elapsed = time.perf_counter() - start
    plog.close()
    return elapsed


def _uvarint(buf, pos: int) -> tuple[int, int]:
    shift = raw = 0
    while True:
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            return raw, pos
        shift += 7


def raw_fetch(port: int, topic: str, end_offset: int, partition_max_bytes: int = 1 << 20) -> float:
    """Fetch v12 from offset 0 to `end_offset` over one TCP connection, one request at a time with
    librdkafka's default 1 MiB per partition, reading only what is needed to find the next offset."""
    import datetime
    import io
    import socket
    import struct

    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
    from kio.schema.request_header.v2.header import RequestHeader
    from kio.serial import entity_writer
    from kio.static.primitive import i8, i16, i32, i64

    offset = n = 0
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while offset < end_offset:
            buf = io.BytesIO()
            entity_writer(RequestHeader)(buf, RequestHeader(request_api_key=i16(1), request_api_version=i16(12),
                                                            correlation_id=i32(n), client_id="bench"))
            part = FetchPartition(partition=i32(0), current_leader_epoch=i32(-1), fetch_offset=i64(offset),
                                  last_fetched_epoch=i32(-1), log_start_offset=i64(-1),
                                  partition_max_bytes=i32(partition_max_bytes))
            entity_writer(FetchRequest)(buf, FetchRequest(
                replica_id=i32(-1), max_wait=datetime.timedelta(milliseconds=500), min_bytes=i32(1),
                max_bytes=i32(52428800), isolation_level=i8(0), session_id=i32(0), session_epoch=i32(-1),
                topics=(FetchTopic(topic=topic, partitions=(part,)),), forgotten_topics_data=(), rack_id=""))
            frame = buf.getvalue()
            sock.sendall(struct.pack(">i", len(frame)) + frame)
            (size,) = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))
            data = bytearray(size)
            view = memoryview(data)
            got = 0
            while got < size:
                got += sock.recv_into(view[got:])
            # response header v1, throttle, error, session, one topic, one partition, then its records
            pos = 4 + 1 + 4 + 2 + 4
            _, pos = _uvarint(view, pos)
            length, pos = _uvarint(view, pos)
            _, pos = _uvarint(view, pos + length - 1)
            pos += 4 + 2 + 8 + 8 + 8
            _, pos = _uvarint(view, pos)
            length, pos = _uvarint(view, pos + 4)
            records, last = view[pos:pos + length - 1], None
            p = 0
            while p + 27 <= len(records):
                base, batch_length = struct.unpack_from(">qi", records, p)
                last = base + struct.unpack_from(">i", records, p + 23)[0]
                p += 12 + batch_length
            assert last is not None, "empty fetch before the end offset"
            offset = last + 1
            n += 1
    return time.perf_counter() - start


def produce_frames(topic: str, batches: list[bytes], version: int = 9) -> list[bytes]:
    """One size-prefixed Produce request (acks=1) per batch, built before any timing."""
    import datetime
    import io
    import struct

    from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
    from kio.schema.request_header.v2.header import RequestHeader
    from kio.serial import entity_writer
    from kio.static.primitive import i16, i32

    frames = []
    for n, batch in enumerate(batches):
        buf = io.BytesIO()
        entity_writer(RequestHeader)(buf, RequestHeader(request_api_key=i16(0), request_api_version=i16(version),
                                                        correlation_id=i32(n), client_id="bench"))
        entity_writer(ProduceRequest)(buf, ProduceRequest(
            transactional_id=None, acks=i16(1), timeout=datetime.timedelta(milliseconds=30000),
            topic_data=(TopicProduceData(name=topic, partition_data=(
                PartitionProduceData(index=i32(0), records=batch),)),)))
        frame = buf.getvalue()
        frames.append(struct.pack(">i", len(frame)) + frame)
    return frames


def raw_produce(port: int, frames: list[bytes], in_flight: int = 5) -> float:
    """Produce requests over one TCP connection with up to `in_flight` unanswered (librdkafka's
    max.in.flight is 5 for idempotent producers), each response read and its error code checked: the
    broker's own cost per request, no client work per record."""
    import socket
    import struct

    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sent = answered = 0
        while answered < len(frames):
            while sent < len(frames) and sent - answered < in_flight:
                sock.sendall(frames[sent])
                sent += 1
            (size,) = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))
            body = sock.recv(size, socket.MSG_WAITALL)
            # header v1 (correlation id, tags), topics[1]: name, partitions[1]: index, then the error code
            pos = 4 + 1 + 1
            name_len = body[pos] - 1
            pos += 1 + name_len + 1 + 4
            assert struct.unpack_from(">h", body, pos)[0] == 0, f"produce failed: {body!r}"
            answered += 1
    return time.perf_counter() - start


def kcat_consume(bootstrap: str, topic: str, expected: int, *extra: str) -> float:
    start = time.perf_counter()
    out = subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q",
                          "-f", "%o\n", *extra], capture_output=True, timeout=300)
    elapsed = time.perf_counter() - start
    assert out.stdout.count(b"\n") == expected, out.stderr[-500:]
    return elapsed


def raw_list_offsets(port: int, topic: str, count: int) -> list[float]:
    """ListOffsets v7 by timestamp over one TCP connection, request by request: the broker's own cost."""
    import io
    import socket
    import struct

    from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
    from kio.schema.request_header.v2.header import RequestHeader
    from kio.serial import entity_writer
    from kio.static.primitive import i8, i16, i32, i64

    timings = []
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(count):
            buf = io.BytesIO()
            entity_writer(RequestHeader)(buf, RequestHeader(request_api_key=i16(2), request_api_version=i16(7),
                                                            correlation_id=i32(i), client_id="bench"))
            part = ListOffsetsPartition(partition_index=i32(0), current_leader_epoch=i32(-1),
                                        timestamp=i64(T0 + (i * 197) % 100_000))
            entity_writer(ListOffsetsRequest)(buf, ListOffsetsRequest(
                replica_id=i32(-1), isolation_level=i8(0), topics=(ListOffsetsTopic(name=topic, partitions=(part,)),)))
            frame = buf.getvalue()
            start = time.perf_counter()
            sock.sendall(struct.pack(">i", len(frame)) + frame)
            size = struct.unpack(">i", sock.recv(4))[0]
            got = b""
            while len(got) < size:
                got += sock.recv(size - len(got))
            timings.append(time.perf_counter() - start)
    return timings


def main() -> None:
    rows = [("measure", "chronolog", "baseline", "ratio / note")]
    with tempfile.TemporaryDirectory(prefix="chronolog-bench-") as tmpdir:
        tmp = Path(tmpdir)
        proc = BrokerProcess(tmp / "data").start()
        try:
            admin = AdminClient({"bootstrap.servers": proc.bootstrap})
            for size in (100, 1024):
                admin.create_topics([NewTopic(f"b{size}", 1, 1, config={
                    "message.timestamp.after.max.ms": str(2**62)})])[f"b{size}"].result(15)
            for size, count in ((100, 100_000), (1024, 30_000)):
                broker_s = produce(proc.bootstrap, f"b{size}", size, count)
                local_s = in_process(tmp, size, count)
                mb = size * count / 1e6
                rows.append((f"produce {size} B records (librdkafka)", f"{mb / broker_s:.1f} MB/s, "
                             f"{count / broker_s:,.0f} rec/s", f"{mb / local_s:.1f} MB/s in-process append",
                             f"{local_s / broker_s:.2f} (target >= 0.5)"))
            # consume vs reading the segment files; best of 3 for each, the disk read too
            logs = sorted((tmp / "data" / "b1024-0").glob("*.log"))
            total = sequential_read(logs)[0]
            disk_s = min(sequential_read(logs)[1] for _ in range(3))
            disk = f"{total / disk_s / 1e6:,.0f} MB/s disk read"
            for label, run in (
                    ("consume 30,000 x 1 KiB, kcat defaults", lambda: kcat_consume(proc.bootstrap, "b1024", 30_000)),
                    ("  kcat -X fetch.wait.max.ms=10", lambda: kcat_consume(proc.bootstrap, "b1024", 30_000,
                                                                            "-X", "fetch.wait.max.ms=10")),
                    ("  raw Fetch v12 loop (broker ceiling)", lambda: raw_fetch(proc.port, "b1024", 30_000))):
                took = min(run() for _ in range(3))
                target = " (target >= 0.5)" if label.startswith("consume") else ""
                rows.append((label, f"{total / took / 1e6:,.1f} MB/s", disk, f"{disk_s / took:.3f}{target}"))
            # ListOffsets by timestamp round trips
            c = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": "bench", "socket.nagle.disable": True})
            c.offsets_for_times([TopicPartition("b100", 0, T0)], timeout=10)
            timings = []
            for i in range(500):
                start = time.perf_counter()
                c.offsets_for_times([TopicPartition("b100", 0, T0 + (i * 197) % 100_000)], timeout=10)
                timings.append(time.perf_counter() - start)
            c.close()
            timings.sort()
            raw = sorted(raw_list_offsets(proc.port, "b100", 500))
            rows.append(("ListOffsets by time, wire round trip", f"p50 {statistics.median(raw) * 1e3:.2f} ms",
                         f"p99 {raw[int(len(raw) * 0.99)] * 1e3:.2f} ms", "(target p50 <= 1 ms)"))
            rows.append(("  same via librdkafka offsets_for_times", f"p50 {statistics.median(timings) * 1e3:.2f} ms",
                         f"p99 {timings[int(len(timings) * 0.99)] * 1e3:.2f} ms", "client-side overhead included"))
        finally:
            proc.stop()
    print_table(rows)


if __name__ == "__main__":
    main()
