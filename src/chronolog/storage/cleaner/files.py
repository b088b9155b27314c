"""The files of a cleaning: the segments read without the log's lock (`SegmentReader`), the `.cleaned`
segment written with `LogSegment.append`'s index rule (`CleanedSegment`), the threads that make, sync and
swap them beside the copy (`submit`), the I/O throttle (Kafka's `Throttler`) and the statistics of a
cleaning (Kafka's `CleanerStats`)."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from chronolog.errors import KafkaError
from chronolog.records import LOG_OVERHEAD, iter_batches
from chronolog.storage.index import OffsetIndex, TimeIndex, TimestampOffset
from chronolog.storage.local_log import CLEANED_SUFFIX
from chronolog.storage.txnindex import TXN_INDEX_SUFFIX, AbortedTxn, TransactionIndex

if TYPE_CHECKING:
    from chronolog.storage.log import PartitionLog
    from chronolog.storage.segment import LogSegment

LOG_SUFFIX = ".log"
_READ_CHUNK = 1 << 20


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
class SegmentReader:
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

    def walk(self, handle: Callable[[bytes, bool], int]) -> None:
        """Calls `handle(chunk, reaches_end)` over the segment in chunks; it returns the bytes of whole batches
        it consumed (the next chunk starts there, grown to hold a batch larger than a chunk), or -1 to stop.
        Ends at the end of the segment or at a torn tail, as `batches` does."""
        pos, want = 0, _READ_CHUNK
        while pos < self.size:
            chunk = self.read(pos, want)
            if not chunk:
                return
            used = handle(chunk, pos + len(chunk) >= self.size)
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
class CleanedSegment:
    """`<base>.log.cleaned` and its indexes, appended batch by batch with `LogSegment.append`'s index rule
    (an entry after more than `index.interval.bytes`, the time index only when the max grows, a final
    time-index entry when done: `onBecomeInactiveSegment`)."""

    def __init__(self, directory: Path, base: int, index_interval: int, max_index_size: int) -> None:
        self.dir, self.base = directory, base
        self.paths = {s: directory / f"{base:020d}{s}{CLEANED_SUFFIX}" for s in (LOG_SUFFIX, ".index", ".timeindex",
                                                                               TXN_INDEX_SUFFIX)}
        for p in self.paths.values():
            p.unlink(missing_ok=True)
        self._fd = os.open(self.paths[LOG_SUFFIX], os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
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
        the preallocated index space is never written back; the syncs run at once (`fsync_together`)."""
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
            fsync_together(fds)
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


def new_dest(plog: PartitionLog, base: int) -> CleanedSegment:
    cfg = plog.config
    return CleanedSegment(plog.dir, base, cfg.index_interval_bytes, cfg.segment_index_bytes)


class DestsAhead:
    """`.cleaned` segments made on one of the cleaner's threads (`submit`) while the cleaner maps or copies
    the group before theirs, by base offset."""

    def __init__(self, plog: PartitionLog) -> None:
        self.plog = plog
        self.futures: dict[int, Future | None] = {}

    def make(self, base: int) -> None:
        if base not in self.futures:
            self.futures[base] = submit("files", new_dest, self.plog, base)

    def take(self, base: int) -> CleanedSegment:
        """The segment at `base`: the one made ahead, or (none was, or its making failed: the error is raised
        again here) made now."""
        future = self.futures.pop(base, None)
        if future is not None:
            with contextlib.suppress(Exception):
                return future.result()
        return new_dest(self.plog, base)

    def drop(self) -> None:
        """The segments made ahead and not taken, removed (each waited for first)."""
        for future in self.futures.values():
            if future is not None:
                with contextlib.suppress(Exception):
                    future.result().discard()
        self.futures.clear()


_POOLS: dict[str, tuple[int, ThreadPoolExecutor]] = {}
_POOLS_LOCK = threading.Lock()


def submit(pool: str, fn: Callable[..., object], *args: object) -> Future | None:
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


def fsync_together(fds: list[int]) -> None:
    """fsync of several files at once, on several threads (fsync releases the GIL): what one file's sync
    costs on ext4 is mostly the journal commit and the device's cache flush, and syncs that arrive together
    share them (three small files: about 1 ms at once against 6-8 ms one after the other).
    The same syncs as one after the other, each file's data durable when this returns; the first error
    raised."""
    errors: list[BaseException] = []
    futures = [(fd, submit("fsync", os.fsync, fd)) for fd in fds[1:]]
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


