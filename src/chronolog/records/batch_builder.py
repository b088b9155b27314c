"""Building RecordBatch v2 bytes: new batches from records (Kafka's `MemoryRecordsBuilder`), the empty
header the log cleaner keeps (`DefaultRecordBatch.writeEmptyHeader`), and the cleaner's splice of a
batch's kept records. The reading side is `records.batch`; in-place header patches `records.batch_patch`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable

from chronolog.errors import InvalidRecordError
from chronolog.records.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_OFFSET,
    DELETE_HORIZON_MASK,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    Record,
    RecordBatch,
    SimpleRecord,
    TimestampType,
    crc32c,
)
from chronolog.records.compression import CompressionType, compress
from chronolog.records.varint import write_varint


def _put_bytes(field, body: bytearray) -> None:
    """A record's nullable bytes: its varint length (-1 for null), then the bytes."""
    if field is None:
        write_varint(-1, body)
    else:
        write_varint(len(field), body)
        body += field


def _encode_record(out: bytearray, offset_delta: int, timestamp_delta: int, key, value, headers) -> None:
    body = bytearray()
    body.append(0)
    write_varint(timestamp_delta, body)
    write_varint(offset_delta, body)
    _put_bytes(key, body)
    _put_bytes(value, body)
    write_varint(len(headers), body)
    for hkey, hval in headers:
        _put_bytes(hkey.encode("utf-8"), body)
        _put_bytes(hval, body)
    write_varint(len(body), out)
    out += body


def _attributes(codec_bits: int, timestamp_type: int, is_transactional: bool, is_control: bool,
                has_delete_horizon: bool) -> int:
    """A v2 batch's attributes field (`DefaultRecordBatch.computeAttributes`)."""
    attributes = codec_bits
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    if has_delete_horizon:
        attributes |= DELETE_HORIZON_MASK
    return attributes


def build_batch(records: Iterable[SimpleRecord | Record], *, base_offset: int = 0,
                compression: int = CompressionType.NONE, timestamp_type: int = TimestampType.CREATE_TIME,
                producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                partition_leader_epoch: int = -1, is_transactional: bool = False,
                is_control: bool = False, max_timestamp: int | None = None,
                last_offset_delta: int | None = None, delete_horizon_ms: int | None = None) -> bytes:
    """Encode one v2 batch. `Record`s keep their offsets (delta = offset - base_offset); `SimpleRecord`s
    get their position. Under LogAppendTime pass the broker time as `max_timestamp`.

    The log cleaner rebuilds a batch from the records it keeps as `MemoryRecordsBuilder` does: the
    original `last_offset_delta` is kept (`overrideLastOffset`, so the producer's last sequence stays
    right), and a `delete_horizon_ms` becomes the base timestamp with the KIP-534 flag set (record
    timestamps stay exact: their deltas are taken from it)."""
    items = list(records)
    if not items:
        raise InvalidRecordError("a record batch needs at least one record")
    first_ts = items[0].timestamp if delete_horizon_ms is None else delete_horizon_ms
    body = bytearray()
    deltas = []
    for i, rec in enumerate(items):
        delta = rec.offset - base_offset if isinstance(rec, Record) else i
        deltas.append(delta)
        _encode_record(body, delta, rec.timestamp - first_ts, rec.key, rec.value, rec.headers)
    payload = compress(compression, bytes(body)) if compression != CompressionType.NONE else bytes(body)
    attributes = _attributes(int(compression) & COMPRESSION_MASK, timestamp_type, is_transactional, is_control,
                             delete_horizon_ms is not None)
    max_ts = max_timestamp if max_timestamp is not None else max(r.timestamp for r in items)
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(payload)
    buf = bytearray(HEADER_SIZE + len(payload))
    HEADER.pack_into(buf, 0, base_offset, batch_length, partition_leader_epoch, 2, 0, attributes,
                     max(deltas) if last_offset_delta is None else last_offset_delta, first_ts, max_ts,
                     producer_id, producer_epoch, base_sequence, len(items))
    buf[HEADER_SIZE:] = payload
    struct.pack_into(">I", buf, CRC_OFFSET, crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
    return bytes(buf)


def build_empty_batch(*, base_offset: int, last_offset_delta: int, max_timestamp: int, timestamp_type: int,
                      producer_id: int, producer_epoch: int, base_sequence: int, partition_leader_epoch: int,
                      is_transactional: bool, is_control: bool) -> bytes:
    """A batch header without records (`DefaultRecordBatch.writeEmptyHeader`): what the log cleaner keeps of
    a producer's last batch, or of the last batch it cleans, once every record in it is gone."""
    attributes = _attributes(0, timestamp_type, is_transactional, is_control, False)
    buf = bytearray(HEADER_SIZE)
    HEADER.pack_into(buf, 0, base_offset, HEADER_SIZE - LOG_OVERHEAD, partition_leader_epoch, 2, 0, attributes,
                     last_offset_delta, NO_TIMESTAMP, max_timestamp, producer_id, producer_epoch, base_sequence, 0)
    struct.pack_into(">I", buf, CRC_OFFSET, crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
    return bytes(buf)


def splice_batch(batch: RecordBatch, body, spans: list[tuple[int, int, int, int, int, int, int]],
                 compress_with: Callable[[int, bytes], bytes] | None = None) -> bytes:
    """A copy of `batch` holding only the records at `spans` of its decompressed `body`, copied byte for byte:
    base offset, last offset delta, base timestamp and producer fields unchanged (the records' deltas stay
    valid), the max timestamp that of the records kept (the broker's under LogAppendTime), recompressed
    with the batch's codec (through `compress_with(codec, data)` when given: the log cleaner's own). The
    log cleaner's fast path; it must keep at least one record."""
    payload = b"".join(bytes(body[s:e]) for _o, _t, s, e, _ks, _kl, _vl in spans)
    codec = batch.compression
    if codec != CompressionType.NONE:
        payload = (compress_with or compress)(codec, payload)
    b = batch
    if b.attributes & TIMESTAMP_TYPE_MASK:
        max_ts = b.max_timestamp
    else:
        max_ts = b.base_timestamp + max(t for _o, t, *_r in spans)
    buf = bytearray(HEADER_SIZE + len(payload))
    HEADER.pack_into(buf, 0, b.base_offset, HEADER_SIZE - LOG_OVERHEAD + len(payload), b.partition_leader_epoch,
                     2, 0, b.attributes, b.last_offset_delta, b.base_timestamp, max_ts, b.producer_id, b.producer_epoch,
                     b.base_sequence, len(spans))
    buf[HEADER_SIZE:] = payload
    struct.pack_into(">I", buf, CRC_OFFSET, crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
    return bytes(buf)

