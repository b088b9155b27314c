"""Retention's side of a partition log: what it says, so that it is never silent (each deleted segment
with the breach that deleted it, Kafka's `SegmentDeletionReason.logReason` wording in `UnifiedLog`; a
warning when a produce brings records that are already past `retention.ms`, which Kafka does not give but
a tool built to replay history must: records loaded with their own, old timestamps would otherwise vanish
at the next retention check), the delayed removal of deleted segments' files (`DelayedDeletions`), and
the rules themselves (`LogRetention`, the partition log's base class: `UnifiedLog.deleteOldSegments`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from chronolog.errors import OffsetOutOfRangeError, PolicyViolationError
from chronolog.storage.producers import delete_snapshot

if TYPE_CHECKING:
    from chronolog.storage.segment import LogSegment

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
    local = "local " if reason.startswith("local.") else ""  # a tiered log's (KIP-405 RetentionMsBreach)
    if reason in ("retention.ms", "local.retention.ms"):
        for seg in segments:
            basis = ("the largest record timestamp in the segment" if seg.max_timestamp_so_far >= 0
                     else "the last modified time of the segment")
            log.info("%sDeleting segment %s due to %slog retention time %dms breach based on %s", ident,
                     segment_text(seg), local, retention_ms, basis)
    elif reason in ("retention.bytes", "local.retention.bytes"):
        size = size_before
        for seg in segments:
            size -= seg.size
            log.info("%sDeleting segment %s due to %slog retention size %d breach. %sog size after deletion "
                     "will be %d.", ident, segment_text(seg), local, retention_bytes, "Local l" if local else "L",
                     size)
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


class DelayedDeletions:
    """Removes renamed `.deleted` files once `file.delete.delay.ms` has passed on the log's clock (Kafka
    schedules `LocalLog.deleteSegmentFiles` on its `Scheduler`, whose time tests mock). A timer only wakes
    `delete_due`, which decides by the clock; files still waiting when the broker stops are removed when the
    log is next loaded, as in Kafka."""

    def __init__(self, clock: Callable[[], int]) -> None:
        self.clock = clock
        self._due: list[tuple[int, list[Path]]] = []  # (due ms on `clock`, `.deleted` files)
        self._lock = threading.Lock()
        self.timer: threading.Timer | None = None
        self._stopped = False

    def remove_after(self, paths: list[Path], delay_ms: int) -> None:
        if delay_ms <= 0:
            _unlink_all(paths)
            return
        with self._lock:
            self._due.append((self.clock() + delay_ms, list(paths)))
        self.arm(delay_ms)

    def delete_due(self, now: int | None = None) -> int:
        """Remove the files whose delay has passed at `now` (default: the clock); returns how many."""
        now = self.clock() if now is None else now
        with self._lock:
            due = [paths for at, paths in self._due if at <= now]
            self._due = [(at, paths) for at, paths in self._due if at > now]
        for paths in due:
            _unlink_all(paths)
        return sum(len(paths) for paths in due)

    def arm(self, delay_ms: int) -> None:
        with self._lock:
            if self.timer is not None or self._stopped:
                return  # the armed timer re-arms itself for what is still waiting
            timer = threading.Timer(max(delay_ms, 1) / 1000.0, self.on_timer)
            timer.daemon = True
            self.timer = timer
        timer.start()

    def on_timer(self) -> None:
        with self._lock:
            self.timer = None
        self.delete_due()
        with self._lock:
            if not self._due:
                return
            wait = min(at for at, _ in self._due) - self.clock()
        self.arm(wait)

    def cancel(self) -> None:
        """Cancel the armed timer, if any (the files wait for the next load)."""
        with self._lock:
            timer, self.timer = self.timer, None
        if timer is not None:
            timer.cancel()

    def stop(self) -> None:
        """The log is closed: no timer is armed again, and the armed one is cancelled."""
        with self._lock:
            self._stopped = True
        self.cancel()


def _unlink_all(paths: list[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


class LogRetention:
    """Retention's rules on a partition log (`PartitionLog`'s base class): `UnifiedLog.deleteOldSegments` and
    DeleteRecords. Uses the log's lock, segments, config, offsets and clock."""

    def delete_old_segments(self, now: int | None = None) -> int:
        """`UnifiedLog.deleteOldSegments` in Kafka's order (KAFKA-12177): segments below the log start offset
        first, then retention.bytes (measured after them), then retention.ms; without the delete policy only
        the first, so DeleteRecords frees space on a compacted topic too. A tiered log's local segments go by
        local.retention.* once copied (`RemoteLog.delete_local_segments`)."""
        now = self.clock() if now is None else now
        if self.remote is not None:
            return self.remote.delete_local_segments(now)
        return self.delete_old_local(now)

    def delete_old_local(self, now: int, *, move_start: bool | None = None) -> int:
        """The three rules of `delete_old_segments` on the local segments."""
        cfg = self.config
        deleted = self._delete_segments(lambda s, n: n is not None and n.base_offset <= self.log_start_offset,
                                        now, "log start offset", move_start=move_start)
        if not cfg.deletes:
            return deleted
        if cfg.retention_bytes >= 0:
            diff = self.size - cfg.retention_bytes
            if diff > 0:
                state = {"diff": diff}

                def breached(seg: LogSegment, _nxt: LogSegment | None) -> bool:
                    if state["diff"] - seg.size >= 0:
                        state["diff"] -= seg.size
                        return True
                    return False
                deleted += self._delete_segments(breached, now, "retention.bytes", move_start=move_start)
        if cfg.retention_ms >= 0:
            deleted += self._delete_segments(lambda s, n: now - s.largest_timestamp > cfg.retention_ms, now,
                                             "retention.ms", move_start=move_start)
        return deleted

    def _delete_segments(self, predicate, now: int, reason: str, *, move_start: bool | None = None,
                         limit: int | None = None) -> int:
        """Delete the oldest segments while `predicate` holds. `move_start` (default: unless the log has
        tiered segments, which keep the log start offset) raises the log start offset to the first segment
        left (`incrementStartOffset`); `limit` is the local.retention.* value a tiered log's reason names."""
        with self.lock:
            deletable = []
            for i, seg in enumerate(self.segments):
                nxt = self.segments[i + 1] if i + 1 < len(self.segments) else None
                upper = nxt.base_offset if nxt is not None else self._next_offset
                last_and_empty = nxt is None and seg.size == 0
                if self.high_watermark >= upper and not last_and_empty and predicate(seg, nxt):
                    deletable.append(seg)
                else:
                    if (reason in ("retention.ms", "local.retention.ms") and seg.max_timestamp_so_far > now
                            and now - seg.largest_timestamp <= self.config.retention_ms):
                        log.warning("%s-%d: retention is blocked by segment %s whose largest timestamp %d is "
                                    "in the future (now %d)", self.topic, self.partition, seg.log_path.name,
                                    seg.max_timestamp_so_far, now)
                    break
            if not deletable:
                return 0
            log_deletions(f"[UnifiedLog partition={self.topic}-{self.partition}, dir={self.dir.parent}] ", reason,
                          deletable, retention_ms=self.config.retention_ms if limit is None else limit,
                          retention_bytes=self.config.retention_bytes if limit is None else limit, size_before=self.size,
                          log_start_offset=self.log_start_offset)
            if len(deletable) == len(self.segments):
                self.roll()
            for seg in deletable:
                self.segments.remove(seg)
                self._schedule_delete(seg)
                delete_snapshot(self.dir, seg.base_offset)  # the snapshot taken when it was rolled in
            self._segments_version += 1
            if move_start if move_start is not None else self.remote is None:
                self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
            log.info("%s-%d: deleted %d segment(s) by %s; log start offset %d", self.topic, self.partition,
                     len(deletable), reason, self.log_start_offset)
            return len(deletable)

    def remove_after_delay(self, paths: list[Path]) -> None:
        """Remove renamed `.deleted` files once `file.delete.delay.ms` has passed on the log's clock
        (`storage.retention.DelayedDeletions`)."""
        self._deletions.remove_after(paths, self.config.file_delete_delay_ms)

    def delete_due_files(self, now: int | None = None) -> int:
        """Remove the `.deleted` files whose delay has passed at `now` (default: the log's clock); returns
        how many files were removed. The timer calls it; tests call it after moving their clock."""
        return self._deletions.delete_due(now)

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: raise the log start offset (`UnifiedLog.deleteRecordsOnLeader`)."""
        with self.lock:
            if not self.config.deletes:  # ReplicaManager.deleteRecordsOnLocalLog
                raise PolicyViolationError(f"Records of partition {self.topic}-{self.partition} can not be "
                                           "deleted due to the configured policy")
            if offset == -1:
                offset = self.high_watermark
            if offset > self.high_watermark or offset < 0:
                raise OffsetOutOfRangeError(f"cannot delete before {offset}: high watermark {self.high_watermark}")
            if offset > self.log_start_offset:
                self.log_start_offset = offset
                self._delete_segments(lambda s, n: n is not None and n.base_offset <= offset, self.clock(),
                                      "delete records")
            return self.log_start_offset
