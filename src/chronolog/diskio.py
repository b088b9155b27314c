"""Writing files so that a full or failing disk leaves nothing half-done (docs/reliability.md, "Disk full and
I/O errors").

Every write the broker makes goes through these few functions. They either write all the bytes or raise
`OSError` (with the file's name in it): a short write is finished or turned into an error, never taken for
success. `write_atomic` writes a temporary file, fsyncs it and checks its size before renaming it over the
old one, so a file that was not wholly written never takes the place of a good one. Callers that append in
place (segments, indexes) truncate back to their last good size when these raise.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import platform
import re
import sys
from collections.abc import Sequence
from pathlib import Path

# Disk incidents (a failed write, writes resumed, low space, checkpoints): one logger, which `chronolog serve`
# shows from INFO up, so that the line saying writes resumed is seen beside the ERROR that said they stopped.
disk_log = logging.getLogger("chronolog.logdir")


def _named(exc: OSError, path: Path | str | None) -> OSError:
    if path is not None and exc.filename is None:
        exc.filename = str(path)
    return exc


def pwrite_all(fd: int, data: bytes | bytearray | memoryview, offset: int, path: Path | str | None = None) -> None:
    """All of `data` at `offset`, or OSError. A write that returns short is continued; one that writes
    nothing is ENOSPC (a full file system that did not say so)."""
    try:
        done = os.pwrite(fd, data, offset)
    except OSError as exc:
        raise _named(exc, path) from None
    if done == (data.nbytes if isinstance(data, memoryview) else len(data)):
        return
    view = memoryview(data).cast("B")
    try:
        if done <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        while done < len(view):
            n = os.pwrite(fd, view[done:], offset + done)
            if n <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            done += n
    except OSError as exc:
        raise _named(exc, path) from None


def pwritev_all(fd: int, parts: Sequence[bytes | bytearray | memoryview], offset: int,
                path: Path | str | None = None) -> None:
    """`pwrite_all` of the parts one after the other, in one `pwritev` when it writes them all."""
    views = [memoryview(p).cast("B") for p in parts]
    total = sum(len(v) for v in views)
    try:
        n = os.pwritev(fd, views, offset)
    except OSError as exc:
        raise _named(exc, path) from None
    if n >= total:
        return
    # A short pwritev: write what is left of each part.
    pos = offset
    for v in views:
        if n >= len(v):
            n -= len(v)
        else:
            pwrite_all(fd, v[n:], pos + n, path)
            n = 0
        pos += len(v)


def write_all(fd: int, data: bytes | bytearray | memoryview, path: Path | str | None = None) -> None:
    """All of `data` at the descriptor's position, or OSError (as `pwrite_all`)."""
    view = memoryview(data).cast("B")
    done = 0
    try:
        while done < len(view):
            n = os.write(fd, view[done:])
            if n <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            done += n
    except OSError as exc:
        raise _named(exc, path) from None


def fsync_dir(directory: Path | str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path | str, data: bytes, *, sync: bool = True, mode: int | None = None,
                 tmp: Path | str | None = None) -> None:
    """Replace `path` by a file holding exactly `data`: a temporary file (`tmp`, default `<path>.tmp`) is
    written, fsynced (with `sync`), checked to hold len(data) bytes and renamed over `path`; on any error
    it is removed and the old file stays. With `sync` the directory is fsynced too, so the rename lasts.
    `mode`, when given, is the file's exact mode from its creation on (the umask does not widen or narrow it)."""
    path = Path(path)
    tmp = Path(tmp) if tmp is not None else path.with_name(path.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644 if mode is None else mode)
    except OSError as exc:
        raise _named(exc, tmp) from None
    try:
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            write_all(fd, data, tmp)
            if sync:
                os.fsync(fd)
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        if size != len(data):  # never rename a short file into place, whatever the writes said
            raise OSError(errno.EIO, f"{tmp} holds {size} of {len(data)} bytes", str(tmp))
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise _named(exc, tmp) from None
        raise
    if sync:
        try:
            fsync_dir(path.parent)
        except OSError as exc:
            raise _named(exc, path.parent) from None


def _libc_syncfs():
    """libc's `syncfs(2)` where it reports write-back errors: Linux from 5.8. Before 5.8 it returned 0 even
    when pages failed to reach the disk, so it could vouch for nothing; elsewhere there is no such call.
    None where it cannot be trusted (callers fsync file by file instead)."""
    if not sys.platform.startswith("linux"):
        return None
    version = re.match(r"(\d+)\.(\d+)", platform.release())
    if version is None or (int(version[1]), int(version[2])) < (5, 8):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int]
    function.restype = ctypes.c_int
    return function


_SYNCFS = _libc_syncfs()


def syncfs(fd: int) -> None:
    """`syncfs(2)` of the file system holding `fd`, or OSError (the one place it is called: tests fault it
    as they fault `os.fsync`). ctypes releases the GIL for the call."""
    if _SYNCFS is None:
        raise OSError(errno.ENOSYS, "syncfs is not available or does not report write-back errors here")
    if _SYNCFS(fd) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


class FileSystemSync:
    """Makes everything written to one file system durable with one `syncfs(2)` instead of one fsync per
    file: a clean stop of 10,000 partitions then costs one journal commit, not tens of thousands of fsyncs.

    The descriptor is opened when the owner starts and held until it stops: `syncfs` reports a write-back
    error that happened on the file system since that descriptor was opened (the kernel keeps one error
    sequence per file system and samples it at open), including errors of pages written back in the
    background long before the sync and errors another process on the same file system has already seen.
    Files on another file system (a partition directory that is a mount point or a symlink elsewhere) are
    not covered: `covers` tells."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)
        self._fd = -1
        self.device = -1
        if _SYNCFS is not None:
            self._fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
            self.device = os.fstat(self._fd).st_dev

    def covers(self, path: Path | str) -> bool:
        """`path` is on this file system (False when `syncfs` is not used here at all)."""
        return self._fd >= 0 and os.stat(path).st_dev == self.device

    def sync(self) -> None:
        """Everything written so far to the file system is on disk, or OSError."""
        if self._fd < 0:
            raise OSError(errno.ENOSYS, "syncfs is not available or does not report write-back errors here")
        try:
            syncfs(self._fd)
        except OSError as exc:
            raise _named(exc, self.directory) from None

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


def free_bytes(path: Path | str) -> int:
    """Bytes an unprivileged writer may still use on the file system of `path` (-1 when unknown)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return -1
    return st.f_bavail * st.f_frsize


def describe(exc: OSError) -> str:
    """`errno 28 (ENOSPC, No space left on device)` for a log line."""
    code = exc.errno
    if code is None:
        return str(exc)
    return f"errno {code} ({errno.errorcode.get(code, '?')}, {os.strerror(code)})"


__all__ = ["disk_log", "pwrite_all", "pwritev_all", "write_all", "write_atomic", "fsync_dir", "syncfs",
           "FileSystemSync", "free_bytes", "describe"]
