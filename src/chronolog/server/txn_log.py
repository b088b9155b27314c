"""The transaction coordinator's state and its records in `__transaction_state`, in Kafka's schemas.

`TxnMetadata` is one transactional id's state (Kafka's `TransactionMetadata`); `TxnState` its states with
Kafka's ids (`TransactionState`). A record's key is `TransactionLogKey` v0 and its value
`TransactionLogValue` v0 (both version-prefixed, `MessageUtil.toVersionPrefixedBytes`); a null value is
the tombstone of an expired transactional id (`TransactionLog.keyToBytes` / `valueToBytes` /
`readTxnRecordValue`). Version 1 (flexible, with the tagged PreviousProducerId, NextProducerId and
ClientTransactionVersion) is what Kafka writes once `transaction.version` 1+ is finalized
(`TransactionVersion.transactionLogValueVersion`); the coordinator writes it with transaction version 2 on.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field

from chronolog.errors import CorruptMessageError
from chronolog.records.group_records import java_string_hash, partition_for  # noqa: F401 (used here and by importers)

TRANSACTION_STATE_TOPIC = "__transaction_state"
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767  # Short.MaxValue


class TxnState(enum.IntEnum):
    """Kafka's TransactionState ids (the TransactionStatus byte of a TransactionLogValue)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions/ListTransactions give (`TransactionState.name`)."""
        return _NAMES[self]


_NAMES = {TxnState.EMPTY: "Empty", TxnState.ONGOING: "Ongoing", TxnState.PREPARE_COMMIT: "PrepareCommit",
          TxnState.PREPARE_ABORT: "PrepareAbort", TxnState.COMPLETE_COMMIT: "CompleteCommit",
          TxnState.COMPLETE_ABORT: "CompleteAbort", TxnState.DEAD: "Dead",
          TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence"}
STATE_BY_NAME = {v: k for k, v in _NAMES.items()}


@dataclass
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH  # the epoch before the last bump, for KIP-360 retries
    previous_producer_id: int = NO_PRODUCER_ID
    timeout_ms: int = 60000
    state: TxnState = TxnState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    last_update_ms: int = -1
    start_ms: int = -1
    has_failed_epoch_fence: bool = False
    # KIP-890 part 2: the id an EndTxn that ran out of epochs moves to once its markers are written, and the
    # transaction version of the client's last AddPartitions/EndTxn (TransactionMetadata.clientTransactionVersion)
    next_producer_id: int = NO_PRODUCER_ID
    client_version: int = 0

    def copy(self) -> TxnMetadata:
        return TxnMetadata(self.transactional_id, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                           self.previous_producer_id, self.timeout_ms, self.state, set(self.partitions),
                           self.last_update_ms, self.start_ms, self.has_failed_epoch_fence, self.next_producer_id,
                           self.client_version)

    @property
    def epoch_exhausted(self) -> bool:
        """TransactionMetadata.isEpochExhausted: the last two epochs are kept for fencing."""
        return self.producer_epoch >= MAX_EPOCH - 1


# -- TransactionLogKey / TransactionLogValue --------------------------------------------------------------
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_VALUE_HEAD = struct.Struct(">hqhib")  # version, producer id, producer epoch, timeout, status
_TIMES = struct.Struct(">qq")  # last update, start


def _string(s: str) -> bytes:
    raw = s.encode()
    return _I16.pack(len(raw)) + raw


def key_bytes(transactional_id: str) -> bytes:
    return _I16.pack(0) + _string(transactional_id)


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def value_bytes(meta: TxnMetadata, version: int = 0) -> bytes:
    """TransactionLogValue v0 or v1; an Empty transaction has a null partition list (TransactionLog.valueToBytes).
    v1's tagged fields are written when they differ from their defaults, as Kafka's generated writer does."""
    flexible = version >= 1
    out = bytearray(_VALUE_HEAD.pack(version, meta.producer_id, meta.producer_epoch, meta.timeout_ms,
                                     int(meta.state)))
    if meta.state == TxnState.EMPTY:
        out += b"\x00" if flexible else _I32.pack(-1)
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(meta.partitions):
            by_topic.setdefault(topic, []).append(partition)
        out += _uvarint(len(by_topic) + 1) if flexible else _I32.pack(len(by_topic))
        for topic, ids in by_topic.items():
            raw = topic.encode()
            if flexible:
                out += _uvarint(len(raw) + 1) + raw + _uvarint(len(ids) + 1)
                out += b"".join(_I32.pack(i) for i in ids) + b"\x00"  # no tagged fields of the topic
            else:
                out += _string(topic) + _I32.pack(len(ids)) + b"".join(_I32.pack(i) for i in ids)
    out += _TIMES.pack(meta.last_update_ms, meta.start_ms)
    if flexible:
        tags = [(tag, body) for tag, body, default in (
            (0, struct.pack(">q", meta.previous_producer_id), meta.previous_producer_id == NO_PRODUCER_ID),
            (1, struct.pack(">q", meta.next_producer_id), meta.next_producer_id == NO_PRODUCER_ID),
            (2, _I16.pack(meta.client_version), meta.client_version == 0)) if not default]
        out += _uvarint(len(tags))
        for tag, body in tags:
            out += _uvarint(tag) + _uvarint(len(body)) + body
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = memoryview(data), 0

    def take(self, st: struct.Struct) -> tuple:
        if self.pos + st.size > len(self.data):
            raise CorruptMessageError("transaction log record is too short")
        out = st.unpack_from(self.data, self.pos)
        self.pos += st.size
        return out

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            (b,) = self.take(struct.Struct(">B"))
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    def string(self, compact: bool) -> str:
        n = self.uvarint() - 1 if compact else self.take(_I16)[0]
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptMessageError("transaction log record has a bad string")
        s = bytes(self.data[self.pos:self.pos + n]).decode()
        self.pos += n
        return s

    def count(self, compact: bool) -> int:
        return self.uvarint() - 1 if compact else self.take(_I32)[0]


def read_key(data: bytes) -> str | None:
    """The transactional id of a TransactionLogKey, or None for a key of another version (skipped, as
    TransactionLog.readTxnRecordKey returns UnknownKey)."""
    r = _Reader(data)
    (version,) = r.take(_I16)
    if version != 0:
        return None
    return r.string(False)


def read_value(transactional_id: str, data: bytes | None) -> TxnMetadata | None:
    """A TransactionLogValue (v0, or v1 with its tagged fields skipped) as metadata; None for a tombstone."""
    if data is None:
        return None
    r = _Reader(data)
    (version,) = r.take(_I16)
    if version not in (0, 1):
        raise CorruptMessageError(f"unknown TransactionLogValue version {version}")
    flexible = version == 1
    pid, epoch, timeout, status = r.take(struct.Struct(">qhib"))
    try:
        state = TxnState(status)
    except ValueError:
        raise CorruptMessageError(f"unknown transaction status {status}") from None
    partitions: set[tuple[str, int]] = set()
    n = r.count(flexible)
    for _ in range(max(n, 0)):
        topic = r.string(flexible)
        for _ in range(max(r.count(flexible), 0)):
            partitions.add((topic, r.take(_I32)[0]))
        if flexible:
            _skip_tags(r)
    last_update, start = r.take(_TIMES)
    meta = TxnMetadata(transactional_id, pid, epoch, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, timeout, state,
                       partitions if state != TxnState.EMPTY else set(), last_update, start)
    if flexible:
        for tag, body in _tags(r):
            if tag == 0 and len(body) == 8:
                meta.previous_producer_id = struct.unpack(">q", body)[0]
            elif tag == 1 and len(body) == 8:
                meta.next_producer_id = struct.unpack(">q", body)[0]
            elif tag == 2 and len(body) == 2:
                meta.client_version = _I16.unpack(body)[0]
    return meta


def _tags(r: _Reader) -> list[tuple[int, bytes]]:
    out = []
    for _ in range(r.uvarint()):
        tag, size = r.uvarint(), r.uvarint()
        out.append((tag, bytes(r.data[r.pos:r.pos + size])))
        r.pos += size
    return out


def _skip_tags(r: _Reader) -> None:
    _tags(r)
