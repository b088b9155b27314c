"""The hand reader of ListOffsets requests (`chronolog.protocol.list_offsets_request`) against kio's reader,
which the broker used before: the same fields on every version kio writes, and a refusal wherever kio's path
(its length walk, then its reader) refuses, on truncated and corrupted frames."""

from __future__ import annotations

import datetime
import io
import random
import struct

import pytest
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i16, i32, i64

from chronolog.errors import KafkaError
from chronolog.protocol import codec
from chronolog.protocol.list_offsets_request import read_list_offsets_request

VERSIONS = range(1, 12)


def _frame(version: int, rng: random.Random) -> bytes:
    cls = codec.request_schema(2, version)
    mod = __import__(cls.__module__, fromlist=["ListOffsetsTopic", "ListOffsetsPartition"])
    header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
    topics = []
    for t in range(rng.choice([0, 1, 1, 2, 3])):
        parts = []
        for _ in range(rng.choice([0, 1, 1, 2, 4])):
            fields = {"partition_index": i32(rng.randrange(0, 100)),
                      "timestamp": i64(rng.choice([-1, -2, -3, 0, 1_700_000_000_000, 2**63 - 1, -(2**63)]))}
            if version >= 4:
                fields["current_leader_epoch"] = i32(rng.choice([-1, 0, 5, -(2**31)]))
            parts.append(mod.ListOffsetsPartition(**fields))
        name = rng.choice(["t", "syslog", "ümlaut-topic", "x" * 200]) + str(t)
        topics.append(mod.ListOffsetsTopic(name=name, partitions=tuple(parts)))
    fields = {"replica_id": i32(rng.choice([-1, -2, 0, 3])), "topics": tuple(topics)}
    if version >= 2:
        fields["isolation_level"] = i8(rng.choice([0, 1, -1, 127]))
    if version >= 10:
        fields["timeout"] = datetime.timedelta(milliseconds=rng.randrange(0, 2**31 - 1))
    out = io.BytesIO()
    entity_writer(header_cls)(out, header_cls(request_api_key=i16(2), request_api_version=i16(version),
                                              correlation_id=i32(rng.randrange(2**31)),
                                              client_id=rng.choice([None, "", "rdkafka", "é"])))
    entity_writer(cls)(out, cls(**fields))
    return out.getvalue()


def _kio(frame: bytes, version: int) -> tuple:
    """kio's path as the broker took it before: header, the length walk, the body; normalised."""
    cls = codec.request_schema(2, version)
    header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
    header, used = entity_reader(header_cls)(frame, 0)
    codec._length_checker(cls)(frame, used, len(frame))
    body, _ = entity_reader(cls)(frame, used)
    timeout = getattr(body, "timeout", None)
    return (header.client_id, int(body.replica_id), int(getattr(body, "isolation_level", 0)),
            0 if timeout is None else timeout // datetime.timedelta(milliseconds=1),
            [(t.name, [(int(p.partition_index), int(p.timestamp), int(getattr(p, "current_leader_epoch", -1)))
                       for p in t.partitions]) for t in body.topics])


def _ours(frame: bytes, version: int) -> tuple:
    client_id, body = read_list_offsets_request(frame, version)
    return (client_id, body.replica_id, body.isolation_level, body.timeout_ms,
            [(t.name, [(p.partition_index, p.timestamp, p.current_leader_epoch) for p in t.partitions])
             for t in body.topics])


def _verdict(fn, frame: bytes, version: int):
    try:
        return fn(frame, version)
    except (KafkaError, Exception) as exc:  # kio raises its own errors; ours raise CorruptMessageError
        return type(exc)


@pytest.mark.parametrize("version", VERSIONS)
def test_valid_requests_read_the_same(version):
    rng = random.Random(version)
    for _ in range(200):
        frame = _frame(version, rng)
        assert _ours(frame, version) == _kio(frame, version)
        parsed = codec.parse_request(frame)
        assert (parsed.client_id, parsed.body) == read_list_offsets_request(frame, version)
        assert _ours(bytearray(frame), version) == _ours(memoryview(frame), version) == _kio(frame, version)


@pytest.mark.parametrize("version", VERSIONS)
def test_truncated_and_corrupted_requests_are_refused_where_kio_refuses(version):
    rng = random.Random(1000 + version)
    refused = 0
    for _ in range(60):
        frame = _frame(version, rng)
        mutants = [frame[:cut] for cut in range(8, len(frame), max(1, len(frame) // 40))]
        for _ in range(40):
            m = bytearray(frame)
            for _ in range(rng.choice([1, 1, 2, 3])):
                m[rng.randrange(8, len(m))] = rng.choice([0, 0x7F, 0x80, 0xFF, rng.randrange(256)])
            mutants.append(bytes(m))
        for m in mutants:
            theirs, ours = _verdict(_kio, m, version), _verdict(_ours, m, version)
            if isinstance(theirs, type):
                assert isinstance(ours, type), (m, theirs, ours)
                refused += 1
            else:
                assert ours == theirs, m
    assert refused > 300


@pytest.mark.parametrize("version", [1, 5])
def test_negative_lengths_other_than_null_are_refused(version):
    """An int16 name length of -2 or below is refused by kio, and so by the hand reader."""
    cls = codec.request_schema(2, version)
    mod = __import__(cls.__module__, fromlist=["ListOffsetsTopic"])
    out = io.BytesIO()
    entity_writer(RequestHeaderV1)(out, RequestHeaderV1(request_api_key=i16(2), request_api_version=i16(version),
                                                        correlation_id=i32(1), client_id="c"))
    fields = {"replica_id": i32(-1), "topics": (mod.ListOffsetsTopic(name="t", partitions=()),)}
    if version >= 2:
        fields["isolation_level"] = i8(0)
    entity_writer(cls)(out, cls(**fields))
    frame = out.getvalue()
    at = frame.index(b"\x00\x01t")
    for n in (-2, -(2**15)):
        bad = frame[:at] + struct.pack(">h", n) + frame[at + 2:]
        with pytest.raises(KafkaError):
            read_list_offsets_request(bad, version)
        with pytest.raises(Exception):  # noqa: B017 (kio raises its own error types)
            _kio(bad, version)
