"""Which log the cleaner cleans next, and how far (Kafka's `LogCleanerManager`: `cleanableOffsets`,
`maxCompactionDelay`, `grabFilthiestCompactedLog`); the cleaner checkpoint file's name is
`CLEANER_CHECKPOINT` (storage.checkpoints), which the log manager reads and writes."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from chronolog.storage.checkpoints import CLEANER_CHECKPOINT

if TYPE_CHECKING:
    from chronolog.storage.log import PartitionLog
    from chronolog.storage.segment import LogSegment

__all__ = ["CLEANER_CHECKPOINT", "LogToClean", "choose_log", "cleanable_offsets", "log_to_clean",
           "max_compaction_delay"]

log = logging.getLogger("chronolog.storage.cleaner")


@dataclass
class LogToClean:
    """A log and its cleanable range (`LogToClean`): clean bytes before `first_dirty`, cleanable bytes from
    there to `first_uncleanable` (whole segments)."""

    key: tuple[str, int]
    log: PartitionLog
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    cleanable_bytes: int
    needs_compaction_now: bool = False

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


def _first_batch_max_timestamp(seg: LogSegment) -> int:
    """`LogSegment.getFirstBatchTimestamp`: the first batch's max timestamp (-1 without one)."""
    if seg.rolling_based_timestamp is not None:
        return seg.rolling_based_timestamp
    head = seg.pread(0, 61)
    if len(head) < 61 or head[16] != 2:
        return -1
    return int.from_bytes(head[35:43], "big", signed=True)


def cleanable_offsets(plog: PartitionLog, last_clean: int | None, now: int) -> tuple[int, int, bool]:
    """(first dirty offset, first uncleanable offset, checkpoint needs resetting) as
    `LogCleanerManager.cleanableOffsets` finds them. Called with the log's lock held."""
    start, end = plog.log_start_offset, plog.log_end_offset
    first_dirty, reset = (last_clean, False) if last_clean is not None else (start, False)
    if first_dirty < start or first_dirty > end:
        if first_dirty > end or not plog.config.deletes:
            log.warning("Resetting first dirty offset of %s-%d to log start offset %d since the checkpointed "
                        "offset %d is invalid.", plog.topic, plog.partition, start, first_dirty)
        first_dirty, reset = start, True
    limits = [plog.last_stable_offset, plog.active.base_offset]
    lag = max(plog.config.min_compaction_lag_ms, 0)
    if lag > 0:
        for seg in _non_active_from(plog, first_dirty):
            if seg.largest_timestamp > now - lag:
                limits.append(seg.base_offset)
                break
    return first_dirty, max(first_dirty, min(limits)), reset


def _non_active_from(plog: PartitionLog, offset: int) -> list[LogSegment]:
    segs = plog.segments[:-1]
    return [s for i, s in enumerate(segs)
            if (segs[i + 1].base_offset if i + 1 < len(segs) else plog.active.base_offset) > offset]


def max_compaction_delay(plog: PartitionLog, first_dirty: int, now: int) -> int:
    """`LogCleanerManager.maxCompactionDelay`: how long past `max.compaction.lag.ms` the oldest dirty
    segment's first batch is (0 when none is), judged by record timestamps (KIP-354)."""
    stamps = [t for t in (_first_batch_max_timestamp(s) for s in _non_active_from(plog, first_dirty)) if t > 0]
    if not stamps:
        return 0
    clean_until = now - max(plog.config.max_compaction_lag_ms, 0)
    earliest = min(stamps)
    return clean_until - earliest if earliest < clean_until else 0


def log_to_clean(key: tuple[str, int], plog: PartitionLog, last_clean: int | None, now: int
                 ) -> tuple[LogToClean, bool]:
    """The cleanable range of one log and whether its checkpoint must be reset (`grabFilthiestCompactedLog`
    and `calculateCleanableBytes`)."""
    with plog.lock:
        first_dirty, uncleanable, reset = cleanable_offsets(plog, last_clean, now)
        delay = max_compaction_delay(plog, first_dirty, now)
        # calculateCleanableBytes: whole segments, up to the first one the uncleanable offset lies in
        later = _non_active_from(plog, uncleanable)
        first_unclean_seg = later[0] if later else plog.active
        upto = first_unclean_seg.base_offset
        lo = min(first_dirty, upto)
        segs = plog.segments
        cleanable = sum(s.size for i, s in enumerate(segs)
                        if s.base_offset < upto and (i + 1 == len(segs) or segs[i + 1].base_offset > lo))
        clean = sum(s.size for s in segs if s.base_offset < first_dirty)  # logSegments(-1, firstDirtyOffset)
        return LogToClean(key, plog, first_dirty, upto, clean, cleanable, delay > 0), reset


def choose_log(logs: dict[tuple[str, int], PartitionLog], checkpoints: dict[tuple[str, int], int], now: int,
               skip: set[tuple[str, int]] = frozenset()) -> tuple[LogToClean | None, dict[tuple[str, int], int]]:
    """The filthiest compacted log above its `min.cleanable.dirty.ratio`, or one past
    `max.compaction.lag.ms` with cleanable bytes (`LogCleanerManager.grabFilthiestCompactedLog`); also the
    checkpoints that must be reset."""
    candidates = []
    resets = {}
    for key, plog in logs.items():
        if not plog.config.compacted or key in skip or plog._closed:
            continue
        ltc, reset = log_to_clean(key, plog, checkpoints.get(key), now)
        if reset:
            resets[key] = ltc.first_dirty
        if ltc.total_bytes > 0:
            candidates.append(ltc)
    ready = [c for c in candidates if (c.needs_compaction_now and c.cleanable_bytes > 0)
             or c.cleanable_ratio > c.log.config.min_cleanable_dirty_ratio]
    if not ready:
        return None, resets
    return max(ready, key=lambda c: c.cleanable_ratio), resets


