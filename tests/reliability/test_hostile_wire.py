"""Hostile bytes on real sockets against a broker subprocess, while a well-behaved confluent-kafka producer and
consumer keep working beside them: every attack gets Kafka's answer (an error code, or the connection
closed) within seconds, the broker's memory stays bounded (VmHWM from /proc), nothing hostile is stored,
and the steady client loses nothing. `tests/compat/test_clients.py::test_bad_input_does_not_hurt_the_broker_
or_other_clients` covers a 2 GiB prefix, a truncated frame, an unknown key/version and a garbage produce
body one after the other; this adds sizes below the header, absurd array lengths (which killed the broker
before the codec checked them), invalid varints, produce batches whose CRC, length, record count or record
fields lie, and compression bombs."""

from __future__ import annotations

import functools
import io
import socket
import struct
import threading
import time
import zlib

import cramjam
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer

from chronolog.protocol import codec
from chronolog.records import CompressionType, SimpleRecord, build_batch, crc32c
from tests.brokerproc import BrokerProcess

NOW_MS = int(time.time() * 1000)
ANSWER_WITHIN_S = 10.0
RSS_BOUND_KB = 512 * 1024  # the decompression cap (256 MiB) plus the broker itself
CORRUPT_MESSAGE, UNSUPPORTED_VERSION, INVALID_RECORD = 2, 35, 87


def request(api_key: int, version: int, body: dict, correlation_id: int = 99) -> bytes:
    """A size-prefixed request frame built by kio from a dict of field values."""
    cls = codec.request_schema(api_key, version)
    header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
    out = io.BytesIO()
    entity_writer(header_cls)(out, header_cls(request_api_key=api_key, request_api_version=version,
                                              correlation_id=correlation_id, client_id="hostile"))
    entity_writer(cls)(out, codec.build(cls, body))
    return struct.pack(">i", out.tell()) + out.getvalue()


def produce_v9(topic: str, records: bytes) -> bytes:
    return request(0, 9, {"acks": -1, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records}]}]})


def with_size(frame_without_size: bytes) -> bytes:
    return struct.pack(">i", len(frame_without_size)) + frame_without_size


def exchange(addr: tuple[str, int], data: bytes, close_write: bool = False) -> tuple[bytes, float]:
    """Send, then read until the broker closes or one whole response arrived: (response, seconds)."""
    started = time.monotonic()
    with socket.create_connection(addr, timeout=ANSWER_WITHIN_S) as s:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):  # closed before we finished sending
            return b"", time.monotonic() - started
        if close_write:
            s.shutdown(socket.SHUT_WR)
        got = b""
        try:
            while True:
                if len(got) >= 4 and len(got) >= 4 + struct.unpack_from(">i", got)[0]:
                    break
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += chunk
        except ConnectionResetError:
            pass
    return got, time.monotonic() - started


def _bare_header(api_key: int, version: int) -> bytes:
    """api key, version, correlation id 99, client id "hostile", plus the v2 header's empty tagged fields."""
    flexible = codec.request_schema(api_key, version).__flexible__
    return struct.pack(">hhih", api_key, version, 99, 7) + b"hostile" + (b"\0" if flexible else b"")


# Frames the broker must close the connection on (Kafka: InvalidReceiveException, or a request it cannot
# parse), each with why.
CLOSES = {
    "size below a header (0)": struct.pack(">i", 0),
    "size below a header (7)": struct.pack(">i", 7) + b"\0" * 7,
    "negative size (-1)": struct.pack(">i", -1) + b"\0" * 8,
    "negative size (-2**31)": struct.pack(">i", -(2**31)) + b"\0" * 8,
    "size over socket.request.max.bytes with bytes following": struct.pack(">i", 2**31 - 1) + b"\0" * 65536,
    "API key -1": with_size(struct.pack(">hhi", -1, 0, 99) + b"\0\0"),
    "API key 32767": with_size(struct.pack(">hhi", 32767, 0, 99) + b"\0\0"),
    "Fetch v99": with_size(struct.pack(">hhi", 1, 99, 99) + b"\0\0"),
    "Metadata v-1": with_size(struct.pack(">hhi", 3, -1, 99) + b"\0\0"),
    "Produce v0 (advertised for old clients, not served)": with_size(struct.pack(">hhi", 0, 0, 99) + b"\0\0"),
    "Metadata v9 with 2**32 - 2 topics (compact array)": with_size(_bare_header(3, 9) + b"\xff\xff\xff\xff\x0f"),
    "Metadata v4 with 2**31 - 1 topics (classic array)": with_size(_bare_header(3, 4) + struct.pack(">i", 2**31 - 1)),
    "DeleteGroups v2 with 2**28 group names": with_size(_bare_header(42, 2) + b"\x81\x80\x80\x80\x01"),
    "ListOffsets v1 with 2**24 topics in 30 bytes": with_size(_bare_header(2, 1) + struct.pack(">ii", -1, 2**24)
                                                              + b"\0" * 30),
    "Metadata v9 with a 6-byte varint": with_size(_bare_header(3, 9) + b"\xff\xff\xff\xff\xff\x01"),
    "Metadata v9 with a varint cut by the frame end": with_size(_bare_header(3, 9) + b"\xff\xff"),
    "ApiVersions v3 with 2**31 tagged fields": with_size(_bare_header(18, 3) + b"\x01a\x01b"
                                                         + b"\xff\xff\xff\xff\x07"),
    "Produce v9 with null topic_data": with_size(_bare_header(0, 9) + b"\0\xff\xff\x00\x00\x13\x88\x00\x00"),
}


def _batch(n: int = 3, codec_: int = CompressionType.NONE) -> bytearray:
    return bytearray(build_batch([SimpleRecord(NOW_MS + i, b"k%d" % i, b"hostile-%d" % i) for i in range(n)],
                                 compression=codec_))


def _recrc(raw: bytearray) -> bytes:
    struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
    return bytes(raw)


@functools.cache
def _lying_batches() -> dict[str, bytes]:
    crc = _batch()
    crc[-1] ^= 0x01
    longer = _batch()
    struct.pack_into(">i", longer, 8, struct.unpack_from(">i", longer, 8)[0] + 100)
    shorter = _batch()
    struct.pack_into(">i", shorter, 8, struct.unpack_from(">i", shorter, 8)[0] - 5)
    count = _batch()
    struct.pack_into(">i", count, 57, 1000)
    count_and_delta = _batch()
    struct.pack_into(">i", count_and_delta, 23, 999)
    struct.pack_into(">i", count_and_delta, 57, 1000)
    key_length = _batch(1)
    key_length[61 + 4] = 0x7E  # the key length varint of the only record: 63 bytes, far past the record
    zeros = cramjam.zstd.Compressor()
    chunk = bytes(8 << 20)
    for _ in range(128):
        zeros.compress(chunk)
    bomb = bytearray(_batch(1, CompressionType.ZSTD))
    bomb[61:] = bytes(zeros.finish())
    struct.pack_into(">i", bomb, 8, len(bomb) - 12)
    gzip_bomb = bytearray(_batch(1, CompressionType.GZIP))
    gz = zlib.compressobj(9, zlib.DEFLATED, 31)
    gzip_bomb[61:] = b"".join(gz.compress(chunk) for _ in range(40)) + gz.flush()
    struct.pack_into(">i", gzip_bomb, 8, len(gzip_bomb) - 12)
    return {"a CRC that does not match": bytes(crc),
            "a batch length 100 bytes longer than the batch": _recrc(longer),
            "a batch length 5 bytes shorter than the batch": _recrc(shorter),
            "a record count of 1000 for 3 records": _recrc(count),
            "a record count and last offset delta of 1000 for 3 records": _recrc(count_and_delta),
            "a key length past its record (CRC recomputed)": _recrc(key_length),
            "1 GiB of zeros in zstd (32 KiB)": _recrc(bomb),
            "320 MiB of zeros in gzip": _recrc(gzip_bomb)}


def _vm_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"{field} not in /proc/{pid}/status")


class SteadyClient:
    """A confluent-kafka producer and a group consumer on their own topic, running until stopped."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.acked: set[bytes] = set()
        self.consumed: list[bytes] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.produced_all = threading.Event()
        self.threads = [threading.Thread(target=self._produce), threading.Thread(target=self._consume)]

    def start(self) -> SteadyClient:
        for t in self.threads:
            t.start()
        return self

    def _produce(self) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, "acks": "all"})

        def done(err, msg) -> None:
            if err is None:
                self.acked.add(msg.value())
            else:
                self.errors.append(f"produce: {err}")
        i = 0
        while not self.stop.is_set():
            p.produce("steady", value=b"steady-%d" % i, on_delivery=done)
            i += 1
            p.poll(0.005)
        if p.flush(30):
            self.errors.append("produce: records left unflushed")
        self.produced_all.set()

    def _consume(self) -> None:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "steady", "auto.offset.reset": "earliest",
                      "session.timeout.ms": 6000})
        c.subscribe(["steady"])
        deadline = None
        while True:
            msg = c.poll(0.2)
            if msg is not None:
                if msg.error():
                    self.errors.append(f"consume: {msg.error()}")
                else:
                    self.consumed.append(msg.value())
            if self.produced_all.is_set():
                deadline = deadline or time.monotonic() + 30
                if set(self.consumed) >= self.acked or time.monotonic() > deadline:
                    break
        c.close()

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(90)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("hostile") / "data").start()
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    for fut in admin.create_topics([NewTopic("steady", 1, 1), NewTopic("hostile", 1, 1)]).values():
        fut.result(15)
    steady = SteadyClient(proc.bootstrap).start()
    yield proc, steady
    steady.finish()
    proc.stop()


@pytest.mark.parametrize("attack", list(CLOSES))
def test_the_broker_closes_the_connection(broker, attack, record_property):
    proc, _ = broker
    response, seconds = exchange(("127.0.0.1", proc.port), CLOSES[attack])
    assert response == b"", f"{attack}: expected a closed connection, got {response[:40]!r}"
    assert seconds < ANSWER_WITHIN_S
    record_property("seconds", round(seconds, 3))
    assert proc.proc.poll() is None, "the broker died"


def test_a_truncated_frame_then_close_costs_nothing(broker):
    proc, _ = broker
    for cut in (1, 3, 4, 30):
        exchange(("127.0.0.1", proc.port), produce_v9("hostile", bytes(_batch()))[:cut], close_write=True)
    response, _ = exchange(("127.0.0.1", proc.port), request(3, 9, {"topics": None}))
    assert struct.unpack_from(">i", response, 4)[0] == 99
    assert proc.proc.poll() is None


def test_an_unknown_api_versions_version_gets_unsupported_version_and_our_range(broker):
    """KIP-511: the answer is an ApiVersions v0 body, so the client can retry with a version we know."""
    proc, _ = broker
    response, _ = exchange(("127.0.0.1", proc.port), with_size(struct.pack(">hhi", 18, 99, 5) + b"\0\0"))
    size, correlation_id, error, count, key, lo, hi = struct.unpack_from(">iihihhh", response)
    assert (correlation_id, error, count, key, lo) == (5, UNSUPPORTED_VERSION, 1, 18, 0) and hi >= 3


@pytest.mark.parametrize("lie", list(_lying_batches()))
def test_a_produce_whose_batch_lies_gets_an_error_code_and_stores_nothing(broker, lie, record_property):
    proc, _ = broker
    frame = produce_v9("hostile", _lying_batches()[lie])
    response, seconds = exchange(("127.0.0.1", proc.port), frame)
    assert response, f"{lie}: the connection closed instead of an error code"
    body, _ = entity_reader(codec.response_schema(0, 9))(response, 9)
    part = body.responses[0].partition_responses[0]
    assert int(part.error_code) in (CORRUPT_MESSAGE, INVALID_RECORD), (lie, part)
    assert part.error_message
    record_property("seconds", round(seconds, 3))
    assert seconds < ANSWER_WITHIN_S
    assert _vm_kb(proc.proc.pid, "VmHWM") < RSS_BOUND_KB


def test_absurd_partition_counts_get_policy_violation_and_create_nothing(broker):
    """max.broker.partitions (KIP-578's name): without it one CreateTopics of 100,000 partitions (librdkafka's own limit) would make
    that many directories and index maps."""
    proc, _ = broker
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    for validate_only in (True, False):
        fut = admin.create_topics([NewTopic("huge", 100_000, 1)], validate_only=validate_only)["huge"]
        with pytest.raises(KafkaException) as err:
            fut.result(15)
        assert err.value.args[0].code() == KafkaError.POLICY_VIOLATION
        fut = admin.create_partitions([NewPartitions("hostile", 100_000)], validate_only=validate_only)["hostile"]
        with pytest.raises(KafkaException) as err:
            fut.result(15)
        assert err.value.args[0].code() == KafkaError.POLICY_VIOLATION
    assert "huge" not in admin.list_topics(timeout=10).topics
    assert len(admin.list_topics(timeout=10).topics["hostile"].partitions) == 1
    assert not (proc.data_dir / "huge-0").exists()
    assert _vm_kb(proc.proc.pid, "VmHWM") < RSS_BOUND_KB


def test_after_all_that_nothing_hostile_is_stored_and_the_steady_client_lost_nothing(broker, record_property):
    proc, steady = broker
    time.sleep(1.0)  # the steady client keeps going a little after the last attack
    steady.finish()
    assert not steady.errors, steady.errors[:3]
    assert len(steady.acked) > 50
    assert set(steady.consumed) >= steady.acked, f"{len(steady.acked - set(steady.consumed))} acked records unread"
    c = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": "inspect"})
    assert c.get_watermark_offsets(TopicPartition("hostile", 0), timeout=10) == (0, 0)
    c.close()
    hwm = _vm_kb(proc.proc.pid, "VmHWM")
    record_property("broker_vmhwm_mb", round(hwm / 1024, 1))
    record_property("broker_vmrss_mb", round(_vm_kb(proc.proc.pid, "VmRSS") / 1024, 1))
    assert hwm < RSS_BOUND_KB
    assert proc.proc.poll() is None
