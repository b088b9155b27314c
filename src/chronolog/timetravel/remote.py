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
from chronolog.storage.log import parse_log_dir_name
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
    directory. A missing or unreadable URI is one `ChronologError` line."""

    def __init__(self, uri: str, filesystem=None) -> None:
        """`filesystem` (a pyarrow FileSystem) replaces resolving the URI; `uri` is then a path in it."""
        import pyarrow as pa
        from pyarrow.fs import FileSelector, FileType
        self.uri = redact(uri)  # for messages
        fs, base = (filesystem, uri) if filesystem is not None else resolve(uri)
        self._fs = fs
        self._base = base.rstrip("/") or base
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._topics: dict[str, int] | None = None
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
        self.path = self.uri
        self._top = top
        self.single = any(i.type == FileType.File and i.base_name.endswith(".log") for i in top)

    def _list(self, directory: str, recursive: bool = False):
        from pyarrow.fs import FileSelector
        try:
            return self._fs.get_file_info(FileSelector(directory, recursive=recursive))
        except self._errors as exc:
            raise ChronologError(f"cannot read {self.uri}: {_one_line(exc)}") from None

    def topics(self) -> dict[str, int]:
        if self.single:
            return {self.name: 1}
        if self._topics is None:
            from pyarrow.fs import FileType
            with_logs = {PurePosixPath(i.path).parent.name for i in self._list(self._base, recursive=True)
                         if i.type == FileType.File and i.base_name.endswith(".log")
                         and str(PurePosixPath(i.path).parent.parent) == str(PurePosixPath(self._base))}
            out: dict[str, int] = {}
            self._present: set[tuple[str, int]] = set()
            for name in with_logs:
                try:
                    topic, p = parse_log_dir_name(name)
                except ValueError:
                    continue
                out[topic] = max(out.get(topic, 0), p + 1)
                self._present.add((topic, p))
            self._topics = out
        return self._topics

    def partitions(self, topic: str) -> list[int]:
        if self.single:
            if topic != self.name:
                raise UnknownTopicOrPartitionError(f"{self.uri} holds only {self.name!r}")
            return [0]
        self.topics()
        parts = sorted(p for t, p in self._present if t == topic)
        if not parts:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} not found in {self.uri}")
        return parts

    def log(self, topic: str, partition: int) -> PartitionLog:
        key = (topic, partition)
        if key not in self._logs:
            if self.single:
                if topic != self.name or partition != 0:
                    raise UnknownTopicOrPartitionError(f"{topic}-{partition} not found in {self.uri}")
                directory, infos = self._base, self._top
            else:
                directory = f"{self._base}/{topic}-{partition}"
                if self._topics is not None and key not in self._present:
                    raise UnknownTopicOrPartitionError(f"{topic}-{partition} not found in {self.uri}")
                from pyarrow.fs import FileSelector
                try:
                    infos = self._fs.get_file_info(FileSelector(directory))
                except FileNotFoundError:
                    raise UnknownTopicOrPartitionError(f"{topic}-{partition} not found in {self.uri}") from None
                except self._errors as exc:
                    raise ChronologError(f"cannot read {self.uri}: {_one_line(exc)}") from None
            files = ArrowFiles(self._fs, directory, infos)
            try:
                self._logs[key] = PartitionLog.open_readonly(PurePosixPath(directory), files=files)
            except self._errors as exc:
                raise ChronologError(f"cannot read {topic}-{partition} in {self.uri}: {_one_line(exc)}") from None
        return self._logs[key]
