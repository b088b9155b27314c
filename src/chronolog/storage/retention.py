"""Retention's side of a partition log: what it says, so that it is never silent (each deleted segment
with the breach that deleted it, Kafka's `SegmentDeletionReason.logReason` wording in `UnifiedLog`; a
warning when a produce brings records that are already past `retention.ms`, which Kafka does not give but
a tool built to replay history must: records loaded with their own, old timestamps would otherwise vanish
at the next retention check), and the delayed removal of deleted segments' files (`DelayedDeletions`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

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
