"""The consume rows' client ceiling in the Kafka race: each consume loop against a broker's answers replayed
from memory, the consuming twin of the produce rows' ceiling (librdkafka's in-process mock broker).

A chronolog broker of its own (`recorder`) is given the very batches the measured chronolog broker holds,
copied batch by batch, and advertises the port of a `bench.replay` server in front of it: one pass of a
client through that server records every answer, keyed by its request; the measured passes of the same
client are then answered from memory, by a server that only looks each request up and sends the recorded
bytes back. Its rate is what that client reaches when a broker costs next to nothing: the most any broker
can show with it. The replay runs in a process of its own, so that its CPU is measured apart from the
client's and a Python client loop shares no GIL with it; requests never seen while recording are forwarded
to the recorder and counted, so a figure answered mostly by a real broker would show it.
"""

from __future__ import annotations

import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.brokerproc import BrokerProcess, free_port
from tests.frames import recv_frame

from bench.kafka_brokers import WAIT, cpu_self_s, cpu_tree_s

ROOT = Path(__file__).resolve().parents[1]
COPY_FETCH_BYTES = 16 << 20  # more than any batch the bench's producers write (batch.size 1,000,000)
LABEL = "  client ceiling: the same consume loop against recorded answers replayed from memory"


def copy_topic(source: str, target: str, topic: str) -> int:
    """Partition 0 of `topic` from the broker at `source` appended batch by batch, as they are, to the same
    topic at `target` (one Produce v8 per batch, acks=1): the record count."""
    from chronolog.protocol import fetch_client, produce_client

    offset = correlation = 0
    with socket.create_connection(_address(source), timeout=WAIT) as src, \
            socket.create_connection(_address(target), timeout=WAIT) as dst:
        while True:
            correlation += 1
            src.sendall(fetch_client.fetch_request(11, correlation, "bench", topic, 0, offset,
                                                   max_bytes=COPY_FETCH_BYTES, isolation_level=0))
            part = fetch_client.read_fetch(11, recv_frame(src), correlation, topic, 0)
            if part.error_code:
                raise RuntimeError(f"copy of {topic}: fetch at {offset}: error {part.error_code}")
            records, pos = part.records, 0
            while pos + 12 <= len(records):  # base offset, length, ..., last offset delta at 23
                length = struct.unpack_from(">i", records, pos + 8)[0]
                if pos + 12 + length > len(records):
                    break
                batch = bytearray(records[pos:pos + 12 + length])
                batch[:8] = bytes(8)  # a producer's base offset (outside the CRC): the broker assigns offsets
                dst.sendall(b"".join(produce_client.produce_request(8, correlation, "bench", 1, 30_000,
                                                                    {topic: {0: bytes(batch)}})))
                answer = produce_client.read_produce(8, recv_frame(dst), correlation)[(topic, 0)]
                if answer.error_code:
                    raise RuntimeError(f"copy of {topic}: produce: error {answer.error_code} ({answer.message})")
                offset += struct.unpack_from(">i", records, pos + 23)[0] + 1
                pos += 12 + length
            if offset >= part.high_watermark:
                return offset


def _address(bootstrap: str) -> tuple[str, int]:
    host, port = bootstrap.rsplit(":", 1)
    return host, int(port)


class ConsumeCeiling:
    """The recorder broker and the replay process, shared by the consume loops of one run of the bench.
    `create(bootstrap, topic)` makes a topic as the bench does; topics are copied from `source` on first
    use."""

    def __init__(self, source: str, create: Callable[[str, str], None]) -> None:
        self.source, self.create = source, create
        self.tmp = Path(tempfile.mkdtemp(prefix="chronolog-bench-ceiling-"))
        self.port = free_port()
        self.recorder = BrokerProcess(self.tmp / "data", {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}"})
        self.recorder.start()
        self.replay = subprocess.Popen([sys.executable, "-m", "bench.replay", str(self.port), str(self.recorder.port)],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
                                       start_new_session=True)
        if self.replay.stdout.readline().strip() != "ready":
            self.close()
            raise RuntimeError("the replay server did not start")
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.copied: set[str] = set()

    def _say(self, command: str) -> str:
        self.replay.stdin.write(command + "\n")
        self.replay.stdin.flush()
        return self.replay.stdout.readline().strip()

    def recorded(self, topic: str, record: Callable[[str], object],
                 run: Callable[[str], tuple[float, int]]) -> Replayed:
        """`record(bootstrap)` once through the recording server (`topic` copied first, if not yet); then a
        `Replayed` whose every call is one run of `run(bootstrap)` -> (MB/s, bytes moved) against the
        replay (the bench calls it between its brokers' runs, so a shared machine's load hits all alike)."""
        if topic not in self.copied:
            self.create(self.recorder.bootstrap, topic)
            copy_topic(self.source, self.recorder.bootstrap, topic)
            self.copied.add(topic)
        self._say("record")
        record(self.bootstrap)
        self._say("replay")
        return Replayed(self, run)

    def counts(self) -> tuple[int, Counter[int]]:
        """Requests answered from memory so far, and those forwarded by API key."""
        answered, *forwarded = self._say("counts").split()
        return int(answered), Counter({int(k): int(n) for k, n in (f.split(":") for f in forwarded)})

    def close(self) -> None:
        if self.replay.poll() is None:
            self.replay.stdin.close()
            try:
                self.replay.wait(30)
            except subprocess.TimeoutExpired:
                self.replay.kill()
                self.replay.wait(10)
        self.recorder.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


class Replayed:
    """The runs of one client against the replay: each call one run; `result` the median rate, the client's
    and the replay's CPU seconds per GB moved (medians), and the requests answered from memory and
    forwarded over the runs (by API key)."""

    def __init__(self, ceiling: ConsumeCeiling, run: Callable[[str], tuple[float, int]]) -> None:
        self.ceiling, self.run = ceiling, run
        self.answered, self.forwarded = ceiling.counts()
        self.rates: list[float] = []
        self.client: list[float] = []
        self.server: list[float] = []

    def __call__(self) -> None:
        pid = self.ceiling.replay.pid
        ours, theirs = cpu_self_s(), cpu_tree_s(pid)
        rate, moved = self.run(self.ceiling.bootstrap)
        self.client.append((cpu_self_s() - ours) / (moved / 1e9))
        self.server.append((cpu_tree_s(pid) - theirs) / (moved / 1e9))
        self.rates.append(rate)

    def result(self) -> dict[str, Any]:
        answered, forwarded = self.ceiling.counts()
        return {"rate": statistics.median(self.rates), "client_cpu": statistics.median(self.client),
                "replay_cpu": statistics.median(self.server), "answered": answered - self.answered,
                "forwarded": forwarded - self.forwarded}


def ceiling_rows(results: dict[str, dict[str, Any]], key: str, fmt: str = "{:.0f}") -> list[tuple[str, ...]]:
    """The ceiling's rows beside the consume row `key`: its rate and its ratio to Kafka's rate in the same
    run; the client's CPU per GB there beside Kafka's client + broker CPU per GB, whose ratio is the ceiling
    where the machine's CPU decides, for a broker of no CPU at all (it hardly moves with the load of a
    shared machine; the rate does); the replay's own CPU per GB and the requests it answered and forwarded."""
    ceiling = results["ceiling"].get(key)
    if not ceiling:
        return []
    kafka = results["kafka"]
    theirs, client = kafka[key + "_cpu"] + kafka[key + "_client_cpu"], ceiling["client_cpu"]
    forwarded = ceiling["forwarded"]
    apis = ", ".join(f"API {api}: {n}" for api, n in sorted(forwarded.items()))
    return [(f"{LABEL}, MB/s", fmt.format(ceiling["rate"]), "-", f"{ceiling['rate'] / kafka[key]:.2f}x",
             "(the most any broker reaches)"),
            ("    the client's CPU per GB there, s (Kafka's client + broker over it: that ceiling if CPU decides)",
             f"{client:.2f}", f"{theirs:.2f}", f"{theirs / client:.2f}x" if client else "-", "-"),
            (f"    the replay's own CPU per GB, s (answered from memory {ceiling['answered']}, forwarded "
             f"{forwarded.total()}" + (f": {apis}" if apis else "") + ")", f"{ceiling['replay_cpu']:.2f}", "-", "-",
             "-")]
