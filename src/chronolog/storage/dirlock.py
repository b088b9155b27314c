"""The data dir's `.lock`: one writer per data dir, as Kafka's `LogManager.lockLogDirs` takes a
`FileLock` on `<log dir>/.lock` and refuses to start when another process holds it.

Two brokers on one data dir would each map the same index files and truncate them on their own schedule;
the survivor then dies on its next write (SIGBUS on a mapping cut short under it). An OS lock (`flock`)
is released by the kernel when the holder dies, however it dies, so a crash never leaves a stale lock
behind; the file itself stays (Kafka never deletes it either). Unlike Kafka's empty file, ours holds the
holder's pid, so the refusal can name it. Read-only readers of a data dir never take the lock.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from chronolog.errors import ChronologError

LOCK_FILE = ".lock"


class DataDirLockedError(ChronologError):
    """Another process (or another writer in this one) holds the data dir."""


class DataDirLock:
    """An exclusive, non-blocking lock on `<data dir>/.lock`; `release` (or the process ending) frees it."""

    def __init__(self, data_dir: Path | str) -> None:
        self.path = Path(data_dir) / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> DataDirLock:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise ChronologError(f"cannot open {self.path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_pid(fd)
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise ChronologError(f"cannot lock {self.path}: {exc.strerror}") from None
            who = f"process {holder}" if holder is not None else "another process"
            if holder == os.getpid():
                who = "this process (another writer is open on it)"
            raise DataDirLockedError(
                f"data dir {self.path.parent} is in use by {who}, which holds {self.path}; stop it first "
                "or use another data dir (read-only tools such as `offsets --data-dir` can still read it)") from None
        try:  # the pid is only a hint for the next refusal: a full disk must not stop a start for it
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass
        self._fd = fd
        return self

    def release(self) -> None:
        """Unlock; the file stays, as Kafka's does (its content is only a hint for the next refusal)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the last descriptor of the open file releases the flock

    def __enter__(self) -> DataDirLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None
