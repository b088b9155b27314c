"""What retention says, so that it is never silent: each deleted segment with the breach that deleted it
(Kafka's `SegmentDeletionReason.logReason` wording in `UnifiedLog`), and a warning when a produce brings
records that are already past `retention.ms` (Kafka says nothing then; a tool built to replay history
must: records loaded with their own, old timestamps would otherwise vanish at the next retention check).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

log = logging.getLogger("chronolog.storage.log")

# A partition repeats its "already past retention" warning at most this often; the batches between two
# warnings are counted in the next one.
EXPIRED_ARRIVAL_WARNING_EVERY_MS = 600_000

KEEP_HISTORY = ("set retention.ms=-1 on the topic (chronolog topics alter / kafka-configs.sh --alter "
                "--add-config retention.ms=-1) or log.retention.hours=-1 on the broker")


def segment_text(seg) -> str:
    """`LogSegment.toString` in Kafka's form (without materialising anything a reader does not hold)."""
    return (f"LogSegment(baseOffset={seg.base_offset}, size={seg.size}, "
            f"largestRecordTimestamp={seg.max_timestamp_so_far})")


def log_deletions(ident: str, reason: str, segments: list, *, retention_ms: int, retention_bytes: int,
                  size_before: int, log_start_offset: int) -> None:
    """One INFO line per deleted segment, with the breach, as `RetentionMsBreach` / `RetentionSizeBreach`
    / `StartOffsetBreach` log them."""
    if reason == "retention.ms":
        for seg in segments:
            basis = ("the largest record timestamp in the segment" if seg.max_timestamp_so_far >= 0
                     else "the last modified time of the segment")
            log.info("%sDeleting segment %s due to log retention time %dms breach based on %s", ident,
                     segment_text(seg), retention_ms, basis)
    elif reason == "retention.bytes":
        size = size_before
        for seg in segments:
            size -= seg.size
            log.info("%sDeleting segment %s due to log retention size %d breach. Log size after deletion "
                     "will be %d.", ident, segment_text(seg), retention_bytes, size)
    else:
        log.info("%sDeleting segments due to log start offset %d breach: %s", ident, log_start_offset,
                 ",".join(segment_text(s) for s in segments))


def utc_text(ms: int) -> str:
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace(
            "+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms"


def duration_text(ms: int) -> str:
    for unit, size in (("days", 86_400_000), ("hours", 3_600_000), ("minutes", 60_000), ("seconds", 1000)):
        if ms >= size and ms % size == 0:
            return f"{ms // size} {unit}"
    return f"{ms} ms"


class ExpiredArrivals:
    """Warns, at most once per `EXPIRED_ARRIVAL_WARNING_EVERY_MS` for one partition, that appended records
    are older than `retention.ms` already, naming the configs that keep them."""

    __slots__ = ("count", "last_warned", "newest", "oldest")

    def __init__(self) -> None:
        self.count = 0
        self.oldest = self.newest = 0
        self.last_warned: int | None = None

    def note(self, topic: str, partition: int, max_timestamp: int, now: int, retention_ms: int) -> None:
        """`max_timestamp` of a batch just appended with CreateTime under time retention."""
        if self.count == 0:
            self.oldest = self.newest = max_timestamp
        self.count += 1
        self.oldest, self.newest = min(self.oldest, max_timestamp), max(self.newest, max_timestamp)
        if self.last_warned is not None and now - self.last_warned < EXPIRED_ARRIVAL_WARNING_EVERY_MS:
            return
        log.warning(
            "%s-%d: %d produced batch(es) hold records already older than retention.ms=%d (%s): their largest "
            "timestamps lie between %s and %s, so the next retention check (log.retention.check.interval.ms) "
            "deletes them unless their segment also holds newer records. To keep history, %s.", topic,
            partition, self.count,
            retention_ms, duration_text(retention_ms), utc_text(self.oldest), utc_text(self.newest), KEEP_HISTORY)
        self.count, self.last_warned = 0, now
