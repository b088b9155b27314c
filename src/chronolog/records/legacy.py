"""Legacy message sets, magic 0 and 1 (pre-0.11), read-only, and their up-conversion to v2.

Message layout (`LegacyRecord`): offset int64 | size int32 | crc uint32 | magic int8 | attributes int8 |
[timestamp int64, v1 only] | key bytes (int32 length) | value bytes (int32 length); CRC-32 (IEEE) over
magic..end. A compressed message wraps a message set in its value. In v1 the inner offsets are relative
(0..n-1) and the wrapper carries the absolute offset of the last inner message; in v0 the inner offsets
are absolute (`AbstractLegacyRecordBatch.DeepRecordsIterator`). The timestamp-type bit (v1) set on the
wrapper means LogAppendTime: every inner message takes the wrapper's timestamp (KIP-32).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

from chronolog.errors import CorruptMessageError, InvalidRecordError
from chronolog.records.batch import Record, TimestampType
from chronolog.records.batch_builder import build_batch
from chronolog.records.compression import (
    DEFAULT_MAX_DECOMPRESSED,
    CompressionType,
    decompress,
    repair_lz4_v0_header_checksum,
)

_HEAD = struct.Struct(">qiIbb")
V0_MIN = 14  # crc + magic + attributes + key length + value length
V1_MIN = 22


def _read_bytes(buf, pos: int, end: int) -> tuple[bytes | None, int]:
    if pos + 4 > end:
        raise CorruptMessageError("legacy message truncated in a length field")
    (n,) = struct.unpack_from(">i", buf, pos)
    pos += 4
    if n < 0:
        return None, pos
    if pos + n > end:
        raise CorruptMessageError("legacy message field runs past the message")
    return bytes(buf[pos:pos + n]), pos + n


class LegacyBatch:
    """One top-level v0/v1 message, with the same shallow interface as `RecordBatch`."""

    def __init__(self, buffer, position: int = 0, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> None:
        buf = buffer if isinstance(buffer, memoryview) else memoryview(buffer)
        if len(buf) - position < 12 + V0_MIN:
            raise CorruptMessageError("legacy message shorter than its minimum size")
        self._buf, self._pos = buf, position
        self.offset, self.message_size, self.crc, self.magic, self.attributes = _HEAD.unpack_from(buf, position)
        if self.magic not in (0, 1):
            raise CorruptMessageError(f"not a legacy message (magic {self.magic})")
        if self.message_size < (V1_MIN if self.magic == 1 else V0_MIN):
            raise CorruptMessageError(f"legacy message size {self.message_size} below the minimum")
        if len(buf) - position < 12 + self.message_size:
            raise CorruptMessageError("legacy message truncated")
        end = position + 12 + self.message_size
        pos = position + 18
        if self.magic == 1:
            (self.timestamp,) = struct.unpack_from(">q", buf, pos)
            pos += 8
        else:
            self.timestamp = -1
        self.key, pos = _read_bytes(buf, pos, end)
        self.value, pos = _read_bytes(buf, pos, end)
        self._max_decompressed = max_decompressed
        self._inner: list[Record] | None = None

    @property
    def size_in_bytes(self) -> int:
        return 12 + self.message_size

    @property
    def raw(self) -> memoryview:
        return self._buf[self._pos:self._pos + self.size_in_bytes]

    @property
    def compression(self) -> CompressionType:
        try:
            return CompressionType(self.attributes & 0x07)
        except ValueError:
            raise CorruptMessageError(f"unknown compression codec {self.attributes & 0x07}") from None

    @property
    def timestamp_type(self) -> TimestampType:
        if self.magic == 0:
            return TimestampType.NO_TIMESTAMP
        return TimestampType.LOG_APPEND_TIME if self.attributes & 0x08 else TimestampType.CREATE_TIME

    is_transactional = False
    is_control = False
    producer_id = -1
    producer_epoch = -1
    base_sequence = -1
    partition_leader_epoch = -1

    def compute_crc(self) -> int:
        return zlib.crc32(self._buf[self._pos + 16:self._pos + self.size_in_bytes]) & 0xFFFFFFFF

    def verify_crc(self) -> bool:
        return self.compute_crc() == self.crc

    def validate(self) -> None:
        if not self.verify_crc():
            raise CorruptMessageError(f"legacy message at offset {self.offset}: CRC mismatch "
                                      f"(stored {self.crc}, computed {self.compute_crc()})")

    @property
    def last_offset(self) -> int:
        return self.offset

    @property
    def base_offset(self) -> int:
        if self.compression == CompressionType.NONE:
            return self.offset
        inner = self._decode_inner()
        return inner[0].offset if inner else self.offset

    @property
    def max_timestamp(self) -> int:
        return self.timestamp

    @property
    def records_count(self) -> int:
        return 1 if self.compression == CompressionType.NONE else len(self._decode_inner())

    def _decode_inner(self) -> list[Record]:
        if self._inner is not None:
            return self._inner
        if self.value is None:
            raise InvalidRecordError("compressed legacy message without a value")
        value = self.value
        if self.compression == CompressionType.LZ4 and self.magic == 0:
            value = repair_lz4_v0_header_checksum(bytes(value))
        data = memoryview(decompress(self.compression, value, self._max_decompressed))
        inner: list[LegacyBatch] = []
        pos = 0
        while pos + 12 <= len(data):
            (size,) = struct.unpack_from(">i", data, pos + 8)
            if pos + 12 + size > len(data):
                break
            msg = LegacyBatch(data, pos, self._max_decompressed)
            msg.validate()
            if msg.compression != CompressionType.NONE:
                raise InvalidRecordError("nested compressed legacy messages")
            inner.append(msg)
            pos += msg.size_in_bytes
        if not inner:
            raise InvalidRecordError("compressed legacy message with no inner messages")
        log_append = self.timestamp_type == TimestampType.LOG_APPEND_TIME
        if self.magic == 1:
            last_rel = inner[-1].offset
            shift = self.offset - last_rel
        else:
            shift = 0
        self._inner = [Record(m.offset + shift, self.timestamp if log_append else m.timestamp, m.key, m.value)
                       for m in inner]
        return self._inner

    def records(self, max_decompressed: int | None = None) -> Iterator[Record]:
        if max_decompressed is not None and max_decompressed != self._max_decompressed:
            self._max_decompressed, self._inner = max_decompressed, None
        if self.compression == CompressionType.NONE:
            yield Record(self.offset, self.timestamp, self.key, self.value)
        else:
            yield from self._decode_inner()

    def __iter__(self) -> Iterator[Record]:
        return self.records()

    def __repr__(self) -> str:
        return f"LegacyBatch(magic={self.magic}, offset={self.offset}, size={self.size_in_bytes})"


def upconvert_to_v2(legacy: LegacyBatch, base_offset: int, compression: int | None = None) -> bytes:
    """The same records as one v2 batch with consecutive offsets from `base_offset`, as Kafka's
    `LogValidator` assigns them when it converts a v0/v1 append (the inner offsets a legacy producer sent
    are not trusted). The codec stays the source's unless `compression` is given. Under LogAppendTime the
    wrapper's timestamp becomes the batch max timestamp; v0 messages carry none (-1)."""
    recs = list(legacy.records())
    log_append = legacy.timestamp_type == TimestampType.LOG_APPEND_TIME
    return build_batch([Record(base_offset + i, r.timestamp, r.key, r.value) for i, r in enumerate(recs)],
                       base_offset=base_offset,
                       compression=legacy.compression if compression is None else compression,
                       timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME,
                       max_timestamp=legacy.max_timestamp if log_append else None)


def merge_to_v2(messages: list[LegacyBatch]) -> bytes:
    """Uncompressed v0/v1 messages appended together become ONE v2 batch at base offset 0, as Kafka's
    `LogValidator.convertAndAssignOffsetsNonCompressed` builds one batch for the whole set (each legacy
    message is a "batch" of its own when iterated). CreateTime; v0 messages carry no timestamp (-1)."""
    recs = [r for m in messages for r in m.records()]
    return build_batch([Record(i, r.timestamp, r.key, r.value) for i, r in enumerate(recs)], base_offset=0)
