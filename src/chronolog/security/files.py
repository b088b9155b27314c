"""Small JSON state files in the data dir (credentials, ACLs): written atomically with mode 0600, read
again only when they changed on disk, so a running broker picks up what the CLI wrote."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from chronolog.diskio import write_atomic
from chronolog.errors import ChronologError

log = logging.getLogger(__name__)


def write_json_atomic(path: Path, data: Any) -> None:
    """Temp file in the same dir (mode 0600 from creation), fsync, rename over, fsync the dir: readers see
    the old file or the new one, never half of one, and nobody else can read it in between."""
    path = Path(path)
    import json  # imported where a file is read or written, not by every broker's start

    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    # A full disk leaves the old file (`diskio.write_atomic` never renames a short one into place).
    write_atomic(path, text.encode("utf-8"), mode=0o600, tmp=path.with_name(f".{path.name}.{os.getpid()}.tmp"))


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Serialises read-modify-write of one state file between CLI invocations."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class WatchedJson:
    """The parsed content of a JSON file, re-read when its (mtime, size, inode) changes. A file that does
    not exist reads as `empty`; a file that cannot be parsed keeps the last good content (and logs) when it
    had one, and raises otherwise, so a broker never silently runs with an empty ACL list."""

    def __init__(self, path: Path, empty: Any) -> None:
        self.path = Path(path)
        self._empty = empty
        self._key: tuple | None = None
        self._data: Any = empty
        self.generation = 0

    def get(self) -> Any:
        try:
            st = os.stat(self.path)
            key: tuple | None = (st.st_mtime_ns, st.st_size, st.st_ino)
        except FileNotFoundError:
            key = None
        if key != self._key:
            if key is None:
                self._data = self._empty
            else:
                import json

                try:
                    self._data = json.loads(self.path.read_text(encoding="utf-8"))
                except (OSError, ValueError) as exc:
                    if self._key is None and self.generation == 0:
                        raise ChronologError(f"cannot read {self.path}: {exc}") from None
                    log.error("cannot read %s, keeping the previous content: %s",
                                                      self.path, exc)
                    return self._data
            self._key = key
            self.generation += 1
        return self._data
