"""The broker's cost of the Spark sink's writes, for A/B runs of two checkouts (not a `make bench` area).

`python -m bench.sink_broker live PATH ROWS WRITES`: a `serve` process of the package on PYTHONPATH, the
sink task's `make_writer(...).write` of ROWS rows (partition, 8-byte key, 80-byte value, CreateTime; Arrow
batches of 10,000 rows, Spark's `maxRecordsPerBatch`) through PATH (`auto` or `librdkafka`), WRITES timed
writes after one that warms up.
`... capture PATH ROWS FILE`: the same through a proxy the broker advertises, keeping the Produce requests
of the second write (librdkafka's batching follows the broker's timing, so live runs differ in requests).
`... replay FILE PASSES`: those requests sent again PASSES times after one pass, five in flight (librdkafka
pipelines), one connection. The last line printed holds the costs per write or per pass: the broker's CPU
(user + system), user, system (ms, from /proc: 10 ms ticks, hence seconds of work per run), its minor page
faults and context switches, then (live) the task's CPU ms and the batches appended, (replay) the requests.
"""

from __future__ import annotations

import pickle
import socket
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

from tests.brokerproc import BrokerProcess, free_port

from bench.common import proc_times

T0 = 1_700_000_000_000
CONFIGS = {"message.timestamp.after.max.ms": str(2**62), "log.segment.bytes": str(1 << 30)}


def costs(pid: int) -> tuple[float, float, int, int]:
    """user s, system s, minor faults, context switches of process `pid`."""
    switches = sum(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                   if "ctxt_switches" in line)
    return (*proc_times(pid), switches)


def _rows(rows: int):
    import pyarrow as pa
    from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType, TimestampType

    schema = StructType([StructField("partition", IntegerType()), StructField("key", BinaryType()),
                         StructField("value", BinaryType()), StructField("timestamp", TimestampType())])
    batches = []
    for start in range(0, rows, 10_000):
        ids = range(start, start + 10_000)
        batches.append(pa.RecordBatch.from_arrays(
            [pa.array([i % 3 for i in ids], pa.int32()), pa.array([b"%08d" % i for i in ids], pa.binary()),
             pa.array([b"x" * 80] * 10_000, pa.binary()), pa.array([(T0 + i) * 1000 for i in ids], pa.timestamp("us"))],
            names=["partition", "key", "value", "timestamp"]))
    return schema, batches


def _create(bootstrap: str, names: list[str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # held: a dropped client cancels its futures
    for future in admin.create_topics([NewTopic(n, 3, 1) for n in names]).values():
        future.result(60)


def _batches(data: Path, topic: str) -> int:
    """Record batches in the topic's segment files (a batch's length field at byte 8)."""
    count = 0
    for log in data.glob(f"{topic}-*/*.log"):
        raw = log.read_bytes()
        pos = 0
        while pos + 12 <= len(raw) and (length := struct.unpack_from(">i", raw, pos + 8)[0]) > 0:
            count += 1
            pos += 12 + length
    return count


def live(path: str, rows: int, writes: int) -> None:
    from chronolog.spark.sink import make_writer

    schema, batches = _rows(rows)
    total = [0.0] * 6
    with tempfile.TemporaryDirectory(prefix="bench-sink-broker-") as tmp:
        data = Path(tmp) / "d"
        proc = BrokerProcess(data, CONFIGS).start()
        pid = proc.proc.pid
        try:
            names = [f"sink-{i}" for i in range(writes + 1)]
            _create(proc.bootstrap, names)
            for i, name in enumerate(names):
                options = {"kafka.bootstrap.servers": proc.bootstrap, "topic": name, "producer": path}
                before, task = costs(pid), time.process_time()
                assert make_writer(options, schema, False, False).write(iter(batches)).rows == rows
                after, task = costs(pid), time.process_time() - task
                if i:  # the first write warms up (imports, connections)
                    for k, v in enumerate((after[0] - before[0], after[1] - before[1], after[2] - before[2],
                                           after[3] - before[3], task)):
                        total[k] += v
            total[5] = sum(_batches(data, name) for name in names[1:])
        finally:
            proc.stop()
    user, system, faults, switches, task, batches_n = (t / writes for t in total)
    print(f"{(user + system) * 1000:.1f} {user * 1000:.1f} {system * 1000:.1f} {faults:.0f} {switches:.0f} "
          f"{task * 1000:.1f} {batches_n:.1f}")


def capture(path: str, rows: int, out: str) -> None:
    from chronolog.spark.sink import make_writer

    schema, batches = _rows(rows)
    frames: list[bytes] = []
    recording = threading.Event()

    def pump(src: socket.socket, dst: socket.socket, keep: bool) -> None:
        pending = b""
        try:
            while chunk := src.recv(1 << 20):
                dst.sendall(chunk)
                if keep:
                    pending += chunk
                    while len(pending) >= 4 and len(pending) >= 4 + (n := struct.unpack_from(">i", pending)[0]):
                        if recording.is_set() and struct.unpack_from(">h", pending, 4)[0] == 0:  # Produce
                            frames.append(pending[4:4 + n])
                        pending = pending[4 + n:]
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def proxy(listener: socket.socket, upstream: int) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            broker = socket.create_connection(("127.0.0.1", upstream))
            for s in (client, broker):  # as librdkafka's own sockets: no Nagle delay to grow its batches
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=pump, args=(client, broker, True), daemon=True).start()
            threading.Thread(target=pump, args=(broker, client, False), daemon=True).start()

    port = free_port()
    listener = socket.create_server(("127.0.0.1", port))
    with tempfile.TemporaryDirectory(prefix="bench-sink-broker-") as tmp:
        proc = BrokerProcess(Path(tmp) / "d", {**CONFIGS, "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}"})
        proc.start()
        threading.Thread(target=proxy, args=(listener, proc.port), daemon=True).start()
        bootstrap = f"127.0.0.1:{port}"
        try:
            _create(bootstrap, ["sink-0", "sink-1"])
            for name in ("sink-0", "sink-1"):
                if name == "sink-1":  # the first write warms up
                    recording.set()
                options = {"kafka.bootstrap.servers": bootstrap, "topic": name, "producer": path}
                assert make_writer(options, schema, False, False).write(iter(batches)).rows == rows
            recording.clear()
        finally:
            proc.stop()
            listener.close()
    Path(out).write_bytes(pickle.dumps(frames))
    print(f"{len(frames)} Produce requests, {sum(map(len, frames))} bytes")


def _recv(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        if not (k := sock.recv_into(view[got:])):
            raise EOFError
        got += k
    return buf


def replay(file: str, passes: int, window: int = 5) -> None:
    frames = pickle.loads(Path(file).read_bytes())

    def one_pass(sock: socket.socket) -> None:
        in_flight = 0
        for i, frame in enumerate(frames):
            sock.sendall(struct.pack(">i", len(frame)) + frame[:4] + struct.pack(">i", i) + frame[8:])
            in_flight += 1
            while in_flight >= window or (i == len(frames) - 1 and in_flight):
                _recv(sock, struct.unpack(">i", _recv(sock, 4))[0])
                in_flight -= 1

    with tempfile.TemporaryDirectory(prefix="bench-sink-broker-") as tmp:
        proc = BrokerProcess(Path(tmp) / "d", CONFIGS).start()
        pid = proc.proc.pid
        try:
            _create(proc.bootstrap, ["sink-1"])
            with socket.create_connection(("127.0.0.1", proc.port)) as sock:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                one_pass(sock)  # warms up
                before = costs(pid)
                for _ in range(passes):
                    one_pass(sock)
                after = costs(pid)
        finally:
            proc.stop()
    user, system, faults, switches = ((a - b) / passes for a, b in zip(after, before, strict=True))
    print(f"{(user + system) * 1000:.1f} {user * 1000:.1f} {system * 1000:.1f} {faults:.0f} {switches:.0f} "
          f"{len(frames)}")


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "live":
        live(args[0], int(args[1]), int(args[2]))
    elif mode == "capture":
        capture(args[0], int(args[1]), args[2])
    elif mode == "replay":
        replay(args[0], int(args[1]))
    else:
        sys.exit(__doc__)
