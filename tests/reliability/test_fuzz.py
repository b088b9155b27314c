"""Fuzzing, bounded in examples and seeded (derandomized, no example database), so a run is the same run
everywhere:

- the frame decoder and dispatch: real encoded requests of every API and version the broker serves, with
  bytes flipped, inserted, deleted or cut, array lengths made absurd and varints made invalid, go through
  `Broker._handle` of an in-process broker. Each must give a well-formed response of its API and version,
  or no response, or one of our declared errors (KafkaError, ConnectionError: the broker closes that
  connection); never another exception, a hang, or an allocation the frame does not pay for;
- the batch validator: valid v2 batches of every codec, with lying bytes (and often a CRC recomputed over
  the lies), go through `PartitionLog.append`: either appended, and read back as the batch's own records
  at the offsets the log assigned, or rejected with a KafkaError and the log left exactly as it was.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import io
import resource
import struct
import typing
import uuid

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveTupleField, classify_field
from kio.serial.errors import OutOfBoundValue

from chronolog.config import TopicConfig
from chronolog.errors import KafkaError
from chronolog.protocol import codec
from chronolog.protocol.registry import HANDLERS, load_deferred
from chronolog.records import CompressionType, RecordBatch, SimpleRecord, build_batch, crc32c
from chronolog.server.broker import Broker, _load_handlers
from chronolog.storage import PartitionLog
from tests.brokerproc import TEST_CONFIGS

_load_handlers()
load_deferred()  # every served API's schemas, those a deferred module adds (the streams groups') included
NOW = 1_700_000_000_000


def fuzz(max_examples: int) -> settings:
    return settings(max_examples=max_examples, derandomize=True, database=None, deadline=None,
                    suppress_health_check=list(HealthCheck))
# Handlers that wait by design (Fetch long-poll up to max.wait.ms, JoinGroup/SyncGroup for the rebalance):
# a fuzzed timeout may make them wait longer than the example allows; every other handler must answer.
WAITING_APIS = {1, 11, 14}
ANSWER_WITHIN_S = 2.0
SERVED = [(key, v) for key, h in sorted(HANDLERS.items())
          for v in range(h.parse_min_version or h.min_version, h.max_version + 1)]
PRODUCE_BATCH = build_batch([SimpleRecord(NOW + i, b"k%d" % i, b"v%d" % i, (("h", b"x"),)) for i in range(3)])


# -- a valid request of every served API and version ------------------------------------------------------
def _sample_value(kafka_type: str, tp: typing.Any) -> typing.Any:
    if kafka_type == "string":
        return "fuzz"
    if kafka_type in ("bytes", "records"):
        return PRODUCE_BATCH
    if kafka_type == "bool":
        return True
    if kafka_type == "uuid":
        return uuid.UUID(int=1)
    if kafka_type == "error_code":
        return KioErrorCode.none
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(0)
    if kafka_type == "datetime_i64":
        return datetime.datetime.fromtimestamp(NOW / 1000, datetime.UTC)
    if kafka_type == "float64":
        return 0.0
    return 0


def sample(cls: type) -> typing.Any:
    """One of everything: every array holds one element, every string is "fuzz" (the topic that exists),
    every number 0, so that handlers go past their first checks."""
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for field in dataclasses.fields(cls):
        kind = classify_field(field)
        if isinstance(kind, EntityTupleField):
            kwargs[field.name] = (sample(kind.type_),)
        elif isinstance(kind, EntityField):
            kwargs[field.name] = sample(kind.type_)
        elif isinstance(kind, PrimitiveTupleField):
            kwargs[field.name] = (_sample_value(field.metadata["kafka_type"], hints[field.name]),)
        else:
            kwargs[field.name] = _sample_value(field.metadata["kafka_type"], hints[field.name])
    return cls(**kwargs)


def encode_request(api_key: int, version: int, body: typing.Any, correlation_id: int = 7) -> bytes:
    """A request frame without its size prefix, as `Broker._handle` receives it."""
    cls = codec.request_schema(api_key, version)
    header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
    out = io.BytesIO()
    entity_writer(header_cls)(out, header_cls(request_api_key=api_key, request_api_version=version,
                                              correlation_id=correlation_id, client_id="fuzz"))
    entity_writer(cls)(out, body)
    return out.getvalue()


CORPUS = {(key, v): encode_request(key, v, sample(codec.request_schema(key, v))) for key, v in SERVED}


def test_the_array_length_walk_agrees_with_kio_on_every_valid_request():
    """The pre-check (`codec._length_checker`) must end where kio ends, or it would reject real clients."""
    for (key, v), frame in CORPUS.items():
        cls = codec.request_schema(key, v)
        header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
        _header, used = entity_reader(header_cls)(frame, 0)
        _body, used2 = entity_reader(cls)(frame, used)
        assert codec._length_checker(cls)(frame, used, len(frame)) == used + used2 == len(frame), (key, v)
        parsed = codec.parse_request(frame).body
        if key == codec.PRODUCE_KEY:  # read by hand; tests/protocol/test_produce_request.py compares it with kio
            ident = "topic_id" if v >= 13 else "name"  # v13+ names its topics by id (KIP-516)
            assert [(getattr(t, ident), len(t.partition_data)) for t in parsed.topic_data] == \
                [(getattr(t, ident), len(t.partition_data)) for t in _body.topic_data]
        elif key == codec.LIST_OFFSETS_KEY:  # read by hand too: tests/protocol/test_list_offsets_request.py
            assert [(t.name, [(p.partition_index, p.timestamp) for p in t.partitions]) for t in parsed.topics] == \
                [(t.name, [(p.partition_index, p.timestamp) for p in t.partitions]) for t in _body.topics]
        else:
            assert parsed == _body


def test_an_absurd_array_length_is_refused_before_anything_is_allocated():
    """kio reserves an array's stated length up front and a failed reservation aborts the process: these
    frames killed the broker before the length walk (Kafka's generated readers check the same)."""
    compact = encode_request(3, 9, sample(codec.request_schema(3, 9)))[:15] + b"\xff\xff\xff\xff\x0f"
    classic = encode_request(42, 0, sample(codec.request_schema(42, 0)))[:14] + struct.pack(">i", 2**31 - 1)
    for frame in (compact, classic):
        with pytest.raises(KafkaError, match="Tried to allocate a collection of size"):
            codec.parse_request(frame)


# -- mutations -------------------------------------------------------------------------------------------
BIG_INT32 = [struct.pack(">i", n) for n in (2**31 - 1, -(2**31), -2, 2**24, 65536)]
BAD_VARINTS = [b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\xff\xff", b"\x80\x80\x80\x80\x80\x01", b"\xfe\xff\xff\xff\x07"]


@st.composite
def mutated(draw, frames: dict[tuple[int, int], bytes]) -> bytes:
    key = draw(st.sampled_from(sorted(frames)))
    frame = bytearray(frames[key])
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "set", "insert", "delete", "int32", "varint", "cut"]))
        # Mostly past the fixed header part (api key, version, correlation id): that is where the bodies are.
        at = draw(st.integers(8 if len(frame) > 8 and draw(st.integers(0, 9)) else 0, max(len(frame) - 1, 0)))
        if kind == "flip" and frame:
            frame[at] ^= draw(st.integers(1, 255))
        elif kind == "set" and frame:
            frame[at] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF]))
        elif kind == "insert":
            frame[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del frame[at:at + draw(st.integers(1, 8))]
        elif kind == "int32":
            frame[at:at + 4] = draw(st.sampled_from(BIG_INT32))
        elif kind == "varint":
            frame[at:at + draw(st.integers(0, 5))] = draw(st.sampled_from(BAD_VARINTS))
        else:
            del frame[at:]
    return bytes(frame)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A broker started in this process (its listener on a free loopback port is not used): requests go
    straight to `_handle`, with the topic "fuzz" (2 partitions) holding a few records."""
    loop = asyncio.new_event_loop()
    b = Broker(tmp_path_factory.mktemp("fuzz-broker"), "127.0.0.1", 0, dict(TEST_CONFIGS))
    loop.run_until_complete(b.start())
    b.state.log_manager.create_topic("fuzz", 2)
    b.state.log_manager.get_log("fuzz", 0).append(PRODUCE_BATCH)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    yield b, loop
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    loop.run_until_complete(b.stop())
    loop.close()
    assert grown_mb < 256, f"peak RSS grew by {grown_mb:.0f} MB while fuzzing the broker"


DESCRIBE_TRANSACTIONS = 65


def _check_answer(broker_and_loop, frame: bytes) -> None:
    b, loop = broker_and_loop
    try:
        response = loop.run_until_complete(asyncio.wait_for(b._handle(frame, "127.0.0.1"), ANSWER_WITHIN_S))
    except (KafkaError, ConnectionError):
        return  # an error code for the client, or the connection closed
    except TimeoutError:
        assert struct.unpack_from(">h", frame)[0] in WAITING_APIS, "a handler that should answer hung"
        return
    if response is None:
        return
    api_key, version, correlation_id = struct.unpack_from(">hhi", frame)
    (size, answered_id) = struct.unpack_from(">ii", response)
    assert size == len(response) - 4 and answered_id == correlation_id
    handler = HANDLERS[api_key]
    if not handler.min_version <= version <= handler.max_version:  # KIP-511: ApiVersions answers with v0
        assert api_key == codec.API_VERSIONS_KEY
        version = 0
    cls = codec.response_schema(api_key, version)
    start = 8 + (1 if cls.__flexible__ and api_key != codec.API_VERSIONS_KEY else 0)
    try:
        _body, used = entity_reader(cls)(response, start)
    except OutOfBoundValue:
        # DescribeTransactions answers an id with no transaction with start time -1, as Kafka does; kio's
        # reader refuses negative timestamps (its writer writes them)
        assert api_key == DESCRIBE_TRANSACTIONS and b"\xff" * 8 in response
        return
    assert start + used == len(response), "the response has bytes its schema does not account for"


@fuzz(600)
@given(frame=mutated(CORPUS))
@example(frame=b"\x00A\x00\x00\x00\x00\x00\x07\x00\x04fuzz\x00\x02\x05guzz\x00")  # DescribeTransactions, no txn
def test_mutated_requests_get_an_answer_or_a_declared_error(broker, frame):
    _check_answer(broker, frame)


@fuzz(200)
@given(head=st.sampled_from(SERVED), tail=st.binary(max_size=64), raw=st.binary(max_size=24), use_raw=st.booleans())
def test_arbitrary_bytes_get_an_answer_or_a_declared_error(broker, head, tail, raw, use_raw):
    _check_answer(broker, raw if use_raw else struct.pack(">hhi", *head, 1) + tail)


def test_the_broker_still_answers_after_the_fuzzing(broker):
    b, loop = broker
    response = loop.run_until_complete(b._handle(CORPUS[(3, 9)], "127.0.0.1"))
    body, _ = entity_reader(codec.response_schema(3, 9))(response, 9)
    assert body.brokers and body.brokers[0].port == b.port


# -- the batch validator ---------------------------------------------------------------------------------
BATCHES = [build_batch([SimpleRecord(NOW + i % 3, b"key%d" % i if i % 2 else None, b"value-%d" % i * (i + 1),
                                     ((f"h{i}", b"x" * i),) if i % 3 else ())
                        for i in range(5)], compression=codec_)
           for codec_ in CompressionType]
BATCH_FIELDS = {"base_offset": (0, ">q"), "length": (8, ">i"), "leader_epoch": (12, ">i"), "magic": (16, ">b"),
                "attributes": (21, ">h"), "last_offset_delta": (23, ">i"), "first_timestamp": (27, ">q"),
                "max_timestamp": (35, ">q"), "producer_id": (43, ">q"), "records_count": (57, ">i")}


@st.composite
def lying_batch(draw) -> bytes:
    raw = bytearray(draw(st.sampled_from(BATCHES)))
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["header", "body", "cut", "grow"]))
        if kind == "header" and len(raw) >= 61:
            offset, fmt = BATCH_FIELDS[draw(st.sampled_from(sorted(BATCH_FIELDS)))]
            size = struct.calcsize(fmt)
            bits = 8 * size
            value = draw(st.one_of(st.integers(-3, 8), st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)))
            struct.pack_into(fmt, raw, offset, value)
        elif kind == "body" and len(raw) > 61:
            raw[draw(st.integers(61, len(raw) - 1))] = draw(st.integers(0, 255))
        elif kind == "cut" and raw:
            del raw[draw(st.integers(0, len(raw) - 1)):]
        elif kind == "grow":
            raw += draw(st.binary(min_size=1, max_size=16))
    if draw(st.booleans()) and len(raw) >= 61:  # lies a CRC vouches for
        struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
    return bytes(raw)


def _records_of(log: PartitionLog) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in log.read_records(0)]


@fuzz(300)
@given(batches=st.lists(lying_batch(), min_size=1, max_size=3))
def test_lying_batches_are_appended_as_the_records_say_or_rejected_leaving_the_log_untouched(tmp_path_factory,
                                                                                          batches):
    wide = {"message.timestamp.after.max.ms": str(2**62), "message.timestamp.before.max.ms": str(2**62)}
    log = PartitionLog.open(tmp_path_factory.mktemp("fuzz-log") / "t-0", TopicConfig.from_kafka(wide))
    try:
        log.append(BATCHES[0], now=NOW)
        expected = _records_of(log)
        for raw in batches:
            end, size = log.log_end_offset, log.size
            try:
                info = log.append(raw, now=NOW)
            except KafkaError:
                assert (log.log_end_offset, log.size) == (end, size)
                continue
            if not raw:  # an empty append appends nothing and knows no offsets (UnifiedLog.append)
                assert info.first_offset == -1 and (log.log_end_offset, log.size) == (end, size)
                continue
            # Accepted: the batch's own records, at the offsets the log assigned from its old end.
            sent = RecordBatch(raw)
            oracle = [(end + i, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(sent.records())]
            assert (info.first_offset, info.last_offset) == (end, end + len(oracle) - 1)
            expected += oracle
            assert log.log_end_offset == end + len(oracle)
        assert _records_of(log) == expected
    finally:
        log.close()
