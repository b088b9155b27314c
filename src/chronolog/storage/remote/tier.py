"""Where tiered segments live (`remote.log.storage.dir`): a local directory, or a URI that pyarrow's
`FileSystem.from_uri` opens (`s3://bucket/prefix`, `gs://...`). Kafka reaches its tier through a
`RemoteStorageManager` plugin; this is chronolog's one built-in one, with the few operations the copier,
the expiration and the readers need. Every read is counted (`reads`), so tests can see what a lookup cost.

Writes are whole or absent: a local file is written under a temporary name, synced and renamed; an
object store makes an object visible only when its upload completes, so a process killed mid-copy
leaves no partial object under a segment's name.
"""

from __future__ import annotations

import contextlib
import io
import os
import threading
import zlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

CHUNK = 1 << 20  # bytes per write of a copy


class TierError(OSError):
    """The tier could not be read or written (unreachable, denied, missing)."""


class Tier:
    """The operations on the tier; paths are '/'-separated, relative to the tier's root."""

    location: str

    def __init__(self) -> None:
        self.reads: Counter[str] = Counter()  # file name -> reads (GETs) since the counters were reset
        self.bytes_read: Counter[str] = Counter()
        self._count_lock = threading.Lock()

    def _counted(self, path: str, nbytes: int) -> None:
        name = path.rsplit("/", 1)[-1]
        with self._count_lock:
            self.reads[name] += 1
            self.bytes_read[name] += nbytes

    def reset_counters(self) -> None:
        with self._count_lock:
            self.reads.clear()
            self.bytes_read.clear()

    # -- what a tier implements ---------------------------------------------------------------------
    def list(self, directory: str) -> dict[str, int]:
        """File name -> size of the files directly in `directory` ({} when it does not exist)."""
        raise NotImplementedError

    def read_range(self, path: str, offset: int, nbytes: int) -> bytes:
        raise NotImplementedError

    def read(self, path: str) -> bytes | None:
        """A whole (small) file; None when it does not exist."""
        raise NotImplementedError

    def put_file(self, path: str, source: BinaryIO, size: int) -> int:
        """Copy `size` bytes of `source` to `path`, whole or not at all; returns their CRC-32."""
        raise NotImplementedError

    def put_bytes(self, path: str, data: bytes) -> None:
        self.put_file(path, io.BytesIO(data), len(data))

    def delete(self, path: str) -> None:
        """Remove a file; a missing one is not an error."""
        raise NotImplementedError

    def delete_dir(self, directory: str) -> None:
        raise NotImplementedError


class LocalTier(Tier):
    """A directory of the local file system (a mounted share, a second disk, a test's temporary dir)."""

    def __init__(self, root: Path | str) -> None:
        super().__init__()
        self.root = Path(root)
        self.location = str(self.root)
        self.root.mkdir(parents=True, exist_ok=True)

    def _p(self, path: str) -> Path:
        return self.root / path

    def list(self, directory: str) -> dict[str, int]:
        try:
            with os.scandir(self._p(directory)) as it:
                return {e.name: e.stat().st_size for e in it if e.is_file()}  # `.tmp`: a copy a crash cut
        except FileNotFoundError:
            return {}

    def read_range(self, path: str, offset: int, nbytes: int) -> bytes:
        with open(self._p(path), "rb") as f:
            data = os.pread(f.fileno(), nbytes, offset)
        self._counted(path, len(data))
        return data

    def read(self, path: str) -> bytes | None:
        try:
            data = self._p(path).read_bytes()
        except FileNotFoundError:
            return None
        self._counted(path, len(data))
        return data

    def put_file(self, path: str, source: BinaryIO, size: int) -> int:
        target = self._p(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        with open(tmp, "wb") as out:
            crc = _copy(path, source, size, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
        _fsync_dir(target.parent)
        return crc

    def delete(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._p(path).unlink()

    def delete_dir(self, directory: str) -> None:
        import shutil
        shutil.rmtree(self._p(directory), ignore_errors=True)


def _copy(path: str, source: BinaryIO, size: int, out) -> int:
    """`size` bytes of `source` to `out` in CHUNK writes; their CRC-32 (the metadata's check of the `.log`)."""
    crc = 0
    left = size
    while left > 0:
        data = source.read(min(CHUNK, left))
        if not data:
            raise TierError(f"{path}: source ended {left} bytes early")
        crc = zlib.crc32(data, crc)
        out.write(data)
        left -= len(data)
    return crc


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ArrowTier(Tier):
    """A pyarrow filesystem (S3, GCS, HDFS, Azure ...) under a base path. Credentials and endpoints come
    from pyarrow's usual environment (AWS_*, ...) or the URI's query (`?endpoint_override=...`)."""

    def __init__(self, uri: str, filesystem=None, base: str | None = None) -> None:
        super().__init__()
        import pyarrow as pa
        from pyarrow.fs import FileSystem
        self.location = uri
        self._errors = (pa.ArrowException, OSError)
        if filesystem is None:
            try:
                filesystem, base = FileSystem.from_uri(uri)
            except (pa.ArrowException, OSError, ValueError, TypeError) as exc:
                raise TierError(f"cannot open remote.log.storage.dir {_redact(uri)}: {exc}") from None
        self.fs = filesystem
        self.base = (base or "").rstrip("/")
        # Open handles of `.log` objects: opening one costs a HEAD request (its size), each read then one
        # ranged GET; kept for the next reads of the same object, least recently used closed first.
        self._handles: dict[str, object] = {}
        self._handles_lock = threading.Lock()

    def _p(self, path: str) -> str:
        return f"{self.base}/{path}" if self.base else path

    def list(self, directory: str) -> dict[str, int]:
        from pyarrow.fs import FileSelector, FileType
        try:
            infos = self.fs.get_file_info(FileSelector(self._p(directory), allow_not_found=True))
        except self._errors as exc:
            raise TierError(f"cannot list {directory}: {exc}") from None
        return {i.base_name: i.size for i in infos if i.type == FileType.File}

    def read_range(self, path: str, offset: int, nbytes: int) -> bytes:
        try:
            data = self._handle(path).read_at(nbytes, offset)
        except self._errors as exc:
            self._drop(path)
            raise TierError(f"cannot read {path}: {exc}") from None
        self._counted(path, len(data))
        return data

    def _handle(self, path: str):
        with self._handles_lock:
            handle = self._handles.pop(path, None)
            if handle is not None:
                self._handles[path] = handle  # most recently used last
                return handle
        handle = self.fs.open_input_file(self._p(path))
        with self._handles_lock:
            self._handles[path] = handle
            while len(self._handles) > 64:
                old = self._handles.pop(next(iter(self._handles)))
                with contextlib.suppress(*self._errors):
                    old.close()
        return handle

    def _drop(self, path: str) -> None:
        with self._handles_lock:
            handle = self._handles.pop(path, None)
        if handle is not None:
            with contextlib.suppress(*self._errors):
                handle.close()

    def read(self, path: str) -> bytes | None:
        try:
            with self.fs.open_input_stream(self._p(path)) as f:
                data = f.read()
        except FileNotFoundError:
            return None
        except self._errors as exc:
            if "not found" in str(exc).lower() or "NoSuchKey" in str(exc):
                return None
            raise TierError(f"cannot read {path}: {exc}") from None
        self._counted(path, len(data))
        return data

    def put_file(self, path: str, source: BinaryIO, size: int) -> int:
        try:
            # The object appears only when the stream is closed (the upload completes): never partial.
            with self.fs.open_output_stream(self._p(path)) as out:
                crc = _copy(path, source, size, out)
        except self._errors as exc:
            if isinstance(exc, TierError):
                raise
            raise TierError(f"cannot write {path}: {exc}") from None
        return crc

    def delete(self, path: str) -> None:
        self._drop(path)
        self._delete(self.fs.delete_file, path)

    def delete_dir(self, directory: str) -> None:
        with self._handles_lock:
            stale = [p for p in self._handles if p.startswith(f"{directory}/")]
        for path in stale:
            self._drop(path)
        self._delete(self.fs.delete_dir, directory)

    def _delete(self, remove: Callable[[str], None], path: str) -> None:
        """What is already gone counts as deleted (object stores say "not found" in their own words)."""
        try:
            remove(self._p(path))
        except FileNotFoundError:
            pass
        except self._errors as exc:
            if "not found" not in str(exc).lower():
                raise TierError(f"cannot delete {path}: {exc}") from None


def _redact(uri: str) -> str:
    import re
    return re.sub(r"([A-Za-z][\w+.-]*://)[^/@\s]*@", r"\1***@", uri)


def open_tier(location: str) -> Tier:
    """`remote.log.storage.dir`: a URI (`scheme://...`) through pyarrow, anything else a local directory."""
    if "://" in location and not location.startswith("file://"):
        return ArrowTier(location)
    return LocalTier(location[len("file://"):] if location.startswith("file://") else location)
