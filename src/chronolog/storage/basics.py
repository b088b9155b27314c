"""What the storage layer's callers need without loading its engine: ListOffsets' special timestamps, the
leader epoch, the answer to a lookup by time, the clock and partition directory names. A broker imports
these at start; the segment and log code is imported when the first partition is opened or created (issue
#26: an empty data dir's start needs none of it)."""

from __future__ import annotations

import time
from dataclasses import dataclass

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5  # KIP-1005: the last offset copied to the tier
LEADER_EPOCH = 0


@dataclass(frozen=True)
class FoundTimestamp:
    timestamp: int
    offset: int
    leader_epoch: int


def now_ms() -> int:
    return int(time.time() * 1000)


def parse_log_dir_name(name: str) -> tuple[str, int]:
    topic, _, part = name.rpartition("-")
    if not topic or not part.isdigit():
        raise ValueError(f"not a partition directory name: {name}")
    return topic, int(part)
