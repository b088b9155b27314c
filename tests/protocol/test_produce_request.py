"""The hand reader of Produce requests (`chronolog.protocol.produce_request`) against kio's reader, which
the broker used before: the same fields on every version kio writes, and a refusal wherever kio's path
(its length walk, then its reader) refuses, on truncated and corrupted frames."""

from __future__ import annotations

import datetime
import io
import random
import uuid

import pytest
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from chronolog.errors import KafkaError
from chronolog.protocol import codec
from chronolog.protocol.produce_request import read_produce_request

VERSIONS = range(3, 14)


def _frame(version: int, rng: random.Random) -> bytes:
    cls = codec.request_schema(0, version)
    mod = __import__(cls.__module__, fromlist=["TopicProduceData", "PartitionProduceData"])
    header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
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
    out = io.BytesIO()
    entity_writer(header_cls)(out, header_cls(request_api_key=i16(0), request_api_version=i16(version),
                                              correlation_id=i32(rng.randrange(2**31)),
                                              client_id=rng.choice([None, "", "rdkafka", "é"])))
    entity_writer(cls)(out, body)
    return out.getvalue()


def _kio(frame: bytes, version: int) -> tuple:
    """kio's path as the broker took it before: header, the length walk, the body; normalised."""
    cls = codec.request_schema(0, version)
    header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
    header, used = entity_reader(header_cls)(frame, 0)
    codec._length_checker(cls)(frame, used, len(frame))
    body, _ = entity_reader(cls)(frame, used)
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
        assert codec.parse_request(frame).client_id == _kio(frame, version)[0]


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
    out = io.BytesIO()
    entity_writer(RequestHeaderV1)(out, RequestHeaderV1(request_api_key=i16(0), request_api_version=i16(version),
                                                        correlation_id=i32(1), client_id="c"))
    entity_writer(cls)(out, cls(transactional_id=None, acks=i16(1), timeout=datetime.timedelta(seconds=1),
                                topic_data=(mod.TopicProduceData(name="t", partition_data=(
                                    mod.PartitionProduceData(index=i32(0), records=b"abc"),)),)))
    frame = out.getvalue()
    assert frame.endswith(struct.pack(">i", 3) + b"abc")
    null = frame[:-7] + struct.pack(">i", -1)
    assert _ours(null, version) == _kio(null, version)
    for n in (-2, -(2**31)):
        bad = frame[:-7] + struct.pack(">i", n)
        with pytest.raises(KafkaError):
            read_produce_request(bad, version)
        with pytest.raises(Exception):  # noqa: B017 (kio raises its own error types)
            _kio(bad, version)
