"""Bytes <-> records: RecordBatch v2, legacy v0/v1 message sets, compression. No files, no sockets."""

from chronolog.records.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    Record,
    RecordBatch,
    SimpleRecord,
    TimestampType,
    crc32c,
)
from chronolog.records.batch_builder import build_batch
from chronolog.records.batch_patch import set_base_offset, set_max_timestamp, set_partition_leader_epoch
from chronolog.records.compression import CompressionType, compress, decompress
from chronolog.records.legacy import LegacyBatch, merge_to_v2, upconvert_to_v2
from chronolog.records.memory import AnyBatch, MemoryRecords, iter_batches

__all__ = [
    "HEADER_SIZE", "LOG_OVERHEAD", "NO_TIMESTAMP", "AnyBatch", "CompressionType", "LegacyBatch",
    "MemoryRecords", "Record", "RecordBatch", "SimpleRecord", "TimestampType", "build_batch", "compress",
    "crc32c", "decompress", "iter_batches", "set_base_offset", "set_max_timestamp",
    "set_partition_leader_epoch", "upconvert_to_v2", "merge_to_v2",
]
