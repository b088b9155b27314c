"""The hand reader of ListOffsets requests (`chronolog.protocol.list_offsets_request`) against kio's reader,
which the broker used before: the same fields on every version kio writes, and a refusal wherever kio's path
(its length walk, then its reader) refuses, on truncated and corrupted frames."""

from __future__ import annotations

import datetime
import random
import struct

import pytest
from kio.static.primitive import i8, i32, i64

from chronolog.errors import KafkaError
from chronolog.protocol import codec
from chronolog.protocol.list_offsets_request import read_list_offsets_request
from tests.protocol.kio_path import kio_read, random_header, refusals_agree, write_frame

VERSIONS = range(1, 12)


def _frame(version: int, rng: random.Random) -> bytes:
    cls = codec.request_schema(2, version)
    mod = __import__(cls.__module__, fromlist=["ListOffsetsTopic", "ListOffsetsPartition"])
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
    return write_frame(2, version, cls(**fields), **random_header(rng))


def _kio(frame: bytes, version: int) -> tuple:
    """kio's path as the broker took it before: header, the length walk, the body; normalised."""
    header, body = kio_read(2, version, frame)
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
    refused = refusals_agree(_kio, _ours, lambda rng: _frame(version, rng), version, random.Random(1000 + version))
    assert refused > 300


@pytest.mark.parametrize("version", [1, 5])
def test_negative_lengths_other_than_null_are_refused(version):
    """An int16 name length of -2 or below is refused by kio, and so by the hand reader."""
    cls = codec.request_schema(2, version)
    mod = __import__(cls.__module__, fromlist=["ListOffsetsTopic"])
    fields = {"replica_id": i32(-1), "topics": (mod.ListOffsetsTopic(name="t", partitions=()),)}
    if version >= 2:
        fields["isolation_level"] = i8(0)
    frame = write_frame(2, version, cls(**fields))
    at = frame.index(b"\x00\x01t")
    for n in (-2, -(2**15)):
        bad = frame[:at] + struct.pack(">h", n) + frame[at + 2:]
        with pytest.raises(KafkaError):
            read_list_offsets_request(bad, version)
        with pytest.raises(Exception):  # noqa: B017 (kio raises its own error types)
            _kio(bad, version)
