"""A partition's segment list (Kafka's `LocalLog`): finding the segment of an offset, rolling, reading
whole batches and transactions' index entries across segments, deleting segment files, and the swap of
segments (`LocalLog.replaceSegments`) with its recovery after a crash (`LogLoader`).

A cleaned segment is written as `<base>.*.cleaned` files. The swap renames them to `.swap` (the `.log`
last: that rename commits), the old segments' files to `.deleted` (their `.log` last), then the `.swap`
files to their final names (the `.log` last). A crash at any step is finished or undone by
`recover_swaps` at the next open; `SwapResolvedFiles` reads such a directory as that open will see it,
without changing it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from chronolog.config import TopicConfig
from chronolog.diskio import fsync_dir
from chronolog.errors import OffsetOutOfRangeError
from chronolog.records import Record, RecordBatch
from chronolog.storage.minima import MINIMA_SUFFIX
from chronolog.storage.segment import DELETED_SUFFIX, LOG_SUFFIX, LogSegment, segment_name
from chronolog.storage.txnindex import (
    READ_COMMITTED,
    TXN_INDEX_SUFFIX,
    AbortedFilter,
    AbortedTxn,
    check_isolation,
)

if TYPE_CHECKING:
    from chronolog.storage.remote.remote_log import RemoteLog

log = logging.getLogger("chronolog.storage.log")

CLEANED_SUFFIX = ".cleaned"  # LogFileUtils.CLEANED_FILE_SUFFIX
SWAP_SUFFIX = ".swap"  # LogFileUtils.SWAP_FILE_SUFFIX
_OTHER_SUFFIXES = (".index", ".timeindex", TXN_INDEX_SUFFIX, MINIMA_SUFFIX)


class SegmentsChangedError(Exception):
    """A replaced segment changed since its copy was made (retention, DeleteRecords, truncation, deletion
    of the topic): nothing was swapped."""


def has_interrupted_swap(directory: Path) -> bool:
    """Whether a partition directory holds files of a swap a crash interrupted (`.swap` or `.cleaned`)."""
    try:
        return any(n.endswith((SWAP_SUFFIX, CLEANED_SUFFIX)) for n in os.listdir(directory))
    except OSError:
        return False


def _swap_order(base: int, suffix: str) -> list[str]:
    """File names of a segment, its `.log` last: the `.log`'s rename is the step that commits."""
    return [f"{base:020d}{s}{suffix}" for s in (".index", ".timeindex", TXN_INDEX_SUFFIX, LOG_SUFFIX)]


def _undo_swap(directory: Path, base: int) -> None:
    for suffix in (CLEANED_SUFFIX, SWAP_SUFFIX):
        for name in _swap_order(base, suffix):
            (directory / name).unlink(missing_ok=True)


@dataclass(frozen=True)
class ReadSlice:
    """Bytes of whole batches in one segment file, for `os.sendfile` or one `pread`."""

    file_path: Path
    position: int
    size: int
    first_offset: int
    _segment: LogSegment
    _after: int = -1  # the next segment's base offset, or the log end offset, when the slice was made

    def fileno(self) -> int:
        return self._segment._fd

    def read_bytes(self) -> bytes:
        """The bytes, read with one `pread` (short only if the segment was deleted meanwhile)."""
        return self._segment.pread(self.position, self.size)

    @property
    def next_offset(self) -> int:
        """The offset just past the slice's last batch: the base offset of the batch that follows it in
        the segment, else the next segment's base offset (or the log end offset). The upper bound a
        read_committed fetch collects aborted transactions to (`LogSegment.fetchUpperBoundOffset`, which
        Kafka takes from the offset index and may overshoot; this is exact)."""
        end = self.position + self.size
        if end + 8 <= self._segment.size:
            head = self._segment.pread(end, 8)
            if len(head) == 8:
                return int.from_bytes(head, "big", signed=True)
        return self._after


class LocalLog:
    """The segment list of a partition as Kafka's `LocalLog` keeps it; `PartitionLog` (`UnifiedLog`) is
    built on it and holds its state (directory, config, lock, segments, log end offset). Public methods take
    the log's lock."""

    dir: Path
    topic: str
    partition: int
    config: TopicConfig
    lock: threading.RLock
    clock: Callable[[], int]
    segments: list[LogSegment]
    log_start_offset: int
    _next_offset: int
    _segments_version: int  # bumped whenever the segment list or an inactive segment changes
    _segment_created_ms: dict[int, int]
    _closed: bool
    remote: RemoteLog | None

    def _new_segment(self, base: int, *, check_indexes: bool = True) -> LogSegment:
        seg = LogSegment(self.dir, base, index_interval_bytes=self.config.index_interval_bytes,
                         max_index_size=self.config.segment_index_bytes, time_index_style=self.time_index_style,
                         rebuild_missing=False, lock=self.lock, check_indexes=check_indexes)
        self._segment_created_ms[base] = self.clock()
        return seg

    def _new_jitter(self) -> int:
        """`LogConfig.randomSegmentJitter`: uniform in [0, min(segment.jitter.ms, segment.ms))."""
        bound = min(self.config.segment_jitter_ms, self.config.segment_ms)
        return random.randrange(bound) if bound > 0 else 0

    @property
    def active(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self._next_offset

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)

    def append_raw_for_test(self, data: bytes) -> None:
        """Write bytes without validation (to build fixtures such as torn tails)."""
        with self.lock:
            os.pwrite(self.active._fd, data, self.active.size)
            self.active.size += len(data)

    def _maybe_roll(self, size: int, max_ts: int, last_offset: int, now: int) -> None:
        cfg = self.config
        seg = self.active
        if seg.should_roll(segment_bytes=cfg.segment_bytes, segment_ms=cfg.segment_ms, jitter_ms=self._jitter,
                           max_timestamp=max_ts, last_offset=last_offset, messages_size=size, now_ms=now,
                           created_ms=self._segment_created_ms.get(seg.base_offset, now)):
            self.roll()

    def roll(self) -> LogSegment:
        """Close the active segment for appends and start a new one at the log end offset."""
        with self.lock:
            if self.active.size == 0 and self.active.base_offset == self._next_offset:
                return self.active
            self.active.on_become_inactive()  # also writes its minima sidecar
            self.active.flush()
            self._snapshot_producers()  # at the new segment's base offset, as Kafka's roll does
            seg = self._new_segment_or_nothing(self._next_offset)
            self.active.is_last = False
            self.active._offset_limit_after = seg.base_offset
            self.segments.append(seg)
            self._segments_version += 1
            self._jitter = self._new_jitter()
            return seg

    def _new_segment_or_nothing(self, base: int) -> LogSegment:
        """A new segment for a roll, tracking its minima; when its files cannot be made, those it made are
        removed (a later roll starts afresh) and the error goes on. The old active segment stays last: its
        indexes are trimmed, so the next append tries the roll again."""
        names = [self.dir / segment_name(base, s) for s in (LOG_SUFFIX, ".index", ".timeindex")]
        existed = [p.exists() for p in names]
        seg = None
        try:
            seg = self._new_segment(base)
            seg.start_minima()
            return seg
        except BaseException:
            if seg is not None:
                seg.close_for_delete()
            for path, was in zip(names, existed, strict=True):
                if not was:
                    with contextlib.suppress(OSError):
                        path.unlink()
            raise

    def _segment_for(self, offset: int) -> int:
        lo, hi = 0, len(self.segments) - 1
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if self.segments[mid].base_offset <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def read(self, start_offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_message: bool = True) -> ReadSlice | None:
        """Whole batches from the first one holding `start_offset`, up to `max_bytes` (at least one batch
        with `min_one_message`, as KIP-74). None at the log end. Found from batch headers and the offset
        index (`LogSegment.fetch_range`), so serving a fetch never parses records nor reads the bytes
        twice; segments with corrupt ranges take the batch-parsing path, which steps over them. Offsets
        below the first local segment of a tiered log are read from the tier, outside the lock."""
        remote = self.remote
        if remote is not None and self.log_start_offset <= start_offset < self.segments[0].base_offset:
            return remote.read(start_offset, max_bytes, max_offset, min_one_message)
        with self.lock:
            if start_offset < self.log_start_offset or start_offset > self._next_offset:
                raise OffsetOutOfRangeError(f"offset {start_offset} is outside [{self.log_start_offset}, "
                                            f"{self._next_offset}] for {self.topic}-{self.partition}")
            limit = self._next_offset if max_offset is None else min(max_offset, self._next_offset)
            if start_offset >= limit:
                return None
            for i in range(self._segment_for(start_offset), len(self.segments)):
                seg = self.segments[i]
                whole = limit >= (self.segments[i + 1].base_offset if i + 1 < len(self.segments)
                                  else self._next_offset)
                found = seg.fetch_range(start_offset, max_bytes, None if whole else limit, min_one_message)
                if found is False:
                    return self._read_parsing(seg, start_offset, max_bytes, limit, min_one_message)
                if found is None:
                    continue  # no batch at or after `start_offset` here: the next segment has it
                pos, size, first = found
                after = self.segments[i + 1].base_offset if i + 1 < len(self.segments) else self._next_offset
                return ReadSlice(seg.log_path, pos, size, first, seg, after) if size else None
            return None

    def _read_parsing(self, seg: LogSegment, start_offset: int, max_bytes: int, limit: int,
                      min_one_message: bool) -> ReadSlice | None:
        """`read` through parsed batches, for segments whose corrupt ranges must be stepped over."""
        for i in range(self.segments.index(seg), len(self.segments)):
            seg = self.segments[i]
            found = seg.translate_offset(start_offset)
            if found is None:
                continue
            pos, first_batch = found
            size = 0
            for _p, batch in seg.batches_from(pos):
                if _p != pos + size:
                    break  # a corrupt range lies between: one slice must be contiguous bytes
                if batch.base_offset >= limit and size > 0:
                    break
                if size + batch.size_in_bytes > max_bytes and (size > 0 or not min_one_message):
                    break
                size += batch.size_in_bytes
            if size == 0:
                return None
            after = self.segments[i + 1].base_offset if i + 1 < len(self.segments) else self._next_offset
            return ReadSlice(seg.log_path, pos, size, first_batch.base_offset, seg, after)
        return None

    def read_records(self, start_offset: int, end_offset: int | None = None, *,
                     isolation: str = "read_uncommitted") -> Iterator[Record]:
        """Records with start_offset <= offset < end_offset (tools and tests; decodes everything), as a
        Kafka consumer with this `isolation.level` returns them: control batches are never records;
        read_committed stops at the last stable offset and drops aborted transactions' records."""
        start = max(start_offset, self.log_start_offset)
        for batch in self.read_data_batches(start, end_offset, isolation=isolation):
            for rec in batch.records():
                if start <= rec.offset and (end_offset is None or rec.offset < end_offset):
                    yield rec

    def read_data_batches(self, start_offset: int, end_offset: int | None = None, *,
                          isolation: str = "read_uncommitted") -> Iterator:
        """`read_batches` as a consumer sees them: no control batches, and under read_committed nothing
        from the last stable offset on and no batch of an aborted transaction (the `.txnindex` entries
        overlapping the range, `aborted_txns`)."""
        check_isolation(isolation)
        start = max(start_offset, self.log_start_offset)
        end = self._next_offset if end_offset is None else min(end_offset, self._next_offset)
        dropped = AbortedFilter([])
        if isolation == READ_COMMITTED:
            end = min(end, self.last_stable_offset)
            if start < end:
                dropped = AbortedFilter(self.aborted_txns(start, end))
        for batch in self.read_batches(start, end):
            if isinstance(batch, RecordBatch):
                if batch.is_control:
                    continue
                if dropped and batch.is_transactional and dropped.is_aborted(batch.producer_id, batch.base_offset):
                    continue
            yield batch

    def read_batches(self, start_offset: int, end_offset: int | None = None) -> Iterator:
        """Batches overlapping [start_offset, end_offset), in offset order, straight from the files."""
        with self.lock:
            end = self._next_offset if end_offset is None else min(end_offset, self._next_offset)
            start = max(start_offset, self.log_start_offset)
            segments = list(self.segments)
        remote = self.remote
        if remote is not None and segments and start < min(end, segments[0].base_offset):
            for batch in remote.read_batches(start, min(end, segments[0].base_offset)):
                yield batch
                start = batch.last_offset + 1
        for i in range(len(segments)):
            seg = segments[i]
            nxt = segments[i + 1].base_offset if i + 1 < len(segments) else None
            if nxt is not None and nxt <= start:
                continue
            if seg.base_offset >= end:
                break
            found = seg.translate_offset(start)
            if found is None:
                continue
            # Where the range ends inside this segment, the offset index bounds the bytes to read (a reader
            # from an object store fetches the range, not the rest of the segment).
            stop = seg.offset_index.position_after(end - 1) if nxt is None or end < nxt else None
            for _pos, batch in seg.batches_from(found[0], stop):
                if batch.base_offset >= end:
                    return
                yield batch

    def corrupt_ranges(self) -> list:
        """Corrupt byte ranges found so far (by recovery or by reads), oldest segment first."""
        with self.lock:
            return [r for seg in self.segments for r in seg.corrupt_ranges]

    def aborted_txns(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [start_offset, upper_bound_offset) as whole `.txnindex`
        entries, from the segment holding `start_offset` on until an entry's last stable offset reaches the
        bound (`LocalLog.collectAbortedTransactions`)."""
        remote = self.remote
        found: list[AbortedTxn] = []
        if remote is not None and start_offset < self.segments[0].base_offset:
            found = remote.aborted_txns(start_offset, upper_bound_offset)  # `RemoteLogManager`'s, from the tier
        with self.lock:
            for seg in self.segments[self._segment_for(start_offset):]:
                txns, complete = seg.txn_index.collect(start_offset, upper_bound_offset)
                found.extend(txns)
                if complete:
                    break
            return found

    def _schedule_delete(self, seg: LogSegment) -> None:
        """Rename to `.deleted` now and remove after `file.delete.delay.ms` (`LocalLog.deleteSegmentFiles`)."""
        seg.close_for_delete()
        renamed = []
        for path in seg.files():
            if path.exists():
                target = path.with_name(path.name + DELETED_SUFFIX)
                os.replace(path, target)
                renamed.append(target)

        self.remove_after_delay(renamed)

    def _segment_base_of(self, offset: int) -> int:
        return self.segments[self._segment_for(offset)].base_offset


    def replace_segments(self, base: int, old: list[LogSegment], sizes: dict[int, int], *,
                         step: Callable[[str], None] | None = None) -> None:
        """`LocalLog.replaceSegments` under the log's lock: the segment written as `<base>.*.cleaned` takes
        the place of `old`. Its files go `.cleaned` -> `.swap` (the `.log` last: that rename commits), the
        old segments' files -> `.deleted` (their `.log` last), `.swap` -> final names (the `.log` last);
        only then does the in-memory segment list change, so a failure part way leaves the running log
        reading the old segments through their open files, and the next open finishes the swap
        (`recover_swaps`). Raises `SegmentsChangedError`, with nothing swapped, when an old segment's size
        is no longer its `sizes` entry or it left the list. `step` is called with each step's name (a test
        seam: `swap:<file>`, `deleted:<base>`, `final:<file>`)."""
        directory = self.dir
        with self.lock:
            # Appends and rolls go on meanwhile; what invalidates the copy is a replaced segment that
            # retention, DeleteRecords or truncation removed, or a truncation that made it active and cut it.
            if self._closed or any(s not in self.segments or s is self.active or s.size != sizes[s.base_offset]
                                   for s in old):
                raise SegmentsChangedError(f"{self.topic}-{self.partition} changed while it was cleaned")
            committed = False
            renamed: list[Path] = []
            for seg in old:  # their files are renamed under them below: none may be closed and reopened by name
                seg.keep_files_open()
            try:
                for name in _swap_order(base, CLEANED_SUFFIX):
                    src = directory / name
                    if src.exists():
                        os.replace(src, directory / (name[:-len(CLEANED_SUFFIX)] + SWAP_SUFFIX))
                        committed = name.endswith(LOG_SUFFIX + CLEANED_SUFFIX)
                        if step is not None:
                            step("swap:" + name[:-len(CLEANED_SUFFIX)])
                # Committed: from here a crash is finished by `recover_swaps` at the next open.
                for seg in old:
                    for path in sorted(seg.files(), key=lambda p: p.name.endswith(LOG_SUFFIX)):
                        if path.exists():
                            target = path.with_name(path.name + DELETED_SUFFIX)
                            os.replace(path, target)
                            renamed.append(target)
                    if step is not None:
                        step(f"deleted:{seg.base_offset}")
                for name in _swap_order(base, SWAP_SUFFIX):
                    src = directory / name
                    if src.exists():
                        os.replace(src, directory / name[:-len(SWAP_SUFFIX)])
                        if step is not None:
                            step("final:" + name[:-len(SWAP_SUFFIX)])
                # One directory sync for the whole swap, after the last rename, as `LocalLog.replaceSegments`
                # (`Utils.flushDir`); its renames (`atomicMoveWithFallback(..., false)`) flush nothing. The
                # new segment's data was synced by its writer before the first rename.
                fsync_dir(directory)
            except BaseException as exc:
                if not committed:
                    _undo_swap(directory, base)
                    raise
                # Committed: finish the swap now as the next open would (the old segments stay readable
                # through their open files until the segment list changes below).
                log.warning("%s-%d: the swap of cleaned segment %d failed after it was committed (%s); finishing "
                            "it", self.topic, self.partition, base, exc)
                try:
                    # the `.cleaned` files of the next group, being written meanwhile, stay (the next open
                    # drops any left over)
                    recover_swaps(directory, drop_cleaned=False)
                except BaseException:
                    log.error("%s-%d: the swap of cleaned segment %d could not be finished; the next start "
                              "finishes it", self.topic, self.partition, base)
                    raise
            cfg = self.config
            seg = LogSegment(directory, base, index_interval_bytes=cfg.index_interval_bytes,
                             max_index_size=cfg.segment_index_bytes, time_index_style=self.time_index_style)
            at = self.segments.index(old[0])
            for old_seg in old:
                self.segments.remove(old_seg)
                old_seg.close_for_delete()
            seg.is_last = False
            seg._offset_limit_after = self.segments[at].base_offset
            seg.on_become_inactive(loading=True)
            self.segments.insert(at, seg)
            self._segment_created_ms.setdefault(base, self.clock())
            self._segments_version += 1
            self.remove_after_delay(renamed)
            log.info("%s-%d: swapped in cleaned segment %d for segment(s) %s", self.topic, self.partition, base,
                     [s.base_offset for s in old])


# -- recovery of an interrupted swap (LogLoader) -------------------------------------------------------
def _next_offset_of(path: Path) -> int | None:
    """The offset after the last whole batch of a `.log` file (headers only), None when it has none."""
    nxt = None
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        pos = 0
        while pos + 27 <= size:
            f.seek(pos)
            head = f.read(27)
            base = int.from_bytes(head[0:8], "big", signed=True)
            length = int.from_bytes(head[8:12], "big", signed=True)
            if length < 14 or pos + 12 + length > size:
                break
            delta = int.from_bytes(head[23:27], "big", signed=True) if head[16] == 2 else 0
            nxt = base + delta + 1
            pos += 12 + length
    return nxt


def recover_swaps(directory: Path, *, drop_cleaned: bool = True) -> None:
    """`LogLoader`'s handling of an interrupted swap: `.cleaned` files go (unless `drop_cleaned` is
    False: a running cleaner finishing a failed swap, whose next group's are being written); `.swap` files
    without a `<base>.log.swap` go (the swap had not committed: the old segments are intact); a
    `<base>.log.swap` replaces every segment whose base offset lies in its offset range, and its files take
    their final names. Idempotent, so a crash during this repair is repaired the same way at the next open."""
    names = [e.name for e in directory.iterdir()]
    for name in names:
        if drop_cleaned and name.endswith(CLEANED_SUFFIX):
            (directory / name).unlink(missing_ok=True)
    swap_bases = {int(n[:20]) for n in names if n.endswith(LOG_SUFFIX + SWAP_SUFFIX) and n[:20].isdigit()}
    for name in names:
        if name.endswith(SWAP_SUFFIX) and not name.endswith(LOG_SUFFIX + SWAP_SUFFIX) and \
                (not name[:20].isdigit() or int(name[:20]) not in swap_bases):
            (directory / name).unlink(missing_ok=True)
    for base in sorted(swap_bases):
        swap_log = directory / f"{base:020d}{LOG_SUFFIX}{SWAP_SUFFIX}"
        end = _next_offset_of(swap_log)
        end = base if end is None else end
        log_bases = sorted(int(n[:20]) for n in os.listdir(directory)
                           if n.endswith(LOG_SUFFIX) and len(n) == 24 and n[:20].isdigit())
        for old in log_bases:
            if base <= old < max(end, base + 1):
                for suffix in _OTHER_SUFFIXES:  # its other files first, the .log last
                    (directory / f"{old:020d}{suffix}").unlink(missing_ok=True)
                (directory / f"{old:020d}{LOG_SUFFIX}").unlink(missing_ok=True)
        for name in _swap_order(base, SWAP_SUFFIX):
            src = directory / name
            if src.exists():
                os.replace(src, directory / name[:-len(SWAP_SUFFIX)])
        with contextlib.suppress(OSError):
            fsync_dir(directory)
        log.info("%s: completed the swap of cleaned segment %d interrupted by a crash (offsets %d-%d)",
                 directory, base, base, end - 1)


class _LocalFile:
    """A local file as `storage.readonly.RandomAccess`."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_RDONLY)

    def read_at(self, nbytes: int, offset: int) -> bytes:
        return os.pread(self._fd, nbytes, offset)

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class SwapResolvedFiles:
    """A partition directory as the next writable open will see it after `recover_swaps`, without changing
    it (`storage.readonly.ReadOnlyFiles`): a `<base>.log.swap` and its `.swap` indexes stand for the
    segment at `base`, the segments in its offset range are hidden, `.cleaned` files and unmatched `.swap`
    files are ignored. So a tool reading a copy of a data dir a crash left mid-swap (or a live one at that
    moment) answers as the broker will."""

    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)
        real = os.listdir(self.dir)
        swap_bases = {int(n[:20]) for n in real if n.endswith(LOG_SUFFIX + SWAP_SUFFIX) and n[:20].isdigit()}
        hidden: set[int] = set()
        for base in swap_bases:
            end = _next_offset_of(self.dir / f"{base:020d}{LOG_SUFFIX}{SWAP_SUFFIX}")
            end = base + 1 if end is None else max(end, base + 1)
            hidden |= {int(n[:20]) for n in real if n.endswith(LOG_SUFFIX) and len(n) == 24 and n[:20].isdigit()
                       and base <= int(n[:20]) < end}
        self._map: dict[str, str] = {}
        for name in real:
            if name.endswith(CLEANED_SUFFIX):
                continue
            if name.endswith(SWAP_SUFFIX):  # before the hidden test: a swap's base is that of a segment it hides
                if name[:20].isdigit() and int(name[:20]) in swap_bases:
                    self._map[name[:-len(SWAP_SUFFIX)]] = name
                continue
            if name[:20].isdigit() and int(name[:20]) in hidden:
                continue
            self._map.setdefault(name, name)

    def names(self) -> list[str]:
        return list(self._map)

    def open(self, name: str) -> _LocalFile:
        return _LocalFile(self.dir / self._map.get(name, name))

    def read(self, name: str) -> bytes | None:
        real = self._map.get(name)
        if real is None:
            return None
        try:
            return (self.dir / real).read_bytes()
        except OSError:
            return None

    def mtime_ms(self, name: str) -> int:
        return int(os.stat(self.dir / self._map.get(name, name)).st_mtime * 1000)

    def identity(self, name: str) -> tuple:
        st = os.stat(self.dir / self._map.get(name, name))
        return ("swap-resolved", str(self.dir / self._map.get(name, name)), st.st_size, st.st_mtime_ns)
