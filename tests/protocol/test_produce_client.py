"""Produce requests written by hand (`protocol.produce_client`) read by kio, Kafka's schemas, on every
version we send (v3-v8): the same client id, acks, timeout, topics, partitions and batch bytes; and the
answers of those versions, written by kio, read back per partition."""

from __future__ import annotations

import datetime
import random

import pytest
from kio.static.primitive import i32, i64

from chronolog.errors import CorruptMessageError
from chronolog.protocol import codec
from chronolog.protocol.produce_client import PRODUCE_MAX, PRODUCE_MIN, produce_request, read_produce

VERSIONS = range(PRODUCE_MIN, PRODUCE_MAX + 1)


def _kio_request(frame: bytes, version: int):
    """kio's reader (not the broker's hand reader): header v1, then the body."""
    from kio.schema.request_header.v1.header import RequestHeader
    from kio.serial import entity_reader
    header, used = entity_reader(RequestHeader)(frame, 0)
    body, end = entity_reader(codec.request_schema(0, version))(frame, used)
    assert used + end == len(frame)  # kio answers the bytes it read
    return header, body


@pytest.mark.parametrize("version", VERSIONS)
def test_requests_read_back_through_kio(version):
    rng = random.Random(version)
    for _ in range(20):
        batches = {f"topic-{t}-ü": {rng.randrange(100): rng.randbytes(rng.choice([1, 61, 3000]))
                                    for _ in range(rng.randint(1, 4))} for t in range(rng.randint(1, 3))}
        acks, timeout, cid = rng.choice([-1, 0, 1]), rng.randrange(2**31), rng.randrange(2**31)
        frame = b"".join(produce_request(version, cid, "client-é", acks, timeout, batches))
        assert int.from_bytes(frame[:4], "big") == len(frame) - 4
        header, body = _kio_request(frame[4:], version)
        assert (header.request_api_key, header.request_api_version, header.correlation_id) == (0, version, cid)
        assert header.client_id == "client-é"
        assert (body.transactional_id, body.acks, body.timeout) == (None, acks, datetime.timedelta(milliseconds=timeout))
        got = {t.name: {int(p.index): p.records for p in t.partition_data} for t in body.topic_data}
        assert got == batches


@pytest.mark.parametrize("version", VERSIONS)
def test_answers_read_per_partition(version):
    cls = codec.response_schema(0, version)
    mod = __import__(cls.__module__, fromlist=["TopicProduceResponse", "PartitionProduceResponse"])
    fields = mod.PartitionProduceResponse.__dataclass_fields__

    def part(index: int, code: int, offset: int):
        more = {"log_append_time": datetime.datetime.fromtimestamp(0, datetime.UTC) if "log_append_time" in fields
                else None, "log_start_offset": i64(0), "record_errors": (), "error_message": "too big" if code else None}
        return mod.PartitionProduceResponse(index=i32(index), error_code=codec_error(code), base_offset=i64(offset),
                                            **{k: v for k, v in more.items() if k in fields})

    body = cls(responses=(mod.TopicProduceResponse(name="t", partition_responses=(part(0, 0, 42), part(3, 10, -1))),),
               throttle_time=datetime.timedelta(0))
    frame = codec.encode_response(0, version, 77, body)[4:]
    got = read_produce(version, frame, 77)
    assert got[("t", 0)].error_code == 0 and got[("t", 0)].base_offset == 42
    assert got[("t", 3)].error_code == 10
    assert got[("t", 3)].message == ("too big" if version >= 8 else None)
    with pytest.raises(CorruptMessageError, match="correlation id 77, expected 78"):
        read_produce(version, frame, 78)
    with pytest.raises(CorruptMessageError, match="cannot decode"):
        read_produce(version, frame[:10], 77)


def codec_error(code: int):
    from kio.schema.errors import ErrorCode
    return ErrorCode(code)


def test_versions_outside_v3_v8_are_refused():
    for version in (2, 9):
        with pytest.raises(ValueError, match=f"Produce v{version}"):
            produce_request(version, 1, "c", -1, 1000, {"t": {0: b"x"}})
