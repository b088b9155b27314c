"""Reading tiered segments: a partition directory of the tier as the storage layer's `ReadOnlyFiles`
(`storage.readonly`), with two bounded caches in front of the object store, as Kafka's `RemoteIndexCache`
(indexes fetched whole, kept locally, least recently used out) and its remote fetches of byte ranges.

A lookup by time into a tiered segment reads its time and offset indexes (cached) and then one byte range
of the `.log` from the index's position (`RangeCache.CHUNK` bytes, enough for the walk from an index
entry to the answer), never the `.log` from its start. A fetch reads the ranges it returns.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import threading
from collections import OrderedDict
from pathlib import Path

from chronolog.storage.index import TimestampOffset
from chronolog.storage.readonly import FilesSegment
from chronolog.storage.remote.metadata import RemoteSegment
from chronolog.storage.remote.tier import Tier
from chronolog.storage.segment import LOG_SUFFIX, segment_name

INDEX_CACHE_BYTES = 1 << 30  # remote.log.index.file.cache.total.size.bytes (Kafka's default: 1 GiB)
RANGE_CACHE_BYTES = 64 << 20
RANGE_BYTES = 256 << 10
INDEX_CACHE_DIR = "remote-log-index-cache"  # in the data dir, as Kafka's RemoteIndexCache.DIR_NAME

log = logging.getLogger("chronolog.storage.remote")


class IndexCache:
    """Small files of the tier (indexes, `.txnindex`, snapshots, sidecars) kept whole, bounded by bytes.
    With `directory` (a broker's `<data dir>/remote-log-index-cache`, Kafka's `RemoteIndexCache.DIR_NAME`)
    each file fetched is also kept there, bounded by the same bytes and least recently used out, so a
    restart or a file dropped from memory is read from local disk, not the tier."""

    def __init__(self, max_bytes: int = INDEX_CACHE_BYTES, directory: Path | None = None) -> None:
        self.max_bytes = max_bytes
        self._data: OrderedDict[tuple, bytes | None] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.directory = directory
        self._disk: OrderedDict[str, int] = OrderedDict()  # file name -> size, least recently used first
        self._disk_bytes = 0
        if directory is not None:
            self._load_disk(directory)

    def get(self, tier: Tier, path: str, identity: str, size: int | None = None) -> bytes | None:
        """The file at `path` of the copy `identity`; `size` (from its metadata), when known, rejects a
        local copy a crash left short."""
        key = (id(tier), path, identity)
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
        data = self._from_disk(_disk_name(path, identity), size) if self.directory is not None else None
        if data is None:
            data = tier.read(path)
            if data is not None and self.directory is not None:
                self._to_disk(_disk_name(path, identity), data)
        with self._lock:
            if key not in self._data:
                self._data[key] = data
                self._bytes += len(data or b"")
                while self._bytes > self.max_bytes and len(self._data) > 1:
                    _k, old = self._data.popitem(last=False)
                    self._bytes -= len(old or b"")
        return data

    def forget(self, tier: Tier, prefix: str) -> None:
        with self._lock:
            for key in [k for k in self._data if k[0] == id(tier) and k[1].startswith(prefix)]:
                self._bytes -= len(self._data.pop(key) or b"")
            gone = [n for n in self._disk if n.startswith(_disk_name(prefix, ""))] if self.directory else []
            for name in gone:
                self._disk_bytes -= self._disk.pop(name)
        for name in gone:
            self._unlink(name)

    # -- the local directory ------------------------------------------------------------------------
    def _load_disk(self, directory: Path) -> None:
        """What an earlier run kept, oldest use first; a write a crash cut (`.tmp`) is removed."""
        try:
            directory.mkdir(parents=True, exist_ok=True)
            found = []
            with os.scandir(directory) as entries:
                for entry in entries:
                    if entry.name.endswith(".tmp"):
                        self._unlink(entry.name)
                    elif entry.is_file():
                        st = entry.stat()
                        found.append((st.st_mtime_ns, entry.name, st.st_size))
        except OSError as exc:
            log.warning("remote index cache %s unusable (%s): indexes are kept in memory only", directory, exc)
            self.directory = None
            return
        for _mtime, name, size in sorted(found):
            self._disk[name] = size
            self._disk_bytes += size
        self._evict_disk()

    def _from_disk(self, name: str, size: int | None) -> bytes | None:
        with self._lock:
            if name not in self._disk:
                return None
            self._disk.move_to_end(name)
        path = self.directory / name
        try:
            data = path.read_bytes()
            if size is not None and len(data) != size:
                raise OSError(f"{len(data)} bytes, not {size}")
            os.utime(path)  # the use, for the order the next start evicts in
            return data
        except OSError:
            with self._lock:
                self._disk_bytes -= self._disk.pop(name, 0)
            self._unlink(name)
            return None

    def _to_disk(self, name: str, data: bytes) -> None:
        """Written under a temporary name and renamed: a crash leaves a whole file or none (no sync: a
        cache; a copy cut short by a power loss is caught by its size and fetched again)."""
        tmp = self.directory / f"{name}.{threading.get_ident()}.tmp"
        try:
            tmp.write_bytes(data)
            os.replace(tmp, self.directory / name)
        except OSError as exc:
            log.debug("remote index cache: %s not kept on disk (%s)", name, exc)
            self._unlink(tmp.name)
            return
        with self._lock:
            self._disk_bytes += len(data) - self._disk.pop(name, 0)
            self._disk[name] = len(data)
        self._evict_disk()

    def _evict_disk(self) -> None:
        gone = []
        with self._lock:
            while self._disk_bytes > self.max_bytes and len(self._disk) > 1:
                name, size = self._disk.popitem(last=False)
                self._disk_bytes -= size
                gone.append(name)
        for name in gone:
            self._unlink(name)

    def _unlink(self, name: str) -> None:
        with contextlib.suppress(OSError):
            (self.directory / name).unlink()


def _disk_name(path: str, identity: str) -> str:
    """`<topic>-<partition>/<file>` of copy `identity` as one file name ('@' is in no topic name)."""
    return f"{path.replace('/', '@')}@{identity}" if identity else path.replace("/", "@")


class RangeCache:
    """Byte ranges of tiered `.log` files, least recently used out beyond `max_bytes`. A read missing from
    the cache fetches at least `range_bytes` from its start in one request."""

    def __init__(self, max_bytes: int = RANGE_CACHE_BYTES, range_bytes: int = RANGE_BYTES) -> None:
        self.max_bytes = max_bytes
        self.range_bytes = range_bytes
        self._data: OrderedDict[tuple, bytes] = OrderedDict()  # (tier id, path, identity, start) -> bytes
        self._starts: dict[tuple, list[int]] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def read(self, tier: Tier, path: str, identity: str, offset: int, nbytes: int, size: int) -> bytes:
        end = min(offset + nbytes, size)
        file_key = (id(tier), path, identity)
        parts = []
        pos = offset
        while pos < end:
            found = self._cached(file_key, pos)
            if found is None:
                want = min(max(end - pos, self.range_bytes), size - pos)
                found = tier.read_range(path, pos, want)
                if not found:
                    break
                self._put(file_key, pos, found)
                chunk_start = pos
            else:
                chunk_start, found = found
            piece = found[pos - chunk_start:end - chunk_start]
            if not piece:
                break
            parts.append(piece)
            pos += len(piece)
        return b"".join(parts)

    def _cached(self, file_key: tuple, pos: int) -> tuple[int, bytes] | None:
        with self._lock:
            starts = self._starts.get(file_key)
            if not starts:
                return None
            i = bisect.bisect_right(starts, pos) - 1
            while i >= 0:
                start = starts[i]
                data = self._data.get((*file_key, start))
                if data is not None and start <= pos < start + len(data):
                    self._data.move_to_end((*file_key, start))
                    return start, data
                if data is not None:
                    return None
                i -= 1
            return None

    def _put(self, file_key: tuple, start: int, data: bytes) -> None:
        with self._lock:
            key = (*file_key, start)
            if key in self._data:
                return
            self._data[key] = data
            bisect.insort(self._starts.setdefault(file_key, []), start)
            self._bytes += len(data)
            while self._bytes > self.max_bytes and len(self._data) > 1:
                (tid, path, ident, old_start), old = self._data.popitem(last=False)
                self._bytes -= len(old)
                starts = self._starts.get((tid, path, ident))
                if starts is not None:
                    starts.remove(old_start)
                    if not starts:
                        del self._starts[(tid, path, ident)]

    def forget(self, tier: Tier, prefix: str) -> None:
        with self._lock:
            for key in [k for k in self._data if k[0] == id(tier) and k[1].startswith(prefix)]:
                self._bytes -= len(self._data.pop(key))
            for fk in [k for k in self._starts if k[0] == id(tier) and k[1].startswith(prefix)]:
                del self._starts[fk]


class RemoteCaches:
    """The caches of one broker's tier (`RemoteLogManager`), or of a tool reading one."""

    def __init__(self, index_bytes: int = INDEX_CACHE_BYTES, range_bytes: int = RANGE_CACHE_BYTES,
                 range_size: int = RANGE_BYTES, index_dir: Path | None = None) -> None:
        self.indexes = IndexCache(index_bytes, index_dir)
        self.ranges = RangeCache(range_bytes, range_size)


class _RangeFile:
    """A tiered `.log` as `storage.readonly.RandomAccess`: its size from the metadata (no request), reads
    through the range cache."""

    def __init__(self, files: TierFiles, path: str, identity: str, size: int) -> None:
        self._files, self._path, self._identity, self._size = files, path, identity, size

    def read_at(self, nbytes: int, offset: int) -> bytes:
        return self._files.caches.ranges.read(self._files.tier, self._path, self._identity, offset, nbytes,
                                              self._size)

    def size(self) -> int:
        return self._size

    def close(self) -> None:
        pass


class TierFiles:
    """One partition directory of the tier as `ReadOnlyFiles`: only the files of listed segments (their
    metadata says COPY_SEGMENT_FINISHED), so a copy in progress or a deletion half done is never read."""

    def __init__(self, tier: Tier, directory: str, segments: list[RemoteSegment], caches: RemoteCaches) -> None:
        self.tier = tier
        self.directory = directory
        self.caches = caches
        self._size: dict[str, int] = {}
        self._ident: dict[str, str] = {}
        self._mtime: dict[str, int] = {}
        for meta in segments:
            for name, size in meta.files.items():
                self._size[name] = size
                self._ident[name] = meta.segment_id
                self._mtime[name] = meta.created_ms

    def _path(self, name: str) -> str:
        return f"{self.directory}/{name}"

    def names(self) -> list[str]:
        return list(self._size)

    def open(self, name: str) -> _RangeFile:
        if name not in self._size:
            raise FileNotFoundError(self._path(name))
        return _RangeFile(self, self._path(name), self._ident[name], self._size[name])

    def read(self, name: str) -> bytes | None:
        if name not in self._size:
            return None
        return self.caches.indexes.get(self.tier, self._path(name), self._ident[name], self._size[name])

    def mtime_ms(self, name: str) -> int:
        return self._mtime.get(name, 0)

    def identity(self, name: str) -> tuple:
        return ("tier", self.tier.location, self._path(name), self._ident.get(name))


class TieredSegment(FilesSegment):
    """A tiered segment read through `TierFiles`: its largest timestamp and end offset come from its
    metadata, so finding the segment of a time or an offset opens none; opening one reads its two indexes
    (cached) and nothing of the `.log`."""

    remote = True

    def __init__(self, files: TierFiles, directory: Path, meta: RemoteSegment, **kwargs) -> None:
        super().__init__(files, directory, meta.base_offset, **kwargs)
        self.meta = meta
        self.is_last = False

    def _load_largest_timestamp(self, scan: bool = True) -> None:
        super()._load_largest_timestamp(scan)
        self._max_ts_known = TimestampOffset(self.meta.max_timestamp, self.meta.offset_of_max_timestamp)

    @property
    def max_timestamp_so_far(self) -> int:
        return self.meta.max_timestamp

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        return self.meta.offset_of_max_timestamp

    @property
    def largest_timestamp(self) -> int:
        return self.meta.max_timestamp if self.meta.max_timestamp >= 0 else self.meta.created_ms

    @property
    def next_offset_guess(self) -> int:
        return self.meta.end_offset + 1

    def _log_mtime_ms(self) -> int:
        return self.meta.created_ms

    def __repr__(self) -> str:
        return (f"RemoteLogSegment(baseOffset={self.base_offset}, endOffset={self.meta.end_offset}, "
                f"size={self.meta.size}, maxTimestamp={self.meta.max_timestamp})")


def log_name(base_offset: int) -> str:
    return segment_name(base_offset, LOG_SUFFIX)
