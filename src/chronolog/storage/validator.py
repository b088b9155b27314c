"""The checks an append runs on what a client or a coordinator writes (Kafka's `LogValidator`, with
`UnifiedLog.analyzeAndValidateRecords` and `DefaultRecordBatch.ensureValid`).

`validate_batch` is the one list of checks for one v2 batch, in one order, for both of the log's append
paths (the producer's single batch written as it came, and the general loop over several or converted
batches); a legacy message set is first validated and converted here (`merge_legacy`, `to_v2`).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

from chronolog.config import TopicConfig
from chronolog.errors import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidTimestampError,
    MessageTooLargeError,
)
from chronolog.records import (
    HEADER_SIZE,
    CompressionType,
    Record,
    RecordBatch,
    build_batch,
    crc32c,
    merge_to_v2,
)
from chronolog.records.batch import (
    ATTRIBUTES_OFFSET,
    CONTROL_MASK,
    TIMESTAMP_TYPE_MASK,
    scan_batch_timestamps,
)
from chronolog.records.batch import HEADER as BATCH_HEADER


class BatchHeader(NamedTuple):
    """The 61-byte header of a v2 batch (`DefaultRecordBatch`), its fields by name."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @classmethod
    def read(cls, data) -> BatchHeader:
        return cls._make(BATCH_HEADER.unpack_from(data, 0))


def validate_batch(data: memoryview, h: BatchHeader, config: TopicConfig, now: int, *, origin_client: bool,
                   partition: str, converted: bool = False) -> tuple[int, int, int]:
    """Every check of one v2 batch, `data` exactly its bytes and `h` its header: CRC and counts
    (`ensureValid`), offset range and size, a client's base offset (`analyzeAndValidateRecords`), control
    batches and sequence numbers (`validateBatch`), keys on a compacted topic (`validateKey`), timestamps
    (`validateTimestamp`). `converted`: the batch was made here from legacy messages (already checked), whose
    base offset is the log's. Returns (smallest timestamp, max timestamp, record count) of its records."""
    if len(data) < HEADER_SIZE:
        raise CorruptMessageError(f"batch size {len(data)} is smaller than the header")
    computed = crc32c(data[ATTRIBUTES_OFFSET:])
    if computed != h.crc:
        raise CorruptMessageError(f"batch at offset {h.base_offset}: CRC mismatch (stored {h.crc}, computed "
                                  f"{computed})")
    if h.records_count < 0 or h.last_offset_delta < 0:
        raise InvalidRecordError(f"batch at offset {h.base_offset}: negative record count or delta")
    if h.last_offset_delta + 1 != h.records_count:
        check_offset_range(h.last_offset_delta, h.records_count)  # raises (inline: the per-batch cost)
    if len(data) > config.max_message_bytes:
        raise MessageTooLargeError(f"batch of {len(data)} bytes exceeds max.message.bytes "
                                   f"{config.max_message_bytes}")
    control = h.attributes & CONTROL_MASK
    if origin_client:
        if h.base_offset != 0 and not converted:
            raise InvalidRecordError(f"The baseOffset of the record batch in the append to {partition} should be 0, "
                                     f"but it is {h.base_offset}")
        if control:
            raise InvalidRecordError("clients may not write control batches")
        if h.producer_id >= 0 and h.base_sequence < 0:
            raise InvalidRecordError(f"invalid sequence number {h.base_sequence} in a batch of producer "
                                     f"{h.producer_id}")
    keyless = keyless_records(RecordBatch(data), partition) if config.compacted and not control else ()
    lo, batch_max, n_records = scan_batch_timestamps(data, h)
    validate_timestamps(data, h.attributes, lo, batch_max, config, now, keyless)
    return lo, batch_max, n_records


def check_offset_range(last_offset_delta: int, count: int) -> None:
    """`LogValidator.validateBatch`: a v2 batch's offset range must match its record count."""
    if last_offset_delta + 1 != count:
        raise InvalidRecordError(f"Inconsistent batch offset range [0, {last_offset_delta}] and count of "
                                 f"records {count}")


def keyless_records(batch: RecordBatch, partition: str) -> tuple[tuple[int, str], ...]:
    """`LogValidator.validateKey`: the cleaner keeps records by key, so a compacted topic refuses a record
    without one; each such record's index in the batch and Kafka's message (the batch is refused whole)."""
    message = f"Compacted topic cannot accept message without key in topic partition {partition}."
    return tuple((index, message) for index, record in enumerate(batch.records()) if record.key is None)


def validate_timestamps(data, attributes: int, lo: int, batch_max: int, config: TopicConfig, now: int,
                        keyless: tuple[tuple[int, str], ...] = ()) -> None:
    """LogValidator.validateTimestamp for a client's batch, with its record errors (KIP-467). The
    batch's smallest and largest timestamps decide whether any record is out of bounds (bounds are
    inclusive; -1, no timestamp, bypasses them); only then are the records walked to name each one.
    A producer may not set the LogAppendTime bit: on a LogAppendTime topic every record is refused, on a
    CreateTime topic those without a timestamp (Kafka reads a LogAppendTime batch's records as stamped
    with its max timestamp, so it is that value that is checked). `data`: the bytes of one v2 batch.
    `keyless`: the record errors of `keyless_records`; as in `LogValidator.validateRecord` a record's key is
    checked before its timestamp, and the batch is refused INVALID_TIMESTAMP if any record's timestamp is
    out of bounds, else INVALID_RECORD (`processRecordErrors`)."""
    producer_lat = bool(attributes & TIMESTAMP_TYPE_MASK)
    before, after = config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms
    if keyless:
        pass  # the records are walked to name each error
    elif config.log_append_time:
        if not producer_lat:
            return
    elif not producer_lat:
        # The common case decided inline (this runs for every batch appended): every timestamp in bounds,
        # or none set at all (-1 throughout; a -1 below a set maximum is walked and named).
        if lo == -1:
            if batch_max == -1:
                return
        elif now - lo <= before and lo - now <= after and \
                (batch_max == -1 or (now - batch_max <= before and batch_max - now <= after)):
            return

    def out_of_bounds(ts: int) -> bool:
        return ts != -1 and (now - ts > before or ts - now > after)

    batch = RecordBatch(bytearray(data))
    errors: list[tuple[int, str]] = []
    key_errors = dict(keyless)
    bad_timestamp = False
    for index, rec in enumerate(batch.records()):
        if index in key_errors:
            errors.append((index, key_errors[index]))
            continue
        ts = batch.max_timestamp if producer_lat else rec.timestamp
        if not config.log_append_time and ts != -1:
            if out_of_bounds(ts):
                bad_timestamp = True
                errors.append((index, f"Timestamp {ts} of message with offset {rec.offset} is out of range. "
                                      f"The timestamp should be within [{now - before}, {now + after}]"))
        elif producer_lat:
            bad_timestamp = True
            errors.append((index, f"Invalid timestamp type in message with offset {rec.offset}. Producer "
                                  "should not set timestamp type to LogAppendTime."))
    if bad_timestamp:
        exc = InvalidTimestampError("One or more records have been rejected due to invalid timestamp")
    elif errors:
        shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
        exc = InvalidRecordError(f"One or more records have been rejected due to {len(errors)} record errors in "
                                 f"total, and only showing the first three errors at most: [{shown}]")
    if errors:
        exc.record_errors = tuple(errors)
        raise exc


def merge_legacy(batches: list) -> tuple[bytearray, list]:
    """LogValidator: a compressed legacy wrapper must come alone; uncompressed legacy messages are
    checked and converted together into one v2 batch. Returns its bytes and the one-batch list."""
    if any(b.compression != CompressionType.NONE for b in batches):
        raise InvalidRecordError("Compressed outer record has more than one batch")
    for b in batches:
        b.validate()
    buf = bytearray(merge_to_v2(batches))
    return buf, [RecordBatch(buf)]


def recompress(batch: RecordBatch, codec: CompressionType) -> bytearray:
    """The batch rebuilt in the topic's codec: the one case that recompresses (LogValidator's
    `validateMessagesAndAssignOffsetsCompressed` when the codecs differ)."""
    return bytearray(build_batch(
        [Record(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records()],
        base_offset=batch.base_offset, compression=codec, timestamp_type=batch.timestamp_type,
        producer_id=batch.producer_id, producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence, is_transactional=batch.is_transactional))


@functools.lru_cache(maxsize=16)
def topic_codec(name: str) -> CompressionType | None:
    """The codec a topic's `compression.type` imposes; None for `producer` (keep the producer's)."""
    return None if name == "producer" else CompressionType.from_name(name)
