"""Offset and time index files, byte-compatible with Kafka's `.index` and `.timeindex`.

Follows `AbstractIndex`, `OffsetIndex` and `TimeIndex`: a memory-mapped file preallocated to
`segment.index.bytes` (rounded down to a whole entry), entries appended in key order, a binary search for
the largest entry whose key is <= the target, and trimming to the used size when the segment is rolled or
closed. An index file opened from disk counts every slot as an entry, which is why closed segments must be
trimmed: the zero-filled tail of a preallocated file would otherwise be read as entries.

The preallocated tail is sparse: on a full file system a store into one of its pages through the map
would kill the process with SIGBUS. Entries are therefore written with `pwrite`, which fails with ENOSPC
instead, and the map is only read (it sees the page cache the write went to). On tmpfs even a read of a
sparse page through the map takes space (and so dies on a full one): a file left untrimmed by a crash
counts as entries only its slots before the first hole (`_data_end`), which are the only ones ever written.

The file and its map are opened on first use and may be closed again by the open-file cache
(`storage.filecache`) when the index is idle: they are reached only through `_file` and `_mmap`, which
reopen them (an mmap holds its own duplicate descriptor in CPython, so an index open costs two).
"""

from __future__ import annotations

import array
import contextlib
import functools
import mmap
import os
import struct
import sys
import threading
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from chronolog.diskio import pwrite_all
from chronolog.errors import CorruptMessageError, KafkaError
from chronolog.storage import filecache

_OFFSET_ENTRY = struct.Struct(">ii")    # relative offset, physical position
_TIME_ENTRY = struct.Struct(">qi")      # timestamp, relative offset
_OFFSET_KEY = struct.Struct(">i")       # an offset entry's key: its relative offset
_POSITION_FIELD = struct.Struct(">4xi")  # an offset entry's position (ascending like its key)
_TIME_KEY = struct.Struct(">q")         # a time entry's key: its timestamp
# Where each searched field lies in its entry: (bytes before it, its struct code, its size).
_LAYOUTS = {_OFFSET_KEY.format: (0, "i", 4), _POSITION_FIELD.format: (4, "i", 4), _TIME_KEY.format: (0, "q", 8)}
# A search bisects a sparse array of every `_STRIDE`-th key (`AbstractIndex._summary`), then the keys of one
# stride, read with one `unpack_from`: two bisects in C instead of a Python probe per halving (issue #37
# dropped the C `floor_slot`; this is as fast on 10,000 entries).
_STRIDE = 16
_MAX_READ = 256  # fields read by one struct (the summary of a big index is read in several)
# Taken only to extend a summary (once per `_STRIDE` entries appended); a search reads it without a lock, as an
# extension only appends to it.
_SUMMARY_LOCK = threading.Lock()


@functools.lru_cache(maxsize=1024)
def _strided(field_format: str, entry_size: int, stride: int, count: int) -> struct.Struct:
    """A struct reading `count` fields of one kind that lie `stride` entries apart (the last without the
    padding after it, so it never reads past the last entry)."""
    pre, code, size = _LAYOUTS[field_format]
    gap = f"{code}{stride * entry_size - size}x" if stride * entry_size > size else code
    return struct.Struct(">" + (f"{pre}x" if pre else "") + gap * (count - 1) + code)


_FULL_WINDOWS = {f: _strided(f, size, 1, _STRIDE) for f, size in ((_OFFSET_KEY.format, 8),
                                                                  (_POSITION_FIELD.format, 8), (_TIME_KEY.format, 12))}


def _data_end(path: Path, length: int) -> int:
    """Where the first hole of the file starts (its length when it has none, or the file system cannot
    tell: SEEK_HOLE then reports the end)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return length
    try:
        return min(length, os.lseek(fd, 0, os.SEEK_HOLE))
    except OSError:
        return length
    finally:
        os.close(fd)


class IndexCorruptError(KafkaError):
    """An index file fails its sanity check; the segment's indexes must be rebuilt from the log."""


class OffsetPosition(NamedTuple):
    offset: int
    position: int


class TimestampOffset(NamedTuple):
    timestamp: int
    offset: int


class AbstractIndex:
    """Shared arithmetic of both index kinds (Kafka's `AbstractIndex`)."""

    entry_size: int = 0
    _key_struct: struct.Struct
    files_weight = 2  # the file and the map's own duplicate of its descriptor
    _map_obj: mmap.mmap | None = None
    _file_obj = None
    _map_length = 0  # what `_mmap` maps when (re)opened; 0: nothing (closed, deleted or empty)
    _dirty = False  # entries written since the last flush
    _held: bytearray | None = None  # entries appended inside `held_writes`, not yet written
    _summaries: dict[str, array.array] | None = None  # a field's sparse keys (`_summary`); dropped on truncation

    def __init__(self, path: Path, base_offset: int, max_index_size: int = 10485760, writable: bool = True,
                 *, lock: threading.RLock | None = None) -> None:
        """`lock`: the one its owner holds while using the index (the partition log's): the open-file
        cache closes the file of an idle index only while it can take that lock. Without one the index
        keeps its file until closed (a tool's or the cleaner's short-lived index, which no lock covers)."""
        self.path = Path(path)
        self.base_offset = base_offset
        self.writable = writable
        self._cached = lock is not None
        self.files_lock = lock or threading.RLock()
        exists = self.path.exists() and self.path.stat().st_size > 0
        if exists:
            length = self.path.stat().st_size
        elif writable:
            length = max(0, max_index_size - max_index_size % self.entry_size)
            with open(self.path, "wb") as f:
                f.truncate(length)
        else:
            length = 0
        # Every slot of a file that existed counts as an entry (AbstractIndex's constructor), up to the first
        # hole of a sparse one: a hole was never written, and reading it through the map may need space.
        self._entries = _data_end(self.path, length) // self.entry_size if exists else 0
        self._last = None  # cached last entry; None = read it from the map
        self._length = length
        self.max_index_size = max_index_size
        self._open_map(length)
        if exists and not writable:
            self._entries = self._written_slots()

    @classmethod
    def from_bytes(cls, data: bytes, path: Path | str, base_offset: int):
        """A read-only index over the bytes of an index file read from elsewhere (an object store): every
        slot counts as an entry, as when a file is opened, so the same sanity checks apply. `path` only
        names it in messages."""
        self = cls.__new__(cls)
        self.path = path
        self.base_offset = base_offset
        self.writable = False
        self._cached = False
        self.files_lock = threading.RLock()
        self._file = None
        self._mmap = None
        self._length = self.max_index_size = len(data)
        self._entries = len(data) // self.entry_size
        self._last = None
        if data:
            self._mmap = mmap.mmap(-1, len(data))  # anonymous: the lookups and close() work unchanged
            self._mmap.write(data)
            self._entries = self._written_slots()
        return self

    def _written_slots(self) -> int:
        """Slots before the zero-filled tail of a file opened read-only. The active segment of a running
        (or crashed) writer keeps its index preallocated to `segment.index.bytes` with zeros after the last
        entry; counting those as entries would fail the sanity check ("offsets not increasing") and make a
        reader of a live data dir rebuild a healthy index. A zero slot can be the tail only: after the
        first slot an offset index entry has a relative offset above 0 and a time index entry a timestamp
        above the previous one. Kafka's `DumpLogSegments` stops at the same place (the first entry after
        the first whose offset is the base offset: "it is a sparse file")."""
        if self._mmap is None or self._entries <= 1:
            return self._entries
        end = self._entries * self.entry_size
        if self._mmap[end - self.entry_size:end].strip(b"\0"):
            return self._entries  # a trimmed file (every closed segment's): nothing to look for, nothing copied
        used = len(self._mmap[:end].rstrip(b"\0"))
        return max(1, -(-used // self.entry_size)) if used else 0

    # -- mapping -------------------------------------------------------------------------------------
    @property
    def _mmap(self) -> mmap.mmap | None:
        """The map, opened on first use (and again after the open-file cache closed it)."""
        if self._map_obj is None:
            if not self._map_length:
                return None
            self._map_file()
        else:
            filecache.cache().used(self)
        return self._map_obj

    @_mmap.setter
    def _mmap(self, value: mmap.mmap | None) -> None:
        self._map_obj = value

    @property
    def _file(self):
        if self._file_obj is None and self._map_length:
            self._map_file()
        return self._file_obj

    @_file.setter
    def _file(self, value) -> None:
        self._file_obj = value

    def _map_file(self) -> None:
        mode = "r+b" if self.writable else "rb"
        f = open(self.path, mode)
        try:
            access = mmap.ACCESS_WRITE if self.writable else mmap.ACCESS_READ
            self._map_obj = mmap.mmap(f.fileno(), self._map_length, access=access)
        except BaseException:
            f.close()
            raise
        self._file_obj = f
        if self._cached:
            filecache.cache().opened(self)

    def _open_map(self, length: int) -> None:
        self._close_map()
        self._map_length = length  # mapped when first used

    def close_files(self) -> None:
        """Close the map and the file (the open-file cache, when the index is idle); `_mmap` reopens them."""
        if self._map_obj is not None:
            self._map_obj.close()
            self._map_obj = None
        if self._file_obj is not None:
            self._file_obj.close()
            self._file_obj = None

    def _close_map(self) -> None:
        self._map_length = 0
        if self._map_obj is not None or self._file_obj is not None:
            filecache.cache().closed(self)
            self.close_files()

    @property
    def entries(self) -> int:
        return self._entries

    @property
    def max_entries(self) -> int:
        return self._length // self.entry_size

    def is_full(self) -> bool:
        return self._entries >= self.max_entries

    @property
    def size_in_bytes(self) -> int:
        return self._entries * self.entry_size

    def resize(self, new_size: int) -> None:
        """Grow or shrink the file to `new_size` rounded down to a whole entry (never below the used size)."""
        if not self.writable:
            return
        rounded = max(new_size - new_size % self.entry_size, self._entries * self.entry_size)
        if rounded == self._length:
            return
        self._close_map()
        with open(self.path, "r+b") as f:
            f.truncate(rounded)
        self._length = rounded
        self._open_map(rounded)

    def trim_to_valid_size(self) -> None:
        self.resize(self._entries * self.entry_size)

    def flush(self) -> None:
        if not self.writable or (self._map_obj is None and not self._dirty):
            return  # (an index the cache closed is mapped again only if entries were written since)
        mm = self._mmap
        if mm is not None:
            mm.flush()
        self._dirty = False

    def close(self, trim: bool = True, *, sync: bool = True) -> None:
        """`sync` False: the entries are left in the page cache for the caller's sync of the whole file
        system (the manager's clean stop)."""
        if trim and self.writable:
            self.trim_to_valid_size()
        if sync:
            self.flush()
        self._close_map()

    def close_unsynced(self) -> None:
        """Closes the map and the file without a flush: for an owner that syncs the file itself, once (the
        log cleaner's `.cleaned` indexes, synced after their trim)."""
        self._close_map()

    def delete(self) -> None:
        self._close_map()
        self.path.unlink(missing_ok=True)

    def rename(self, new_path: Path) -> None:
        os.replace(self.path, new_path)
        self.path = Path(new_path)

    def _write_slot(self, slot: int, entry: bytes) -> None:
        """One entry into its slot with pwrite (never a store into the map: see the module docstring)."""
        held = self._held
        if held is not None and slot == self._entries:  # the next slot: written when `held_writes` ends
            held += entry
            return
        pwrite_all(self._file.fileno(), entry, slot * self.entry_size, self.path)  # type: ignore[union-attr]
        self._dirty = True

    @contextlib.contextmanager
    def held_writes(self) -> Iterator[None]:
        """Entries appended inside are written together, in one pwrite, when it ends (the log cleaner
        appends a chunk's entries at once: a pwrite each was most of their cost). Meanwhile they are counted
        and are the last entry, but not in the file: nothing may read them back before."""
        first, self._held = self._entries, bytearray()
        try:
            yield
        finally:
            held, self._held = self._held, None
            if held:
                pwrite_all(self._file.fileno(), held, first * self.entry_size, self.path)  # type: ignore[union-attr]
                self._dirty = True

    def truncate_entries(self, entries: int) -> None:
        self._entries = max(0, min(entries, self._entries))
        self._forget()

    def _forget(self) -> None:
        """Drop what is cached of the entries (the last one, the summaries): some were removed."""
        self._last = None
        self._summaries = None

    def reset(self) -> None:
        """Drop every entry and give the file its preallocated size again (used before a rebuild)."""
        self._entries = 0
        self._forget()
        if self.writable:
            self._close_map()
            with open(self.path, "r+b") as f:
                f.truncate(0)
            self._length = 0
            self.resize(self.max_index_size)

    # -- search --------------------------------------------------------------------------------------
    def _key(self, slot: int) -> int:
        """The searched field of a slot: the relative offset (`.index`) or the timestamp (`.timeindex`)."""
        return self._key_struct.unpack_from(self._mmap, slot * self.entry_size)[0]  # type: ignore[arg-type]

    def _summary(self, mm: mmap.mmap, fmt: str, n: int) -> array.array:
        """The field's value at slots 0, _STRIDE, 2 * _STRIDE, ... below `n`, kept until entries are
        removed and extended as they are appended. Kafka's `AbstractIndex` keeps the searches of recent
        entries in pages it touched lately (its warm section); here it is the Python probes that cost, and
        this array (8 bytes for every `_STRIDE` entries: a 16th of an offset index file, a 24th of a time
        index's) replaces them with a bisect in C."""
        summaries = self._summaries  # the usual case, without the lock: the summary covers every entry
        keys = summaries.get(fmt) if summaries is not None else None
        if keys is not None and len(keys) * _STRIDE >= n:
            return keys
        with _SUMMARY_LOCK:  # readers need not hold the log's lock: two must not extend one array at once
            summaries = self._summaries
            if summaries is None:
                summaries = self._summaries = {}
            keys = summaries.get(fmt)
            if keys is None:
                keys = summaries[fmt] = array.array("q")
            size = self.entry_size
            while (have := len(keys)) * _STRIDE < n:
                count = min(_MAX_READ, -(-(n - have * _STRIDE) // _STRIDE))
                keys.extend(_strided(fmt, size, _STRIDE, count).unpack_from(mm, have * _STRIDE * size))
            return keys

    def _window(self, mm: mmap.mmap, fmt: str, lo: int, hi: int) -> tuple[int, ...]:
        """The field's values at slots lo..hi-1, in one read."""
        return _strided(fmt, self.entry_size, 1, hi - lo).unpack_from(mm, lo * self.entry_size)

    def _largest_lower_bound_slot(self, target: int, field: struct.Struct | None = None,
                                  mm: mmap.mmap | None = None) -> int:
        """Slot of the largest entry whose key (or other ascending `field`) is <= target, or -1
        (AbstractIndex.indexSlotRangeFor): the last summary key <= target, then the last key <= target in
        its stride. Most of a lookup by time; `mm`: the map, when the caller holds it already."""
        n = self._entries
        if n == 0:
            return -1
        fmt = (field or self._key_struct).format
        if mm is None:
            mm = self._mmap
        lo = (bisect_right(self._summary(mm, fmt, n), target) - 1) * _STRIDE  # type: ignore[arg-type]
        if lo < 0:
            return -1
        if lo + _STRIDE <= n:
            return lo - 1 + bisect_right(_FULL_WINDOWS[fmt].unpack_from(mm, lo * self.entry_size), target)  # type: ignore[arg-type]
        return lo - 1 + bisect_right(self._window(mm, fmt, lo, n), target)  # type: ignore[arg-type]

    def _smallest_upper_bound_slot(self, target: int) -> int:
        """Slot of the smallest entry whose key is >= target, or -1."""
        n = self._entries
        if n == 0:
            return -1
        fmt, mm = self._key_struct.format, self._mmap
        j = bisect_left(self._summary(mm, fmt, n), target)  # type: ignore[arg-type]
        if j == 0:
            return 0
        # past slot (j - 1) * _STRIDE, whose key is < target; at or before slot j * _STRIDE (if any), whose is not
        lo = (j - 1) * _STRIDE + 1
        hi = min(j * _STRIDE + 1, n)
        if lo >= hi:
            return -1
        slot = lo + bisect_left(self._window(mm, fmt, lo, hi), target)  # type: ignore[arg-type]
        return slot if slot < n else -1


class OffsetIndex(AbstractIndex):
    """`.index`: int32 offset relative to the segment base, int32 byte position in the `.log`."""

    entry_size = 8
    _key_struct = _OFFSET_KEY

    def entry(self, slot: int) -> OffsetPosition:
        rel, pos = _OFFSET_ENTRY.unpack_from(self._mmap, slot * 8)  # type: ignore[arg-type]
        return OffsetPosition(self.base_offset + rel, pos)

    def last_entry(self) -> OffsetPosition:
        if self._entries == 0:
            return OffsetPosition(self.base_offset, 0)
        if self._last is None:
            self._last = self.entry(self._entries - 1)
        return self._last

    @property
    def last_offset(self) -> int:
        return self.last_entry().offset

    def lookup(self, target_offset: int) -> OffsetPosition:
        """Largest entry with offset <= target, else (base offset, 0) (OffsetIndex.lookup)."""
        mm = self._mmap
        slot = self._largest_lower_bound_slot(target_offset - self.base_offset, None, mm)
        if slot < 0:
            return OffsetPosition(self.base_offset, 0)
        rel, pos = _OFFSET_ENTRY.unpack_from(mm, slot * 8)  # type: ignore[arg-type]
        return OffsetPosition(self.base_offset + rel, pos)

    def position_after(self, offset: int) -> int | None:
        """A position from which every batch of the segment has a base offset > `offset`: that of the entry
        after the first one whose offset is >= `offset` (entries name the last offset of an append and the
        position where it starts, and later appends hold only larger offsets); None when the index cannot
        tell. Lets a reader of an offset range stop reading the file there."""
        slot = self._smallest_upper_bound_slot(offset - self.base_offset)
        if slot < 0 or slot + 1 >= self._entries:
            return None
        return self.entry(slot + 1).position

    def position_floor(self, position: int) -> int:
        """The largest entry position <= `position` (0 when none): a batch starts there."""
        slot = self._largest_lower_bound_slot(position, _POSITION_FIELD)
        return 0 if slot < 0 else self.entry(slot).position

    def append(self, offset: int, position: int) -> None:
        if self.is_full():
            raise KafkaError(f"Attempt to append to a full index {self.path}")
        if self._entries > 0 and offset <= self.last_entry().offset:
            raise KafkaError(f"Attempt to append an offset ({offset}) no larger than the last offset "
                             f"appended ({self.last_offset}) to {self.path}")
        rel = offset - self.base_offset
        if not 0 <= rel <= 0x7FFFFFFF:
            raise KafkaError(f"offset {offset} not within int32 of base {self.base_offset}")
        self._write_slot(self._entries, _OFFSET_ENTRY.pack(rel, position))
        self._entries += 1
        self._last = OffsetPosition(offset, position)

    def truncate_to(self, offset: int) -> None:
        """Remove entries with offset >= `offset` (OffsetIndex.truncateTo)."""
        slot = self._largest_lower_bound_slot(offset - self.base_offset)
        self._forget()
        if slot < 0:
            self._entries = 0
        elif self.entry(slot).offset == offset:
            self._entries = slot
        else:
            self._entries = slot + 1

    def sanity_check(self) -> None:
        if self._length % self.entry_size != 0:
            raise IndexCorruptError(f"Index file {self.path} has size {self._length} not a multiple of 8")
        if self._entries > 0 and self.last_offset < self.base_offset:
            raise IndexCorruptError(f"Corrupt index {self.path}: last offset {self.last_offset} < base offset "
                                    f"{self.base_offset}")
        n = self._entries
        if n < 2:
            return
        # every entry's relative offset, in one copy: a Python read of each was most of opening a big index
        fields = array.array("i", self._mmap[:n * 8])  # type: ignore[index]
        if sys.byteorder == "little":
            fields.byteswap()
        rels = fields[::2].tolist()
        if rels != sorted(set(rels)):  # not strictly increasing: name the first entry that is not
            slot = next(i for i in range(1, n) if rels[i] <= rels[i - 1])
            raise IndexCorruptError(f"Corrupt index {self.path}: offsets not increasing at entry {slot}")


class TimeIndex(AbstractIndex):
    """`.timeindex`: int64 timestamp, int32 offset relative to the segment base (KIP-33).

    An entry is appended only when the segment's running max timestamp grows; the last slot is reserved
    for the final entry written on roll or close, hence `is_full` counts `max_entries - 1` (TimeIndex.java).
    """

    entry_size = 12
    _key_struct = _TIME_KEY

    def is_full(self) -> bool:
        return self._entries >= self.max_entries - 1

    def entry(self, slot: int) -> TimestampOffset:
        ts, rel = _TIME_ENTRY.unpack_from(self._mmap, slot * 12)  # type: ignore[arg-type]
        return TimestampOffset(ts, self.base_offset + rel)

    def last_entry(self) -> TimestampOffset:
        if self._entries == 0:
            return TimestampOffset(-1, self.base_offset)
        if self._last is None:
            self._last = self.entry(self._entries - 1)
        return self._last

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """Largest entry with timestamp <= target, else (-1, base offset) (TimeIndex.lookup)."""
        mm = self._mmap
        slot = self._largest_lower_bound_slot(target_timestamp, None, mm)
        if slot < 0:
            return TimestampOffset(-1, self.base_offset)
        ts, rel = _TIME_ENTRY.unpack_from(mm, slot * 12)  # type: ignore[arg-type]
        return TimestampOffset(ts, self.base_offset + rel)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> bool:
        """Append (timestamp, offset) if timestamp is larger than the last entry's (TimeIndex.maybeAppend)."""
        if not skip_full_check and self.is_full():
            raise KafkaError(f"Attempt to append to a full time index {self.path}")
        last = self.last_entry()
        if self._entries > 0 and offset < last.offset:
            raise KafkaError(f"Attempt to append an offset ({offset}) smaller than the last offset "
                             f"({last.offset}) to the time index {self.path}")
        if self._entries > 0 and timestamp < last.timestamp:
            raise KafkaError(f"Attempt to append a timestamp ({timestamp}) smaller than the last one "
                             f"({last.timestamp}) to the time index {self.path}")
        # Only a timestamp above the last entry's, which is -1 for an empty index: data without timestamps
        # (v0 messages, v2 records of -1) leaves the time index empty, as Kafka's.
        if timestamp > last.timestamp:
            if self._entries >= self.max_entries:
                raise KafkaError(f"time index {self.path} has no room for its final entry")
            self._write_slot(self._entries, _TIME_ENTRY.pack(timestamp, offset - self.base_offset))
            self._entries += 1
            self._last = TimestampOffset(timestamp, offset)
            return True
        return False

    def truncate_to(self, offset: int) -> None:
        """Remove entries pointing at offsets >= `offset` (TimeIndex.truncateTo)."""
        keep = 0
        for slot in range(self._entries):
            if self.entry(slot).offset >= offset:
                break
            keep = slot + 1
        self._entries = keep
        self._forget()

    def sanity_check(self) -> None:
        if self._length % self.entry_size != 0:
            raise IndexCorruptError(f"Time index file {self.path} has size {self._length} not a multiple of 12")
        if self._entries == 0:
            return
        last = self.last_entry()
        if last.timestamp < self.entry(0).timestamp:
            raise IndexCorruptError(f"Corrupt time index {self.path}: last timestamp {last.timestamp} is "
                                    f"smaller than the first {self.entry(0).timestamp}")
        if last.offset < self.base_offset:
            raise IndexCorruptError(f"Corrupt time index {self.path}: last offset {last.offset} < base "
                                    f"offset {self.base_offset}")


__all__ = ["OffsetIndex", "TimeIndex", "OffsetPosition", "TimestampOffset", "IndexCorruptError",
           "CorruptMessageError"]
