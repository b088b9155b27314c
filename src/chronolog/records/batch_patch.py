"""In-place patches of a v2 batch's header, as the broker makes them on append (`DefaultRecordBatch`'s
setters): base offset and leader epoch lie outside the CRC; max timestamp and attributes need it
recomputed, never a recompression."""

from __future__ import annotations

import struct

from chronolog.records.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    LOG_OVERHEAD,
    MAX_TIMESTAMP_OFFSET,
    PARTITION_LEADER_EPOCH_OFFSET,
    TIMESTAMP_TYPE_MASK,
    TimestampType,
    crc32c,
)


def _rewrite_crc(buf, position: int) -> None:
    (batch_length,) = struct.unpack_from(">i", buf, position + 8)
    end = position + LOG_OVERHEAD + batch_length
    struct.pack_into(">I", buf, position + CRC_OFFSET,
                     crc32c(memoryview(buf)[position + ATTRIBUTES_OFFSET:end]))


def set_base_offset(buf, position: int, offset: int) -> None:
    """Outside the CRC: no recomputation (`DefaultRecordBatch.setLastOffset` style)."""
    struct.pack_into(">q", buf, position, offset)


def set_partition_leader_epoch(buf, position: int, epoch: int) -> None:
    struct.pack_into(">i", buf, position + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_max_timestamp(buf, position: int, timestamp_type: int, timestamp: int) -> None:
    """Set max timestamp and the timestamp-type bit and recompute the CRC (`setMaxTimestamp`); records,
    compressed or not, are untouched: consumers derive LogAppendTime timestamps from the header."""
    (attributes,) = struct.unpack_from(">h", buf, position + ATTRIBUTES_OFFSET)
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    else:
        attributes &= ~TIMESTAMP_TYPE_MASK
    struct.pack_into(">h", buf, position + ATTRIBUTES_OFFSET, attributes)
    struct.pack_into(">q", buf, position + MAX_TIMESTAMP_OFFSET, timestamp)
    _rewrite_crc(buf, position)
