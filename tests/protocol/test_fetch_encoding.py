"""Fetch responses framed around file regions (codec.encode_fetch_response) against kio's encoder and
decoder for every Fetch version we serve, and the regions sent over real sockets: sendfile on a plain
listener, pread and write on a TLS one."""

from __future__ import annotations

import asyncio
import datetime
import io
import os
import socket
import ssl
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader, entity_writer

from chronolog.protocol import codec
from chronolog.protocol.core import ZERO_COPY_MIN_BYTES
from chronolog.records import SimpleRecord, build_batch
from chronolog.server.broker import Broker
from tests.brokerproc import TEST_CONFIGS
from tests.frames import recv_frame

VERSIONS = range(4, 19)
NOW = 1_700_000_000_000


def _kio_frame(version: int, correlation_id: int, values: dict) -> bytes:
    """The same response through kio (records as bytes): the reference encoding."""
    return codec.encode_response(1, version, correlation_id, codec.build_response(1, version, values))


def _materialise(values: dict) -> dict:
    """`values` with every FileRegion replaced by the bytes it stands for."""
    out = dict(values)
    out["responses"] = [{**t, "partitions": [
        {**p, "records": p["records"].read_bytes() if isinstance(p["records"], codec.FileRegion) else p["records"]}
        for p in t["partitions"]]} for t in values["responses"]]
    return out


def _decode(version: int, frame: bytes):
    cls = codec.response_schema(1, version)
    start = 8 + (1 if cls.__flexible__ else 0)
    body, used = entity_reader(cls)(frame, start)
    assert start + used == len(frame), "bytes the schema does not account for"
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    return body


@pytest.fixture(scope="module")
def segment_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("regions") / "file.log"
    path.write_bytes(bytes(range(256)) * 1024)
    return path


partition = st.fixed_dictionaries({
    "partition_index": st.integers(0, 2**31 - 1),
    "error_code": st.sampled_from([0, 1, 3, 6, 29]),
    "high_watermark": st.integers(-1, 2**63 - 1),
    "last_stable_offset": st.integers(-1, 2**63 - 1),
    "log_start_offset": st.integers(-1, 2**63 - 1),
    "aborted_transactions": st.none() | st.lists(st.fixed_dictionaries(
        {"producer_id": st.integers(0, 2**63 - 1), "first_offset": st.integers(0, 2**63 - 1)}), max_size=3),
    "preferred_read_replica": st.integers(-1, 5),
    # None (null), bytes, or a (position, size) region of the segment file
    "records": st.none() | st.binary(max_size=300) | st.tuples(st.integers(0, 200_000), st.integers(0, 50_000)),
})
response = st.fixed_dictionaries({
    "throttle_time": st.integers(0, 1000), "error_code": st.sampled_from([0, 70]),
    "session_id": st.integers(0, 2**31 - 1),
    "responses": st.lists(st.fixed_dictionaries({
        "topic": st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20),
        "partitions": st.lists(partition, max_size=4)}), max_size=3),
})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=response, version=st.sampled_from(VERSIONS), correlation_id=st.integers(-2**31, 2**31 - 1))
def test_fetch_framing_equals_kio_for_every_version(segment_file, values, version, correlation_id):
    fd = os.open(segment_file, os.O_RDONLY)
    try:
        regions = 0
        for t in values["responses"]:
            for p in t["partitions"]:
                if isinstance(p["records"], tuple):
                    p["records"] = codec.FileRegion(os.dup(fd), *p["records"])
                    regions += 1
        framed = codec.encode_fetch_response(version, correlation_id, values)
        assert isinstance(framed, codec.ResponseParts) == (regions > 0)
        try:
            data = framed.to_bytes() if isinstance(framed, codec.ResponseParts) else framed
            expected_values = _materialise(values)
        finally:
            if isinstance(framed, codec.ResponseParts):
                assert len(framed.regions()) == regions
                framed.close()
        assert data == _kio_frame(version, correlation_id, expected_values)
        body = _decode(version, data)
        got = [bytes(p.records) if p.records is not None else None for t in body.responses for p in t.partitions]
        assert got == [p["records"] for t in expected_values["responses"] for p in t["partitions"]]
    finally:
        os.close(fd)


def test_a_region_that_shrank_is_a_connection_error(tmp_path):
    path = tmp_path / "f.log"
    path.write_bytes(b"x" * 1000)
    region = codec.FileRegion(os.open(path, os.O_RDONLY), 500, 400)
    os.truncate(path, 600)
    with pytest.raises(ConnectionError):
        region.read_bytes()
    region.close()
    region.close()  # twice is fine
    assert region.fd == -1


# -- over real sockets ------------------------------------------------------------------------------------
trustme = pytest.importorskip("trustme")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """An in-process broker with a plain and a TLS listener, and topic t (1 partition) holding about 2 MB in
    batches of 40 KiB."""
    base = tmp_path_factory.mktemp("fetch-broker")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(base / "ca.pem"))
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(base / "server.pem"))
    loop = asyncio.new_event_loop()
    b = Broker(base / "data", "127.0.0.1", 0, {
        **TEST_CONFIGS, "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "ssl.keystore.location": str(base / "server.pem"), "ssl.truststore.location": str(base / "ca.pem"),
        "ssl.client.auth": "none", "file.delete.delay.ms": "0"})
    loop.run_until_complete(b.start())
    b.state.log_manager.create_topic("t", 1, {"message.timestamp.after.max.ms": str(2**62)})
    plog = b.state.log_manager.get_log("t", 0)
    for i in range(50):
        plog.append(build_batch([SimpleRecord(NOW + i, None, os.urandom(1000)) for _ in range(40)]))
    client_ctx = ssl.create_default_context(cafile=str(base / "ca.pem"))
    yield b, loop, plog, client_ctx
    loop.run_until_complete(b.stop())
    loop.close()


def _fetch_frame(version: int, offset: int, max_bytes: int, topic_id=None) -> bytes:
    """A Fetch of topic t; from v13 by `topic_id` (KIP-516)."""
    from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
    from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
    from kio.static.primitive import i8, i16, i32, i64

    cls = codec.request_schema(1, version)
    mod = __import__(cls.__module__, fromlist=["FetchPartition", "FetchTopic"])
    header_cls = HeaderV2 if cls.__flexible__ else HeaderV1
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, header_cls(request_api_key=i16(1), request_api_version=i16(version),
                                              correlation_id=i32(version), client_id="test"))
    part = codec.build(mod.FetchPartition, {"partition": 0, "fetch_offset": i64(offset), "current_leader_epoch": -1,
                                            "last_fetched_epoch": -1, "log_start_offset": -1,
                                            "partition_max_bytes": max_bytes})
    topic = codec.build(mod.FetchTopic, {"topic": "t", "topic_id": topic_id, "partitions": (part,)})
    entity_writer(cls)(buf, codec.build(cls, {
        "replica_id": -1, "max_wait": datetime.timedelta(milliseconds=100), "min_bytes": 1,
        "max_bytes": 50 << 20, "isolation_level": i8(0), "session_id": 0, "session_epoch": -1,
        "topics": (topic,), "forgotten_topics_data": (), "rack_id": ""}))
    frame = buf.getvalue()
    return struct.pack(">i", len(frame)) + frame


def _topic_id(b: Broker, name: str):
    from chronolog.protocol.topic_ids import uuid_of

    return uuid_of(b.state.log_manager.topic_id(name))


def _round_trip(address: tuple[str, int], context: ssl.SSLContext | None, frames: list[bytes]) -> list[bytes]:
    answers = []
    with socket.create_connection(address, timeout=10) as raw:
        sock = context.wrap_socket(raw, server_hostname="127.0.0.1") if context is not None else raw
        for frame in frames:
            sock.sendall(frame)
            body = recv_frame(sock)
            answers.append(struct.pack(">i", len(body)) + body)
    return answers


@pytest.mark.parametrize("listener", ["PLAINTEXT", "SSL"])
def test_large_fetches_over_plain_and_tls_listeners_match_the_log(broker, listener):
    """Fetches of every version, from a batch boundary and from inside a batch, with partition limits that
    cut the log into several responses, some above the zero-copy threshold (file regions) and some below
    (read at once): each decodes with kio to exactly the segment's bytes."""
    b, loop, plog, client_ctx = broker
    where = next(li for li in b.listeners if li.name == listener)
    context = client_ctx if listener == "SSL" else None
    seg = plog.segments[0]
    whole = seg.pread(0, seg.size)
    sizes = set()
    for version in VERSIONS:
        for offset, max_bytes in ((0, 1 << 20), (7, 30_000), (500, 1 << 20), (1500, 1 << 20)):
            frames = [_fetch_frame(version, offset, max_bytes, _topic_id(b, "t"))]
            (answer,) = loop.run_until_complete(asyncio.to_thread(
                _round_trip, (where.host, where.port), context, frames))
            body = _decode(version, answer)
            (p,) = body.responses[0].partitions
            assert int(p.error_code) == 0 and p.high_watermark == 2000
            piece = plog.read(offset, max_bytes)
            sizes.add(piece.size >= ZERO_COPY_MIN_BYTES)
            assert bytes(p.records) == whole[piece.position:piece.position + piece.size]
    assert sizes == {True, False}


def test_a_region_outlives_the_deletion_of_its_segment(tmp_path):
    """The region holds its own descriptor: a segment closed and removed (retention) after the fetch found
    its range still gives the bytes the response promised."""
    from chronolog.config import TopicConfig
    from chronolog.protocol.core import _attach_records
    from chronolog.storage import PartitionLog

    plog = PartitionLog.open(tmp_path / "t-0", TopicConfig.from_kafka({"message.timestamp.after.max.ms": str(2**62)}))
    for _ in range(2):
        plog.append(build_batch([SimpleRecord(NOW, None, os.urandom(1000)) for _ in range(450)]))
    piece = plog.read(0, 1 << 20)
    assert piece.size >= ZERO_COPY_MIN_BYTES
    expected = piece.read_bytes()
    out = {"records": b""}
    _attach_records([(out, plog, piece)])
    region = out["records"]
    assert isinstance(region, codec.FileRegion)
    plog.close()
    for path in (tmp_path / "t-0").iterdir():
        path.unlink()
    try:
        assert region.read_bytes() == expected
    finally:
        region.close()


def test_a_client_gone_during_a_large_fetch_is_not_an_error(broker, caplog):
    """Clients that close (or reset) the connection right after asking for a large fetch: the broker stops
    that send quietly, releases the region and keeps answering others."""
    b, loop, plog, _ctx = broker
    where = next(li for li in b.listeners if li.name == "PLAINTEXT")
    frame = _fetch_frame(12, 0, 1 << 20)

    def hang_up(reset: bool) -> None:
        with socket.create_connection((where.host, where.port), timeout=10) as sock:
            if reset:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.sendall(frame)
            sock.recv(1000)  # the start of the answer: the send is under way

    async def run() -> list[bytes]:
        for reset in (False, True, False, True):
            await asyncio.to_thread(hang_up, reset)
        # The broker notices each hang-up in its send and drops the connection and its region: wait for that
        # state (every descriptor of those four exchanges closed), bounded, before the next client asks.
        deadline = loop.time() + 60
        while len(os.listdir("/proc/self/fd")) > open_fds and loop.time() < deadline:
            await asyncio.sleep(0.01)
        return await asyncio.to_thread(_round_trip, (where.host, where.port), None, [frame])

    open_fds = len(os.listdir("/proc/self/fd"))
    with caplog.at_level("DEBUG", logger="chronolog.server.broker"):
        (answer,) = loop.run_until_complete(run())
    assert bytes(_decode(12, answer).responses[0].partitions[0].records)[:8] == struct.pack(">q", 0)
    assert not [r for r in caplog.records if r.levelno >= 30], [r.getMessage() for r in caplog.records]
    assert len(os.listdir("/proc/self/fd")) <= open_fds, "a region's descriptor was not released"


def test_a_region_the_socket_does_not_take_at_once_is_sent_whole(broker, monkeypatch):
    """When the first sendfile sends only part of a region (a full socket; here it is made to send about
    half), the rest follows through the loop's sendfile from where the first stopped, and the client gets
    exactly the segment's bytes."""
    import chronolog.server.broker as broker_module

    b, loop, plog, _ctx = broker
    where = next(li for li in b.listeners if li.name == "PLAINTEXT")
    partial = []

    def half_now(transport, region):
        sock = transport.get_extra_info("socket")
        sent = os.sendfile(sock.fileno(), region.fd, region.position, region.size // 2)
        partial.append(0 < sent < region.size)
        return sent

    monkeypatch.setattr(broker_module, "_sendfile_now", half_now)
    seg = plog.segments[0]
    (answer,) = loop.run_until_complete(asyncio.to_thread(
        _round_trip, (where.host, where.port), None, [_fetch_frame(12, 0, 8 << 20)]))
    (p,) = _decode(12, answer).responses[0].partitions
    assert seg.size > 1 << 20 and bytes(p.records) == seg.pread(0, seg.size)
    assert partial == [True]


@pytest.mark.parametrize("version", range(12, 19))
def test_a_diverging_epoch_is_framed_as_kio_frames_it(version):
    """A fetch past the end of its last fetched epoch answers that epoch's end in the partition's tagged
    field 0 (Partition.fetchRecords, KIP-595)."""
    import uuid

    values = {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": [
        {"topic": "t", "topic_id": uuid.uuid4(), "partitions": [
            {"partition_index": 0, "error_code": 0, "high_watermark": 5, "last_stable_offset": 5, "log_start_offset": 0,
             "aborted_transactions": None, "preferred_read_replica": -1, "records": b"",
             "diverging_epoch": {"epoch": 0, "end_offset": 5}},
            {"partition_index": 1, "error_code": 0, "high_watermark": 5, "last_stable_offset": 5, "log_start_offset": 0,
             "aborted_transactions": None, "preferred_read_replica": -1, "records": b"xyz"}]}]}
    framed = codec.encode_fetch_response(version, 3, values)
    assert framed == _kio_frame(version, 3, values)
    diverging = _decode(version, framed).responses[0].partitions[0].diverging_epoch
    assert (diverging.epoch, diverging.end_offset) == (0, 5)
