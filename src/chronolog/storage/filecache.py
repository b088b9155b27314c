"""The open-file budget: one bounded cache of the descriptors that segments hold on their files.

Kafka keeps every segment's `.log` channel open and closes an index's file once it is mapped, so a
partition costs it about one descriptor per segment. In CPython an `mmap` keeps its own duplicate of the
descriptor it was made from (until 3.13's `trackfd=False`), so an index mapped for its whole life would
cost two. Instead a segment's `.log` descriptor, each index's file and map, and a `.txnindex`'s
descriptor are opened when first used, counted here, and closed again, least recently used first, when
the total passes the cache's capacity (`chronolog.log.open.files.max`); the next use reopens them. Open
files are then bounded by what is in use, not by what is on disk.

A descriptor must never be closed while a thread uses it: its number could be given to another file
and a read would silently return that file's bytes. Every holder names the lock that covers its use
(the partition log's lock, under which all segment work runs); a holder is closed only by a thread that
can take that lock, without waiting (so two threads evicting each other's files never deadlock). A
holder used by the evicting thread itself may be closed: it reopens on its next use, which always goes
through the holder (nobody keeps a holder's descriptor or map across a call that opens files).
"""

from __future__ import annotations

import logging
import os
import resource
import threading
from collections import OrderedDict
from typing import Protocol

log = logging.getLogger(__name__)

# Descriptors left outside the cache when its size is derived from the process's limit: client sockets,
# the listeners, checkpoint and snapshot writes, the data dir's lock, the interpreter's own files.
RESERVED_FRACTION = 2
MIN_CAPACITY = 16
RLIM_INFINITY = resource.RLIM_INFINITY


class FileHolder(Protocol):
    """Something that holds descriptors the cache may close (a segment's `.log`, an index, a .txnindex)."""

    files_weight: int  # descriptors held while open

    @property
    def files_lock(self) -> threading.RLock: ...

    def close_files(self) -> None:
        """Close the descriptors; the holder reopens them on its next use."""


class OpenFileCache:
    """Least-recently-used holders with their descriptors open, at most `capacity` descriptors in all
    (exceeded only while every other holder is in use by another thread)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self._lock = threading.Lock()
        self._open: OrderedDict[int, FileHolder] = OrderedDict()
        self._held = 0
        self.evictions = 0
        self.peak = 0

    @property
    def held(self) -> int:
        """Descriptors held by open holders now."""
        return self._held

    def __len__(self) -> int:
        return len(self._open)

    def opened(self, holder: FileHolder) -> None:
        """`holder` has just opened its files: count them, then close the least recently used others
        while over capacity."""
        with self._lock:
            key = id(holder)
            if key not in self._open:
                self._held += holder.files_weight
            self._open[key] = holder
            self._open.move_to_end(key)
            if self._held > self.capacity:
                self._evict_locked(key)
            self.peak = max(self.peak, self._held)

    def used(self, holder: FileHolder) -> None:
        """`holder` was used: it becomes the most recently used (cheap; called on every access)."""
        with self._lock:
            try:
                self._open.move_to_end(id(holder))
            except KeyError:
                pass

    def closed(self, holder: FileHolder) -> None:
        """`holder` closed its files itself (segment closed or deleted)."""
        with self._lock:
            if self._open.pop(id(holder), None) is not None:
                self._held -= holder.files_weight

    def _evict_locked(self, keep: int) -> None:
        for key in list(self._open):
            if self._held <= self.capacity:
                return
            if key == keep:
                continue
            holder = self._open[key]
            lock = holder.files_lock
            if not lock.acquire(blocking=False):
                continue  # in use by another thread: never pull a descriptor from under a read
            try:
                del self._open[key]
                self._held -= holder.files_weight
                self.evictions += 1
                holder.close_files()
            finally:
                lock.release()

    def resize(self, capacity: int) -> None:
        with self._lock:
            self.capacity = max(1, capacity)
            if self._held > self.capacity:
                self._evict_locked(-1)

    def close_all(self) -> None:
        """Close every idle holder's files (tests; a broker stopping closes its logs itself)."""
        self.resize(0)


def raise_open_files_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit (as Kafka's start scripts leave to `ulimit -n`, and
    as the JVM does for itself on Linux/macOS with -XX:+MaxFDLimit); returns (soft, hard) after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):  # macOS refuses above OPEN_MAX: keep what we have
            pass
    return soft, hard


def default_capacity(limit: int) -> int:
    """Half of the process's open-files limit for segment files, the rest for sockets and the rest."""
    return max(MIN_CAPACITY, limit // RESERVED_FRACTION)


def open_descriptors() -> int:
    """Descriptors the process holds now (-1 where /proc or /dev/fd cannot tell)."""
    for where in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(where)) - 1  # less the one listdir itself held
        except OSError:
            continue
    return -1


def nofile_limit() -> int:
    """The soft RLIMIT_NOFILE (a large figure when unlimited)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 1 << 20 if soft == resource.RLIM_INFINITY else soft


# The process's cache: every segment of every log uses it. The broker sizes it at start
# (`LogManager.startup`); tools reading a data dir keep the default derived from the limit at import.
_cache = OpenFileCache(default_capacity(nofile_limit()))


def cache() -> OpenFileCache:
    return _cache


def configure(capacity: int) -> OpenFileCache:
    _cache.resize(capacity)
    return _cache


__all__ = ["OpenFileCache", "FileHolder", "cache", "configure", "raise_open_files_limit", "default_capacity",
           "open_descriptors", "nofile_limit"]
