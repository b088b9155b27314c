"""Broker benchmarks, each against a baseline measured in the same run:
- produce vs the storage engine's in-process append of the same records (best of 3), four ways:
  confluent-kafka from Python (one `produce()` call per record: the client's loop is most of the time, the
  final flush shows how far behind the broker was), kcat -P from a file (librdkafka in C; with the CPU
  seconds kcat and the broker used), the same kcat -P against librdkafka's own in-process mock broker (the
  client's ceiling: a broker that costs almost nothing), and a raw Produce v9 loop sending the baseline's
  own batches, 16 KiB and 1 MB (best of 3; the broker's overhead per request, no client work per record);
  then kcat -P, its mock ceiling and the 1 MB raw loop against a raw page-cache write of the same batches
  (one `write()` per 1 MB batch to a new file), in time and in CPU (the write's against the broker's);
- consume 300,000 x 1 KiB (about 300 MB) vs reading the same segment file: kcat -c N (exits when it has the
  records; it prints one byte per record, which is counted) against a page-cache read, the same printing
  each record's offset (kcat's formatting is part of its cost per record), kcat -e (exits after one Fetch at the log end, which waits
  `fetch.wait.max.ms`, 500 ms, as Kafka's DelayedFetch does), a raw Fetch v12 loop (the broker's ceiling),
  the socket's own ceiling (sendfile of 1 MiB per request to the same receive loop, no broker at all), and
  kcat -c N from the disk against a read from the disk (the files dropped from the page cache before each
  run of either side), and the client's ceiling (kcat -c against a replay of the broker's answers,
  recorded once through a proxy: see bench/replay.py); then both kcat rows again with 30,000 records of 10 KiB (the same bytes in a tenth
  of the records: how much of kcat's rate is its cost per record);
- ListOffsets by timestamp round trip p50/p99 (target p50 <= 1 ms on loopback).
Baselines and broker runs are interleaved (best of 3 each; kcat -P and the mock broker best of 2), so a
drift in the machine's speed during the run hits both sides of a ratio alike.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.brokerproc import BrokerProcess, free_port
from tests.frames import recv_frame

from bench.common import evict, print_table, proc_times, sequential_read, time_append
from bench.replay import ResponseReplay
from chronolog.config import TopicConfig
from chronolog.protocol.wire import read_uvarint
from chronolog.records import SimpleRecord, build_batch

T0 = 1_700_000_000_000


def send(p: Producer, topic: str, payload: bytes, first: int, end: int) -> None:
    """Records `first` to `end` (timestamps T0 + i) to partition 0, one `produce()` call each; when
    librdkafka's queue is full, served deliveries make room."""
    for i in range(first, end):
        while True:
            try:
                p.produce(topic, value=payload, partition=0, timestamp=T0 + i)
                break
            except BufferError:
                p.poll(0.01)


def produce(bootstrap: str | None, topic: str, size: int, count: int) -> tuple[float, float]:
    """confluent-kafka (librdkafka) from Python, one `produce()` call per record: (seconds in all, seconds
    of the final flush). A short flush means the broker kept up with the client's loop. With no bootstrap,
    to librdkafka's own in-process mock broker (a broker that costs almost nothing: the client's ceiling)."""
    where = {"bootstrap.servers": bootstrap} if bootstrap else {"test.mock.num.brokers": 1}
    p = Producer({**where, "linger.ms": 5, "batch.size": 1_000_000, "acks": 1,
                  "queue.buffering.max.messages": 1_000_000})
    payload = b"x" * size
    start = time.perf_counter()
    send(p, topic, payload, 0, count)
    flushing = time.perf_counter()
    assert p.flush(120) == 0
    end = time.perf_counter()
    return end - start, end - flushing


def produce_in_transactions(bootstrap: str, topic: str, size: int, count: int, per_txn: int | None,
                            txn_id: str) -> float:
    """Seconds for `count` records of `size` bytes from confluent-kafka: in transactions of `per_txn`
    records each committed (a transactional.id), or with `per_txn` None by an idempotent producer (the
    same acks=all and in-flight limit a transactional producer has), flushed at the end."""
    conf = {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000, "enable.idempotence": True}
    if per_txn is not None:
        conf["transactional.id"] = txn_id
    p = Producer(conf)
    payload = b"x" * size
    start = time.perf_counter()
    if per_txn is not None:
        p.init_transactions(30)
    step = per_txn or count
    for first in range(0, count, step):
        if per_txn is not None:
            p.begin_transaction()
        send(p, topic, payload, first, min(first + step, count))
        if per_txn is not None:
            p.commit_transaction(60)
    assert p.flush(120) == 0
    return time.perf_counter() - start


def transaction_rows(bootstrap: str) -> list[tuple]:
    """Transactional produce (KIP-98) against idempotent produce of the same records, interleaved runs,
    best of three each: transactions of 100 and of 10,000 records of 100 B."""
    rows = []
    for per_txn, count in ((100, 50_000), (10_000, 200_000)):
        txn, idem = [], []
        for i in range(3):
            idem.append(produce_in_transactions(bootstrap, "t100", 100, count, None, ""))
            txn.append(produce_in_transactions(bootstrap, "t100", 100, count, per_txn, f"bench-{per_txn}-{i}"))
        t, b = min(txn), min(idem)
        target = " (target >= 0.5)" if per_txn == 10_000 else ""
        rows.append((f"transactional produce, {count // per_txn:,} transactions of {per_txn:,} x 100 B",
                     f"{count / t:,.0f} rec/s", f"{count / b:,.0f} rec/s idempotent", f"{b / t:.2f}{target}"))
    return rows


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (/proc/PID/stat)."""
    user, system, _faults = proc_times(pid)
    return user + system


def timed_child(args: list[str], broker_pid: int | None) -> tuple[float, float, float, subprocess.CompletedProcess]:
    """(seconds, the child's CPU seconds, the broker's CPU seconds meanwhile, result) of one command: who
    was busy shows which side bounds the rate."""
    before_child = resource.getrusage(resource.RUSAGE_CHILDREN)
    before_broker = cpu_seconds(broker_pid) if broker_pid else 0.0
    start = time.perf_counter()
    out = subprocess.run(args, capture_output=True, timeout=300)
    elapsed = time.perf_counter() - start
    after_child = resource.getrusage(resource.RUSAGE_CHILDREN)
    child = (after_child.ru_utime - before_child.ru_utime) + (after_child.ru_stime - before_child.ru_stime)
    return elapsed, child, (cpu_seconds(broker_pid) - before_broker) if broker_pid else 0.0, out


KCAT_PRODUCER = ["-X", "linger.ms=5", "-X", "batch.size=1000000", "-X", "acks=1",
                 "-X", "queue.buffering.max.messages=1000000"]


def kcat_produce(bootstrap: str, topic: str, lines: Path, count: int, broker_pid: int | None = None,
                 mock: bool = False) -> tuple[float, float, float]:
    """kcat -P (librdkafka from C, no Python per record) sending each line of a file as a record, with the
    same producer settings as above; includes kcat's start and metadata round trip (about 20 ms). With
    `mock`, to librdkafka's own mock cluster (`test.mock.num.brokers`, a broker written in C inside the
    kcat process that keeps the records in memory): how fast this client goes against a broker that costs
    almost nothing. (seconds, kcat CPU seconds, broker CPU seconds)."""
    where = ["-X", "test.mock.num.brokers=1"] if mock else []
    elapsed, child, broker, out = timed_child(
        ["kcat", "-P", "-b", bootstrap, *where, "-t", topic, "-p", "0", "-l", str(lines), *KCAT_PRODUCER],
        None if mock else broker_pid)
    assert out.returncode == 0, out.stderr[-500:]
    return elapsed, child, broker


def batches_of(size: int, count: int, batch_bytes: int = 16384) -> list[bytes]:
    """The baseline's batches: about `batch_bytes` each, records of `size` bytes."""
    per_batch = max(1, batch_bytes // (size + 10))
    return [build_batch([SimpleRecord(T0 + i + j, None, b"x" * size) for j in range(min(per_batch, count - i))])
            for i in range(0, count, per_batch)]


IN_PROCESS = TopicConfig.from_kafka({"message.timestamp.after.max.ms": str(2**62), "segment.bytes": str(256 << 20)})


def in_process(tmp: Path, name: str, batches: list[bytes]) -> float:
    """The storage engine's own append of `batches` (validation, offsets, indexes), in this process, after
    an untimed append of the first two (the broker's logs have paid their first block allocations by the
    time they are measured)."""
    return time_append(tmp / f"{name}-0", IN_PROCESS, batches[:2], batches, T0)


def page_cache_write(tmp: Path, data: bytes, chunk: int = 1_000_000) -> tuple[float, float]:
    """A raw write of `data` to a new file, one `write()` per `chunk` bytes (as the log writes one librdkafka
    batch): (seconds, CPU seconds of this process). The file is deleted after, so its writeback does not run
    under the next measure."""
    view = memoryview(data)
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    fd = os.open(tmp / "page-cache-write", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for i in range(0, len(data), chunk):
            os.write(fd, view[i:i + chunk])
    finally:
        os.close(fd)
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    os.unlink(tmp / "page-cache-write")
    return took, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def raw_fetch(port: int, topic: str, end_offset: int, partition_max_bytes: int = 1 << 20) -> float:
    """Fetch v12 from offset 0 to `end_offset` over one TCP connection, one request at a time with
    librdkafka's default 1 MiB per partition. The request is encoded once and only its fetch offset patched;
    each response is received into one reused buffer and only the batch headers needed to find the next
    offset are read: as little client work as Python allows, so the figure is mostly the broker's."""
    import datetime
    import io
    import socket
    import struct

    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
    from kio.schema.request_header.v2.header import RequestHeader
    from kio.serial import entity_writer
    from kio.static.primitive import i8, i16, i32, i64

    marker = 0x0123456789ABCDEF
    buf = io.BytesIO()
    entity_writer(RequestHeader)(buf, RequestHeader(request_api_key=i16(1), request_api_version=i16(12),
                                                    correlation_id=i32(1), client_id="bench"))
    part = FetchPartition(partition=i32(0), current_leader_epoch=i32(-1), fetch_offset=i64(marker),
                          last_fetched_epoch=i32(-1), log_start_offset=i64(-1),
                          partition_max_bytes=i32(partition_max_bytes))
    entity_writer(FetchRequest)(buf, FetchRequest(
        replica_id=i32(-1), max_wait=datetime.timedelta(milliseconds=500), min_bytes=i32(1),
        max_bytes=i32(52428800), isolation_level=i8(0), session_id=i32(0), session_epoch=i32(-1),
        topics=(FetchTopic(topic=topic, partitions=(part,)),), forgotten_topics_data=(), rack_id=""))
    request = bytearray(struct.pack(">i", len(buf.getvalue())) + buf.getvalue())
    at = request.index(struct.pack(">q", marker))
    data = bytearray(partition_max_bytes + (1 << 16))
    view = memoryview(data)
    offset = 0
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while offset < end_offset:
            struct.pack_into(">q", request, at, offset)
            sock.sendall(request)
            got = 0
            while got < 4:
                got += sock.recv_into(view[got:])
            size = 4 + struct.unpack_from(">i", data)[0]
            if size > len(data):
                data.extend(bytes(size - len(data)))
                view = memoryview(data)
            while got < size:
                got += sock.recv_into(view[got:size])
            # size, response header v1, throttle, error, session, one topic, one partition, then its records
            pos = 4 + 4 + 1 + 4 + 2 + 4
            _, pos = read_uvarint(view, pos)
            length, pos = read_uvarint(view, pos)
            _, pos = read_uvarint(view, pos + length - 1)
            pos += 4 + 2 + 8 + 8 + 8
            _, pos = read_uvarint(view, pos)
            length, pos = read_uvarint(view, pos + 4)
            p, end, last = pos, pos + length - 1, None
            while p + 27 <= end:
                base, batch_length = struct.unpack_from(">qi", data, p)
                last = base + struct.unpack_from(">i", data, p + 23)[0]
                p += 12 + batch_length
            assert last is not None, "empty fetch before the end offset"
            offset = last + 1
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
            body = recv_frame(sock)
            # header v1 (correlation id, tags), topics[1]: name, partitions[1]: index, then the error code
            pos = 4 + 1 + 1
            name_len = body[pos] - 1
            pos += 1 + name_len + 1 + 4
            assert struct.unpack_from(">h", body, pos)[0] == 0, f"produce failed: {body!r}"
            answered += 1
    return time.perf_counter() - start


ONE_BYTE = "."  # kcat's output per record in the consume rows: enough to count the records, little else
OFFSETS = "%o\n"  # each record's offset and a newline: about 0.2 us more of kcat's CPU per record


def kcat_consume(bootstrap: str, topic: str, expected: int, *extra: str, broker_pid: int | None = None,
                 output: str = ONE_BYTE) -> tuple[float, float, float]:
    """kcat -C from the beginning of partition 0, printing `output` per record (counted afterwards);
    `extra` says when it stops. (seconds, kcat CPU seconds, broker CPU seconds)."""
    elapsed, child, broker, out = timed_child(
        ["kcat", "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-q", "-f", output, *extra],
        broker_pid)
    got = out.stdout.count(b"\n") if output == OFFSETS else len(out.stdout)
    assert got == expected, out.stderr[-500:]
    return elapsed, child, broker


def consume_round(proc: BrokerProcess, topic: str, count: int, logs: list[Path]) -> tuple:
    """(page-cache read s, kcat -c from the page cache, disk read s, kcat -c from the disk): one interleaved
    round; each disk side starts with the segment files dropped from the page cache."""
    warm = sequential_read(logs)[1]
    cached = kcat_consume(proc.bootstrap, topic, count, "-c", str(count), broker_pid=proc.proc.pid)
    evict(logs)
    cold = sequential_read(logs)[1]
    evict(logs)
    from_disk = kcat_consume(proc.bootstrap, topic, count, "-c", str(count), broker_pid=proc.proc.pid)
    return warm, cached, cold, from_disk


def consume_rows(what: str, total: int, rounds: list[tuple], target: str) -> tuple[tuple, tuple]:
    """The page-cache row and the disk row of `consume_round`s, best of each side."""
    warm_s, cold_s = min(r[0] for r in rounds), min(r[2] for r in rounds)
    out = []
    for index, base_s, label, base in (
            (1, warm_s, f"consume {what}, kcat -c (exits on the last record)",
             f"{total / warm_s / 1e6:,.0f} MB/s reading the segment file (page cache)"),
            (3, cold_s, f"consume {what} from the disk: kcat -c, segment files dropped from the page cache",
             f"{total / cold_s / 1e6:,.0f} MB/s reading the segment file from the disk")):
        took, kcat_cpu, broker_cpu = min((r[index] for r in rounds), key=lambda r: r[0])
        out.append((label, f"{total / took / 1e6:,.1f} MB/s", base,
                    f"{base_s / took:.3f}{target} (CPU s: kcat {kcat_cpu:.2f}, broker {broker_cpu:.2f}, "
                    f"in {took:.2f} s)"))
    return out[0], out[1]


def recorded_replay(tmp: Path, frames: list[bytes], count: int) -> tuple[ResponseReplay, BrokerProcess]:
    """The consume rows' client ceiling (bench.replay): a second broker given the same Produce frames and
    advertising the replay server's port, and one kcat -c run recorded through it; the server then answers
    kcat from memory (the broker stays up, idle, for any request not seen while recording)."""
    port = free_port()
    proc = BrokerProcess(tmp / "replay-data", {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}"}).start()
    replay = ResponseReplay(port, proc.port)
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
    for future in admin.create_topics([NewTopic("c1024", 1, 1, config={
            "message.timestamp.after.max.ms": str(2**62)})]).values():
        future.result(15)
    del admin  # (its librdkafka handle is destroyed now)
    raw_produce(proc.port, frames)
    kcat_consume(f"127.0.0.1:{port}", "c1024", count, "-c", str(count))
    replay.recording = False
    return replay, proc


def socket_ceiling(path: Path, chunk: int = 1 << 20) -> tuple[int, float]:
    """(bytes, seconds) for one loopback TCP connection to move a file request by request: a thread answers
    each small request with a size prefix and `os.sendfile` of the next `chunk` bytes (what Kafka's
    zero-copy path does, with no broker work at all) to the receive loop raw_fetch uses. No broker can
    serve this client faster."""
    import os
    import socket
    import struct
    import threading

    size = path.stat().st_size
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = server.accept()
        with conn, open(path, "rb") as f:
            position = 0
            while position < size and conn.recv(8, socket.MSG_WAITALL):
                n = min(chunk, size - position)
                conn.sendall(struct.pack(">i", n))
                sent = 0
                while sent < n:
                    sent += os.sendfile(conn.fileno(), f.fileno(), position + sent, n - sent)
                position += n

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    data = bytearray(chunk + 4)
    view = memoryview(data)
    start = time.perf_counter()
    with socket.create_connection(server.getsockname()) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        received = 0
        while received < size:
            sock.sendall(struct.pack(">q", received))
            got = 0
            while got < 4:
                got += sock.recv_into(view[got:])
            want = 4 + struct.unpack_from(">i", data)[0]
            while got < want:
                got += sock.recv_into(view[got:want])
            received += want - 4
    elapsed = time.perf_counter() - start
    thread.join()
    server.close()
    return size, elapsed


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
            recv_frame(sock)
            timings.append(time.perf_counter() - start)
    return timings


def main() -> None:
    rows = [("measure", "chronolog", "baseline", "ratio / note")]
    with tempfile.TemporaryDirectory(prefix="chronolog-bench-") as tmpdir:
        tmp = Path(tmpdir)
        proc = BrokerProcess(tmp / "data").start()
        helpers: list[BrokerProcess] = []
        try:
            admin = AdminClient({"bootstrap.servers": proc.bootstrap})
            topics = [f"{kind}{size}" for kind in ("b", "k", "r", "t") for size in (100, 1024)] + ["c1024", "c10240"]
            for future in admin.create_topics([NewTopic(t, 1, 1, config={
                    "message.timestamp.after.max.ms": str(2**62)}) for t in topics]).values():
                future.result(15)
            del admin  # (destroyed now: left alive, it would retry the stopped broker while the table prints)
            # -- produce: four ways, each against the in-process append of the same records ----------------
            # The in-process appends run between the broker's runs, not all before them: this machine's
            # speed drifts by 2-4x over tens of seconds, and interleaving keeps both sides in the same weather.
            for size, count in ((100, 1_000_000), (1024, 100_000)):
                mb = size * count / 1e6
                batches = batches_of(size, count)
                big = batches_of(size, count, 1_000_000)  # batch.size above: the overhead amortised
                frames, big_frames = produce_frames(f"r{size}", batches), produce_frames(f"r{size}", big)
                lines = tmp / f"lines{size}"
                lines.write_bytes((b"x" * size + b"\n") * count)
                local, big_local, kcat_runs, mock_runs, raw, big_raw, writes = [], [], [], [], [], [], []
                big_bytes = b"".join(big)
                for i in range(3):
                    writes.append(page_cache_write(tmp, big_bytes))
                    local.append(in_process(tmp, f"inproc{size}-{i}", batches))
                    if i == 0:
                        broker_s, flush_s = produce(proc.bootstrap, f"b{size}", size, count)
                    if i < 2:
                        kcat_runs.append(kcat_produce(proc.bootstrap, f"k{size}", lines, count, proc.proc.pid))
                        mock_runs.append(kcat_produce("127.0.0.1:1", f"k{size}", lines, count, mock=True))
                    raw.append(raw_produce(proc.port, frames))
                    big_local.append(in_process(tmp, f"inproc{size}big-{i}", big))
                    big_raw.append(raw_produce(proc.port, big_frames))
                local_s, big_local_s, raw_s, big_s = min(local), min(big_local), min(raw), min(big_raw)
                kcat_s, kcat_cpu, broker_cpu = min(kcat_runs, key=lambda r: r[0])
                mock_s, mock_cpu, _ = min(mock_runs, key=lambda r: r[0])
                base = f"{mb / local_s:.1f} MB/s in-process append"
                rows.append((f"produce {count:,} x {size} B, confluent-kafka from Python",
                             f"{mb / broker_s:.1f} MB/s, {count / broker_s:,.0f} rec/s", base,
                             f"{local_s / broker_s:.2f} (target >= 0.5; final flush {flush_s * 1e3:.0f} ms)"))
                rows.append(("  kcat -P from a file (librdkafka in C)",
                             f"{mb / kcat_s:.1f} MB/s, {count / kcat_s:,.0f} rec/s", "same",
                             f"{local_s / kcat_s:.2f} (CPU s: kcat {kcat_cpu:.2f}, broker {broker_cpu:.2f}, "
                             f"in {kcat_s:.2f} s)"))
                rows.append(("  client ceiling: same kcat -P to librdkafka's in-process mock broker (C)",
                             f"{mb / mock_s:.1f} MB/s, {count / mock_s:,.0f} rec/s", "same",
                             f"{local_s / mock_s:.2f} (kcat CPU {mock_cpu:.2f} s; chronolog reaches "
                             f"{mock_s / kcat_s:.2f} of it)"))
                rows.append((f"  raw Produce v9 loop, the baseline's {len(batches)} batches, 5 in flight",
                             f"{mb / raw_s:.1f} MB/s, {len(frames) / raw_s:,.0f} req/s", "same",
                             f"{local_s / raw_s:.2f} (broker overhead per request)"))
                rows.append((f"  raw Produce v9 loop, {len(big)} batches of 1 MB, 5 in flight",
                             f"{mb / big_s:.1f} MB/s, {len(big) / big_s:,.0f} req/s",
                             f"{mb / big_local_s:.1f} MB/s in-process append of them", f"{big_local_s / big_s:.2f}"))
                write_s, write_cpu = min(writes)
                target = " (target >= 0.3)" if size == 1024 else ""
                rows.append(("  kcat -P / its mock ceiling / raw 1 MB loop, of a raw page-cache write of the batches",
                             f"{mb / kcat_s:.1f} / {mb / mock_s:.1f} / {mb / big_s:.1f} MB/s",
                             f"{mb / write_s:.1f} MB/s, 1 MB write()s",
                             f"{write_s / kcat_s:.3f}{target} / {write_s / mock_s:.3f} / {write_s / big_s:.3f}; CPU, the "
                             f"write's of the broker's under kcat: {write_cpu / max(broker_cpu, 1e-9):.2f} "
                             f"({write_cpu:.2f} / {broker_cpu:.2f} s)"))
            # -- consume: 300,000 x 1 KiB (and 30,000 x 10 KiB), against reading the segment file ----------
            # Interleaved as the produce rows are; the disk rounds start with the segment files out of the
            # page cache, for the baseline's read and for the broker's sendfile alike.
            count = 300_000
            c_frames = produce_frames("c1024", [batches_of(1024, 15)[0]]) * (count // 15)
            raw_produce(proc.port, c_frames)
            logs = sorted((tmp / "data" / "c1024-0").glob("*.log"))
            total = sequential_read(logs)[0]
            replay, replay_proc = recorded_replay(tmp, c_frames, count)
            helpers.append(replay_proc)
            rounds, offsets, kcat_e, fetches, ceilings, replays = [], [], [], [], [], []
            for _ in range(3):
                rounds.append(consume_round(proc, "c1024", count, logs))
                replays.append(kcat_consume(f"127.0.0.1:{replay.port}", "c1024", count, "-c", str(count)))
                offsets.append(kcat_consume(proc.bootstrap, "c1024", count, "-c", str(count),
                                            broker_pid=proc.proc.pid, output=OFFSETS))
                kcat_e.append(kcat_consume(proc.bootstrap, "c1024", count, "-e", broker_pid=proc.proc.pid))
                fetches.append(raw_fetch(proc.port, "c1024", count))
                ceilings.append(socket_ceiling(logs[0]))
            from_cache, from_disk = consume_rows(f"{count:,} x 1 KiB", total, rounds, " (target >= 0.5)")
            disk_s = min(r[0] for r in rounds)
            disk = f"{total / disk_s / 1e6:,.0f} MB/s reading the segment file (page cache)"
            rows.append(from_cache)
            took, kcat_cpu, broker_cpu = min(offsets, key=lambda r: r[0])
            rows.append(("  kcat -c printing each record's offset (-f '%o\\n') instead of one byte",
                         f"{total / took / 1e6:,.1f} MB/s", disk,
                         f"{disk_s / took:.3f} (CPU s: kcat {kcat_cpu:.2f}, broker {broker_cpu:.2f}, in {took:.2f} s)"))
            took, kcat_cpu, broker_cpu = min(kcat_e, key=lambda r: r[0])
            rows.append(("  kcat -e (exits after an empty Fetch at the end: + fetch.wait.max.ms, 500 ms)",
                         f"{total / took / 1e6:,.1f} MB/s", disk,
                         f"{disk_s / took:.3f} (CPU s: kcat {kcat_cpu:.2f}, broker {broker_cpu:.2f}, in {took:.2f} s)"))
            took = min(fetches)
            rows.append(("  raw Fetch v12 loop, 1 MiB per request (broker ceiling)", f"{total / took / 1e6:,.1f} MB/s",
                         disk, f"{disk_s / took:.3f}"))
            moved, ceiling_s = min(ceilings, key=lambda r: r[1])
            rows.append(("  socket ceiling: sendfile 1 MiB per request, same receive loop, no broker",
                         f"{moved / ceiling_s / 1e6:,.1f} MB/s", disk,
                         f"{disk_s * moved / total / ceiling_s:.3f}"))
            rows.append(from_disk)
            took, kcat_cpu, _ = min(replays, key=lambda r: r[0])
            cold_s = min(r[2] for r in rounds)
            cached_s, cold_kcat_s = min(r[1][0] for r in rounds), min(r[3][0] for r in rounds)
            rows.append(("  client ceiling: same kcat -c against a replay of the broker's recorded answers",
                         f"{total / took / 1e6:,.1f} MB/s",
                         f"{total / cold_s / 1e6:,.0f} MB/s reading the segment file from the disk",
                         f"{cold_s / took:.3f} (kcat CPU {kcat_cpu:.2f} s; chronolog reaches {took / cached_s:.2f} "
                         f"of it from the page cache, {took / cold_kcat_s:.2f} from the disk; "
                         f"{replay.forwarded} requests not recorded were forwarded)"))
            replay.close()
            # The same with 10 KiB records, one per 16 KiB batch: a tenth of the records for the same bytes,
            # so kcat's cost per record weighs a tenth as much.
            big_count = 30_000
            raw_produce(proc.port, produce_frames("c10240", batches_of(10240, big_count)))
            big_logs = sorted((tmp / "data" / "c10240-0").glob("*.log"))
            big_total = sequential_read(big_logs)[0]
            big_rounds = [consume_round(proc, "c10240", big_count, big_logs) for _ in range(3)]
            rows.extend(consume_rows(f"{big_count:,} x 10 KiB", big_total, big_rounds, ""))
            # -- ListOffsets by timestamp round trips -------------------------------------------------------
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
            rows.extend(transaction_rows(proc.bootstrap))
        finally:
            for p in [proc, *helpers]:
                p.stop()
    print_table(rows)


if __name__ == "__main__":
    main()
