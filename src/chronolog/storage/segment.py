"""One log segment: `<base>.log` plus its `.index` and `.timeindex` (Kafka's `LogSegment`).

Invariants (as `LogSegment`'s javadoc states them): entries are appended to the offset index at most
every `index.interval.bytes` (strictly more bytes since the last entry), never for a segment's first
append; the time index gets the running max timestamp and its offset at the same moments, only when that
maximum grew, and once more when the segment is rolled or closed; `largest_timestamp` falls back to the
file's mtime when no batch carries a timestamp.

The segment's minimum timestamps are its base class's (`storage.minima.SegmentMinimaTracking`), and so is
its recovery (`storage.segment_recovery.SegmentRecovery`); lookups by time inside it walk batch headers in
`storage.time_lookup`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from chronolog.diskio import describe, pwrite_all, pwritev_all
from chronolog.errors import CorruptMessageError, InvalidRecordError, KafkaError
from chronolog.native import load_native
from chronolog.records import AnyBatch, LegacyBatch, iter_batches
from chronolog.storage import filecache
from chronolog.storage.corruption import CorruptRange, add_span, find_next_valid_batch, span_end
from chronolog.storage.index import IndexCorruptError, OffsetIndex, TimeIndex, TimestampOffset
from chronolog.storage.minima import SegmentMinimaTracking
from chronolog.storage.segment_recovery import SegmentRecovery
from chronolog.storage.time_lookup import HeaderReader, find_in_segment
from chronolog.storage.txnindex import TXN_INDEX_SUFFIX, TransactionIndex

log = logging.getLogger(__name__)

LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX = ".log", ".index", ".timeindex"
DELETED_SUFFIX = ".deleted"
_CHUNK = 1 << 20
_FIRST_CHUNK = 16 << 10  # lookups usually need one batch: start small, grow


def segment_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


def offsets_named(names: Iterable[str], suffix: str) -> list[int]:
    """The offsets of the files among `names` that are named `<offset><suffix>` (`segment_name`),
    ascending (`LogFileUtils.offsetFromFileName`)."""
    return sorted(int(n[:-len(suffix)]) for n in names if n.endswith(suffix) and n[:-len(suffix)].isdigit())


class LogSegment(SegmentRecovery, SegmentMinimaTracking):
    """A `.log` file with its two indexes. Not thread-safe: the owning `PartitionLog` holds the lock.

    The `.log` descriptor is held through the open-file cache (`storage.filecache`): `_fd` reopens it
    after the cache closed it for an idle segment, and is -1 only once the segment is closed."""

    files_weight = 1
    _log_fd = -1
    _log_closed = True

    def __init__(self, directory: Path, base_offset: int, *, index_interval_bytes: int = 4096,
                 max_index_size: int = 10485760, writable: bool = True, time_index_style: str = "batch_last",
                 check_indexes: bool = True, rebuild_missing: bool = True,
                 lock: threading.RLock | None = None) -> None:
        """With `rebuild_missing=False` missing indexes are left empty and `needs_rebuild` is set, for a
        caller that is about to `recover()` anyway (one scan of the log instead of two). `lock`: the one
        held while the segment is used (its log's); the open-file cache closes idle files only under it.
        Without one the segment's files stay open until it is closed (the cleaner's segments)."""
        self._cached = lock is not None
        self.files_lock = lock or threading.RLock()
        self.dir = Path(directory)
        self.base_offset = base_offset
        self.corrupt_ranges: list[CorruptRange] = []  # found by recovery or by a reader; skipped by reads
        self._reported: set[CorruptRange] = set()
        self.index_interval_bytes = index_interval_bytes
        self.max_index_size = max_index_size
        self.writable = writable
        self.time_index_style = time_index_style
        self.log_path = self.dir / segment_name(base_offset, LOG_SUFFIX)
        self._open_log(writable)
        self._checked = [[0, 0]] if self.size == 0 else []  # a new file: what is appended is checked
        self._rebuild_missing = rebuild_missing
        self._open_indexes(writable)
        self.bytes_since_last_index_entry = 0
        self.rolling_based_timestamp: int | None = None
        self._max_ts_known: TimestampOffset | None = TimestampOffset(-1, -1)
        if check_indexes and not self._rebuild_needed:
            try:
                self.sanity_check()
            except IndexCorruptError as exc:
                log.warning("%s; rebuilding the indexes of segment %s", exc, self.log_path)
                if not writable:
                    # Never write into a read-only directory: rebuild into private temporary files.
                    self.offset_index.close(trim=False)
                    self.time_index.close(trim=False)
                    self._open_indexes(writable=False, force_private=True)
                else:
                    self.rebuild_indexes()
        self._load_largest_timestamp(scan=not self._rebuild_needed)

    def _open_log(self, writable: bool) -> None:
        """Open the `.log` and set `size` (`storage.readonly.FilesSegment` reads it elsewhere)."""
        if writable:
            self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        else:
            self._fd = os.open(self.log_path, os.O_RDONLY)
        self.size = os.fstat(self._fd).st_size

    @property
    def _fd(self) -> int:
        """The `.log` descriptor: reopened if the open-file cache closed it; -1 once the segment is closed.
        Use it at once, under the log's lock; never keep it across a call that may open another file."""
        fd = self._log_fd
        if fd >= 0:
            filecache.cache().used(self)
            return fd
        if self._log_closed:
            return -1
        self._fd = fd = os.open(self.log_path, os.O_RDWR if self.writable else os.O_RDONLY)
        return fd

    @_fd.setter
    def _fd(self, fd: int) -> None:
        if self._log_fd >= 0 and fd != self._log_fd:
            filecache.cache().closed(self)
        self._log_fd, self._log_closed = fd, fd < 0
        if fd >= 0 and self._cached:
            filecache.cache().opened(self)

    def close_files(self) -> None:
        """The open-file cache closes the idle segment's `.log`; `_fd` reopens it."""
        fd, self._log_fd = self._log_fd, -1
        if fd >= 0:
            os.close(fd)

    def keep_files_open(self) -> None:
        """Open the `.log` and both indexes now and keep them open, outside the open-file cache, until the
        segment is closed: for a caller about to rename the files without telling the segment (the
        cleaner's swap), which must go on reading it through the open files."""
        for holder in (self, self.offset_index, self.time_index):
            if holder is self:
                self._fd  # noqa: B018  (reopens the .log if the cache closed it)
            else:
                holder._mmap  # noqa: B018
            holder._cached = False
            filecache.cache().closed(holder)

    def _close_log(self) -> None:
        fd = self._log_fd
        self._fd = -1
        if fd >= 0:
            os.close(fd)

    def _open_indexes(self, writable: bool, force_private: bool = False) -> None:
        index_path = self.dir / segment_name(self.base_offset, INDEX_SUFFIX)
        time_path = self.dir / segment_name(self.base_offset, TIME_INDEX_SUFFIX)
        if not writable and (force_private or not index_path.exists() or not time_path.exists()):
            # A read-only directory without indexes: keep them in memory only.
            import tempfile
            self._tmpdir = tempfile.TemporaryDirectory(prefix="chronolog-idx-")
            index_path = Path(self._tmpdir.name) / index_path.name
            time_path = Path(self._tmpdir.name) / time_path.name
            writable = True
            self._rebuild_needed = True
        else:
            missing = not index_path.exists() or not time_path.exists()
            self._rebuild_needed = missing and self.size > 0
        lock = self.files_lock if self._cached else None
        self.offset_index = OffsetIndex(index_path, self.base_offset, self.max_index_size, writable, lock=lock)
        self.time_index = TimeIndex(time_path, self.base_offset, self.max_index_size, writable, lock=lock)
        if self._rebuild_needed and (self._rebuild_missing or not writable):
            self.rebuild_indexes()
            self._rebuild_needed = False

    # -- reading the file ----------------------------------------------------------------------------
    def pread(self, position: int, size: int) -> bytes:
        with self.files_lock:  # also called outside the log's lock (ReadSlice): the descriptor stays ours
            return os.pread(self._fd, size, position)

    def batches_from(self, position: int = 0, end: int | None = None, *,
                     resync: bool = True) -> Iterator[tuple[int, AnyBatch]]:
        """(position, batch) for each complete batch from `position`; reads the file in chunks.

        Known corrupt ranges are skipped. Bytes that cannot be a batch although the file goes on (a bad
        size or magic mid-file) become a new corrupt range when `resync` is set: the reader continues at
        the next valid batch instead of ending the segment there (see `storage.corruption`).

        A read-only segment (a data dir read offline, a copy) is not known to have been recovered, so with
        `resync` each batch's CRC is checked before it is yielded (once: verified spans are remembered),
        and a batch that fails becomes a corrupt range as broker recovery makes it (`LogSegment.recover`
        validates every batch, `DefaultRecordBatch.ensureValid`): offline readers and the broker skip the
        same bytes and report them the same way."""
        end = self.size if end is None else min(end, self.size)
        pos = position
        want = _FIRST_CHUNK
        prev_next: int | None = None
        verify = resync and not self.writable
        while pos < end:
            skip = self._corrupt_range_at(pos)
            if skip is not None:
                pos = skip.end
                continue
            stop = self._next_corrupt_start(pos, end)
            chunk = self.pread(pos, min(want, stop - pos))
            want = min(want * 4, _CHUNK)
            consumed = 0
            bad = False
            failed_crc = False
            try:
                for batch in iter_batches(chunk):
                    if verify and not self._crc_ok(pos + consumed, batch):
                        failed_crc = True
                        break
                    yield pos + consumed, batch
                    consumed += batch.size_in_bytes
                    prev_next = batch.last_offset + 1
            except CorruptMessageError:
                bad = True
            if failed_crc:
                found = self._resync_from(pos + consumed, prev_next, torn_tail_ok=self.is_last)
                if found is None:
                    return
                pos = found.end
                continue
            if consumed == 0:
                if not bad and self.size - pos >= 12:
                    need = 12 + int.from_bytes(self.pread(pos + 8, 4), "big", signed=True)
                    if len(chunk) < need <= stop - pos:
                        try:
                            (batch,) = list(iter_batches(self.pread(pos, need)))
                        except (CorruptMessageError, ValueError):
                            bad = True
                        else:
                            if verify and not self._crc_ok(pos, batch):
                                found = self._resync_from(pos, prev_next, torn_tail_ok=self.is_last)
                                if found is None:
                                    return
                                pos = found.end
                                continue
                            yield pos, batch
                            prev_next = batch.last_offset + 1
                            pos += need
                            continue
                    elif need <= self.size - pos:
                        return  # a whole batch that the caller's `end` cuts off
                # What is left cannot be read: a torn tail of the last segment (recovery's business, and a
                # reader of a file still being written may see one), else corruption to step over.
                if not resync or (not bad and self.is_last):
                    return
                found = self._resync_from(pos, prev_next)
                if found is None:
                    return
                pos = found.end
                continue
            pos += consumed

    is_last = True  # the owning log clears it for segments that are not the last

    _crc_spans: list[list[int]] | tuple = ()  # [start, end) of a read-only segment whose CRCs were checked

    def _crc_ok(self, pos: int, batch: AnyBatch) -> bool:
        """Whether the batch at `pos` passes `validate` (CRC, sizes), checked once per read-only segment."""
        end = pos + batch.size_in_bytes
        if span_end(self._crc_spans, pos) >= end:
            return True
        try:
            batch.validate()
        except (CorruptMessageError, InvalidRecordError):
            return False
        self._crc_spans = add_span(self._crc_spans, pos, end, self.MAX_CHECKED_SPANS)
        return True

    def _corrupt_range_at(self, pos: int) -> CorruptRange | None:
        for r in self.corrupt_ranges:
            if r.start <= pos < r.end:
                return r
        return None

    def _next_corrupt_start(self, pos: int, end: int) -> int:
        starts = [r.start for r in self.corrupt_ranges if pos < r.start < end]
        return min(starts) if starts else end

    def _resync_from(self, pos: int, prev_next: int | None, *, torn_tail_ok: bool = False) -> CorruptRange | None:
        """Record bytes from `pos` as corrupt up to the next valid batch (or the end of the file). With
        `torn_tail_ok` (a batch failing its CRC in the last segment) nothing valid after it makes it a
        torn tail, as recovery judges one, not corruption: None, nothing recorded. A reader of a live
        segment may also see a batch the writer has not finished writing."""
        if prev_next is None:
            prev_next = self.base_offset
            for _p, batch in self.batches_from(0, pos, resync=False):
                prev_next = batch.last_offset + 1
        nxt = find_next_valid_batch(self.pread, pos + 1, self.size, prev_next, self.base_offset + 0x7FFFFFFF)
        if nxt is None and torn_tail_ok:
            return None
        if nxt is None:
            end, last = self.size, self._offset_limit_after - 1
        else:
            end, last = nxt[0], nxt[1].base_offset - 1
        return self._record_corrupt(pos, end, prev_next, last)

    _offset_limit_after = 0  # base offset of the next segment, set by the owning log (for reports)
    _scan_next_offset = 0

    # -- state --------------------------------------------------------------------------------------
    @property
    def needs_rebuild(self) -> bool:
        return self._rebuild_needed

    def _load_largest_timestamp(self, scan: bool = True) -> None:
        """Only the first batch is read now; the running max (`LogSegment.loadLargestTimestamp`) is
        found when first needed, as Kafka's `maxTimestampAndOffsetSoFar` is: by an append, a roll,
        retention or a time lookup. Opening a log then reads no segment whole, even one whose records
        all share a timestamp (its time index holds one entry, so the scan would cover it all). Without
        `scan` a recovery that follows computes the max."""
        first = next(self.batches_from(0), None)
        self.rolling_based_timestamp = first[1].max_timestamp if first else None
        if scan:
            self._max_ts_known = None

    @property
    def _max_ts(self) -> TimestampOffset:
        known = self._max_ts_known
        if known is None:
            known = self._max_ts_known = self._scan_largest_timestamp()
        return known

    @_max_ts.setter
    def _max_ts(self, value: TimestampOffset) -> None:
        self._max_ts_known = value

    def _scan_largest_timestamp(self) -> TimestampOffset:
        """The running max: the time index's last entry, then the batches after its position."""
        last = self.time_index.last_entry()
        found = TimestampOffset(last.timestamp, last.offset) if self.time_index.entries else TimestampOffset(-1, -1)
        start = self.offset_index.lookup(last.offset).position if self.time_index.entries else 0
        for _pos, batch in self.batches_from(start):
            if batch.max_timestamp > found.timestamp:
                found = TimestampOffset(batch.max_timestamp, self._index_offset_for(batch))
        return found

    def _index_offset_for(self, batch: AnyBatch) -> int:
        """Time-index offset for a batch: its last offset (Kafka 3.8+, KAFKA-16310), or in "max_record"
        style the first record holding the batch's max timestamp (what Kafka <= 3.7 leaders wrote)."""
        if self.time_index_style == "max_record" and not isinstance(batch, LegacyBatch):
            for rec in batch.records():
                if rec.timestamp == batch.max_timestamp:
                    return rec.offset
        return batch.last_offset

    @property
    def max_timestamp_so_far(self) -> int:
        return self._max_ts.timestamp

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        return self._max_ts.offset

    @property
    def largest_timestamp(self) -> int:
        """Largest record timestamp, or the `.log` mtime when there is none (`LogSegment.largestTimestamp`)."""
        if self._max_ts.timestamp >= 0:
            return self._max_ts.timestamp
        return self._log_mtime_ms()

    def _log_mtime_ms(self) -> int:
        return int(os.stat(self.log_path).st_mtime * 1000)

    def first_batch_timestamp(self) -> int | None:
        return self.rolling_based_timestamp

    def first_timestamp(self) -> int | None:
        """Smallest timestamp of the first batch's records (for tools); None when empty."""
        first = next(self.batches_from(0), None)
        if first is None:
            return None
        return min((r.timestamp for r in first[1].records()), default=None)

    @property
    def next_offset_guess(self) -> int:
        """The offset after the last readable batch, walking from the offset index's last entry; from the
        start of the file when nothing readable is there (that entry names a torn or corrupt last batch)."""
        last = None
        start = self.offset_index.last_entry().position
        for _pos, batch in self.batches_from(start):
            last = batch
        if last is None and start > 0:
            for _pos, batch in self.batches_from(0):
                last = batch
        return last.last_offset + 1 if last is not None else self.base_offset

    # -- writing ------------------------------------------------------------------------------------
    def append(self, largest_offset: int, largest_timestamp: int, offset_of_max_timestamp: int,
               data: bytes | bytearray | memoryview, min_timestamp: int | None = None,
               head: bytes | bytearray | None = None) -> None:
        """Append already-validated batches (`LogSegment.append`). `min_timestamp`, the smallest record
        timestamp in `data` (validation has it), keeps the segment's minima for its sidecar; without it
        the segment stops tracking them. `head`, when given, is written in place of the first len(head)
        bytes of one batch in `data`: its patched header, so a producer's batch is never copied."""
        if not data:
            return
        physical_position = self.size
        mark = self.write_mark()
        if physical_position == 0:
            self.rolling_based_timestamp = largest_timestamp
        if not 0 <= largest_offset - self.base_offset <= 0x7FFFFFFF:
            raise KafkaError(f"offset {largest_offset} cannot be stored relative to base {self.base_offset}")
        size = len(data)
        try:
            if self._tail_dirty:  # bytes of a failed append that could not be cut off yet
                os.ftruncate(self._fd, physical_position)
                self._tail_dirty = False
            if head is None:
                pwrite_all(self._fd, data, physical_position, self.log_path)
            else:
                pwritev_all(self._fd, (head, memoryview(data)[len(head):]), physical_position, self.log_path)
            if self.bytes_since_last_index_entry > self.index_interval_bytes:
                # Written before anything in memory changes, so that a failure leaves nothing to take back
                # but the bytes (the entries' values are those the code below would compute).
                top = self._max_ts
                if largest_timestamp > top.timestamp:
                    top = TimestampOffset(largest_timestamp, offset_of_max_timestamp)
                self.offset_index.append(largest_offset, physical_position)
                self.time_index.maybe_append(top.timestamp, top.offset)
        except BaseException:
            with contextlib.suppress(OSError):  # (a cut that failed is made by the next append or the close)
                self.undo_to(mark)
            raise
        written = size
        if self._checked and self._checked[-1][1] == physical_position:  # validated batches: no reader
            self._checked[-1][1] = physical_position + written  # needs to walk them again
        self.size += written
        if self._minima is not None:  # (`time_minima`'s view is keyed by size: it needs no reset here)
            if head is not None:
                tracked = min_timestamp is not None and self._minima.add_one(physical_position, head, size,
                                                                             min_timestamp)
            else:
                tracked = min_timestamp is not None and self._minima.add(physical_position, data, min_timestamp)
            if not tracked:
                self._minima = None
            self._minima_on_disk = False
        if largest_timestamp > self._max_ts.timestamp:
            self._max_ts = TimestampOffset(largest_timestamp, offset_of_max_timestamp)
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self.bytes_since_last_index_entry = 0  # (the entries were written above)
        self.bytes_since_last_index_entry += size

    _tail_dirty = False  # the file may hold bytes past `size` that the next append must cut off first

    def write_mark(self) -> tuple:
        """What `undo_to` needs to take the appends after this moment back."""
        return (self.size, self.offset_index._entries, self.time_index._entries, self._max_ts_known,
                self.bytes_since_last_index_entry, self.rolling_based_timestamp)

    def undo_to(self, mark: tuple) -> None:
        """Take back appends after `mark` (a write or fsync failed, so none of them is acknowledged): the
        file is cut back to its size then, so no later append goes after their bytes, and the indexes
        and the running maximum forget them. When the cut itself fails the next append tries it again."""
        size, oi_entries, ti_entries, max_ts, since, rolling = mark
        self.offset_index.truncate_entries(oi_entries)
        self.time_index.truncate_entries(ti_entries)
        self._max_ts_known = max_ts
        self.bytes_since_last_index_entry = since
        self.rolling_based_timestamp = rolling
        grew = self.size > size
        self.size = size
        self._checked = [[a, min(b, size)] for a, b in self._checked if a < size or a == size == 0]
        if grew:
            self.truncate_minima()
        self._tail_dirty = True
        os.ftruncate(self._fd, size)
        self._tail_dirty = False

    def should_roll(self, *, segment_bytes: int, segment_ms: int, jitter_ms: int, max_timestamp: int,
                    last_offset: int, messages_size: int, now_ms: int, created_ms: int) -> bool:
        """`LogSegment.shouldRoll`: size, time since the first batch's max timestamp, full indexes, or an
        offset that no longer fits in 32 bits relative to the base."""
        if self.rolling_based_timestamp is not None and self.rolling_based_timestamp >= 0:
            waited = max_timestamp - self.rolling_based_timestamp
        else:  # no first batch, or one without a timestamp (-1): the segment's age (`timeWaitedForRoll`)
            waited = now_ms - created_ms
        reached_ms = waited > segment_ms - jitter_ms
        return (self.size > segment_bytes - messages_size
                or (self.size > 0 and reached_ms)
                or self.offset_index.is_full() or self.time_index.is_full()
                or not 0 <= last_offset - self.base_offset <= 0x7FFFFFFF)

    def on_become_inactive(self, *, loading: bool = False) -> None:
        """Final time-index entry and trimmed indexes when the segment stops being active, and its minimum
        timestamps in the sidecar (also on a clean close of the active segment: the sidecar claims only
        the bytes it covers, see storage.minima). `loading`: an older segment met when a log is opened,
        whose final entry its roll wrote (or the recovery that rebuilt its index): the largest timestamp
        is not looked for just for that."""
        known = self._max_ts_known if loading else self._max_ts
        if known is not None and known.timestamp >= 0 and self.writable:
            try:
                self.time_index.maybe_append(known.timestamp, known.offset, skip_full_check=True)
            except (OSError, KafkaError) as exc:
                # Only a shortcut is missing: the largest timestamp is found by scanning from the last entry.
                # (KafkaError: no room, the index was trimmed after this entry failed at an earlier roll.)
                log.warning("segment %s: final time index entry not written: %s", self.log_path,
                            describe(exc) if isinstance(exc, OSError) else exc)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self.write_minima()

    def make_active(self) -> None:
        """Re-expand the indexes of a loaded active segment so it can take appends."""
        if self.writable:
            self.offset_index.resize(self.max_index_size)
            self.time_index.resize(self.max_index_size)

    def flush(self) -> None:
        if self.writable:
            os.fsync(self._fd)
            self.offset_index.flush()
            self.time_index.flush()
            if "_txn_index" in self.__dict__:
                self._txn_index.flush()

    def close(self, *, sync: bool = True) -> None:
        """Final time-index entry, trimmed indexes, minima sidecar, files closed (`LogSegment.close`). The
        `.log` is not fsynced here (the log's flush does that); with `sync` False neither are the indexes:
        the caller syncs the whole file system once (storage.manager's clean stop)."""
        if self._log_closed:
            return
        if self._tail_dirty:  # a failed append's bytes are still there: cut them, or the close is not clean
            os.ftruncate(self._fd, self.size)
            self._tail_dirty = False
        if self.writable:
            self.on_become_inactive()
        self.offset_index.close(trim=self.writable, sync=sync)
        self.time_index.close(trim=self.writable, sync=sync)
        if "_txn_index" in self.__dict__:
            self._txn_index.close()
        self._close_log()

    def close_for_delete(self) -> None:
        """Closes the files of a segment about to go without syncing its indexes, as Kafka's
        `AbstractIndex.deleteIfExists` (`closeHandler`: unmapped, never forced)."""
        if "_txn_index" in self.__dict__:
            self._txn_index.close()
        if not self._log_closed:
            self.offset_index.close_unsynced()
            self.time_index.close_unsynced()
            self._close_log()

    def files(self) -> list[Path]:
        """The segment's files, sidecar and transaction index included, so deletion renames and removes
        them together (`LogSegment.deleteIfExists` / `changeFileSuffixes`)."""
        return [self.log_path, self.offset_index.path, self.time_index.path, self.minima_path,
                self.txn_index_path]

    # -- the aborted-transaction index ----------------------------------------------------------------
    @property
    def txn_index_path(self) -> Path:
        return self.dir / segment_name(self.base_offset, TXN_INDEX_SUFFIX)

    @property
    def txn_index(self) -> TransactionIndex:
        """The segment's `.txnindex` (storage.txnindex), read when first asked for; the file itself is
        created by the first aborted transaction whose marker lands in this segment."""
        found = self.__dict__.get("_txn_index")
        if found is None:
            found = self._txn_index = self._open_txn_index()
        return found

    def _open_txn_index(self) -> TransactionIndex:
        return TransactionIndex(self.txn_index_path, self.base_offset, writable=self.writable,
                                lock=self.files_lock if self._cached else None)

    # -- recovery (`storage.segment_recovery`, the base class) ---------------------------------------
    def _record_corrupt(self, start: int, end: int, first_offset: int, last_offset: int) -> CorruptRange:
        found = CorruptRange(self.base_offset, start, end, first_offset, last_offset)
        self.corrupt_ranges = sorted([*self.corrupt_ranges, found], key=lambda r: r.start)
        if found not in self._reported:
            self._reported.add(found)
            log.error("%s; serving the rest of %s", found.describe(), self.dir.name)
        return found

    def truncate_to(self, offset: int) -> int:
        """Drop every batch whose last offset is >= `offset` (`LogSegment.truncateTo`); returns bytes cut."""
        cut = None
        for pos, batch in self.batches_from(self.offset_index.lookup(offset).position):
            if batch.last_offset >= offset:
                cut = pos
                break
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        if cut is None:
            return 0
        self.corrupt_ranges = [r for r in self.corrupt_ranges if r.start < cut]
        removed = self.size - cut
        os.ftruncate(self._fd, cut)
        self.size = cut
        self._checked = [[a, min(b, cut)] for a, b in self._checked if a < cut or a == cut == 0]
        self.bytes_since_last_index_entry = 0
        if cut == 0:
            self.rolling_based_timestamp = None
        self._load_largest_timestamp()
        return removed

    # -- lookups ------------------------------------------------------------------------------------
    def translate_offset(self, offset: int, start_position: int = 0) -> tuple[int, AnyBatch] | None:
        """Position and batch of the first batch whose last offset is >= `offset`."""
        start = max(start_position, self.offset_index.lookup(offset).position)
        for pos, batch in self.batches_from(start):
            if batch.last_offset >= offset:
                return pos, batch
        return None

    def fetch_range(self, offset: int, max_bytes: int, limit: int | None, min_one_message: bool
                    ) -> tuple[int, int, int] | None | bool:
        """(position, size, first base offset) of the whole batches a fetch of `offset` returns (at most
        `max_bytes`, at least one batch with `min_one_message`, only batches based below `limit`), found
        from batch headers alone as Kafka's `LogSegment.read` does with `FileChannelRecordBatch`: the
        offset index gives the start, batches are stepped over 27 header bytes at a time, so a 1 MiB batch
        is never read to learn its size. Size 0: the first batch does not fit. None: no batch here holds `offset` or a later one.
        False: the segment has corrupt ranges or a header looks wrong; the caller takes the
        batch-parsing path, which knows how to handle them."""
        if self.corrupt_ranges:
            return False
        headers = HeaderReader(self)
        pos = self.offset_index.lookup(offset).position
        while True:  # the first batch whose last offset is >= `offset` (FileRecords.searchForOffsetWithSize)
            head = headers.at(pos)
            if not head:
                return head
            size, base, last = head
            if last >= offset:
                break
            pos += size
        if size > max_bytes and not min_one_message:
            return pos, 0, base
        start, first_base, end = pos, base, pos + size
        budget_end = start + max(max_bytes, size)
        # Bytes no reader has checked are never served: every header up to the end of the slice is looked
        # at, so a corrupt range found after a clean start is stepped over instead of reaching a client
        # (see storage.corruption). Bytes checked once (appended here, recovered, or walked by an earlier
        # fetch) are not walked again: the end is found from the offset index's last entry below it.
        checked_to = self._checked_end(start) if limit is None else -1
        if end <= checked_to:
            inside = min(budget_end, headers.end, checked_to)
            found = self._last_boundary(headers, max(end, self.offset_index.position_floor(inside)), inside)
            if found is not None:
                if found < inside or found == budget_end:  # the next batch does not fit
                    return start, found - start, first_base
                end = found  # the span's end: the walk goes on from there
        # The C walk reads only the headers (one pread each); the Python one below reads in chunks.
        if _native_batch_end is not None and self._fd >= 0:
            end = _native_batch_end(self._fd, end, headers.end, budget_end, -1 if limit is None else limit,
                                    self.is_last)
            if end < 0:
                return False
        else:
            while True:
                head = headers.at(end)
                if head is None:
                    break
                if head is False:
                    return False
                size, base, _last = head
                if (limit is not None and base >= limit) or end + size > budget_end:
                    break
                end += size
        self._mark_checked(start, end)
        return start, end - start, first_base

    @staticmethod
    def _last_boundary(headers: HeaderReader, pos: int, target: int) -> int | None:
        """The last batch boundary at or before `target`, walking headers from `pos` (a batch start);
        None when a header there is not a v2 batch's (a legacy batch: the caller walks instead)."""
        while pos < target:
            head = headers.at(pos)
            if head is False:
                return None
            if head is None or pos + head[0] > target:
                break
            pos += head[0]
        return pos

    # Spans of the file whose batch headers are known good, each [start, end) between batch boundaries,
    # sorted and apart: a few readers reading on from where their last fetch ended each grow one span.
    MAX_CHECKED_SPANS = 16
    _checked: list[list[int]] | tuple = ()

    def checked_spans(self) -> list[tuple[int, int]]:
        return [(a, b) for a, b in self._checked]

    def _checked_end(self, position: int) -> int:
        """The end of the checked span holding `position` (-1: none)."""
        return span_end(self._checked, position)

    def _mark_checked(self, start: int, end: int) -> None:
        if self._checked_end(start) >= end:  # inside a span already: nothing to merge
            return
        self._checked = add_span(self._checked, start, end, self.MAX_CHECKED_SPANS)

    # `LogSegment.findOffsetByTimestamp` (the function itself, as a method: no call in between)
    find_offset_by_timestamp = find_in_segment

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size})"


# `_headers.batch_end` (C): fetch_range's header walk with exactly the Python walk's answers.
_native_batch_end = load_native("chronolog.storage._headers", "batch_end")
