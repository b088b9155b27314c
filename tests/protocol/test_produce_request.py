"""The hand reader of Produce requests (`chronolog.protocol.produce_request`) against kio's reader, which
the broker used before: the same fields on every version kio writes, and a refusal wherever kio's path
(its length walk, then its reader) refuses, on truncated and corrupted frames."""

from __future__ import annotations

import datetime
import random
import uuid

import pytest
from kio.static.primitive import i16, i32

from chronolog.errors import KafkaError
from chronolog.protocol import codec
from chronolog.protocol.produce_request import read_produce_request
from tests.protocol.kio_path import kio_read, random_header, refusals_agree, write_frame

VERSIONS = range(3, 14)


def _frame(version: int, rng: random.Random) -> bytes:
    cls = codec.request_schema(0, version)
    mod = __import__(cls.__module__, fromlist=["TopicProduceData", "PartitionProduceData"])
    topics = []
    for t in range(rng.choice([0, 1, 1, 2, 3])):
        parts = []
        for _ in range(rng.choice([0, 1, 1, 2, 4])):
            records = None if rng.random() < 0.15 else rng.randbytes(rng.choice([0, 1, 61, 300, 5000]))
            parts.append(mod.PartitionProduceData(index=i32(rng.randrange(0, 100)), records=records))
        if version >= 13:  # topics by id (KIP-516)
            topic_id = rng.choice([uuid.UUID(int=0), uuid.UUID(int=rng.getrandbits(128))])
            topics.append(mod.TopicProduceData(topic_id=topic_id, partition_data=tuple(parts)))
            continue
        name = rng.choice(["t", "syslog", "ümlaut-topic", "x" * 200]) + str(t)
        topics.append(mod.TopicProduceData(name=name, partition_data=tuple(parts)))
    body = cls(transactional_id=rng.choice([None, "", "tx-1"]), acks=i16(rng.choice([-1, 0, 1])),
               timeout=datetime.timedelta(milliseconds=rng.randrange(0, 2**31 - 1)), topic_data=tuple(topics))
    return write_frame(0, version, body, **random_header(rng))


def _kio(frame: bytes, version: int) -> tuple:
    """kio's path as the broker took it before: header, the length walk, the body; normalised."""
    header, body = kio_read(0, version, frame)
    return (header.client_id, body.transactional_id, int(body.acks), body.timeout // datetime.timedelta(milliseconds=1),
            [(getattr(t, "name", None), getattr(t, "topic_id", None),
              [(int(p.index), None if p.records is None else bytes(p.records)) for p in t.partition_data])
             for t in body.topic_data])


def _ours(frame: bytes, version: int) -> tuple:
    client_id, body = read_produce_request(frame, version)
    return (client_id, body.transactional_id, body.acks, body.timeout_ms,
            [(t.name, t.topic_id, [(p.index, None if p.records is None else bytes(p.records))
                                   for p in t.partition_data])
             for t in body.topic_data])


@pytest.mark.parametrize("version", VERSIONS)
def test_valid_requests_read_the_same(version):
    rng = random.Random(version)
    for _ in range(200):
        frame = _frame(version, rng)
        assert _ours(frame, version) == _kio(frame, version)
        assert codec.parse_request(frame).client_id == _kio(frame, version)[0]


@pytest.mark.parametrize("version", VERSIONS)
def test_truncated_and_corrupted_requests_are_refused_where_kio_refuses(version):
    refused = refusals_agree(_kio, _ours, lambda rng: _frame(version, rng), version, random.Random(1000 + version))
    assert refused > 500


def test_records_are_slices_of_the_frame_not_copies():
    frame = bytearray(_frame(9, random.Random(5)))
    _client, body = read_produce_request(frame, 9)
    views = [p.records for t in body.topic_data for p in t.partition_data if p.records]
    assert views and all(v.obj is frame for v in views)


@pytest.mark.parametrize("version", [3, 8])
def test_negative_lengths_other_than_null_are_refused(version):
    """-1 is null; kio refuses -2 and below for a bytes length, and so does the hand reader. The records
    here are the frame's last field, so a reader taking -2 as null would read the rest cleanly."""
    import struct

    cls = codec.request_schema(0, version)
    mod = __import__(cls.__module__, fromlist=["TopicProduceData", "PartitionProduceData"])
    frame = write_frame(0, version, cls(transactional_id=None, acks=i16(1), timeout=datetime.timedelta(seconds=1),
                                        topic_data=(mod.TopicProduceData(name="t", partition_data=(
                                            mod.PartitionProduceData(index=i32(0), records=b"abc"),)),)))
    assert frame.endswith(struct.pack(">i", 3) + b"abc")
    null = frame[:-7] + struct.pack(">i", -1)
    assert _ours(null, version) == _kio(null, version)
    for n in (-2, -(2**31)):
        bad = frame[:-7] + struct.pack(">i", n)
        with pytest.raises(KafkaError):
            read_produce_request(bad, version)
        with pytest.raises(Exception):  # noqa: B017 (kio raises its own error types)
            _kio(bad, version)
