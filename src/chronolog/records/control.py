"""Control batches: the commit and abort markers that end a transaction (KIP-98).

A transaction's outcome is written into each partition it touched as a batch of its own, flagged
control and transactional, carrying the producer's id and epoch and one record (Kafka's
`EndTransactionMarker`, `ControlRecordType`, `MemoryRecords.withEndTransactionMarker`):

    key   = version int16 (0) | type int16 (0 ABORT, 1 COMMIT)
    value = version int16 (0) | coordinator epoch int32

The batch's base sequence is -1 (markers are not part of the producer's sequence), its timestamps are
the marker's, uncompressed, CreateTime. Readers skip control batches; a read_committed reader uses an
ABORT marker to stop dropping the aborted transaction's records.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from chronolog.errors import InvalidRecordError
from chronolog.records.batch import RecordBatch, SimpleRecord
from chronolog.records.batch_builder import build_batch

_KEY = struct.Struct(">hh")  # ControlRecordType.CONTROL_RECORD_KEY_SCHEMA_VERSION_V0
_VALUE = struct.Struct(">hi")  # EndTransactionMarker.END_TXN_MARKER_SCHEMA_VERSION_V0
CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0
NO_SEQUENCE = -1


class ControlType(IntEnum):
    """`ControlRecordType`: the transaction markers and the KRaft control records a log may hold."""

    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


@dataclass(frozen=True, slots=True)
class EndTxnMarker:
    """A transaction's end as written into a partition (`EndTransactionMarker`)."""

    control_type: ControlType
    coordinator_epoch: int

    def __post_init__(self) -> None:
        if self.control_type not in (ControlType.ABORT, ControlType.COMMIT):
            raise ValueError(f"not a transaction marker type: {self.control_type!r}")

    @property
    def is_commit(self) -> bool:
        return self.control_type == ControlType.COMMIT

    def key(self) -> bytes:
        return control_key(self.control_type)

    def value(self) -> bytes:
        return _VALUE.pack(END_TXN_MARKER_VERSION, self.coordinator_epoch)


def control_key(control_type: int) -> bytes:
    """The 4-byte key of a control record of this type (`ControlRecordType.recordKey`)."""
    return _KEY.pack(CONTROL_KEY_VERSION, int(control_type))


def _versioned(schema: struct.Struct, data: bytes | memoryview | None, what: str, versioned: str) -> int:
    """The field after the version of a control key or marker value; InvalidRecordError for fewer bytes than
    the schema or a negative version (both of Kafka's parsers check these two)."""
    if data is None or len(data) < schema.size:
        raise InvalidRecordError(f"{what} of {0 if data is None else len(data)} bytes; at least {schema.size} "
                                 "are needed")
    version, field = schema.unpack_from(data)
    if version < 0:
        raise InvalidRecordError(f"invalid {versioned} version {version}")
    return field


def control_type_of(key: bytes | memoryview | None) -> ControlType:
    """The type in a control record's key (`ControlRecordType.parse`): UNKNOWN for a type this version does
    not know (readers ignore those), InvalidRecordError for a key too short or with a negative version."""
    type_id = _versioned(_KEY, key, "control record key", "control record key")
    try:
        return ControlType(type_id)
    except ValueError:
        return ControlType.UNKNOWN


def parse_control_record(key: bytes | memoryview | None, value: bytes | memoryview | None) -> EndTxnMarker:
    """The marker in a control record (`EndTransactionMarker.deserialize`). InvalidRecordError for a short key
    or value, a negative version, or a type that is not ABORT or COMMIT. A newer value version is read as
    version 0, as Kafka does (its fields only grow)."""
    control_type = control_type_of(key)
    if control_type not in (ControlType.ABORT, ControlType.COMMIT):
        raise InvalidRecordError(f"control record of type {control_type.name} ({_KEY.unpack_from(key)[1]}) is "
                                 "not a transaction marker")
    coordinator_epoch = _versioned(_VALUE, value, "end transaction marker value", "end transaction marker")
    return EndTxnMarker(control_type, coordinator_epoch)


def build_control_batch(producer_id: int, producer_epoch: int, marker: EndTxnMarker, timestamp: int,
                        base_offset: int = 0, partition_leader_epoch: int = -1) -> bytes:
    """The marker batch Kafka's `MemoryRecords.withEndTransactionMarker` builds, byte for byte."""
    record = SimpleRecord(timestamp, marker.key(), marker.value())
    return build_batch([record], base_offset=base_offset, producer_id=producer_id, producer_epoch=producer_epoch,
                       base_sequence=NO_SEQUENCE, partition_leader_epoch=partition_leader_epoch,
                       is_transactional=True, is_control=True, max_timestamp=timestamp)


def marker_of(batch: RecordBatch) -> EndTxnMarker | None:
    """The transaction marker of a control batch, None when its record is another control type or it has
    none (an empty control batch: its transaction was cleaned away, `ProducerAppendInfo.append`)."""
    for record in batch.records():
        if control_type_of(record.key) in (ControlType.ABORT, ControlType.COMMIT):
            return parse_control_record(record.key, record.value)
        return None
    return None
