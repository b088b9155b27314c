"""Log compaction: Kafka's `LogCleaner` (`Cleaner`, `SkimpyOffsetMap`, `CleanedTransactionMetadata`), the
choice of the log to clean (`LogCleanerManager`) and the `.cleaned` / `.swap` file protocol that makes a
swap survive a crash at any step (`LocalLog.replaceSegments`, `LogLoader`).

One pass over a log:
1. `cleanable_offsets`: the dirty part runs from the cleaner checkpoint (or the log start) up to the first
   uncleanable offset: the active segment, the last stable offset, and the first segment whose largest
   record timestamp is younger than `min.compaction.lag.ms` (KIP-58).
2. An offset map (key hash -> last offset) is built over the dirty part, bounded by
   `log.cleaner.dedupe.buffer.size`; a dirty part with more keys is cleaned in several passes.
3. The segments from the log start to the end of the map are grouped (`segment.bytes`, index sizes,
   32-bit relative offsets) and each group is copied into one `<base>.log.cleaned` (with its `.index`,
   `.timeindex` and `.txnindex`), keeping of each key only its last record, offsets and timestamps
   unchanged. Tombstones and the markers of transactions left empty get a delete horizon (KIP-534:
   `delete.retention.ms` after the first cleaning that meets them) and go at the first cleaning after
   it; records of aborted transactions go at once.
4. The swap: `.cleaned` -> `.swap` (the `.log` last: its rename commits the swap), the old segments ->
   `.deleted` (their `.log` last), `.swap` -> final names (the `.log` last). `recover_swaps` finishes an
   interrupted swap when the partition is opened, or undoes one that had not committed.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from chronolog.errors import KafkaError
from chronolog.records import (
    LOG_OVERHEAD,
    CompressionType,
    RecordBatch,
    TimestampType,
    build_batch,
    iter_batches,
)
from chronolog.records.batch import build_empty_batch, record_spans, splice_batch
from chronolog.records.compression import DEFAULT_MAX_DECOMPRESSED, compress, decompress, zstd_context_methods
from chronolog.records.control import ControlType, control_type_of
from chronolog.storage.checkpoints import CLEANER_CHECKPOINT  # noqa: F401 (named here by tools and tests)
from chronolog.storage.index import OffsetIndex, TimeIndex, TimestampOffset
from chronolog.storage.txnindex import TXN_INDEX_SUFFIX, AbortedTxn, TransactionIndex

try:  # the per-record work in C (records/_clean.c); the pure-Python path gives the same bytes
    from chronolog.records import _clean as _native
except ImportError:  # pragma: no cover - built without a compiler
    _native = None

if TYPE_CHECKING:
    from chronolog.storage.log import PartitionLog
    from chronolog.storage.segment import LogSegment

log = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"  # LogFileUtils.CLEANED_FILE_SUFFIX
SWAP_SUFFIX = ".swap"  # LogFileUtils.SWAP_FILE_SUFFIX
_LOG = ".log"
_OTHER_SUFFIXES = (".index", ".timeindex", TXN_INDEX_SUFFIX, ".chronolog-minima")
_ENTRY_BYTES = 24  # SkimpyOffsetMap: a 16-byte MD5 and an 8-byte offset per slot
_READ_CHUNK = 1 << 20
# Bytes a walk asks the kernel to read ahead of where it reads (posix_fadvise WILLNEED): the disk reads
# them while the cleaner decompresses and hashes what it has, instead of after. Bounded, so that a large
# dirty log does not push everything else out of the page cache at once.
_READ_AHEAD = 8 << 20

# Test seam: called with the name of each step of a swap (`cleaned`, `swap:<file>`, `deleted:<base>`,
# `final:<file>`), so that tests can raise or die there.
STEP_HOOK: Callable[[str], None] | None = None


def _step(name: str) -> None:
    if STEP_HOOK is not None:
        STEP_HOOK(name)


class CleaningAbortedError(Exception):
    """The cleaning of a log stopped (shutdown, the log changed under it): nothing was swapped."""


# -- the offset map ------------------------------------------------------------------------------------
class OffsetMap:
    """Kafka's `SkimpyOffsetMap`: MD5 of each key -> the last offset seen for it, sized by memory
    (`log.cleaner.dedupe.buffer.size` / 24 bytes a slot) and filled to `load_factor` of its slots."""

    def __init__(self, memory: int, load_factor: float = 0.9) -> None:
        self.slots = memory // _ENTRY_BYTES
        self.max_entries = int(self.slots * load_factor)
        if self.max_entries < 1:
            raise KafkaError("offset map is too small to fit in even a single message: increase "
                             "log.cleaner.dedupe.buffer.size")
        self._map: dict[bytes, int] = {}
        self.latest_offset = -1
        self.peak_bytes = 0

    def __len__(self) -> int:
        return len(self._map)

    @property
    def full(self) -> bool:
        return len(self._map) >= self.max_entries

    def put(self, key: bytes, offset: int) -> None:
        self._map[hashlib.md5(key).digest()] = offset
        self.latest_offset = offset

    def put_digest(self, digest: bytes, offset: int) -> None:
        self._map[digest] = offset
        self.latest_offset = offset

    def get_digest(self, digest: bytes) -> int:
        return self._map.get(digest, -1)

    def get(self, key: bytes) -> int:
        return self._map.get(hashlib.md5(key).digest(), -1)

    def clear(self) -> None:
        self._note_memory()
        self._map.clear()
        self.latest_offset = -1

    def _note_memory(self) -> None:
        # The dict, its 16-byte digests (49 bytes as Python objects) and the offsets (small ints are
        # shared, the others 32 bytes each).
        used = sys.getsizeof(self._map) + len(self._map) * (49 + 32)
        self.peak_bytes = max(self.peak_bytes, used)

    @property
    def utilization(self) -> float:
        return len(self._map) / self.slots if self.slots else 0.0

    def map_body(self, body, count: int, base: int, start: int) -> tuple[bool, int]:
        return map_records(self, body, count, base, start)

    def kept_spans(self, body, count: int, base: int, retain_deletes: bool) -> tuple[int, list, bool]:
        return kept_records(self, body, count, base, retain_deletes)


def map_records(omap, body, count: int, base: int, start: int) -> tuple[bool, int]:
    """Puts the keyed records at or after `start` of a records section into `omap`; (the map filled,
    records mapped before it did). The C map's `map_body` does the same; the walk's error for a bad body."""
    mapped = 0
    for off_delta, _t, _s, _e, kstart, klen, _vl in record_spans(body, count):
        if klen >= 0 and base + off_delta >= start:
            if omap.full:
                return True, mapped
            omap.put(bytes(body[kstart:kstart + klen]), base + off_delta)
        mapped += 1
    return False, mapped


def kept_records(omap, body, count: int, base: int, retain_deletes: bool) -> tuple[int, list, bool]:
    """(records, the spans of those that stay, whether a tombstone stays) of a records section: a record
    stays when it is past the map or the last of its key (a tombstone only while `retain_deletes`); a
    record without a key goes. The C map's `kept_spans` does the same."""
    spans = record_spans(body, count)
    latest = omap.latest_offset
    kept = []
    tombstones = False
    for span in spans:
        offset = base + span[0]
        klen, vlen = span[5], span[6]
        if offset > latest:
            keep = True
        elif klen < 0:
            keep = False
        else:
            keep = offset >= omap.get(bytes(body[span[4]:span[4] + klen])) and (vlen >= 0 or retain_deletes)
        if keep:
            kept.append(span)
            tombstones = tombstones or vlen < 0
    return len(spans), kept, tombstones


def recompress(codec: int, data: bytes) -> bytes:
    """The cleaner's codec for the records a partly kept batch keeps (Kafka's `filterTo` recompresses them
    with the batch's codec): zstd through the system's libzstd where the C extension loaded it, as the C
    copy compresses them on its threads, so that both paths write the same bytes (python-zstandard's
    bundled zstd may write other, equally valid, frames for the same records); the records layer's codecs
    otherwise."""
    if codec == CompressionType.ZSTD and _native is not None and _native.LIBZSTD_COMPRESS:
        return _native.zstd_compress(data)
    return compress(codec, data)


def new_offset_map(memory: int, load_factor: float = 0.9, native: bool | None = None):
    """The C map (records/_clean.c: 128-bit hashes in an open-addressing table bounded by `memory`) where
    the extension is built and `native` is not False, else the Python one (MD5 -> offset in a dict)."""
    if native is False or _native is None:
        if native:
            raise KafkaError("the log cleaner's C extension is not built")
        return OffsetMap(memory, load_factor)
    if int(memory // _ENTRY_BYTES * load_factor) < 1:
        raise KafkaError("offset map is too small to fit in even a single message: increase "
                         "log.cleaner.dedupe.buffer.size")
    omap = _native.OffsetMap(memory, load_factor, int.from_bytes(os.urandom(8), "little"))
    # compressed batches in C too, through the codecs the Python path calls (the same limits and errors);
    # zstd straight through contexts of the map's own, made as the records layer makes its own, and
    # recompressed as the Python path recompresses (`recompress`)
    zstd = zstd_context_methods()
    if zstd is not None and _native.LIBZSTD_COMPRESS:
        zstd = (zstd[0], _native.zstd_compress)
    omap.set_codecs(decompress, recompress, *(zstd or (None, None)), DEFAULT_MAX_DECOMPRESSED)
    return omap


def _note_memory(omap) -> None:
    if isinstance(omap, OffsetMap):
        omap._note_memory()


# -- choosing a log ------------------------------------------------------------------------------------
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


# -- transactions --------------------------------------------------------------------------------------
class _AbortedMeta:
    __slots__ = ("txn", "last_observed")

    def __init__(self, txn: AbortedTxn) -> None:
        self.txn = txn
        self.last_observed: int | None = None


class CleanedTransactionMetadata:
    """Kafka's `CleanedTransactionMetadata`: which batches belong to aborted transactions (discarded), and
    which markers may go (a COMMIT whose transaction has no batch left, an ABORT once its batches are
    gone). Retained aborted transactions are written to the cleaned segment's `.txnindex`."""

    def __init__(self) -> None:
        self.ongoing_committed: set[int] = set()
        self.ongoing_aborted: dict[int, _AbortedMeta] = {}
        self._aborted: list[tuple[int, int, AbortedTxn]] = []
        self._seq = 0
        self.cleaned_index: list[AbortedTxn] | None = None

    def add_aborted(self, txns: list[AbortedTxn]) -> None:
        for txn in txns:
            self._seq += 1
            heapq.heappush(self._aborted, (txn.first_offset, self._seq, txn))

    def _consume_up_to(self, offset: int) -> None:
        while self._aborted and self._aborted[0][0] <= offset:
            txn = heapq.heappop(self._aborted)[2]
            self.ongoing_aborted.setdefault(txn.producer_id, _AbortedMeta(txn))

    def on_control_batch(self, batch: RecordBatch) -> bool:
        """True when the control batch can be discarded (`onControlBatchRead`)."""
        self._consume_up_to(batch.last_offset)
        first = next(iter(batch.records()), None)
        if first is None:
            return True  # an empty control batch was already cleaned
        kind = control_type_of(first.key)
        pid = batch.producer_id
        if kind == ControlType.ABORT:
            meta = self.ongoing_aborted.pop(pid, None)
            if meta is not None and meta.last_observed is not None:
                if self.cleaned_index is not None:
                    self.cleaned_index.append(meta.txn)
                return False
            return True
        if kind == ControlType.COMMIT:
            if pid in self.ongoing_committed:
                self.ongoing_committed.discard(pid)
                return False
            return True
        return False

    def on_batch(self, batch: RecordBatch) -> bool:
        """True when the data batch belongs to an aborted transaction (`onBatchRead`)."""
        self._consume_up_to(batch.last_offset)
        if not batch.is_transactional:
            return False
        meta = self.ongoing_aborted.get(batch.producer_id)
        if meta is not None:
            meta.last_observed = batch.last_offset
            return True
        self.ongoing_committed.add(batch.producer_id)
        return False


# -- throttling and statistics -------------------------------------------------------------------------
class Throttler:
    """`log.cleaner.io.max.bytes.per.second` over reads and writes (Kafka's `Throttler`): sleeps when the
    bytes since the last check came faster than the rate."""

    def __init__(self, bytes_per_second: float, sleep: Callable[[float], object] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = bytes_per_second
        self._sleep, self._clock = sleep, clock
        self._start = clock()
        self._bytes = 0.0
        self.slept = 0.0

    def maybe_throttle(self, n: int) -> None:
        if self.rate >= 1e300:
            return
        self._bytes += n
        elapsed = self._clock() - self._start
        if elapsed < 0.01 and self._bytes < self.rate * 0.01:
            return
        wanted = self._bytes / self.rate
        if wanted > elapsed:
            self._sleep(wanted - elapsed)
            self.slept += wanted - elapsed
        self._start, self._bytes = self._clock(), 0.0


@dataclass
class CleanerStats:
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_retained: int = 0
    map_records: int = 0
    map_bytes_read: int = 0
    segments: int = 0
    groups: int = 0
    seconds: float = 0.0
    sync_seconds: float = 0.0  # of `seconds`: the wait for the groups' syncs and swaps beyond the copies they overlap
    map_seconds: float = 0.0  # of `seconds`: the offset-map pass
    notes: list[str] = field(default_factory=list)


# -- reading a segment without the log's lock ----------------------------------------------------------
class _SegmentReader:
    """The batches of an inactive segment through a file descriptor of our own: retention may rename or
    remove the segment meanwhile, and our descriptor still reads the bytes it had."""

    def __init__(self, seg: LogSegment) -> None:
        self.seg = seg
        self.base_offset = seg.base_offset
        self.size = seg.size
        self._fd = os.open(seg.log_path, os.O_RDONLY)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def read(self, position: int, size: int) -> bytes:
        return os.pread(self._fd, min(size, self.size - position), position)

    def read_ahead(self, position: int, size: int) -> None:
        """Asks the kernel to start reading `size` bytes at `position` (a hint: an error is ignored)."""
        try:
            os.posix_fadvise(self._fd, position, min(size, self.size - position), os.POSIX_FADV_WILLNEED)
        except OSError:
            pass

    def walk(self, handle: Callable[[bytes, bool, bytes | None], int], then: _SegmentReader | None = None,
             early: bool = False) -> None:
        """Calls `handle(chunk, reaches_end, next)` over the segment in chunks; it returns the bytes of whole
        batches it consumed (the next chunk starts there, grown to hold a batch larger than a chunk), or -1
        to stop. Ends at the end of the segment or at a torn tail, as `batches` does. The next
        `_READ_AHEAD` bytes are kept on their way from the disk, reaching into `then` (the segment read
        next) near the end. `early`: each next chunk is read before `handle` runs, from where the chunk's
        whole batches end (`next`, None at the end), so that the map pass's helper can start on it while the
        chunk after it is read; it is used when `handle` consumed every whole batch (as it does unless it
        stops), else read again from where `handle` stopped."""
        pos, want, advised = 0, _READ_CHUNK, 0
        ahead: tuple[int, bytes] | None = None
        while pos < self.size:
            if pos + _READ_AHEAD // 2 >= advised:
                advised = pos + _READ_AHEAD
                self.read_ahead(pos, _READ_AHEAD)
                if advised > self.size and then is not None:
                    then.read_ahead(0, advised - self.size)
            if ahead is not None and ahead[0] == pos and want == _READ_CHUNK:
                chunk = ahead[1]
            else:
                chunk = self.read(pos, want)
            ahead = None
            if not chunk:
                return
            end = pos + len(chunk)
            if early and end < self.size and _native is not None:
                whole = pos + _native.chunk_end(chunk)
                if whole > pos:
                    ahead = (whole, self.read(whole, _READ_CHUNK))
            used = handle(chunk, end >= self.size, None if ahead is None else ahead[1])
            if used < 0:
                return
            if used:
                pos += used
                want = _READ_CHUNK
                continue
            if len(chunk) >= LOG_OVERHEAD:
                need = LOG_OVERHEAD + int.from_bytes(chunk[8:12], "big", signed=True)
                if need > len(chunk) and pos + need <= self.size:
                    want = need
                    continue
            return  # a torn tail (recovery has cut it on a writable log)

    def batches(self, position: int = 0) -> Iterator[tuple[int, object]]:
        pos = position
        while pos < self.size:
            chunk = os.pread(self._fd, min(_READ_CHUNK, self.size - pos), pos)
            if not chunk:
                return
            consumed = 0
            for batch in iter_batches(chunk):
                yield pos + consumed, batch
                consumed += batch.size_in_bytes
            if consumed == 0:
                if len(chunk) >= 12:
                    size = LOG_OVERHEAD + int.from_bytes(chunk[8:12], "big", signed=True)
                    if pos + size <= self.size:
                        chunk = os.pread(self._fd, size, pos)
                        batch = next(iter_batches(chunk), None)
                        if batch is not None:
                            yield pos, batch
                            pos += batch.size_in_bytes
                            continue
                return  # a torn tail (recovery has cut it on a writable log)
            pos += consumed


# -- the cleaned segment -------------------------------------------------------------------------------
class _CleanedSegment:
    """`<base>.log.cleaned` and its indexes, appended batch by batch with `LogSegment.append`'s index rule
    (an entry after more than `index.interval.bytes`, the time index only when the max grows, a final
    time-index entry when done: `onBecomeInactiveSegment`)."""

    def __init__(self, directory: Path, base: int, index_interval: int, max_index_size: int) -> None:
        self.dir, self.base = directory, base
        self.paths = {s: directory / f"{base:020d}{s}{CLEANED_SUFFIX}" for s in (_LOG, ".index", ".timeindex",
                                                                               TXN_INDEX_SUFFIX)}
        for p in self.paths.values():
            p.unlink(missing_ok=True)
        self._fd = os.open(self.paths[_LOG], os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self.offset_index = OffsetIndex(self.paths[".index"], base, max_index_size, True)
        self.time_index = TimeIndex(self.paths[".timeindex"], base, max_index_size, True)
        self.interval = index_interval
        self.size = 0
        self._pending = bytearray()  # appended, not yet written: they end at `size`
        self.since_entry = 0
        self.max_ts = TimestampOffset(-1, -1)
        self.aborted: list[AbortedTxn] = []

    def append(self, data: bytes | memoryview, last_offset: int, max_timestamp: int) -> None:
        if not 0 <= last_offset - self.base <= 0x7FFFFFFF:
            raise KafkaError(f"offset {last_offset} cannot be stored relative to base {self.base}")
        if max_timestamp > self.max_ts.timestamp:
            self.max_ts = TimestampOffset(max_timestamp, last_offset)  # KAFKA-16310: the batch's last offset
        if self.since_entry > self.interval:
            self.offset_index.append(last_offset, self.size)
            self.time_index.maybe_append(self.max_ts.timestamp, self.max_ts.offset)
            self.since_entry = 0
        self._pending += data
        self.size += len(data)
        self.since_entry += len(data)
        if len(self._pending) >= _READ_CHUNK:
            self._write_pending()

    def _write_pending(self) -> None:
        """The bytes `append` gathered, in one write (a batch at a time would be a write per batch)."""
        with memoryview(self._pending) as view:
            at = self.size - len(view)
            written = 0
            while written < len(view):
                written += os.pwrite(self._fd, view[written:], at + written)
        self._pending = bytearray()

    def append_native(self, data: bytes, points: list[tuple[int, int, int, int]], size: int, since_entry: int,
                      max_ts: int, max_ts_offset: int) -> None:
        """What `append` does over many batches, as `filter_chunk` computed it: their bytes, the index
        entries (last offset, position, max timestamp, its offset) and the state after them."""
        if self._pending:
            self._write_pending()
        view = memoryview(data)
        written = 0
        while written < len(view):
            written += os.pwrite(self._fd, view[written:], self.size + written)
        with self.offset_index.held_writes(), self.time_index.held_writes():
            for last_offset, position, ts, ts_offset in points:
                self.offset_index.append(last_offset, position)
                self.time_index.maybe_append(ts, ts_offset)
        self.size, self.since_entry = size, since_entry
        self.max_ts = TimestampOffset(max_ts, max_ts_offset)

    def finish(self) -> None:
        """Final time-index entry, trimmed indexes (`onBecomeInactiveSegment`), the `.txnindex`, then each
        file synced once (`LogSegment.flush`: the log, both indexes, the `.txnindex`), after the trim, so
        the preallocated index space is never written back; the syncs run at once (`_fsync_together`)."""
        if self._pending:
            self._write_pending()
        if self.max_ts.timestamp >= 0:
            self.time_index.maybe_append(self.max_ts.timestamp, self.max_ts.offset, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self.offset_index.close_unsynced()
        self.time_index.close_unsynced()
        names = [".index", ".timeindex"]
        if self.aborted:
            txn_index = TransactionIndex(self.paths[TXN_INDEX_SUFFIX], self.base)
            for txn in self.aborted:
                txn_index.append(txn)
            txn_index.close()
            names.append(TXN_INDEX_SUFFIX)
        fds = [self._fd]
        try:
            for name in names:
                fds.append(os.open(self.paths[name], os.O_RDONLY))
            _fsync_together(fds)
        finally:
            for fd in fds[1:]:
                os.close(fd)
        self.close()

    def close(self) -> None:
        """Closes the files without syncing them (`finish` syncs each once; a discarded copy needs none)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            self.offset_index.close_unsynced()
            self.time_index.close_unsynced()

    def discard(self) -> None:
        self.close()
        for p in self.paths.values():
            p.unlink(missing_ok=True)


def _new_dest(plog: PartitionLog, base: int) -> _CleanedSegment:
    cfg = plog.config
    return _CleanedSegment(plog.dir, base, cfg.index_interval_bytes, cfg.segment_index_bytes)


class _DestsAhead:
    """`.cleaned` segments made on one of the cleaner's threads (`_submit`) while the cleaner maps or copies
    the group before theirs, by base offset."""

    def __init__(self, plog: PartitionLog) -> None:
        self.plog = plog
        self.futures: dict[int, Future | None] = {}

    def make(self, base: int) -> None:
        if base not in self.futures:
            self.futures[base] = _submit("files", _new_dest, self.plog, base)

    def take(self, base: int) -> _CleanedSegment:
        """The segment at `base`: the one made ahead, or (none was, or its making failed: the error is raised
        again here) made now."""
        future = self.futures.pop(base, None)
        if future is not None:
            with contextlib.suppress(Exception):
                return future.result()
        return _new_dest(self.plog, base)

    def drop(self) -> None:
        """The segments made ahead and not taken, removed (each waited for first)."""
        for future in self.futures.values():
            if future is not None:
                with contextlib.suppress(Exception):
                    future.result().discard()
        self.futures.clear()


def _fsync_path(path: Path) -> None:
    """fsync of a file or a directory by name."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_fsync_dir = _fsync_path


_POOLS: dict[str, tuple[int, ThreadPoolExecutor]] = {}
_POOLS_LOCK = threading.Lock()


def _submit(pool: str, fn: Callable[..., object], *args: object) -> Future | None:
    """`fn(*args)` on one of the cleaner's threads kept for the process's life (`pool`: "fsync", "swap" or
    "files"), instead of a thread started for it (a start cost 0.1-0.3 ms of the cleaning's time, several a
    group).
    None when no thread takes it (the interpreter is exiting): the caller then runs it itself. A pool is
    made again in a forked child, which has none of its parent's threads. A swap waits only for the swap
    submitted before it, and the pools take tasks in order, so no task waits for one queued behind it."""
    with _POOLS_LOCK:
        got = _POOLS.get(pool)
        if got is None or got[0] != os.getpid():
            got = (os.getpid(), ThreadPoolExecutor(4, thread_name_prefix=f"cleaner-{pool}"))
            _POOLS[pool] = got
    try:
        return got[1].submit(fn, *args)
    except RuntimeError:
        return None


def _fsync_together(fds: list[int]) -> None:
    """fsync of several files at once, on several threads (fsync releases the GIL): what one file's sync
    costs on ext4 is mostly the journal commit and the device's cache flush, and syncs that arrive together
    share them (three small files: about 1 ms at once against 6-8 ms one after the other on the shared VM).
    The same syncs as one after the other, each file's data durable when this returns; the first error
    raised."""
    errors: list[BaseException] = []
    futures = [(fd, _submit("fsync", os.fsync, fd)) for fd in fds[1:]]
    for fd in [fds[0]] + [fd for fd, f in futures if f is None]:
        try:
            os.fsync(fd)
        except BaseException as exc:  # noqa: BLE001 - the first error is raised below
            errors.append(exc)
    for _fd, future in futures:
        if future is not None:
            try:
                future.result()
            except BaseException as exc:  # noqa: BLE001 - the first error is raised below
                errors.append(exc)
    if errors:
        raise errors[0]


# -- the cleaner ---------------------------------------------------------------------------------------
_RETAIN_EMPTY, _DELETE, _DELETE_EMPTY = "retain_empty", "delete", "delete_empty"


class Cleaner:
    """Cleans one log at a time (Kafka's `Cleaner`). `should_stop` is polled between batches (shutdown)."""

    def __init__(self, dedupe_buffer_size: int = 134217728, load_factor: float = 0.9,
                 max_io_bytes_per_second: float = 1.7976931348623157e308, *,
                 should_stop: Callable[[], bool] = lambda: False,
                 sleep: Callable[[float], object] = time.sleep, native: bool | None = None) -> None:
        self.offset_map = new_offset_map(dedupe_buffer_size, load_factor, native)
        self.native = not isinstance(self.offset_map, OffsetMap)
        self.throttler = Throttler(max_io_bytes_per_second, sleep)
        self.should_stop = should_stop

    def _budget(self) -> int:
        """Bytes the C walk reads between two throttle checks: 10 ms at the I/O limit (unlimited when off)."""
        rate = self.throttler.rate
        return 1 << 62 if rate >= 1e300 else max(int(rate / 100), 1)

    def _check_done(self, plog: PartitionLog) -> None:
        if self.should_stop() or plog._closed:
            raise CleaningAbortedError(f"cleaning of {plog.topic}-{plog.partition} stopped")

    def clean(self, ltc: LogToClean, now: int) -> tuple[int, CleanerStats]:
        """Clean `ltc.log` up to the end of the offset map; returns the offset the next cleaning starts at
        (the new cleaner checkpoint) and statistics (`Cleaner.doClean`)."""
        plog = ltc.log
        stats = CleanerStats()
        started = time.monotonic()
        with plog.lock:
            if any(seg.corrupt_ranges for seg in plog.segments[:-1]):
                raise KafkaError(f"{plog.topic}-{plog.partition} has corrupt ranges; not cleaned")
            plog._ensure_producers()
            sizes = {s.base_offset: s.size for s in plog.segments}
            segs = [s for s in plog.segments if s.base_offset < ltc.first_uncleanable and s is not plog.active]
            active_producers = {pid: ((e.batches[-1].last_offset if e.batches else None), e.epoch)
                                for pid, e in plog.producers.producers.items()}
            nexts = {s.base_offset: (plog.segments[i + 1].base_offset if i + 1 < len(plog.segments)
                                     else plog.log_end_offset) for i, s in enumerate(plog.segments)}
        readers = {s.base_offset: _SegmentReader(s) for s in segs}
        swaps: list[_Swap] = []  # started, not yet joined: at most two (one swapping, the next syncing)
        # the next groups' `.cleaned` files, made on another thread meanwhile (a file's creation cost up to
        # 0.3 ms on ext4 with many files deleted lately): the first two groups' as they are if the map
        # covers the whole cleanable range, then each group's while the one before is copied
        cfg = plog.config
        made = _DestsAhead(plog)
        for group in group_segments(segs, cfg.segment_bytes, cfg.segment_index_bytes, ltc.first_uncleanable,
                                    nexts)[:2]:
            made.make(group[0].base_offset)
        try:
            map_started = time.monotonic()
            end = self._build_offset_map(plog, readers, segs, ltc.first_dirty, ltc.first_uncleanable, nexts, stats)
            stats.map_seconds = time.monotonic() - map_started
            groups = group_segments([s for s in segs if s.base_offset < end], cfg.segment_bytes,
                                    cfg.segment_index_bytes, ltc.first_uncleanable, nexts)
            txn = CleanedTransactionMetadata()
            for i, group in enumerate(groups):
                self._check_done(plog)
                dest = made.take(group[0].base_offset)
                if i + 1 < len(groups):
                    made.make(groups[i + 1][0].base_offset)
                dest = self._copy_group(plog, group, readers, nexts, txn, active_producers,
                                        ltc.first_uncleanable, now, stats, dest)
                try:
                    while len(swaps) >= 2:
                        self._wait_swap(swaps.pop(0), stats)
                except BaseException:
                    dest.discard()
                    raise
                swaps.append(_Swap(plog, group, dest, sizes, swaps[-1] if swaps else None))
                stats.groups += 1
                stats.segments += len(group)
            while swaps:
                self._wait_swap(swaps.pop(0), stats)
        finally:
            made.drop()
            for swap in swaps:  # a failure meanwhile: the swaps under way end first, their errors logged
                try:
                    swap.join()
                except _PreviousSwapFailed:
                    pass
                except BaseException as exc:  # noqa: BLE001 - the first error is the one raised
                    log.warning("%s-%d: the swap of cleaned segment %d failed too: %s", plog.topic, plog.partition,
                                swap.dest.base, exc)
            for reader in readers.values():
                reader.close()
            self.offset_map.clear()
        stats.seconds = time.monotonic() - started
        return end, stats

    def _build_offset_map(self, plog: PartitionLog, readers: dict, segs: list, start: int, end: int,
                          nexts: dict, stats: CleanerStats) -> int:
        """`Cleaner.buildOffsetMap`: keys of the dirty part, skipping aborted transactions; stops when the
        map is full. Returns the offset after the last one mapped."""
        omap = self.offset_map
        omap.clear()
        dirty = [s for s in segs if nexts[s.base_offset] > start and s.base_offset < end]
        txn = CleanedTransactionMetadata()
        txn.add_aborted(plog.aborted_txns(start, end))
        full = False
        for i, seg in enumerate(dirty):
            reader = readers[seg.base_offset]
            if self.native:
                then = readers[dirty[i + 1].base_offset] if i + 1 < len(dirty) else None
                full = self._map_segment_native(plog, reader, txn, start, end, stats, then)
                if full:
                    break
                continue
            for _pos, batch in reader.batches(0):
                self._check_done(plog)
                if batch.last_offset < start:
                    continue
                if batch.base_offset >= end:
                    break
                if self._map_batch(batch, txn, start, stats):
                    full = True
                    break
            if full:
                break
        _note_memory(omap)
        if full:
            return omap.latest_offset + 1
        return omap.latest_offset + 1 if omap.latest_offset >= 0 else start

    def _map_batch(self, batch, txn: CleanedTransactionMetadata, start: int, stats: CleanerStats) -> bool:
        """One batch into the map; True when the map filled in it."""
        omap = self.offset_map
        stats.map_bytes_read += batch.size_in_bytes
        self.throttler.maybe_throttle(batch.size_in_bytes)
        if not isinstance(batch, RecordBatch):
            return False  # v0/v1 message sets are kept as they are
        if batch.is_control or txn.on_batch(batch):
            if batch.is_control:
                txn.on_control_batch(batch)
            omap.latest_offset = max(omap.latest_offset, batch.last_offset)
            return False
        body = batch.records_section()
        got = omap.map_body(body, batch.records_count, batch.base_offset, start)
        if got is None:  # one C leaves to the Python walk (its error, or a timestamp beyond 64 bits)
            got = map_records(omap, body, batch.records_count, batch.base_offset, start)
        full, mapped = got
        stats.map_records += mapped
        if full:
            return True
        omap.latest_offset = max(omap.latest_offset, batch.last_offset)
        return False

    def _map_segment_native(self, plog: PartitionLog, reader: _SegmentReader, txn: CleanedTransactionMetadata,
                            start: int, end: int, stats: CleanerStats, then: _SegmentReader | None) -> bool:
        """`_build_offset_map`'s loop over one segment with the common batches in C (`map_chunk`); True when
        the map filled."""
        omap = self.offset_map
        budget = self._budget()
        full = [False]

        def handle(chunk: bytes, _reaches_end: bool, next_chunk: bytes | None) -> int:
            off = 0
            while True:
                self._check_done(plog)
                off, status, nbytes, records, last = omap.map_chunk(chunk, off, start, end, budget, next_chunk)
                if nbytes:
                    stats.map_bytes_read += nbytes
                    stats.map_records += records
                    self.throttler.maybe_throttle(nbytes)
                if last >= 0:
                    txn._consume_up_to(last)  # what `on_batch` does for a plain batch
                if status == _native.FULL:
                    full[0] = True
                    return -1
                if status == _native.END:
                    return -1
                if status == _native.PYTHON:
                    batch = next(iter_batches(chunk, off))
                    off += batch.size_in_bytes
                    if batch.last_offset < start:
                        continue
                    if batch.base_offset >= end:
                        return -1
                    if self._map_batch(batch, txn, start, stats):
                        full[0] = True
                        return -1
                    continue
                if status == _native.BUDGET:
                    continue
                return off

        reader.walk(handle, then, early=True)
        return full[0]

    def _copy_group(self, plog: PartitionLog, group: list, readers: dict, nexts: dict,
                    txn: CleanedTransactionMetadata, active_producers: dict, upper_bound: int, now: int,
                    stats: CleanerStats, dest: _CleanedSegment) -> _CleanedSegment:
        """`Cleaner.cleanSegments`' `cleanInto` loop: one group into `dest`, its `.cleaned` segment, written
        but not yet synced (`_Swap` does that, then the swap)."""
        cfg = plog.config
        txn.cleaned_index = dest.aborted
        try:
            for seg in group:
                txn.add_aborted(plog.aborted_txns(seg.base_offset, nexts[seg.base_offset]))
                reader = readers[seg.base_offset]
                if self.native:
                    self._copy_segment_native(plog, reader, dest, txn, active_producers, upper_bound, now, cfg,
                                              stats, seg is group[-1])
                    continue
                for batch, is_last in _with_next(reader.batches(0)):
                    self._check_done(plog)
                    self._copy_batch(batch, dest, txn, active_producers, upper_bound, now, cfg, stats,
                                     is_last and seg is group[-1])
        except BaseException:
            dest.discard()
            raise
        return dest

    @staticmethod
    def _wait_swap(swapping: _Swap | None, stats: CleanerStats) -> None:
        """Waits for the previous group's sync and swap (its error raised here); the wait is what the
        cleaning spends on them beyond the copy they overlapped (`sync_seconds`)."""
        if swapping is not None:
            waited = time.monotonic()
            swapping.join()
            stats.sync_seconds += time.monotonic() - waited

    def _copy_batch(self, batch, dest: _CleanedSegment, txn: CleanedTransactionMetadata, active_producers: dict,
                    upper_bound: int, now: int, cfg, stats: CleanerStats, last_of_group: bool) -> None:
        stats.bytes_read += batch.size_in_bytes
        self.throttler.maybe_throttle(batch.size_in_bytes)
        out = self._filter_batch(batch, txn, active_producers, upper_bound, now, cfg, stats, last_of_group)
        if out is not None:
            data, max_ts = out
            dest.append(data, batch.last_offset, max_ts)
            stats.bytes_written += len(data)
            self.throttler.maybe_throttle(len(data))

    def _copy_segment_native(self, plog: PartitionLog, reader: _SegmentReader, dest: _CleanedSegment,
                             txn: CleanedTransactionMetadata, active_producers: dict, upper_bound: int, now: int,
                             cfg, stats: CleanerStats, last_of_group: bool) -> None:
        """`_clean_group`'s loop over one segment with the common batches in C (`filter_chunk`: judged,
        copied or spliced, and indexed as `_CleanedSegment.append` does)."""
        omap = self.offset_map
        budget = self._budget()
        last_offsets = {pid: last for pid, (last, _epoch) in active_producers.items()}

        def handle(chunk: bytes, reaches_end: bool, _next: bytes | None) -> int:
            tail = last_of_group and reaches_end
            off = 0
            while True:
                self._check_done(plog)
                (off, status, nread, out, read, kept, last, points, size, since, max_ts,
                 max_ts_offset) = omap.filter_chunk(chunk, off, tail, upper_bound, now, last_offsets, dest.base,
                                                    dest.size, dest.since_entry, dest.max_ts.timestamp,
                                                    dest.max_ts.offset, dest.interval, budget)
                if nread:
                    stats.bytes_read += nread
                    stats.records_read += read
                    stats.records_retained += kept
                    self.throttler.maybe_throttle(nread)
                    txn._consume_up_to(last)  # what `on_batch` does for a plain batch
                if out:
                    dest.append_native(out, points, size, since, max_ts, max_ts_offset)
                    stats.bytes_written += len(out)
                    self.throttler.maybe_throttle(len(out))
                if status == _native.PYTHON:
                    batch = next(iter_batches(chunk, off))
                    off += batch.size_in_bytes
                    is_last = tail and next(iter_batches(chunk, off), None) is None
                    self._copy_batch(batch, dest, txn, active_producers, upper_bound, now, cfg, stats, is_last)
                    continue
                if status == _native.BUDGET:
                    continue
                return off

        reader.walk(handle)

    def _filter_batch(self, batch, txn: CleanedTransactionMetadata, active_producers: dict, upper_bound: int,
                      now: int, cfg, stats: CleanerStats, last_of_group: bool) -> tuple[bytes, int] | None:
        """`MemoryRecords.filterTo` with the cleaner's `RecordFilter`: the bytes to keep of one batch (the
        batch itself when nothing changes) and their max timestamp, or None."""
        if not isinstance(batch, RecordBatch):
            return bytes(batch.raw), getattr(batch, "max_timestamp", -1)
        can_discard = txn.on_control_batch(batch) if batch.is_control else txn.on_batch(batch)
        horizon = batch.delete_horizon_ms
        if batch.is_control:
            discard_records = can_discard and horizon is not None and horizon <= now
        else:
            discard_records = can_discard
        last = active_producers.get(batch.producer_id)
        last_of_producer = last is not None and (
            batch.last_offset == last[0] if last[0] is not None
            else batch.is_control and batch.producer_epoch == last[1])
        if batch.producer_id >= 0 and last_of_producer:
            retention = _RETAIN_EMPTY
        elif batch.next_offset == upper_bound or last_of_group:
            # Kafka keeps the round's last batch; chronolog also each group's, so that the swap covers the
            # offsets of every segment it replaces (what `recover_swaps` relies on after a crash).
            retention = _RETAIN_EMPTY
        elif discard_records:
            retention = _DELETE
        else:
            retention = _DELETE_EMPTY
        if retention == _DELETE:
            stats.records_read += batch.records_count
            return None
        omap = self.offset_map
        if not batch.is_control and not discard_records:
            fast = self._filter_by_spans(batch, horizon, now, stats)
            if fast is _NOTHING_KEPT:
                return _empty_batch(batch) if retention == _RETAIN_EMPTY else None
            if fast is not None:
                return fast
        kept = []
        tombstones = False
        changed = False
        for record in batch.records():
            stats.records_read += 1
            if discard_records:
                keep = False
            elif batch.is_control:
                keep = True
            elif record.offset > omap.latest_offset:
                keep = True
            elif record.key is None:
                keep = False
            else:
                retain_deletes = horizon is None or now < horizon
                keep = record.offset >= omap.get(record.key) and (record.value is not None or retain_deletes)
            if keep:
                kept.append(record)
                tombstones = tombstones or (record.value is None and not batch.is_control)
            else:
                changed = True
        stats.records_retained += len(kept)
        if kept:
            needs_horizon = (tombstones or (can_discard and batch.is_control)) and horizon is None
            if not changed and not needs_horizon:
                return bytes(batch.raw), batch.max_timestamp
            new_horizon = now + cfg.delete_retention_ms if needs_horizon else horizon
            log_append = batch.timestamp_type == TimestampType.LOG_APPEND_TIME
            data = build_batch(kept, base_offset=batch.base_offset, compression=batch.compression,
                               timestamp_type=batch.timestamp_type, producer_id=batch.producer_id,
                               producer_epoch=batch.producer_epoch, base_sequence=batch.base_sequence,
                               partition_leader_epoch=batch.partition_leader_epoch,
                               is_transactional=batch.is_transactional, is_control=batch.is_control,
                               max_timestamp=batch.max_timestamp if log_append else None,
                               last_offset_delta=batch.last_offset_delta, delete_horizon_ms=new_horizon)
            return data, RecordBatch(data).max_timestamp
        if retention == _RETAIN_EMPTY:
            return _empty_batch(batch)
        return None


    def _filter_by_spans(self, batch: RecordBatch, horizon: int | None, now: int, stats: CleanerStats
                         ) -> tuple[bytes, int] | None:
        """The data-batch case of `_filter_batch` without decoding records: each record judged from its key's
        bytes, the kept ones copied byte for byte (`splice_batch`). None when the batch needs the slow path:
        nothing kept (an empty batch may have to stay) or a tombstone that needs its delete horizon set."""
        body = batch.records_section()
        retain_deletes = horizon is None or now < horizon
        got = self.offset_map.kept_spans(body, batch.records_count, batch.base_offset, retain_deletes)
        if got is None:  # one C leaves to the Python walk (its error, or a timestamp beyond 64 bits)
            got = kept_records(self.offset_map, body, batch.records_count, batch.base_offset, retain_deletes)
        total, kept, tombstones = got
        if tombstones and horizon is None:
            return None  # decided again, record by record, by the general path
        stats.records_read += total
        stats.records_retained += len(kept)
        if not kept:
            return _NOTHING_KEPT
        if len(kept) == total:
            return bytes(batch.raw), batch.max_timestamp
        data = splice_batch(batch, body, kept, recompress)
        return data, RecordBatch(data).max_timestamp


_NOTHING_KEPT = (b"", -1)


def _empty_batch(batch: RecordBatch) -> tuple[bytes, int]:
    data = build_empty_batch(base_offset=batch.base_offset, last_offset_delta=batch.last_offset_delta,
                             max_timestamp=batch.max_timestamp, timestamp_type=batch.timestamp_type,
                             producer_id=batch.producer_id, producer_epoch=batch.producer_epoch,
                             base_sequence=batch.base_sequence, partition_leader_epoch=batch.partition_leader_epoch,
                             is_transactional=batch.is_transactional, is_control=batch.is_control)
    return data, batch.max_timestamp


def _with_next(it: Iterator[tuple[int, object]]) -> Iterator[tuple[object, bool]]:
    """Each batch with whether it is the last one."""
    prev = None
    for _pos, batch in it:
        if prev is not None:
            yield prev, False
        prev = batch
    if prev is not None:
        yield prev, True


def group_segments(segs: list, max_size: int, max_index_size: int, first_uncleanable: int, nexts: dict
                   ) -> list[list]:
    """`Cleaner.groupSegmentsBySize`: consecutive segments whose total log size stays within `segment.bytes`,
    each index within `segment.index.bytes`, and offsets within 32 bits of the group's base."""
    groups: list[list] = []
    rest = list(segs)
    while rest:
        group = [rest.pop(0)]
        size = group[0].size
        index_size = group[0].offset_index.entries * 8
        time_size = group[0].time_index.entries * 12
        while rest:
            nxt = rest[0]
            last_offset = (rest[1].base_offset - 1) if len(rest) > 1 else first_uncleanable - 1
            if not (size + nxt.size <= max_size and index_size + nxt.offset_index.entries * 8 <= max_index_size
                    and time_size + (nxt.time_index.entries + 1) * 12 <= max_index_size
                    and (nxt.size == 0 or last_offset - group[0].base_offset <= 0x7FFFFFFF)):
                break
            group.append(rest.pop(0))
            size += nxt.size
            index_size += nxt.offset_index.entries * 8
            time_size += nxt.time_index.entries * 12
        groups.append(group)
    return groups


# -- the swap ------------------------------------------------------------------------------------------
class _PreviousSwapFailed(Exception):
    """A group's swap did not start because the previous group's failed (that one's error is raised)."""


class _Swap:
    """The end of `Cleaner.cleanSegments` for one group, on a thread of the cleaner's (`_submit`) while the
    cleaner copies the next group: the `.cleaned` files synced (`cleaned.flush()`), the group's modification
    time (`cleaned.setLastModified`), then `swap_in` (`replaceSegments`), the same steps in the same order
    as one after the other. The syncs may run while the previous group's swap ends (they touch only this
    group's new files); `swap_in` waits for that swap, and does not run if it failed, so swaps stay in
    offset order. The cleaner joins every one before `clean` returns."""

    def __init__(self, plog: PartitionLog, group: list, dest: _CleanedSegment, sizes: dict[int, int],
                 previous: _Swap | None) -> None:
        self.plog, self.group, self.dest, self.sizes, self.previous = plog, group, dest, sizes, previous
        self.error: BaseException | None = None
        self.failed = False
        self._done = threading.Event()
        if _submit("swap", self._run) is None:
            threading.Thread(target=self._run, name=f"cleaner-swap-{plog.topic}-{plog.partition}",
                             daemon=True).start()

    def _run(self) -> None:
        try:
            self.run()
        finally:
            self._done.set()

    def run(self) -> None:
        try:
            try:
                self.dest.finish()
                # the group's last modification time, which retention falls back to when no record carries
                # a timestamp
                with contextlib.suppress(OSError):
                    mtime = max(os.stat(seg.log_path).st_mtime for seg in self.group)
                    os.utime(self.dest.paths[_LOG], (mtime, mtime))
                _step("cleaned")
                if self.previous is not None:
                    self.previous._done.wait()  # its outcome, not its error (the cleaner raises that)
                    if self.previous.failed:
                        raise _PreviousSwapFailed(f"the swap before that of {self.dest.base} failed")
            except BaseException:
                self.dest.discard()
                raise
            self.previous = None
            swap_in(self.plog, self.dest, self.group, self.sizes)
        except BaseException as exc:  # noqa: BLE001 - raised again in the cleaner's thread by `join`
            self.error = exc
            self.failed = True

    def join(self, timeout: float | None = None) -> None:
        self._done.wait(timeout)
        if self.error is not None:
            error, self.error = self.error, None
            raise error


def _cleaned_order(base: int, suffix: str) -> list[str]:
    """File names of a segment, its `.log` last: the `.log`'s rename is the step that commits."""
    return [f"{base:020d}{s}{suffix}" for s in (".index", ".timeindex", TXN_INDEX_SUFFIX, _LOG)]


class _SwapNotCommitted(Exception):
    pass


def swap_in(plog: PartitionLog, dest: _CleanedSegment, old: list, sizes: dict[int, int]) -> None:
    """`LocalLog.replaceSegments` under the log's lock: `.cleaned` -> `.swap` (the `.log` last: that rename
    commits), the old segments' files -> `.deleted` (their `.log` last), `.swap` -> final names (the
    `.log` last); only then does the in-memory segment list change, so a failure part way leaves the
    running log reading the old segments through their open files, and the next open finishes the swap
    (`recover_swaps`). Aborts with nothing swapped when a replaced segment changed since the cleaning
    began (retention, DeleteRecords, truncation, deletion of the topic)."""
    from chronolog.storage.segment import DELETED_SUFFIX, LogSegment

    directory = plog.dir
    with plog.lock:
        # Appends and rolls go on meanwhile; what invalidates the copy is a replaced segment that retention,
        # DeleteRecords or truncation removed, or a truncation that made it active and cut it.
        if plog._closed or any(s not in plog.segments or s is plog.active or s.size != sizes[s.base_offset]
                               for s in old):
            raise CleaningAbortedError(f"{plog.topic}-{plog.partition} changed while it was cleaned")
        base = dest.base
        committed = False
        renamed: list[Path] = []
        for seg in old:  # their files are renamed under them below: none may be closed and reopened by name
            seg.keep_files_open()
        try:
            for name in _cleaned_order(base, CLEANED_SUFFIX):
                src = directory / name
                if src.exists():
                    os.replace(src, directory / (name[:-len(CLEANED_SUFFIX)] + SWAP_SUFFIX))
                    committed = name.endswith(_LOG + CLEANED_SUFFIX)
                    _step("swap:" + name[:-len(CLEANED_SUFFIX)])
            # Committed: from here a crash is finished by `recover_swaps` at the next open.
            for seg in old:
                for path in sorted(seg.files(), key=lambda p: p.name.endswith(_LOG)):
                    if path.exists():
                        target = path.with_name(path.name + DELETED_SUFFIX)
                        os.replace(path, target)
                        renamed.append(target)
                _step(f"deleted:{seg.base_offset}")
            for name in _cleaned_order(base, SWAP_SUFFIX):
                src = directory / name
                if src.exists():
                    os.replace(src, directory / name[:-len(SWAP_SUFFIX)])
                    _step("final:" + name[:-len(SWAP_SUFFIX)])
            # One directory sync for the whole swap, after the last rename, as `LocalLog.replaceSegments`
            # (`Utils.flushDir`); its renames (`atomicMoveWithFallback(..., false)`) flush nothing. The
            # cleaned files' data was synced by `finish` before the first rename.
            _fsync_dir(directory)
        except BaseException as exc:
            if not committed:
                _undo_swap(directory, base)
                raise
            # Committed: finish the swap now as the next open would (the old segments stay readable
            # through their open files until the segment list changes below).
            log.warning("%s-%d: the swap of cleaned segment %d failed after it was committed (%s); finishing it",
                        plog.topic, plog.partition, base, exc)
            try:
                # the `.cleaned` files of the next group, being written meanwhile, stay (the next open drops
                # any left over)
                recover_swaps(directory, drop_cleaned=False)
            except BaseException:
                log.error("%s-%d: the swap of cleaned segment %d could not be finished; the next start finishes "
                          "it", plog.topic, plog.partition, base)
                raise
        cfg = plog.config
        seg = LogSegment(directory, base, index_interval_bytes=cfg.index_interval_bytes,
                         max_index_size=cfg.segment_index_bytes, time_index_style=plog.time_index_style)
        at = plog.segments.index(old[0])
        for old_seg in old:
            plog.segments.remove(old_seg)
            old_seg.close_for_delete()
        seg.is_last = False
        seg._offset_limit_after = plog.segments[at].base_offset
        seg.on_become_inactive(loading=True)
        plog.segments.insert(at, seg)
        plog._segment_created_ms.setdefault(base, plog.clock())
        plog._segments_version += 1
        plog.remove_after_delay(renamed)
        log.info("%s-%d: swapped in cleaned segment %d for segment(s) %s", plog.topic, plog.partition, base,
                 [s.base_offset for s in old])


def _undo_swap(directory: Path, base: int) -> None:
    for suffix in (CLEANED_SUFFIX, SWAP_SUFFIX):
        for name in _cleaned_order(base, suffix):
            (directory / name).unlink(missing_ok=True)


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
    """`LogLoader`'s handling of an interrupted clean: `.cleaned` files go (unless `drop_cleaned` is
    False: a running cleaner finishing a failed swap, whose next group's are being written); `.swap` files
    without a `<base>.log.swap` go (the swap had not committed: the old segments are intact); a
    `<base>.log.swap` replaces every segment whose base offset lies in its offset range, and its files take
    their final names. Idempotent, so a crash during this repair is repaired the same way at the next open."""
    names = [e.name for e in directory.iterdir()]
    for name in names:
        if drop_cleaned and name.endswith(CLEANED_SUFFIX):
            (directory / name).unlink(missing_ok=True)
    swap_bases = {int(n[:20]) for n in names if n.endswith(_LOG + SWAP_SUFFIX) and n[:20].isdigit()}
    for name in names:
        if name.endswith(SWAP_SUFFIX) and not name.endswith(_LOG + SWAP_SUFFIX) and \
                (not name[:20].isdigit() or int(name[:20]) not in swap_bases):
            (directory / name).unlink(missing_ok=True)
    for base in sorted(swap_bases):
        swap_log = directory / f"{base:020d}{_LOG}{SWAP_SUFFIX}"
        end = _next_offset_of(swap_log)
        end = base if end is None else end
        log_bases = sorted(int(n[:20]) for n in os.listdir(directory)
                           if n.endswith(_LOG) and len(n) == 24 and n[:20].isdigit())
        for old in log_bases:
            if base <= old < max(end, base + 1):
                for suffix in _OTHER_SUFFIXES:  # its other files first, the .log last
                    (directory / f"{old:020d}{suffix}").unlink(missing_ok=True)
                (directory / f"{old:020d}{_LOG}").unlink(missing_ok=True)
        for name in _cleaned_order(base, SWAP_SUFFIX):
            src = directory / name
            if src.exists():
                os.replace(src, directory / name[:-len(SWAP_SUFFIX)])
        with contextlib.suppress(OSError):
            _fsync_dir(directory)
        log.info("%s: completed the swap of cleaned segment %d interrupted by a crash (offsets %d-%d)",
                 directory, base, base, end - 1)


# -- reading a directory an interrupted swap left (read-only) ------------------------------------------
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
        swap_bases = {int(n[:20]) for n in real if n.endswith(_LOG + SWAP_SUFFIX) and n[:20].isdigit()}
        hidden: set[int] = set()
        for base in swap_bases:
            end = _next_offset_of(self.dir / f"{base:020d}{_LOG}{SWAP_SUFFIX}")
            end = base + 1 if end is None else max(end, base + 1)
            hidden |= {int(n[:20]) for n in real if n.endswith(_LOG) and len(n) == 24 and n[:20].isdigit()
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
