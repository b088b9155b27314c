"""Data dirs behind a URI (`file://`, `s3://`, `gs://`, `hdfs://`, `abfs://` ... whatever
`pyarrow.fs.FileSystem.from_uri` resolves), read through the storage layer's `ReadOnlyFiles` seam.

`.log` files are read by byte ranges (`NativeFile.read_at`), so the bytes read grow with the offsets
asked for, not with the topic; index files and minima sidecars are read whole. Credentials and endpoints
come from pyarrow's usual environment (AWS_*, GOOGLE_APPLICATION_CREDENTIALS, HADOOP_HOME/CLASSPATH,
AZURE_* ...). Each process resolves a URI once and keeps the filesystem object.
"""

from __future__ import annotations

import re
import threading
from pathlib import PurePosixPath

from chronolog.errors import ChronologError, UnknownTopicOrPartitionError
from chronolog.storage import PartitionLog
from chronolog.timetravel.sources import DataDirSource

_FILESYSTEMS: dict[str, tuple[object, str]] = {}
_FILESYSTEMS_LOCK = threading.Lock()


def is_uri(path: object) -> bool:
    return isinstance(path, str) and "://" in path


def redact(uri: str) -> str:
    """The URI for messages: credentials given in it (`s3://key:secret@bucket/...`) are not shown."""
    return re.sub(r"([A-Za-z][\w+.-]*://)[^/@\s]*@", r"\1***@", uri)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return redact(" ".join(text.split()))


def resolve(uri: str):
    """(filesystem, path inside it) for `uri`, cached per process (executors get only the URI)."""
    with _FILESYSTEMS_LOCK:
        found = _FILESYSTEMS.get(uri)
    if found is not None:
        return found
    import pyarrow as pa
    from pyarrow.fs import FileSystem
    try:
        found = FileSystem.from_uri(uri)
    except (pa.ArrowException, OSError, ValueError, TypeError) as exc:
        raise ChronologError(f"cannot open {redact(uri)}: {_one_line(exc)}") from None
    with _FILESYSTEMS_LOCK:
        return _FILESYSTEMS.setdefault(uri, found)


class ArrowFiles:
    """One directory of a pyarrow filesystem as the storage layer's `ReadOnlyFiles`."""

    def __init__(self, fs, directory: str, infos) -> None:
        from pyarrow.fs import FileType
        self._fs = fs
        self.directory = directory
        self._info = {i.base_name: i for i in infos if i.type == FileType.File}

    def _path(self, name: str) -> str:
        return f"{self.directory}/{name}"

    def names(self) -> list[str]:
        return list(self._info)

    def open(self, name: str):
        return self._fs.open_input_file(self._path(name))  # read_at / size / close, as the seam wants

    def read(self, name: str) -> bytes | None:
        if name not in self._info:
            return None
        import pyarrow as pa
        try:
            with self._fs.open_input_file(self._path(name)) as f:
                return f.read()
        except (pa.ArrowException, OSError):
            return None  # a missing index is rebuilt, a missing sidecar costs a scan: never a wrong answer

    def mtime_ms(self, name: str) -> int:
        info = self._info.get(name)
        return 0 if info is None or info.mtime_ns is None else info.mtime_ns // 1_000_000

    def identity(self, name: str) -> tuple:
        info = self._info.get(name)
        return (id(self._fs.__class__), self._path(name), None if info is None else info.size,
                None if info is None else info.mtime_ns)


class RemoteDataDirSource(DataDirSource):
    """`DataDirSource` over a URI: partition directories `<topic>-<partition>` under it, or one partition
    directory. The URI is listed once (recursively); a missing or unreadable URI is one `ChronologError`
    line."""

    def __init__(self, uri: str, filesystem=None) -> None:
        """`filesystem` (a pyarrow FileSystem) replaces resolving the URI; `uri` is then a path in it."""
        import pyarrow as pa
        from pyarrow.fs import FileSelector, FileType
        self.uri = redact(uri)  # for messages
        fs, base = (filesystem, uri) if filesystem is not None else resolve(uri)
        self._fs = fs
        self._base = base.rstrip("/") or base
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._found: set[tuple[str, int]] | None = None
        self._errors = (pa.ArrowException, OSError)
        try:
            info = fs.get_file_info(self._base)
            if info.type == FileType.NotFound:
                raise ChronologError(f"data dir {self.uri} does not exist")
            if info.type != FileType.Directory:
                raise ChronologError(f"data dir {self.uri} is not a directory")
            top = fs.get_file_info(FileSelector(self._base, recursive=False))
        except self._errors as exc:
            raise ChronologError(f"cannot read {self.uri}: {_one_line(exc)}") from None
        self.name = PurePosixPath(self._base).name
        self.path = self.where = self.uri
        self._top = top
        self.single = any(i.type == FileType.File and i.base_name.endswith(".log") for i in top)

    def _partition_dirs(self) -> set[str]:
        from pyarrow.fs import FileSelector, FileType
        base = str(PurePosixPath(self._base))
        try:
            listing = self._fs.get_file_info(FileSelector(self._base, recursive=True))
        except self._errors as exc:
            raise ChronologError(f"cannot read {self.uri}: {_one_line(exc)}") from None
        return {PurePosixPath(i.path).parent.name for i in listing
                if i.type == FileType.File and i.base_name.endswith(".log")
                and str(PurePosixPath(i.path).parent.parent) == base}

    def _open(self, directory: str | None) -> PartitionLog:
        from pyarrow.fs import FileSelector
        if directory is None:
            path, infos = self._base, self._top
        else:
            path = f"{self._base}/{directory}"
            try:
                infos = self._fs.get_file_info(FileSelector(path))
            except FileNotFoundError:
                raise UnknownTopicOrPartitionError(f"{directory} not found in {self.uri}") from None
            except self._errors as exc:
                raise ChronologError(f"cannot read {self.uri}: {_one_line(exc)}") from None
        try:
            return PartitionLog.open_readonly(PurePosixPath(path), files=ArrowFiles(self._fs, path, infos))
        except self._errors as exc:
            raise ChronologError(f"cannot read {directory or self.name} in {self.uri}: {_one_line(exc)}") from None
