"""One log segment: `<base>.log` plus its `.index` and `.timeindex` (Kafka's `LogSegment`).

Invariants (as `LogSegment`'s javadoc states them): entries are appended to the offset index at most
every `index.interval.bytes` (strictly more bytes since the last entry), never for a segment's first
append; the time index gets the running max timestamp and its offset at the same moments, only when that
maximum grew, and once more when the segment is rolled or closed; `largest_timestamp` falls back to the
file's mtime when no batch carries a timestamp.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from chronolog.diskio import describe, pwrite_all, pwritev_all
from chronolog.errors import CorruptMessageError, InvalidRecordError, KafkaError
from chronolog.native import load_native
from chronolog.records import HEADER_SIZE, AnyBatch, LegacyBatch, RecordBatch, iter_batches
from chronolog.records.batch import COMPRESSION_MASK, TIMESTAMP_TYPE_MASK, TimestampTable
from chronolog.records.batch import HEADER as BATCH_HEADER
from chronolog.storage import filecache
from chronolog.storage.basics import FoundTimestamp
from chronolog.storage.corruption import CorruptRange, find_next_valid_batch
from chronolog.storage.index import IndexCorruptError, OffsetIndex, TimeIndex, TimestampOffset
from chronolog.storage.minima import CHUNK_BYTES, SegmentMinima, minima_path, read_minima, write_minima
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


class LogSegment:
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

    def producer_batches(self, position: int, start: int
                         ) -> Iterator[tuple[int, int, int, int, int, int, int, int]]:
        """(producer id, epoch, base sequence, base offset, last offset, max timestamp, attributes, position)
        of each v2 batch from `position` that carries a producer id (data or control) and that ends at or
        after offset `start`: what the producers' replay needs, all of it in batch headers but a control
        batch's marker (read at `position`). Whole v2 batches are read in C (`_headers.producer_run`,
        headers only, in large reads), the rest through `batches_from` as before."""
        pos = position
        if _native_producer_run is not None and self._fd >= 0 and not self.corrupt_ranges:
            while pos < self.size:
                stop, found = _native_producer_run(self._fd, pos, self.size, start, _PRODUCER_RUN_MOST)
                yield from found
                if stop == pos:
                    break
                pos = stop
        for _pos, batch in self.batches_from(pos):
            if batch.magic == 2 and batch.producer_id >= 0 and batch.last_offset >= start:
                yield (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.base_offset,
                       batch.last_offset, batch.max_timestamp, batch.attributes, _pos)

    is_last = True  # the owning log clears it for segments that are not the last

    _crc_spans: list[list[int]] | tuple = ()  # [start, end) of a read-only segment whose CRCs were checked

    def _crc_ok(self, pos: int, batch: AnyBatch) -> bool:
        """Whether the batch at `pos` passes `validate` (CRC, sizes), checked once per read-only segment."""
        end = pos + batch.size_in_bytes
        if _span_end(self._crc_spans, pos) >= end:
            return True
        try:
            batch.validate()
        except (CorruptMessageError, InvalidRecordError):
            return False
        self._crc_spans = _add_span(self._crc_spans, pos, end, self.MAX_CHECKED_SPANS)
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

    def min_timestamp(self) -> int | None:
        """Smallest record timestamp in the segment (None when empty). It lets a reader prove that no
        record below a time lies after some offset, which the max-based time index cannot; see
        `time_minima`."""
        entries = self.time_minima()
        return min((e.min_timestamp for e in entries), default=None)

    # -- minimum timestamps (the `.chronolog-minima` sidecar, see storage.minima) --------------------
    _minima: SegmentMinima | None = None   # writable segments: chunk minima tracked as batches are appended
    _minima_on_disk = False                # the sidecar file says what `_minima` says
    _minima_view: tuple[int, list[MinEntry]] | None = None

    @property
    def minima_path(self) -> Path:
        return minima_path(self.dir, self.base_offset)

    def start_minima(self, *, rebuild: bool = False) -> None:
        """Begin tracking minima of a writable segment: an empty one starts empty; an existing one takes
        its sidecar when it still matches the file (scanning any tail it does not cover), or with `rebuild`
        (after recovery) scans the whole segment. Otherwise the segment stays untracked and gets no
        sidecar: readers scan it, which is exact."""
        if self.size == 0:
            self._minima, self._minima_on_disk = SegmentMinima(self.base_offset), False
            self.minima_path.unlink(missing_ok=True)
            return
        if rebuild:
            self.minima_path.unlink(missing_ok=True)  # written again from the scan (roll, clean close)
        found = None if rebuild else read_minima(self.minima_path, self.base_offset, self.pread, self.size)
        if found is None and not rebuild:
            self._minima = None
            return
        on_disk = found is not None and found.covered_end == self.size
        self._minima = self._extend_by_scan(found or SegmentMinima(self.base_offset))
        self._minima_on_disk = on_disk and self._minima is not None

    def resume_minima(self) -> None:
        """`start_minima` for a segment that is becoming the active one (at open, or after truncation
        made an inactive segment the last), unless it already tracks them."""
        if self._minima is None:
            self.start_minima()

    def _extend_by_scan(self, minima: SegmentMinima) -> SegmentMinima | None:
        """`minima` extended over the batches after its covered end, read from the file; None when they
        cannot be described (legacy batches, corruption)."""
        if self.corrupt_ranges:
            return None
        native = _native_minima_run if self._fd >= 0 and _native_scan is not None else None
        while minima.covered_end < self.size:
            if native is not None:  # the uncompressed batches in C, up to one it leaves to the loop below
                tail = minima.chunks[-1] if minima.chunks else None
                minima.extend_run(*native(self._fd, minima.covered_end, self.size, CHUNK_BYTES, _native_scan,
                                          -1 if tail is None else tail.position,
                                          0 if tail is None else tail.min_timestamp))
                if minima.covered_end >= self.size:
                    break
            for pos, batch in self.batches_from(minima.covered_end, resync=False):
                if isinstance(batch, LegacyBatch):
                    return None
                low = _batch_min(batch)
                last = (pos, batch.base_offset, batch.size_in_bytes, batch.crc)
                if not minima.extend(pos, batch.base_offset, batch.crc, last, _NO_RECORDS if low is None else low):
                    return None
                if native is not None and not batch.attributes & COMPRESSION_MASK:
                    break  # back to C (a run of compressed batches stays here)
            else:
                break  # nothing more can be read
        return minima if minima.covered_end == self.size else None

    def write_minima(self) -> None:
        """Persist the tracked minima (at roll, recovery and clean close); a no-op when untracked, when the
        file already says the same, or for read-only segments."""
        if not self.writable or self._minima is None or self._minima_on_disk:
            return
        if self._minima.covered_end != self.size:
            self._minima = None  # bytes reached the file some other way: stop claiming anything
            self.minima_path.unlink(missing_ok=True)
            return
        try:
            write_minima(self.minima_path, self._minima)
            self._minima_on_disk = True
        except OSError as exc:  # a missing sidecar costs readers a scan, never an answer
            log.warning("segment %s: cannot write %s: %s", self.log_path, self.minima_path.name, exc)

    def drop_minima_file(self) -> None:
        """Remove the sidecar before the file shrinks (truncation), so no crash leaves a claim about bytes
        that are gone."""
        if self.writable:
            self.minima_path.unlink(missing_ok=True)
            self._minima_on_disk = False
        self._minima_view = None

    def truncate_minima(self) -> None:
        """After truncation to `self.size`: keep the minima of what is left (a cut chunk keeps its
        minimum, still a lower bound)."""
        if self._minima is not None and not self._minima.truncate(self.size, self.pread):
            self._minima = None
        self._minima_on_disk = False
        self._minima_view = None

    def time_minima(self) -> list[MinEntry]:
        """The segment's bytes as consecutive runs with the smallest record timestamp of each: chunks from
        the tracked minima or the validated sidecar, then one entry per batch for the tail they do not
        cover. Read-only segments also remember a scanned tail in this process (validated like a sidecar),
        so a planner that queries the same files again does not scan them again."""
        view = self._minima_view
        if view is not None and view[0] == self.size:
            return view[1]
        known = self._minima
        if known is None or known.covered_end > self.size:
            known = _best_minima(self, self._read_sidecar())
        entries: list[MinEntry] = []
        if known is not None:
            # (no chunks: every batch is empty, as the log cleaner leaves some: nothing to describe)
            ends = [c.position for c in known.chunks[1:]] + ([known.covered_end] if known.chunks else [])
            entries = [MinEntry(c.position, end, c.base_offset, c.min_timestamp, 0)
                       for c, end in zip(known.chunks, ends, strict=True)]
        start = known.covered_end if known is not None else 0
        grown = None if self.writable else known.copy() if known is not None else SegmentMinima(self.base_offset)
        for pos, batch in self.batches_from(start):
            low = _batch_min(batch)
            if low is not None:
                entries.append(MinEntry(pos, pos + batch.size_in_bytes, batch.base_offset, low, 1))
            if grown is not None and (isinstance(batch, LegacyBatch) or not grown.extend(
                    pos, batch.base_offset, batch.crc, (pos, batch.base_offset, batch.size_in_bytes, batch.crc),
                    _NO_RECORDS if low is None else low)):
                grown = None
        if grown is not None and not self.corrupt_ranges and grown.covered_end > start:
            _remember_minima(self, grown)
        self._minima_view = (self.size, entries)
        return entries

    def _read_sidecar(self) -> SegmentMinima | None:
        return read_minima(self.minima_path, self.base_offset, self.pread, self.size)

    def _reader_key(self) -> tuple:
        """Names this segment's file in the process-wide cache of scanned minima."""
        st = os.fstat(self._fd)
        return (str(self.log_path), st.st_dev, st.st_ino, self.base_offset)

    def batch_minima(self, position: int, end: int) -> Iterator[tuple[int, int]]:
        """(base offset, smallest timestamp) of each batch in bytes [position, end), last batch first;
        a batch's records are scanned only when the caller gets that far."""
        batches = [batch for _pos, batch in self.batches_from(position, end)]
        for batch in reversed(batches):
            low = _batch_min(batch)
            if low is not None:
                yield batch.base_offset, low

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

    # -- recovery -----------------------------------------------------------------------------------
    def sanity_check(self) -> None:
        self.offset_index.sanity_check()
        self.time_index.sanity_check()
        if self.offset_index.entries and self.offset_index.last_entry().position > self.size:
            raise IndexCorruptError(f"index {self.offset_index.path} points past the end of the log")

    def rebuild_indexes(self) -> int:
        """Rebuild both indexes from the log without truncating anything; returns the valid bytes."""
        return self._scan(truncate=False)

    def recover(self) -> int:
        """Validate every batch, rebuild the indexes and truncate a torn tail (`LogSegment.recover`).
        Corruption followed by valid batches is kept and recorded in `corrupt_ranges` instead of ending
        the log there (see `storage.corruption`); a segment that is not the last is never truncated.
        Returns the number of bytes truncated."""
        valid = self._scan(truncate=True)
        if valid < self.size and not self.is_last:
            self._record_corrupt(valid, self.size, self._scan_next_offset, self._offset_limit_after - 1)
            return 0
        truncated = self.size - valid
        if truncated > 0:
            log.warning("segment %s: truncating %d invalid bytes at position %d", self.log_path, truncated, valid)
            os.ftruncate(self._fd, valid)
            self.size = valid
        if not self.corrupt_ranges:  # every batch was validated
            self._checked = [[0, valid]]
        return truncated

    def _record_corrupt(self, start: int, end: int, first_offset: int, last_offset: int) -> CorruptRange:
        found = CorruptRange(self.base_offset, start, end, first_offset, last_offset)
        self.corrupt_ranges = sorted([*self.corrupt_ranges, found], key=lambda r: r.start)
        if found not in self._reported:
            self._reported.add(found)
            log.error("%s; serving the rest of %s", found.describe(), self.dir.name)
        return found

    def _scan(self, truncate: bool) -> int:
        """One pass over the log: rebuild both indexes and return the end of the last valid batch. With
        `truncate` (recovery) every batch is validated and invalid bytes followed by a valid batch are
        recorded as a corrupt range and stepped over."""
        self._rebuild_needed = False
        self.offset_index.reset()
        self.time_index.reset()
        self.corrupt_ranges = []
        self._max_ts = TimestampOffset(-1, -1)
        valid = 0
        last_entry = 0
        expected = self.base_offset
        start = 0
        native = _native_clean_run if truncate and self.time_index_style != "max_record" and self._fd >= 0 else None
        while True:
            if native is not None:
                # The valid v2 batches from `start`, walked in C with the same checks and bookkeeping as the
                # loop below; the loop carries on from where C stopped (anything C does not judge itself).
                oi, ti = self.offset_index, self.time_index
                stop, last_entry, max_ts, max_off, expected, points = native(
                    self._fd, start, self.size, self.base_offset, self.index_interval_bytes, last_entry,
                    self._max_ts.timestamp, self._max_ts.offset, expected,
                    oi.max_entries - oi.entries, ti.max_entries - 1 - ti.entries)
                for last_offset, position, ts, off in points:
                    self.offset_index.append(last_offset, position)
                    self.time_index.maybe_append(ts, off)
                if stop > start:
                    self._max_ts = TimestampOffset(max_ts, max_off)
                    start = valid = stop
            try:
                for pos, batch in self.batches_from(start, resync=False):
                    if truncate:
                        batch.validate()
                    if not 0 <= batch.last_offset - self.base_offset <= 0x7FFFFFFF:
                        raise CorruptMessageError(f"offset {batch.last_offset} outside segment {self.base_offset}")
                    if batch.base_offset < expected and truncate:
                        # Offsets only grow in a segment; a batch going back could only be damage, and its
                        # timestamps must not become the running max (every later index entry would fail).
                        raise CorruptMessageError(f"batch offsets {batch.base_offset}-{batch.last_offset} go back "
                                                  f"before {expected}")
                    max_ts = self._max_ts
                    if batch.max_timestamp > max_ts.timestamp:
                        max_ts = TimestampOffset(batch.max_timestamp, self._index_offset_for(batch))
                    if pos - last_entry > self.index_interval_bytes:
                        self.offset_index.append(batch.last_offset, pos)
                        self.time_index.maybe_append(max_ts.timestamp, max_ts.offset)
                        last_entry = pos
                    self._max_ts = max_ts  # (a batch whose index entries were refused is invalid: not counted)
                    valid = pos + batch.size_in_bytes
                    expected = max(expected, batch.last_offset + 1)
            except (CorruptMessageError, InvalidRecordError, KafkaError) as exc:
                if not truncate:
                    raise
                log.warning("segment %s: invalid batch at position %d: %s", self.log_path, valid, exc)
            if not truncate or valid >= self.size:
                break
            nxt = find_next_valid_batch(self.pread, valid + 1, self.size, expected,
                                        self.base_offset + 0x7FFFFFFF)
            if nxt is None:
                break  # nothing valid follows: a torn tail
            self._record_corrupt(valid, nxt[0], expected, nxt[1].base_offset - 1)
            start = valid = nxt[0]
        self._scan_next_offset = expected
        # Like LogSegment.recover: the final time-index entry a normal close would have written; and
        # bytesSinceLastIndexEntry is left alone (0 on a freshly opened segment).
        if self._max_ts.timestamp >= 0:
            self.time_index.maybe_append(self._max_ts.timestamp, self._max_ts.offset, skip_full_check=True)
        return valid

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
        headers = _HeaderReader(self)
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
    def _last_boundary(headers: _HeaderReader, pos: int, target: int) -> int | None:
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
        return _span_end(self._checked, position)

    def _mark_checked(self, start: int, end: int) -> None:
        if self._checked_end(start) >= end:  # inside a span already: nothing to merge
            return
        self._checked = _add_span(self._checked, start, end, self.MAX_CHECKED_SPANS)

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int = 0, *,
                                 tables: TimeTableCache | None = None, key: tuple = ()) -> FoundTimestamp | None:
        """First record with timestamp >= target and offset >= starting_offset
        (`LogSegment.findOffsetByTimestamp`: time index floor, offset index position, then a log scan).
        With `tables`, batches are walked by their headers and only the one that can hold the answer is
        read, through the cache of per-batch timestamp tables; `key` names this log version there."""
        floor = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(floor.offset, starting_offset)).position
        if tables is not None and not self.corrupt_ranges:
            found = self._find_by_headers(timestamp, starting_offset, position, tables, key)
            if found is not False:
                return found
        for _pos, batch in self.batches_from(position):
            if batch.max_timestamp >= timestamp and batch.last_offset >= starting_offset:
                if isinstance(batch, LegacyBatch):
                    for rec in batch.records():
                        if rec.timestamp >= timestamp and rec.offset >= starting_offset:
                            return FoundTimestamp(rec.timestamp, rec.offset, batch.partition_leader_epoch)
                    continue
                found = batch.first_at_or_after(timestamp, starting_offset)
                if found is not None:
                    return FoundTimestamp(found[1], found[0], batch.partition_leader_epoch)
        return None

    def _find_by_headers(self, timestamp: int, starting_offset: int, position: int, tables: TimeTableCache,
                         key: tuple) -> FoundTimestamp | None | bool:
        """`find_offset_by_timestamp` over v2 headers; False sends the caller to the batch-parsing loop."""
        headers = _HeaderReader(self)
        pos = position
        while True:
            pos = headers.skip_below(pos, timestamp, starting_offset)
            h = headers.header(pos)
            if not h:
                return h
            size = 12 + h[1]
            if h[8] >= timestamp and h[0] + h[6] >= starting_offset:
                if not self.writable and not self._crc_ok(pos, headers.batch(pos, size)):
                    return False  # the parsing loop records the corrupt range and steps over it
                found = tables.first_at_or_after((*key, self.base_offset, pos), h,
                                                 lambda p=pos, n=size: headers.batch(p, n), timestamp,
                                                 starting_offset)
                if found is not None:
                    return FoundTimestamp(found[1], found[0], h[2])
            pos += size

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size})"


# `_headers.minima_run` (C): `_extend_by_scan`'s walk over uncompressed v2 batches, with `scan_timestamps` (C)
# reading their records as `RecordBatch.scan_timestamps` does.
_native_minima_run = load_native("chronolog.storage._headers", "minima_run")
# `_headers.producer_run` (C): `producer_batches`' walk over whole v2 batches.
_native_producer_run = load_native("chronolog.storage._headers", "producer_run")
_PRODUCER_RUN_MOST = 4096  # batches per call: a bounded list, however long the segment
_native_scan = load_native("chronolog.records._walk", "scan_timestamps")

_NO_TS = -(2**63)  # a batch whose timestamps cannot be read: lower than anything, so nothing is proven past it
_NO_RECORDS = 2**63 - 1  # a batch without records (compaction can leave one): no record is below anything


def _span_end(spans, position: int) -> int:
    """The end of the span of `spans` (sorted, apart) holding `position`; -1 when none does."""
    for a, b in spans:
        if a <= position <= b:
            return b
        if a > position:
            break
    return -1


def _add_span(spans, start: int, end: int, most: int) -> list[list[int]]:
    """`spans` with [start, end) merged in; beyond `most` spans the shortest is forgotten."""
    out = []
    for a, b in spans:
        if b < start or a > end:  # apart from [start, end)
            out.append([a, b])
        else:  # touching or overlapping: one span
            start, end = min(a, start), max(b, end)
    out.append([start, end])
    out.sort()
    if len(out) > most:
        out.remove(min(out, key=lambda s: s[1] - s[0]))
    return out


class MinEntry(NamedTuple):
    """Bytes [position, end) of a segment, from the batch based at `first_offset`, whose records are all
    at or after `min_timestamp`; `batches` is 1 for a single batch, 0 for a chunk of one or more."""

    position: int
    end: int
    first_offset: int
    min_timestamp: int
    batches: int


def _batch_min(batch: AnyBatch) -> int | None:
    """Smallest timestamp a reader sees in the batch; None when it has no records."""
    if isinstance(batch, LegacyBatch):
        return min((r.timestamp for r in batch.records()), default=None)
    if batch.records_count <= 0:
        return None
    if batch.timestamp_type == 1:
        return batch.max_timestamp  # LogAppendTime: every record reads as the batch's max timestamp
    try:
        return batch.scan_timestamps()[0]
    except (InvalidRecordError, CorruptMessageError, KafkaError):
        return _NO_TS


_READER_MINIMA: OrderedDict[tuple, SegmentMinima] = OrderedDict()
_READER_MINIMA_LOCK = threading.Lock()
_READER_MINIMA_MAX_CHUNKS = 1 << 18  # ~64 GiB of segments remembered, some tens of MB; oldest use out first
_reader_chunks = 0


def _reader_key(seg: LogSegment) -> tuple:
    return seg._reader_key()


def _remember_minima(seg: LogSegment, minima: SegmentMinima) -> None:
    global _reader_chunks
    with _READER_MINIMA_LOCK:
        key = _reader_key(seg)
        old = _READER_MINIMA.pop(key, None)
        if old is not None:
            _reader_chunks -= len(old.chunks)
        _READER_MINIMA[key] = minima
        _reader_chunks += len(minima.chunks)
        while _reader_chunks > _READER_MINIMA_MAX_CHUNKS and len(_READER_MINIMA) > 1:
            _key, dropped = _READER_MINIMA.popitem(last=False)
            _reader_chunks -= len(dropped.chunks)


def _best_minima(seg: LogSegment, from_file: SegmentMinima | None) -> SegmentMinima | None:
    """The sidecar or what this process scanned before, whichever covers more and still matches."""
    if seg.writable:
        return from_file
    with _READER_MINIMA_LOCK:
        key = _reader_key(seg)
        cached = _READER_MINIMA.get(key)
        if cached is not None:
            _READER_MINIMA.move_to_end(key)
    if cached is not None and (from_file is None or cached.covered_end > from_file.covered_end) \
            and cached.matches(seg.pread, seg.size):
        return cached
    return from_file


# baseOffset, batchLength, magic, lastOffsetDelta, maxTimestamp of a v2 batch header.
_WALK_FIELDS = struct.Struct(">qi4xb6xi8xq")


# `_headers.batch_end` (C): fetch_range's header walk with exactly the Python walk's answers.
_native_batch_end = load_native("chronolog.storage._headers", "batch_end")
# `_headers.clean_run` (C): recovery's walk over valid v2 batches (`LogSegment._scan`).
_native_clean_run = load_native("chronolog.storage._headers", "clean_run")


_HEADER_FIRST_READ = 4096  # one header of a big batch costs a small read


class _HeaderReader:
    """The 61-byte header of the v2 batch at a position, from chunked reads of the headers only. None at
    the end of the data (or a torn tail of the last segment); False for anything a batch-parsing reader
    must look at (legacy messages, bad sizes or magic, truncation mid-file)."""

    __slots__ = ("_seg", "_end", "_buf", "_buf_pos", "_chunk")

    def __init__(self, seg: LogSegment) -> None:
        self._seg = seg
        self._end = seg.size
        self._buf = b""
        self._buf_pos = 0
        self._chunk = _HEADER_FIRST_READ  # many small batches: reads grow

    @property
    def end(self) -> int:
        """The segment's size when this reader began: nothing past it is read."""
        return self._end

    def header(self, pos: int) -> tuple | None | bool:
        """`RecordBatch` header fields (baseOffset, batchLength, leaderEpoch, magic, crc, attributes,
        lastOffsetDelta, baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, count)."""
        if pos >= self._end:
            return None
        rel = pos - self._buf_pos
        if rel < 0 or rel + HEADER_SIZE > len(self._buf):
            # Reads grow while the walk goes on within reach of the next, larger read (a walk over many
            # batches); a jump further than that (to an index entry, as a fetch inside a checked span makes)
            # starts again with one small read instead of a 64 KiB one.
            if rel < 0 or rel > len(self._buf) + self._chunk:
                self._chunk = _HEADER_FIRST_READ
            self._buf = self._seg.pread(pos, min(self._chunk, self._end - pos))
            self._chunk = min(self._chunk * 4, 64 << 10)
            self._buf_pos, rel = pos, 0
            if len(self._buf) < HEADER_SIZE:
                return None if self._seg.is_last else False
        h = BATCH_HEADER.unpack_from(self._buf, rel)
        if h[3] != 2 or h[1] < HEADER_SIZE - 12 or h[6] < 0:
            return False
        if pos + 12 + h[1] > self._end:
            return None if self._seg.is_last else False
        return h

    def skip_below(self, pos: int, timestamp: int, min_offset: int) -> int:
        """The first position from `pos` whose batch may hold a record at or after both bounds, walking
        only the headers already read (five fields each, the checks of `header`); where the buffer ends
        or a header looks wrong it stops, and `header` there gives the verdict."""
        buf, end = self._buf, self._end
        rel = pos - self._buf_pos
        limit = len(buf) - HEADER_SIZE
        while pos < end and 0 <= rel <= limit:
            base, length, magic, delta, max_ts = _WALK_FIELDS.unpack_from(buf, rel)
            if (magic != 2 or length < HEADER_SIZE - 12 or delta < 0 or pos + 12 + length > end
                    or (max_ts >= timestamp and base + delta >= min_offset)):
                break
            pos += 12 + length
            rel += 12 + length
        return pos

    def batch(self, pos: int, size: int) -> RecordBatch:
        """The batch at `pos`, from the headers' buffer when it holds all of it, else read."""
        rel = pos - self._buf_pos
        if 0 <= rel and rel + size <= len(self._buf):
            return RecordBatch(self._buf, rel)
        return RecordBatch(self._seg.pread(pos, size))

    def at(self, pos: int) -> tuple[int, int, int] | None | bool:
        """(size, base offset, last offset), or None / False as `header`."""
        h = self.header(pos)
        if not h:
            return h
        return 12 + h[1], h[0], h[0] + h[6]


class TimeTableCache:
    """Lookups by time inside big batches (a librdkafka batch holds thousands of records): the first
    lookup in a batch scans it, stopping at the answer; a second builds the batch's `TimestampTable`
    and keeps it here, so later lookups bisect instead of scanning. Bounded by records held (about 24
    bytes each), least recently used first out. Keys name a batch position in one version of one
    log; entries also check base offset, CRC and length, so a table never answers for other bytes."""

    MIN_RECORDS = 64  # smaller batches scan faster than they bisect

    def __init__(self, max_records: int = 1_000_000, max_seen: int = 4096) -> None:
        self.max_records = max_records
        self.max_seen = max_seen
        self._tables: OrderedDict[tuple, tuple[tuple[int, int, int], TimestampTable]] = OrderedDict()
        self._seen: OrderedDict[tuple, None] = OrderedDict()
        self._records = 0
        self._lock = threading.Lock()

    def first_at_or_after(self, key: tuple, header: tuple, load, target: int,
                          min_offset: int) -> tuple[int, int] | None:
        """`RecordBatch.first_at_or_after` for the batch with this header; `load()` reads the batch."""
        if header[12] < self.MIN_RECORDS or header[5] & TIMESTAMP_TYPE_MASK:
            return load().first_at_or_after(target, min_offset)
        ident = (header[0], header[4], header[1])
        with self._lock:
            entry = self._tables.get(key)
            if entry is not None and entry[0] == ident:
                self._tables.move_to_end(key)
                return entry[1].first_at_or_after(target, min_offset)
            seen = key in self._seen
            if not seen:
                self._seen[key] = None
                if len(self._seen) > self.max_seen:
                    self._seen.popitem(last=False)
        batch = load()
        if not seen:
            return batch.first_at_or_after(target, min_offset)
        table = batch.timestamp_table()
        with self._lock:
            old = self._tables.pop(key, None)
            if old is not None:
                self._records -= len(old[1])
            self._tables[key] = (ident, table)
            self._records += len(table)
            while self._records > self.max_records and len(self._tables) > 1:
                _key, (_ident, dropped) = self._tables.popitem(last=False)
                self._records -= len(dropped)
        return table.first_at_or_after(target, min_offset)

    def clear(self) -> None:
        with self._lock:
            self._tables.clear()
            self._seen.clear()
            self._records = 0


TIME_TABLES = TimeTableCache()
