"""Files: Kafka's segments, indexes, partition logs and the data dir. No sockets.

Its names are imported from their modules when first asked for (PEP 562): a broker's start on an empty data
dir needs the `LogManager` but none of the segment code, which loads with the first partition (issue #26)."""

from __future__ import annotations

from chronolog.lazy import package_names

_WHERE = {
    "EARLIEST_LOCAL_TIMESTAMP": "basics", "EARLIEST_TIMESTAMP": "basics", "LATEST_TIMESTAMP": "basics",
    "MAX_TIMESTAMP": "basics", "AppendInfo": "log", "PartitionLog": "log", "ReadSlice": "local_log",
    "TimestampAndOffset": "log", "LogManager": "manager", "LogSegment": "segment", "OffsetIndex": "index",
    "TimeIndex": "index", "TimestampOffset": "index",
}

__all__ = sorted(_WHERE)


__getattr__, __dir__ = package_names(__name__, _WHERE, globals())
