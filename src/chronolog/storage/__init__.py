"""Files: Kafka's segments, indexes, partition logs and the data dir. No sockets."""

from chronolog.storage.index import OffsetIndex, TimeIndex, TimestampOffset
from chronolog.storage.log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    AppendInfo,
    PartitionLog,
    ReadSlice,
    TimestampAndOffset,
)
from chronolog.storage.manager import LogManager
from chronolog.storage.segment import LogSegment

__all__ = ["EARLIEST_LOCAL_TIMESTAMP", "EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "MAX_TIMESTAMP", "AppendInfo",
           "LogManager", "LogSegment", "OffsetIndex", "PartitionLog", "ReadSlice", "TimeIndex",
           "TimestampAndOffset", "TimestampOffset"]
