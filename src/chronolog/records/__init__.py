"""Bytes <-> records: RecordBatch v2, legacy v0/v1 message sets, compression. No files, no sockets.

The names below are imported from their modules when first read (PEP 562), not when the package is: a
reader of one module (the column decoder of `consume --format raw`) does not pay for all the others."""

from __future__ import annotations

from chronolog.lazy import package_names

_WHERE = {
    "HEADER_SIZE": "batch", "LOG_OVERHEAD": "batch", "NO_TIMESTAMP": "batch", "Record": "batch",
    "RecordBatch": "batch", "SimpleRecord": "batch", "TimestampType": "batch", "crc32c": "batch",
    "build_batch": "batch_builder",
    "set_base_offset": "batch_patch", "set_max_timestamp": "batch_patch", "set_partition_leader_epoch": "batch_patch",
    "CompressionType": "compression", "compress": "compression", "decompress": "compression",
    "LegacyBatch": "legacy", "merge_to_v2": "legacy", "upconvert_to_v2": "legacy",
    "AnyBatch": "memory", "MemoryRecords": "memory", "iter_batches": "memory",
}

__all__ = [
    "HEADER_SIZE", "LOG_OVERHEAD", "NO_TIMESTAMP", "AnyBatch", "CompressionType", "LegacyBatch",
    "MemoryRecords", "Record", "RecordBatch", "SimpleRecord", "TimestampType", "build_batch", "compress",
    "crc32c", "decompress", "iter_batches", "set_base_offset", "set_max_timestamp",
    "set_partition_leader_epoch", "upconvert_to_v2", "merge_to_v2",
]


__getattr__, __dir__ = package_names(__name__, _WHERE, globals())
