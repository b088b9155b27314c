"""Control batches (`records.control`) against Kafka's encoding rules: `EndTransactionMarker`,
`ControlRecordType` and `MemoryRecords.withEndTransactionMarker` (a MemoryRecordsBuilder with magic 2, no
compression, CreateTime, the marker's timestamp as base and max timestamp, base sequence -1,
transactional and control set, one record with offset and timestamp deltas 0, no headers).

The expected bytes are assembled here field by field with `struct`, independently of `build_batch`."""

from __future__ import annotations

import struct

import crc32c
import pytest

from chronolog.errors import InvalidRecordError
from chronolog.records import RecordBatch, SimpleRecord, build_batch
from chronolog.records.control import (
    ControlType,
    EndTxnMarker,
    build_control_batch,
    control_key,
    control_type_of,
    marker_of,
    parse_control_record,
)


def kafka_marker_batch(pid: int, epoch: int, control_type: int, coordinator_epoch: int, ts: int,
                       base_offset: int = 0, leader_epoch: int = -1) -> bytes:
    key = struct.pack(">hh", 0, control_type)
    value = struct.pack(">hi", 0, coordinator_epoch)
    # DefaultRecord: attributes 0, timestampDelta 0, offsetDelta 0 (zig-zag varints: one 0 byte each),
    # keyLength 4 (zig-zag 8), key, valueLength 6 (zig-zag 12), value, header count 0.
    body = bytes([0, 0, 0, 8]) + key + bytes([12]) + value + bytes([0])
    record = bytes([len(body) * 2]) + body  # the length varint (16 -> zig-zag 32)
    after_crc = struct.pack(">hiqqqhii", 0x30, 0, ts, ts, pid, epoch, -1, 1) + record
    crc = crc32c.crc32c(after_crc)
    return struct.pack(">qiibI", base_offset, 49 + len(record), leader_epoch, 2, crc) + after_crc


@pytest.mark.parametrize("commit", [True, False])
@pytest.mark.parametrize("coordinator_epoch", [0, 7, 2**31 - 1])
def test_marker_batch_is_byte_identical_to_kafkas(commit, coordinator_epoch):
    marker = EndTxnMarker(ControlType.COMMIT if commit else ControlType.ABORT, coordinator_epoch)
    built = build_control_batch(123456789, 5, marker, 1_700_000_000_123)
    assert built == kafka_marker_batch(123456789, 5, int(commit), coordinator_epoch, 1_700_000_000_123)
    assert len(built) == 78  # RECORD_BATCH_OVERHEAD 61 + CURRENT_END_TXN_SCHEMA_RECORD_SIZE 17


def test_marker_batch_at_an_offset_and_leader_epoch():
    marker = EndTxnMarker(ControlType.ABORT, 3)
    built = build_control_batch(9, 0, marker, 1000, base_offset=4242, partition_leader_epoch=0)
    assert built == kafka_marker_batch(9, 0, 0, 3, 1000, base_offset=4242, leader_epoch=0)
    batch = RecordBatch(built)
    assert batch.is_control and batch.is_transactional and batch.base_sequence == -1
    assert batch.verify_crc() and batch.records_count == 1 and batch.last_offset == 4242


def test_the_known_bytes_of_one_commit_marker():
    # Hand-checked once: producer 1, epoch 0, COMMIT, coordinator epoch 0, timestamp 0, offset 0.
    built = build_control_batch(1, 0, EndTxnMarker(ControlType.COMMIT, 0), 0)
    assert built.hex() == (
        "0000000000000000" "00000042" "ffffffff" "02" + built[17:21].hex() + "0030" "00000000"
        "0000000000000000" "0000000000000000" "0000000000000001" "0000" "ffffffff" "00000001"
        "20" "00" "00" "00" "08" "00000001" "0c" "000000000000" "00")


def test_key_and_value_layouts():
    assert control_key(ControlType.ABORT) == b"\x00\x00\x00\x00"
    assert control_key(ControlType.COMMIT) == b"\x00\x00\x00\x01"
    assert EndTxnMarker(ControlType.COMMIT, 258).value() == b"\x00\x00\x00\x00\x01\x02"


def test_parse_round_trip_and_marker_of():
    for control_type in (ControlType.ABORT, ControlType.COMMIT):
        marker = EndTxnMarker(control_type, 11)
        assert parse_control_record(marker.key(), marker.value()) == marker
        assert marker_of(RecordBatch(build_control_batch(1, 2, marker, 5))) == marker


def test_parse_refuses_what_kafka_refuses():
    with pytest.raises(InvalidRecordError):
        parse_control_record(b"\x00\x00\x00", b"\x00\x00\x00\x00\x00\x01")  # key shorter than 4 bytes
    with pytest.raises(InvalidRecordError):
        parse_control_record(None, b"\x00\x00\x00\x00\x00\x01")
    with pytest.raises(InvalidRecordError):
        parse_control_record(b"\xff\xff\x00\x01", b"\x00\x00\x00\x00\x00\x01")  # negative key version
    with pytest.raises(InvalidRecordError):
        parse_control_record(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00")  # value shorter than 6 bytes
    with pytest.raises(InvalidRecordError):
        parse_control_record(b"\x00\x00\x00\x01", b"\xff\xff\x00\x00\x00\x01")  # negative value version
    with pytest.raises(InvalidRecordError):
        parse_control_record(b"\x00\x00\x00\x02", b"\x00\x00\x00\x00\x00\x01")  # LEADER_CHANGE: not a marker
    with pytest.raises(InvalidRecordError):
        parse_control_record(b"\x00\x00\x01\x51", b"\x00\x00\x00\x00\x00\x01")  # unknown type 337
    with pytest.raises(ValueError):
        EndTxnMarker(ControlType.LEADER_CHANGE, 0)


def test_unknown_types_and_newer_versions_parse_as_kafka_does():
    assert control_type_of(b"\x00\x00\x01\x51") == ControlType.UNKNOWN  # ControlRecordTypeTest
    assert control_type_of(b"\x00\x05\x00\x00\x00\x00\x5b\x88") == ControlType.ABORT  # newer key version
    # A newer value version is read as version 0 (its fields only grow).
    assert parse_control_record(b"\x00\x00\x00\x01", b"\x00\x01\x00\x00\x00\x09\xff").coordinator_epoch == 9


def test_marker_of_other_control_records_is_none():
    leader_change = build_batch([SimpleRecord(0, control_key(ControlType.LEADER_CHANGE), b"\x00\x00")],
                                is_control=True)
    assert marker_of(RecordBatch(leader_change)) is None
