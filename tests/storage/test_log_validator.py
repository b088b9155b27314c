"""Produce validation answers as Kafka's `LogValidator` gives them: per-record errors (KIP-467) naming each
refused record of a batch, and the timestamp-type rules. Named after `LogValidatorTest`."""

from __future__ import annotations

import gzip
import struct
import time
import zlib
from types import SimpleNamespace as NS

import pytest

from chronolog.config import BrokerConfig, TopicConfig
from chronolog.errors import ErrorCode, InvalidRecordError, InvalidTimestampError
from chronolog.protocol.core import produce
from chronolog.protocol.registry import BrokerState, RequestContext
from chronolog.records import CompressionType, SimpleRecord, TimestampType, build_batch, iter_batches
from chronolog.records.control import ControlType, EndTxnMarker, build_control_batch
from chronolog.storage import LogManager, PartitionLog
from tests.storage.helpers import NOW, WIDE, batch

BOUNDS = {"message.timestamp.before.max.ms": "1000", "message.timestamp.after.max.ms": "500"}


def _log(tmp_path, **extra) -> PartitionLog:
    return PartitionLog.open(tmp_path / "t-0", TopicConfig.from_kafka({**BOUNDS, **extra}))


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.GZIP])
@pytest.mark.parametrize("topic_codec", ["producer", "lz4"])
def test_invalid_timestamp_exception_has_batch_index(tmp_path, codec, topic_codec):
    """LogValidatorTest.testInvalidTimestampExceptionHasBatchIndex (and its compressed and recompressed
    variants): every record out of bounds is named by its index in the batch, with Kafka's message."""
    plog = _log(tmp_path, **{"compression.type": topic_codec})
    with pytest.raises(InvalidTimestampError) as info:
        plog.append(batch(NOW, NOW - 1001, NOW + 500, NOW + 501, -1, codec=codec), now=NOW)
    exc = info.value
    assert str(exc) == "One or more records have been rejected due to invalid timestamp"
    assert [i for i, _m in exc.record_errors] == [1, 3]
    assert exc.record_errors[0][1] == (f"Timestamp {NOW - 1001} of message with offset 1 is out of range. "
                                       f"The timestamp should be within [{NOW - 1000}, {NOW + 500}]")
    assert plog.log_end_offset == 0  # nothing of the batch is stored


def test_producer_may_not_set_log_append_time(tmp_path):
    """LogValidator.validateTimestamp: a producer's LogAppendTime bit refuses every record on a LogAppendTime
    topic, and on a CreateTime topic the records without a timestamp (LogValidatorTest's
    testInvalidTimestampType... cases)."""
    lat = _log(tmp_path / "a", **{"message.timestamp.type": "LogAppendTime"})
    raw = build_batch([SimpleRecord(NOW, None, b"a"), SimpleRecord(NOW, None, b"b")],
                      timestamp_type=TimestampType.LOG_APPEND_TIME, max_timestamp=NOW)
    with pytest.raises(InvalidTimestampError) as info:
        lat.append(raw, now=NOW)
    assert [i for i, _m in info.value.record_errors] == [0, 1]
    assert "Producer should not set timestamp type to LogAppendTime" in info.value.record_errors[0][1]
    create = _log(tmp_path / "b")
    no_ts = build_batch([SimpleRecord(-1, None, b"a")], timestamp_type=TimestampType.LOG_APPEND_TIME,
                        max_timestamp=-1)
    with pytest.raises(InvalidTimestampError):
        create.append(no_ts, now=NOW)
    create.append(raw, now=NOW)  # stamped (its max timestamp is in bounds): stored as CreateTime
    assert create.log_end_offset == 2


def test_produce_response_carries_record_errors(tmp_path):
    """ProduceResponse v8+ (KIP-467): the partition's error, its message and the per-record errors."""
    with LogManager(tmp_path, BrokerConfig()) as manager:
        manager.create_topic("t", 1, BOUNDS)
        ctx = RequestContext(BrokerState(manager, manager.broker_config, "127.0.0.1", 0), 0, 9, 1, "c", "h")
        req = NS(acks=-1, transactional_id=None, timeout=1000, topic_data=[NS(name="t", partition_data=[
            NS(index=0, records=batch(int(time.time() * 1000), 1, 2))])])  # the broker's clock
        (part,) = produce(req, ctx)["responses"][0]["partition_responses"]
    assert part["error_code"] == ErrorCode.INVALID_TIMESTAMP
    assert part["error_message"] == "One or more records have been rejected due to invalid timestamp"
    assert [e["batch_index"] for e in part["record_errors"]] == [1, 2]


def _produce_one(tmp_path, records: bytes, version: int = 9) -> dict:
    with LogManager(tmp_path, BrokerConfig()) as manager:
        manager.create_topic("t", 1, WIDE)
        ctx = RequestContext(BrokerState(manager, manager.broker_config, "127.0.0.1", 0), 0, version, 1, "c", "h")
        req = NS(acks=-1, transactional_id=None, timeout=1000, topic_data=[NS(name="t", partition_data=[
            NS(index=0, records=records)])])
        (part,) = produce(req, ctx)["responses"][0]["partition_responses"]
        part["stored"] = manager.get_log("t", 0).log_end_offset
    return part


def test_produce_request_validate_records(tmp_path):
    """ProduceRequestTest.testV3AndAboveShouldContainOnlyOneRecordBatch / ...CannotHaveNoRecordBatches /
    ...CannotUseMagicV0 / ...CannotUseMagicV1 / testMixedTransactionalData... (ProduceRequest.validateRecords):
    Produce v3+ carries exactly one v2 batch per partition; zstd needs v7."""
    two = batch(NOW) + batch(NOW)
    body = struct.pack(">bbqii", 1, 0, NOW, -1, 1) + b"v"  # one v1 message: magic, attributes, ts, key, value
    legacy = struct.pack(">qiI", 0, 4 + len(body), zlib.crc32(body)) + body
    zstd = batch(NOW, codec=CompressionType.ZSTD)
    cases = [(two, 9, ErrorCode.INVALID_RECORD), (b"", 9, ErrorCode.INVALID_RECORD),
             (legacy, 9, ErrorCode.INVALID_RECORD), (zstd, 6, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
             (zstd, 7, 0)]
    for i, (records, version, code) in enumerate(cases):
        part = _produce_one(tmp_path / str(i), records, version)
        assert (part["error_code"], part["stored"]) == (code, 0 if code else 1), (i, part)
    # Refused by the request's own rule, before the log (whose one-batch rule would answer the same code).
    assert "exactly one record batch per partition" in _produce_one(tmp_path / "two", two)["error_message"]


def test_append_base_offset_must_be_zero(tmp_path):
    """UnifiedLogTest.testAppendWithNonZeroBaseOffset... (analyzeAndValidateRecords): a client's v2 batch
    must start at offset 0; the follower-style append (not from a client) keeps any base offset."""
    plog = PartitionLog.open(tmp_path / "t-0", TopicConfig.from_kafka(WIDE))
    shifted = build_batch([SimpleRecord(NOW, None, b"x")], base_offset=5)
    for codec in ("producer", "gzip"):  # the fast path and the general (recompressing) one
        plog.update_config(TopicConfig.from_kafka({**WIDE, "compression.type": codec}))
        with pytest.raises(InvalidRecordError, match="should be 0, but it is 5"):
            plog.append(shifted, now=NOW)
    assert plog.log_end_offset == 0


def _v1(offset: int, ts: int, value: bytes, attributes: int = 0) -> bytes:
    body = struct.pack(">bbqi", 1, attributes, ts, -1) + struct.pack(">i", len(value)) + value
    return struct.pack(">qiI", offset, 4 + len(body), zlib.crc32(body)) + body


def test_legacy_messages_convert_into_one_batch(tmp_path):
    """LogValidatorTest.testMagicV1ToV2NonCompressed...: uncompressed v0/v1 messages appended together become
    one v2 batch with consecutive offsets; two compressed wrappers in one append are refused
    ("Compressed outer record has more than one batch", LogValidator)."""
    plog = PartitionLog.open(tmp_path / "t-0", TopicConfig.from_kafka(WIDE))
    info = plog.append(b"".join(_v1(7, NOW + i, b"m%d" % i) for i in range(3)), now=NOW)
    assert (info.first_offset, info.last_offset) == (0, 2)
    stored = list(iter_batches(plog.read(0, 1 << 20).read_bytes()))
    assert len(stored) == 1 and [(r.offset, r.timestamp) for r in stored[0].records()] == [
        (0, NOW), (1, NOW + 1), (2, NOW + 2)]
    inner = gzip.compress(_v1(0, NOW, b"x"))
    wrappers = _v1(0, NOW, inner, attributes=1) + _v1(1, NOW, inner, attributes=1)
    with pytest.raises(InvalidRecordError, match="more than one batch"):
        plog.append(wrappers, now=NOW)
    assert plog.log_end_offset == 3


def test_coordinator_control_batch_kept_as_it_is(tmp_path):
    """LogValidator with AppendOrigin.COORDINATOR: a control batch (a transaction marker) is stored as a
    control batch even when the topic's compression.type would recompress client data."""
    plog = PartitionLog.open(tmp_path / "t-0", TopicConfig.from_kafka({**WIDE, "compression.type": "gzip"}))
    marker = build_control_batch(7, 0, EndTxnMarker(ControlType.ABORT, 0), NOW)
    plog.append(marker, now=NOW, origin_client=False)
    (stored,) = iter_batches(plog.read(0, 1 << 20).read_bytes())
    assert stored.is_control and stored.compression == CompressionType.NONE and stored.producer_id == 7
