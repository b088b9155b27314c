"""The aborted-transaction index `<base>.txnindex`, byte-compatible with Kafka's `TransactionIndex`.

One per segment, created only when the segment gets its first entry (most never do). Each entry is the
34 bytes of Kafka's `AbortedTxn`: version int16 (0) | producer id int64 | first offset int64 | last offset
int64 | last stable offset int64, appended when an ABORT marker is written into the segment, so entries
are ordered by last offset (the marker's offset). A read_committed fetch asks which aborted transactions
overlap its range; the entry's last stable offset (the LSO right after the abort) tells where to stop
looking in later segments (`TransactionIndex.collectAbortedTxns`).

The entries are few (one per aborted transaction and partition), so they are kept in memory as well as in
the file; a file whose length is not a multiple of 34 (a torn append) is read up to its last whole entry,
as Kafka's iterator does, and recovery rewrites it.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from pathlib import Path
from typing import NamedTuple

from chronolog.storage import filecache
from chronolog.storage.index import IndexCorruptError

log = logging.getLogger(__name__)

TXN_INDEX_SUFFIX = ".txnindex"  # LogFileUtils.TXN_INDEX_FILE_SUFFIX
ABORTED_TXN_VERSION = 0  # AbortedTxn.CURRENT_VERSION
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # AbortedTxn.TOTAL_SIZE = 34


class AbortedTxn(NamedTuple):
    """One aborted transaction (`AbortedTxn`): offsets are absolute; `last_offset` is the ABORT marker's."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def to_bytes(self) -> bytes:
        return _ENTRY.pack(ABORTED_TXN_VERSION, *self)


def parse_entries(data: bytes | memoryview, name: str = "transaction index") -> list[AbortedTxn]:
    """The whole entries in `data` (a trailing partial entry is ignored, as Kafka's iterator does); an entry
    of a newer version raises IndexCorruptError (Kafka: KafkaException 'Unexpected aborted transaction
    version')."""
    entries = []
    for pos in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
        version, *fields = _ENTRY.unpack_from(data, pos)
        if version > ABORTED_TXN_VERSION:
            raise IndexCorruptError(f"unexpected aborted transaction version {version} in {name} at position "
                                    f"{pos}, current version is {ABORTED_TXN_VERSION}")
        entries.append(AbortedTxn(*fields))
    return entries


class TransactionIndex:
    """A segment's aborted transactions. Not thread-safe: the owning log's lock covers it."""

    files_weight = 1  # its descriptor, once an entry was written (storage.filecache)

    def __init__(self, path: Path, start_offset: int, *, writable: bool = True,
                 data: bytes | None = None, lock: threading.RLock | None = None) -> None:
        """`data`: the file's bytes when they come from elsewhere than `path` (a read-only copy read
        through an object store); None reads `path` if it exists. `lock`: the segment's (the open-file
        cache closes the descriptor of an idle index under it)."""
        self.path = Path(path)
        self.start_offset = start_offset
        self.writable = writable
        self._cached = lock is not None  # without a lock: kept open until closed, outside the cache
        self.files_lock = lock or threading.RLock()
        self._fd = -1
        if data is None and self.path.exists():
            data = self.path.read_bytes()
        self.entries: list[AbortedTxn] = parse_entries(data or b"", str(self.path))
        self._size = len(self.entries) * ENTRY_SIZE  # where the next entry goes (past a torn tail's start)

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def last_offset(self) -> int | None:
        return self.entries[-1].last_offset if self.entries else None

    def _open(self) -> int:
        if self._fd < 0:
            if not self.writable:
                raise OSError(f"{self.path} is read-only")
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            if self._cached:
                filecache.cache().opened(self)
        else:
            filecache.cache().used(self)
        return self._fd

    def close_files(self) -> None:
        """The open-file cache closes the idle index's descriptor; the next write reopens it."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry; the file is created by the first one. Last offsets must grow
        (`TransactionIndex.append`: IllegalArgumentException otherwise)."""
        if self.entries and self.entries[-1].last_offset >= txn.last_offset:
            raise ValueError(f"the last offset of appended transactions must increase: {txn.last_offset} is not "
                             f"greater than {self.entries[-1].last_offset} in {self.path}")
        fd = self._open()
        os.pwrite(fd, txn.to_bytes(), self._size)
        self._dirty = True
        self._size += ENTRY_SIZE
        self.entries.append(txn)

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """Entries overlapping [fetch_offset, upper_bound_offset), and whether the search is complete (an
        entry's last stable offset reaches the upper bound: later segments cannot hold an overlapping one)
        (`TransactionIndex.collectAbortedTxns`)."""
        found = []
        for txn in self.entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after `offset` (`TransactionIndex.truncateTo`)."""
        keep = 0
        while keep < len(self.entries) and self.entries[keep].last_offset < offset:
            keep += 1
        if keep == len(self.entries) and self._size == keep * ENTRY_SIZE:
            return
        del self.entries[keep:]
        self._cut(keep * ENTRY_SIZE)

    def reset(self) -> None:
        """Remove every entry (`TransactionIndex.reset`): recovery rewrites the index from the log."""
        self.entries = []
        self._cut(0)

    def _cut(self, size: int) -> None:
        self._size = size
        if not self.writable:
            return
        if self._fd >= 0:
            os.ftruncate(self._fd, size)
        elif self.path.exists():
            os.truncate(self.path, size)

    def sanity_check(self) -> None:
        """`TransactionIndex.sanityCheck`: no entry may end before the segment starts."""
        for txn in self.entries:
            if txn.last_offset < self.start_offset:
                raise IndexCorruptError(f"last offset of aborted transaction {txn} in index {self.path} is less "
                                        f"than start offset {self.start_offset}")

    _dirty = False

    def flush(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)
        elif self._dirty:  # closed by the open-file cache since the last entry was written
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self._dirty = False

    def close(self) -> None:
        if self._fd >= 0:
            filecache.cache().closed(self)
            os.close(self._fd)
            self._fd = -1

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


READ_UNCOMMITTED, READ_COMMITTED = "read_uncommitted", "read_committed"
ISOLATION_LEVELS = (READ_UNCOMMITTED, READ_COMMITTED)


def check_isolation(isolation: str) -> str:
    """`isolation.level`'s two values, Kafka's names; anything else is a clear error."""
    if isolation not in ISOLATION_LEVELS:
        raise ValueError(f"isolation level {isolation!r}: use read_uncommitted or read_committed")
    return isolation


class AbortedFilter:
    """Which transactional batches a read_committed reader drops, given the aborted transactions overlapping
    its range: a batch of producer P at offset o is aborted when an entry (P, first, last) has
    first <= o < last (what a Kafka consumer's `CompletedFetch` works out from the Fetch response's aborted
    list and the ABORT markers it meets)."""

    def __init__(self, aborted: list[AbortedTxn]) -> None:
        self._by_producer: dict[int, list[AbortedTxn]] = {}
        for txn in aborted:
            self._by_producer.setdefault(txn.producer_id, []).append(txn)

    def __bool__(self) -> bool:
        return bool(self._by_producer)

    def is_aborted(self, producer_id: int, offset: int) -> bool:
        for txn in self._by_producer.get(producer_id, ()):
            if txn.first_offset <= offset < txn.last_offset:
                return True
        return False
