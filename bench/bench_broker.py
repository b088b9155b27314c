"""Broker benchmarks, each against a baseline measured in the same run:
- produce through the broker with librdkafka vs the storage engine's in-process append of similar batches;
- consume with kcat vs reading the same segment bytes from disk;
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
            # consume with kcat vs reading the segment files
            logs = sorted((tmp / "data" / "b1024-0").glob("*.log"))
            total, disk_s = sequential_read(logs)
            start = time.perf_counter()
            out = subprocess.run(["kcat", "-b", proc.bootstrap, "-C", "-t", "b1024", "-p", "0", "-o", "beginning",
                                  "-e", "-q", "-f", "%o\n"], capture_output=True, timeout=300)
            kcat_s = time.perf_counter() - start
            assert out.stdout.count(b"\n") == 30_000
            rows.append(("consume with kcat (1 KiB records)", f"{total / kcat_s / 1e6:.1f} MB/s",
                         f"{total / disk_s / 1e6:.0f} MB/s disk read", f"{disk_s / kcat_s:.3f} (target >= 0.5)"))
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
