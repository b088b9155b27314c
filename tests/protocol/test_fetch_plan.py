"""A connection's repeated one-partition Fetch answered from its plan (`protocol.fetch_plan`,
`core.planned_fetch`) must be exactly the Fetch handler's answer: the framing against
`codec.encode_fetch_response` on every version, the recognition of the same request at another offset
(and of nothing else), and whole request sequences over a socket with plans on and off."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import io
import os
import random
import socket
import struct
import uuid

import pytest
from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from kio.serial import entity_writer
from kio.static.primitive import i8, i16, i32, i64

from chronolog.protocol import codec
from chronolog.protocol.fetch_plan import FetchPlan
from chronolog.protocol.topic_ids import uuid_of
from chronolog.records import SimpleRecord, build_batch
from chronolog.server import broker as broker_module
from chronolog.server.broker import Broker
from tests.brokerproc import TEST_CONFIGS
from tests.frames import recv_frame

VERSIONS = range(4, 19)
NOW = 1_700_000_000_000
DEFAULTS = {"partition": 0, "fetch_offset": 0, "current_leader_epoch": -1, "last_fetched_epoch": -1,
            "log_start_offset": -1, "partition_max_bytes": 1 << 20, "replica_id": -1, "max_wait": 100,
            "min_bytes": 1, "max_bytes": 50 << 20, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "rack_id": "", "topic": "t", "client_id": "rdkafka", "correlation_id": 7}


# From v13 a Fetch names its topic by id (KIP-516): made-up ids for the names these tests use; the broker
# fixture puts its topic's real id here.
TOPIC_IDS: dict[str, uuid.UUID] = {}


def _topic_id(name: str) -> uuid.UUID:
    return TOPIC_IDS.get(name) or uuid.uuid5(uuid.NAMESPACE_OID, name)


def _build(cls, **values):
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


def _frame(version: int, topics: int = 1, partitions: int = 1, forgotten: bool = False, **fields) -> bytes:
    """A Fetch request (no size prefix) written by kio; `fields` override DEFAULTS."""
    f = {**DEFAULTS, **fields}
    cls = codec.request_schema(1, version)
    mod = __import__(cls.__module__, fromlist=["FetchPartition", "FetchTopic", "ForgottenTopic"])
    parts = tuple(_build(mod.FetchPartition, partition=i32(f["partition"] + k), fetch_offset=i64(f["fetch_offset"]),
                         current_leader_epoch=i32(f["current_leader_epoch"]),
                         last_fetched_epoch=i32(f["last_fetched_epoch"]), log_start_offset=i64(f["log_start_offset"]),
                         partition_max_bytes=i32(f["partition_max_bytes"])) for k in range(partitions))
    body = _build(cls, replica_id=i32(f["replica_id"]), max_wait=datetime.timedelta(milliseconds=f["max_wait"]),
                  min_bytes=i32(f["min_bytes"]), max_bytes=i32(f["max_bytes"]), isolation_level=i8(f["isolation_level"]),
                  session_id=i32(f["session_id"]), session_epoch=i32(f["session_epoch"]),
                  topics=tuple(_build(mod.FetchTopic, topic=f["topic"] + ("" if k == 0 else str(k)),
                                      topic_id=_topic_id(f["topic"] + ("" if k == 0 else str(k))), partitions=parts)
                               for k in range(topics)),
                  forgotten_topics_data=(_build(mod.ForgottenTopic, topic="gone", topic_id=_topic_id("gone"),
                                                partitions=(i32(0),)),) if forgotten else (),
                  rack_id=f["rack_id"])
    header_cls = HeaderV2 if cls.__flexible__ else HeaderV1
    out = io.BytesIO()
    entity_writer(header_cls)(out, header_cls(request_api_key=i16(1), request_api_version=i16(version),
                                              correlation_id=i32(f["correlation_id"]), client_id=f["client_id"]))
    entity_writer(cls)(out, body)
    return out.getvalue()


def _name_of(topic_id: uuid.UUID) -> str | None:
    return next((n for n in ["t", "u", "syslog", "ümlaut", "x" * 249, *TOPIC_IDS] if _topic_id(n) == topic_id), None)


def _plan(frame: bytes) -> FetchPlan | None:
    parsed = codec.parse_request(frame)
    return FetchPlan.build(frame, parsed.api_version, parsed.body, _name_of)


# -- the answer's framing ----------------------------------------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
def test_a_planned_answer_is_framed_as_the_encoder_frames_it(tmp_path, version):
    rng = random.Random(version)
    path = tmp_path / "records"
    path.write_bytes(os.urandom(4096))
    fd = os.open(path, os.O_RDONLY)
    try:
        for _ in range(60):
            topic = rng.choice(["t", "syslog", "ümlaut", "x" * 249])
            partition = rng.choice([0, 1, 77, 2**31 - 1])
            plan = _plan(_frame(version, topic=topic, partition=partition, fetch_offset=rng.randrange(2**40)))
            assert plan is not None and (plan.topic, plan.partition) == (topic, partition)
            correlation_id = rng.randrange(-2**31, 2**31)
            hw, log_start = rng.randrange(2**63), rng.choice([-1, 0, rng.randrange(2**63)])
            # the records' length takes 1 to 5 bytes in the flexible versions
            size = rng.choice([0, 1, 126, 127, 300, 16_383, 16_384, 2**21, 2**28])
            as_bytes = rng.random() < 0.3 and size <= 16_384
            records = os.urandom(size) if as_bytes else codec.FileRegion(os.dup(fd), 0, size)
            values = {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": [
                {"topic": topic, "topic_id": _topic_id(topic), "partitions": [
                {"partition_index": partition, "error_code": 0, "high_watermark": hw, "last_stable_offset": hw,
                 "log_start_offset": log_start, "aborted_transactions": None, "preferred_read_replica": -1,
                 "records": records}]}]}
            ours = plan.response(correlation_id, hw, log_start, records)
            theirs = codec.encode_fetch_response(version, correlation_id, values)
            if as_bytes:
                assert ours == theirs
            else:
                assert [p if isinstance(p, bytes) else p is records for p in ours.parts] == \
                       [p if isinstance(p, bytes) else p is records for p in theirs.parts]
                records.close()
    finally:
        os.close(fd)


@pytest.mark.parametrize("version", VERSIONS)
def test_read_committed_gets_no_plan_and_the_lso_is_framed(version):
    """A read_committed Fetch stops at the LSO and lists aborted transactions: the handler answers it,
    never the plan. A planned (read_uncommitted) answer reports the LSO as the encoder does."""
    assert _plan(_frame(version, fetch_offset=1234)) is not None
    assert _plan(_frame(version, fetch_offset=1234, isolation_level=1)) is None
    plan = _plan(_frame(version, fetch_offset=1234))
    values = {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": [
        {"topic": "t", "topic_id": _topic_id("t"), "partitions": [
        {"partition_index": 0, "error_code": 0, "high_watermark": 90, "last_stable_offset": 40,
         "log_start_offset": 3, "aborted_transactions": None, "preferred_read_replica": -1,
         "records": b"abc"}]}]}
    assert plan.response(7, 90, 3, b"abc", 40) == codec.encode_fetch_response(version, 7, values)


# -- recognising the request ------------------------------------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
def test_the_same_request_at_another_offset_is_recognised_and_nothing_else(version):
    plan = _plan(_frame(version, fetch_offset=1234))
    assert plan is not None
    for offset in (0, 1235, 2**62, -1):
        assert plan.offset_of(_frame(version, fetch_offset=offset, correlation_id=99)) == offset
    changed = {"partition": 1, "partition_max_bytes": 1000, "max_bytes": 1000, "min_bytes": 2, "max_wait": 500,
               "topic": "u", "client_id": "other", "isolation_level": 1}
    if version <= 14:  # (v15 moved it into the tagged replica_state, KIP-903)
        changed["replica_id"] = 2
    if version >= 5:
        changed["log_start_offset"] = 5
    if version >= 7:
        changed["session_epoch"] = 3
        changed["session_id"] = 9
    if version >= 9:
        changed["current_leader_epoch"] = 4
    if version >= 11:
        changed["rack_id"] = "r"
    if version >= 12:
        changed["last_fetched_epoch"] = 6
    for name, value in changed.items():
        assert plan.offset_of(_frame(version, fetch_offset=1234, **{name: value})) is None, name
    other_version = version - 1 if version == VERSIONS[-1] else version + 1
    assert plan.offset_of(_frame(other_version, fetch_offset=1234)) is None
    # only one-partition requests get a plan
    assert _plan(_frame(version, partitions=2)) is None
    assert _plan(_frame(version, topics=2)) is None
    if version >= 7:
        assert _plan(_frame(version, forgotten=True)) is None


def test_an_offset_whose_bytes_occur_twice_in_the_frame_gets_no_plan():
    """The fetch offset is found by its bytes (with the partition's before it); if they also occur elsewhere
    (here inside the client id), which of the two is the field cannot be told: no plan."""
    fields = struct.pack(">iq", 0, 65)  # ASCII bytes: the client id holds them as they are
    frame = _frame(4, fetch_offset=65, client_id=fields.decode())
    assert frame.count(fields) == 2
    assert _plan(frame) is None
    assert _plan(_frame(4, fetch_offset=65)) is not None


# -- over a socket: plans on and off give the same answers ---------------------------------------------------
@pytest.fixture()
def broker(tmp_path):
    loop = asyncio.new_event_loop()
    b = Broker(tmp_path / "data", "127.0.0.1", 0, {**TEST_CONFIGS, "file.delete.delay.ms": "0"})
    loop.run_until_complete(b.start())
    b.state.log_manager.create_topic("t", 1, {"message.timestamp.after.max.ms": str(2**62)})
    TOPIC_IDS["t"] = uuid_of(b.state.log_manager.topic_id("t"))
    plog = b.state.log_manager.get_log("t", 0)
    for i in range(60):  # batches of 20 records of 1 KB: about 1.2 MB
        plog.append(build_batch([SimpleRecord(NOW + i, None, os.urandom(1000)) for _ in range(20)]))
    yield b, loop, plog
    TOPIC_IDS.pop("t", None)
    loop.run_until_complete(b.stop())
    loop.close()


def _answers(b: Broker, loop, frames: list[bytes]) -> list[bytes]:
    async def run() -> list[bytes]:
        def talk() -> list[bytes]:
            out = []
            with socket.create_connection(("127.0.0.1", b.listeners[0].port), timeout=10) as sock:
                for frame in frames:
                    sock.sendall(struct.pack(">i", len(frame)) + frame)
                    out.append(recv_frame(sock))
            return out
        return await asyncio.get_running_loop().run_in_executor(None, talk)
    return loop.run_until_complete(run())


def count_planned(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """A list the broker's planned_fetch appends to from now on: True where the plan answered a Fetch, False
    where it handed the Fetch to the handler."""
    planned: list[bool] = []
    original = broker_module.planned_fetch

    def counting(ctx, plan, offset):
        answer = original(ctx, plan, offset)
        planned.append(answer is not None)
        return answer
    monkeypatch.setattr(broker_module, "planned_fetch", counting)
    return planned


@pytest.mark.parametrize("version", [4, 7, 11, 12, 13, 16, 18])
def test_a_consumer_reading_on_gets_the_handlers_answers(broker, version, monkeypatch):
    b, loop, plog = broker
    end = plog.high_watermark
    planned = count_planned(monkeypatch)
    frames = []
    # reading on with librdkafka's 1 MiB partition limit, then a small limit (answers read into memory),
    # then offsets inside batches, at the log end (a long poll), past it and before the start (errors),
    # min_bytes above what is there, and a zero limit
    for limit in (1 << 20, 100_000, 30_000):
        frames += [_frame(version, fetch_offset=o, partition_max_bytes=limit, correlation_id=len(frames) + k)
                   for k, o in enumerate(range(0, end, 250))]
    for offset in (1, 399, end - 1, end, end + 5, -3, 0):
        frames.append(_frame(version, fetch_offset=offset, partition_max_bytes=30_000, max_wait=5))
    frames.append(_frame(version, fetch_offset=0, partition_max_bytes=30_000, min_bytes=10 << 20, max_wait=5))
    frames.append(_frame(version, fetch_offset=0, partition_max_bytes=0, max_wait=5))
    with_plans = _answers(b, loop, frames)
    b.plan_fetches = False
    try:
        without = _answers(b, loop, frames)
    finally:
        b.plan_fetches = True
    assert len(with_plans) == len(frames)
    for k, (ours, theirs) in enumerate(zip(with_plans, without, strict=True)):
        assert ours == theirs, k
    assert sum(planned) >= 10, planned  # the plan answered most of the reading on
    assert not all(planned)  # and handed the errors and the long poll to the handler


def _partition(version: int, answer: bytes) -> tuple[int, int]:
    """(error code, bytes of records) of a one-partition Fetch answer, decoded by kio."""
    from kio.serial import entity_reader

    cls = codec.response_schema(1, version)
    body, _ = entity_reader(cls)(answer, 4 + (1 if cls.__flexible__ else 0))
    p = body.responses[0].partitions[0]
    return int(p.error_code), len(p.records or b"")


def _timed_answers(b: Broker, loop, frames: list[bytes]) -> list[tuple[float, bytes]]:
    import time

    async def run():
        def talk():
            out = []
            with socket.create_connection(("127.0.0.1", b.listeners[0].port), timeout=10) as sock:
                for frame in frames:
                    start = time.monotonic()
                    sock.sendall(struct.pack(">i", len(frame)) + frame)
                    answer = recv_frame(sock)
                    out.append((time.monotonic() - start, answer))
            return out
        return await asyncio.get_running_loop().run_in_executor(None, talk)
    return loop.run_until_complete(run())


def test_a_planned_fetch_with_too_little_data_still_waits_max_wait(broker):
    """min_bytes above what the log holds: the answer comes after max_wait (Kafka's DelayedFetch), for the
    request that made the plan and for the next one, which matches it."""
    b, loop, _plog = broker
    frames = [_frame(11, fetch_offset=o, partition_max_bytes=100_000, min_bytes=50 << 20, max_wait=300)
              for o in (0, 100)]
    for took, _answer in _timed_answers(b, loop, frames):
        assert took >= 0.25


class _Switch:
    """An authorizer that allows everything until told not to allow reading topic t."""

    def __init__(self) -> None:
        self.deny_read = False

    def authorize(self, principal, operation, resource_type, name) -> bool:
        return not (self.deny_read and operation == "read" and name == "t")


def test_a_planned_fetch_is_authorized_on_every_request(broker):
    b, loop, _plog = broker
    switch = _Switch()
    b.state.authorizer = switch
    frames = [_frame(12, fetch_offset=o, partition_max_bytes=100_000) for o in (0, 100, 200)]
    first = _answers(b, loop, frames[:2])
    switch.deny_read = True
    denied = _answers(b, loop, frames)  # the plan is made by the first request, the others match it
    b.plan_fetches = False
    try:
        expected = _answers(b, loop, frames)
    finally:
        b.plan_fetches = True
    assert denied == expected
    # TOPIC_AUTHORIZATION_FAILED (29) and no records; before the switch, records
    assert [_partition(12, a) for a in denied] == [(29, 0)] * 3
    assert all(error == 0 and size > 50_000 for error, size in (_partition(12, a) for a in first))
