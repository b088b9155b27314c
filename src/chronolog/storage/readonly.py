"""Segments read through a `ReadOnlyFiles` object instead of the local file system: a copy of a log dir in
an object store or any other filesystem the caller can open (`chronolog.timetravel.remote` adapts
pyarrow's). The storage layer knows only this small seam; local directories keep the `os.pread` /
`mmap` path of `LogSegment` unchanged.

What is read: `.log` files by byte ranges (`read_at`), never whole; index files, `.txnindex` files and
minima sidecars, which are small, whole into memory. Missing or failing indexes are rebuilt into private temporary files,
as for a read-only local directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from chronolog.storage.index import OffsetIndex, TimeIndex
from chronolog.storage.minima import MINIMA_SUFFIX, SegmentMinima
from chronolog.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    offsets_named,
    segment_name,
)
from chronolog.storage.txnindex import TXN_INDEX_SUFFIX, TransactionIndex


class RandomAccess(Protocol):
    """An open file: `read_at(nbytes, offset)` (short at the end), `size()`, `close()` (pyarrow's
    `NativeFile` is one)."""

    def read_at(self, nbytes: int, offset: int) -> bytes: ...
    def size(self) -> int: ...
    def close(self) -> None: ...


class ReadOnlyFiles(Protocol):
    """The files of one partition directory."""

    def names(self) -> list[str]:
        """File names in the directory."""
    def open(self, name: str) -> RandomAccess: ...
    def read(self, name: str) -> bytes | None:
        """A whole (small) file, None when it does not exist or cannot be read."""
    def mtime_ms(self, name: str) -> int: ...
    def identity(self, name: str) -> tuple:
        """Something that changes when the file does (for caches in this process)."""


def segment_bases(files: ReadOnlyFiles) -> list[int]:
    return offsets_named(files.names(), LOG_SUFFIX)


class FilesSegment(LogSegment):
    """A read-only `LogSegment` whose bytes come from `files`, opened lazily: nothing is fetched until
    something the `LogSegment` constructor sets is first needed, so a reader of an offset range touches
    only the segments that hold it (and the last one, for the log end offset), not every segment of the
    partition. A time lookup still opens the segments it walks (their largest timestamps), as Kafka does."""

    def __init__(self, files: ReadOnlyFiles, directory: Path, base_offset: int, **kwargs) -> None:
        self._files = files
        self.base_offset = base_offset
        self._pending = (directory, kwargs)

    def __getattr__(self, name: str):
        # Called only for attributes not set yet: the ones `LogSegment.__init__` sets.
        pending = self.__dict__.get("_pending")
        if pending is None:
            raise AttributeError(name)
        self._pending = None  # while the constructor runs, a missing attribute is a plain AttributeError
        try:
            LogSegment.__init__(self, pending[0], self.base_offset, writable=False, **pending[1])
        except BaseException:
            self._pending = pending
            raise
        return getattr(self, name)

    def _open_log(self, writable: bool) -> None:
        self._fd = -1
        self._log = self._files.open(segment_name(self.base_offset, LOG_SUFFIX))
        self.size = self._log.size()

    def pread(self, position: int, size: int) -> bytes:
        size = min(size, self.size - position)  # like os.pread: short at the end, never an error
        return self._log.read_at(size, position) if size > 0 else b""

    def _open_indexes(self, writable: bool, force_private: bool = False) -> None:
        index_name = segment_name(self.base_offset, INDEX_SUFFIX)
        time_name = segment_name(self.base_offset, TIME_INDEX_SUFFIX)
        index_raw = None if force_private else self._files.read(index_name)
        time_raw = None if force_private or index_raw is None else self._files.read(time_name)
        if index_raw is not None and time_raw is not None:
            self._rebuild_needed = False
            self.offset_index = OffsetIndex.from_bytes(index_raw, self.dir / index_name, self.base_offset)
            self.time_index = TimeIndex.from_bytes(time_raw, self.dir / time_name, self.base_offset)
            return
        import tempfile  # (with shutil and its archive codecs: only for a directory read without its indexes)

        self._tmpdir = tempfile.TemporaryDirectory(prefix="chronolog-idx-")
        private = Path(self._tmpdir.name)
        lock = self.files_lock if self._cached else None
        self.offset_index = OffsetIndex(private / index_name, self.base_offset, self.max_index_size, True, lock=lock)
        self.time_index = TimeIndex(private / time_name, self.base_offset, self.max_index_size, True, lock=lock)
        self._rebuild_needed = True
        self.rebuild_indexes()
        self._rebuild_needed = False

    def _load_largest_timestamp(self, scan: bool = True) -> None:
        """`LogSegment._load_largest_timestamp` without reading the first batch at open: its timestamp
        only matters for rolling (never here) and tools (`first_batch_timestamp` reads it when asked), and
        a reader should fetch a byte range per segment only where the answer needs one."""
        self._first_read = False
        self._max_ts_known = None  # found when first needed (`LogSegment._max_ts`)

    def first_batch_timestamp(self) -> int | None:
        if not self._first_read:
            first = next(self.batches_from(0), None)
            self.rolling_based_timestamp = first[1].max_timestamp if first else None
            self._first_read = True
        return self.rolling_based_timestamp

    def _open_txn_index(self) -> TransactionIndex:
        """The `.txnindex` through `files`, without opening the `.log` (a read_committed reader asks for the
        aborted transactions of segments it may not read)."""
        name = segment_name(self.base_offset, TXN_INDEX_SUFFIX)
        pending = self.__dict__.get("_pending")
        directory = pending[0] if pending is not None else self.dir
        return TransactionIndex(Path(directory) / name, self.base_offset, writable=False,
                                data=self._files.read(name) or b"")

    def _log_mtime_ms(self) -> int:
        return self._files.mtime_ms(segment_name(self.base_offset, LOG_SUFFIX))

    def _read_sidecar(self) -> SegmentMinima | None:
        raw = self._files.read(segment_name(self.base_offset, MINIMA_SUFFIX))
        found = None if raw is None else SegmentMinima.from_bytes(raw, self.base_offset)
        return found if found is not None and found.matches(self.pread, self.size) else None

    def _reader_key(self) -> tuple:
        return ("files", *self._files.identity(segment_name(self.base_offset, LOG_SUFFIX)), self.base_offset)

    def close(self, *, sync: bool = True) -> None:
        """`sync` as `LogSegment.close` takes it: nothing here is written, so nothing to sync."""
        log = self.__dict__.get("_log")  # never opened: nothing to close (and nothing to fetch now)
        if log is None:
            return
        self.offset_index.close(trim=False)
        self.time_index.close(trim=False)
        log.close()
        self._log = None

    close_for_delete = close
