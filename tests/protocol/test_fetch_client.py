"""The hand-written frames of `protocol.fetch_client` against kio, Kafka's schemas, on every version the
clients use: requests written by hand read back by kio with the same fields, and random responses written
by kio read by hand to the same answers kio's own reading gives (the reduction the module made of kio's
entities before it read the bytes itself)."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import random
import types
import typing

import pytest
from kio.serial import entity_reader, entity_writer

from chronolog.errors import CorruptMessageError
from chronolog.protocol import codec
from chronolog.protocol import fetch_client as fc

API_VERSIONS, METADATA, FETCH, LIST_OFFSETS = 18, 3, 1, 2


def _request(frame: bytes, api_key: int, version: int):
    from kio.schema.request_header.v1.header import RequestHeader
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    header, used = entity_reader(RequestHeader)(frame, 4)
    body, size = entity_reader(codec.request_schema(api_key, version))(frame, 4 + used)
    assert 4 + used + size == len(frame)
    assert (header.request_api_key, header.request_api_version, header.client_id) == (api_key, version, "c-é")
    return header.correlation_id, body


def fill(hint, rng: random.Random, depth: int = 0):
    """A random value of a kio field type (entities recursively, arrays of 0-3 items)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return None if rng.random() < 0.2 else fill(args[0], rng, depth)
    if origin is tuple:
        return tuple(fill(typing.get_args(hint)[0], rng, depth + 1) for _ in range(rng.randint(0, 3 - depth // 2)))
    if dataclasses.is_dataclass(hint):
        hints = typing.get_type_hints(hint)
        return hint(**{f.name: fill(hints[f.name], rng, depth) for f in dataclasses.fields(hint)})
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return rng.choice(list(hint)[:40])
    if hint is bool:
        return rng.random() < 0.5
    if isinstance(hint, type) and issubclass(hint, str):
        return hint(rng.choice(["t", "ü-topic", "", "x" * 30]))
    if isinstance(hint, type) and issubclass(hint, bytes):
        return hint(rng.randbytes(rng.choice([0, 5, 300])))
    if isinstance(hint, type) and issubclass(hint, datetime.timedelta):
        return hint(datetime.timedelta(milliseconds=rng.randint(0, 10_000)))
    if isinstance(hint, type) and issubclass(hint, datetime.datetime):
        return hint(datetime.datetime.fromtimestamp(rng.randint(0, 2_000_000_000), datetime.UTC))
    if isinstance(hint, type) and issubclass(hint, int):
        if rng.random() < 0.6:  # small: partition 5 and error codes come up often
            return hint(rng.randint(-1, 8))
        return hint(rng.randint(-1, 120 if hint.__name__ in ("i8", "u8") else 2**15 - 1))
    raise TypeError(f"no filler for {hint!r}")


def _encode(api_key: int, version: int, cid: int, body) -> bytes:
    return codec.encode_response(api_key, version, cid, body)[4:]


def _kio(api_key: int, version: int, frame: bytes):
    body, _ = entity_reader(codec.response_schema(api_key, version))(frame, 4)
    return body


@pytest.mark.parametrize("version", range(fc.METADATA_MIN, fc.METADATA_MAX + 1))
def test_metadata(version):
    cid, body = _request(fc.metadata_request(version, 9, "c-é", "ü-topic"), METADATA, version)
    assert cid == 9 and [t.name for t in body.topics] == ["ü-topic"]
    if version >= 4:
        assert body.allow_auto_topic_creation is False
    rng = random.Random(version)
    cls = codec.response_schema(METADATA, version)
    for _ in range(60):
        frame = _encode(METADATA, version, 5, fill(cls, rng))
        got = _kio(METADATA, version, frame)
        for topic in ("t", "ü-topic", "none"):
            want = next((fc.Metadata({int(b.node_id): (b.host, int(b.port)) for b in got.brokers},
                                     int(t.error_code.value),
                                     {int(p.partition_index): fc.PartitionLeader(int(p.error_code.value),
                                                                                 int(p.leader_id))
                                      for p in t.partitions})
                         for t in got.topics if t.name == topic),
                        fc.Metadata({int(b.node_id): (b.host, int(b.port)) for b in got.brokers}, None, {}))
            assert fc.read_metadata(version, frame, 5, topic) == want


@pytest.mark.parametrize("version", range(fc.FETCH_MIN, fc.FETCH_MAX + 1))
def test_fetch(version):
    cid, body = _request(fc.fetch_request(version, 3, "c-é", "ü-topic", 7, 12345, max_bytes=1 << 20,
                                          isolation_level=1), FETCH, version)
    (topic,) = body.topics
    (part,) = topic.partitions
    assert (cid, topic.topic, part.partition, part.fetch_offset, part.partition_max_bytes) == \
        (3, "ü-topic", 7, 12345, 1 << 20)
    assert (body.replica_id, body.min_bytes, body.max_bytes, body.isolation_level) == (-1, 1, 1 << 20, 1)
    rng = random.Random(version)
    cls = codec.response_schema(FETCH, version)
    found = 0
    for _ in range(150):
        frame = _encode(FETCH, version, 4, fill(cls, rng))
        got = _kio(FETCH, version, frame)
        top = int(got.error_code.value) if hasattr(got, "error_code") else 0
        want = next((fc.PartitionFetch(int(p.error_code.value) or top, int(p.high_watermark),
                                       int(p.last_stable_offset), int(getattr(p, "log_start_offset", -1)),
                                       tuple((int(a.producer_id), int(a.first_offset))
                                             for a in (p.aborted_transactions or ())), bytes(p.records or b""))
                     for t in got.responses if t.topic == "t" for p in t.partitions if int(p.partition_index) == 5),
                    None)
        if want is None:
            with pytest.raises(CorruptMessageError, match="no answer for t-5"):
                fc.read_fetch(version, frame, 4, "t", 5)
        else:
            found += 1
            assert fc.read_fetch(version, frame, 4, "t", 5) == want
        try:  # a frame cut short: an error, or the answer when it lies before the cut
            assert fc.read_fetch(version, frame[:len(frame) // 2], 4, "t", 5) == want
        except CorruptMessageError as exc:
            assert f"cannot decode FetchResponse v{version}" in str(exc) or "no answer" in str(exc)
    assert found


@pytest.mark.parametrize("version", range(fc.LIST_OFFSETS_MIN, fc.LIST_OFFSETS_MAX + 1))
def test_list_offsets(version):
    cid, body = _request(fc.list_offsets_request(version, 8, "c-é", "ü-topic", {0: 1_700_000_000_000, 4: -2}, 1),
                         LIST_OFFSETS, version)
    (topic,) = body.topics
    assert (cid, body.replica_id, body.isolation_level, topic.name) == (8, -1, 1, "ü-topic")
    assert [int(p.partition_index) for p in topic.partitions] == [0, 4]
    rng = random.Random(version)
    cls = codec.response_schema(LIST_OFFSETS, version)
    for _ in range(60):
        frame = _encode(LIST_OFFSETS, version, 2, fill(cls, rng))
        got = _kio(LIST_OFFSETS, version, frame)
        want = {}
        for t in got.topics:
            if t.name == "t":
                for p in t.partitions:
                    ts = p.timestamp
                    ts = int(ts.timestamp() * 1000) if isinstance(ts, datetime.datetime) else int(ts)
                    want[int(p.partition_index)] = (int(p.error_code.value), ts, int(p.offset))
        assert fc.read_list_offsets(version, frame, 2, "t") == want


def test_api_versions():
    cid, _body = _request(fc.api_versions_request(6, "c-é"), API_VERSIONS, 0)
    assert cid == 6
    rng = random.Random(0)
    cls = codec.response_schema(API_VERSIONS, 0)
    for _ in range(20):
        frame = _encode(API_VERSIONS, 0, 6, fill(cls, rng))
        got = _kio(API_VERSIONS, 0, frame)
        assert fc.read_api_versions(frame, 6) == {int(k.api_key): (int(k.min_version), int(k.max_version))
                                                  for k in got.api_keys}
    with pytest.raises(CorruptMessageError, match="correlation id 6, expected 7"):
        fc.read_api_versions(frame, 7)


def test_versions_outside_the_written_ones_are_refused():
    with pytest.raises(ValueError, match="Fetch v12"):
        fc.fetch_request(12, 1, "c", "t", 0, 0, max_bytes=1, isolation_level=0)
    with pytest.raises(ValueError, match="Metadata v9"):
        fc.metadata_request(9, 1, "c", "t")
    with pytest.raises(ValueError, match="ListOffsets v6"):
        fc.list_offsets_request(6, 1, "c", "t", {0: -1}, 0)


def test_written_requests_are_kios_bytes():
    """The same bytes kio writes for the same request (a last check on field order and widths)."""
    import io

    from kio.schema.request_header.v1.header import RequestHeader
    frame = fc.metadata_request(8, 2, "c-é", "t")
    cid, body = _request(frame, METADATA, 8)
    out = io.BytesIO()
    entity_writer(RequestHeader)(out, RequestHeader(request_api_key=METADATA, request_api_version=8,
                                                    correlation_id=cid, client_id="c-é"))
    entity_writer(type(body))(out, body)
    assert frame[4:] == out.getvalue()
