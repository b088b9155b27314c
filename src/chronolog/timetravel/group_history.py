"""Where was a consumer group at time T? Its commit records in `__consumer_offsets`, replayed up to T.

Every OffsetCommit record carries the time the coordinator wrote it (the record timestamp); replaying a
group's records (read_committed: aborted transactional commits left out) up to T gives the committed
position of each partition as of T, which `reset-offsets --to-group-position-at` commits again (undoing a
bad deploy). The history reaches back as far as the log cleaner has left it: compaction keeps only the
last record of each key in cleaned segments, and the active segment (offsets.topic.segment.bytes, 100 MiB)
is never cleaned. Works over a broker (a consumer of the internal topic) or a data dir.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from chronolog.errors import ChronologError
from chronolog.records.group_records import CONSUMER_OFFSETS_TOPIC, CommitEvent, commit_events, partition_for

READ_COMMITTED = "read_committed"


@dataclass(frozen=True)
class Position:
    topic: str
    partition: int
    offset: int
    committed_at: int  # the commit record's timestamp


def group_events(source: Any, group: str) -> Iterator[CommitEvent]:
    """The group's commit records (and tombstones), oldest first, from its `__consumer_offsets` partition."""
    try:
        partitions = source.partitions(CONSUMER_OFFSETS_TOPIC)
    except ChronologError:
        partitions = []
    if not partitions:
        raise ChronologError(f"no {CONSUMER_OFFSETS_TOPIC} topic: no group has committed offsets here")
    p = partition_for(group, len(partitions))
    low, high = source.watermarks(CONSUMER_OFFSETS_TOPIC, p, isolation=READ_COMMITTED)
    yield from commit_events(source.read(CONSUMER_OFFSETS_TOPIC, p, low, high, isolation=READ_COMMITTED), group)


def positions_at(events: Iterable[CommitEvent], at: int, topic: str | None = None) -> dict[tuple[str, int], Position]:
    """The committed position of every partition as of `at` (commits at or before it; a tombstone clears)."""
    out: dict[tuple[str, int], Position] = {}
    for e in events:
        if e.timestamp > at:
            continue  # records are in offset order; timestamps are the coordinator's clock, mostly increasing
        if topic is not None and e.topic != topic:
            continue
        key = (e.topic, e.partition)
        if e.offset is None:
            out.pop(key, None)
        else:
            out[key] = Position(e.topic, e.partition, e.offset, e.timestamp)
    return out
