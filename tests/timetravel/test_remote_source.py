"""A data dir behind a URI (pyarrow filesystems) answers as the local `DataDirSource` does, reads `.log`
files by byte ranges only, and fails with one clear line when the URI is wrong."""

from __future__ import annotations

import os
import random
import shutil
from collections import Counter

import pytest

pa = pytest.importorskip("pyarrow")
pafs = pytest.importorskip("pyarrow.fs")

from chronolog.config import BrokerConfig  # noqa: E402
from chronolog.errors import ChronologError, UnknownTopicOrPartitionError  # noqa: E402
from chronolog.records import SimpleRecord, build_batch  # noqa: E402
from chronolog.storage import LogManager  # noqa: E402
from chronolog.timetravel.opener import open_data_dir  # noqa: E402
from chronolog.timetravel.remote import RemoteDataDirSource  # noqa: E402
from chronolog.timetravel.sources import DataDirSource  # noqa: E402
from tests.fds import open_files_under  # noqa: E402
from tests.s3server import s3_server  # noqa: E402


def proven_end(plog, start: int, window_end_ms: int) -> int:
    """The path-mode planner's end-offset proof (driver code, no SparkSession)."""
    from chronolog.spark.planning import _proven_end
    return _proven_end(plog, start, window_end_ms)

BASE = 1_700_000_000_000
HOUR = 3_600_000
HOURS = 24
PER_HOUR = 1000  # records per partition and hour


class CountingHandler(pafs.FileSystemHandler):
    """A filesystem that forwards to another and counts the bytes read from each file name, so a test
    sees what a reader fetched (and that it went through the filesystem, not the local path)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.bytes_read: Counter[str] = Counter()
        self.opened: Counter[str] = Counter()

    def get_type_name(self):
        return "counting"

    def normalize_path(self, path):
        return self.inner.normalize_path(path)

    def get_file_info(self, paths):
        return self.inner.get_file_info(paths)

    def get_file_info_selector(self, selector):
        return self.inner.get_file_info(selector)

    def open_input_file(self, path):
        self.opened[os.path.basename(path)] += 1
        wrapped = _CountingFile(self.inner.open_input_file(path), os.path.basename(path), self.bytes_read)
        return pa.PythonFile(wrapped, mode="r")

    def open_input_stream(self, path):
        return self.open_input_file(path)

    def _read_only(self, *args, **kwargs):
        raise OSError("read-only test filesystem")

    create_dir = delete_dir = delete_dir_contents = delete_root_dir_contents = delete_file = _read_only
    move = copy_file = open_output_stream = open_append_stream = _read_only


class _CountingFile:
    def __init__(self, inner, name: str, counter: Counter) -> None:
        self._inner, self._name, self._counter = inner, name, counter
        self.closed = False

    def read(self, n=-1):
        data = self._inner.read() if n is None or n < 0 else self._inner.read(n)
        self._counter[self._name] += len(data)
        return data

    def seek(self, pos, whence=0):
        return self._inner.seek(pos, whence)

    def tell(self):
        return self._inner.tell()

    def size(self):
        return self._inner.size()

    def readable(self):
        return True

    def seekable(self):
        return True

    def writable(self):
        return False

    def close(self):
        self._inner.close()
        self.closed = True


def counting_fs(root):
    """A PyFileSystem over a SubTreeFileSystem rooted at `root`: paths inside it are relative names that
    mean nothing to the local file system."""
    handler = CountingHandler(pafs.SubTreeFileSystem(str(root), pafs.LocalFileSystem()))
    return pafs.PyFileSystem(handler), handler


def stamps(p: int) -> list[int]:
    rng = random.Random(p)
    # 24 hours, mostly rising, some records late by up to 10 minutes.
    return [BASE + i * HOUR // PER_HOUR - (rng.randint(0, 600_000) if rng.random() < 0.05 else 0)
            for i in range(HOURS * PER_HOUR)]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("remote") / "logdir-copy"
    manager = LogManager(path, BrokerConfig())
    manager.startup(background=False)
    manager.create_topic("ev", 2, {"segment.bytes": "500000", "message.timestamp.after.max.ms": str(2**62),
                                   "message.timestamp.before.max.ms": str(2**62)})
    manager.create_topic("other", 1, {"message.timestamp.after.max.ms": str(2**62)})
    for p in range(2):
        ts = stamps(p)
        for i in range(0, len(ts), 10):
            batch = [SimpleRecord(t, b"k", b"line %06d " % (i + j) + b"x" * 150) for j, t in enumerate(ts[i:i + 10])]
            manager.get_log("ev", p).append(build_batch(batch))
    manager.get_log("other", 0).append(build_batch([SimpleRecord(BASE, None, b"o")]))
    manager.shutdown()
    return path


def probes(first: int, last: int) -> list[int]:
    rng = random.Random(7)
    return [first - 1, first, last, last + 1, *(rng.randint(first, last) for _ in range(40))]


def test_file_uri_answers_as_the_local_source(data_dir):
    local, remote = DataDirSource(data_dir), open_data_dir(data_dir.as_uri())
    assert isinstance(remote, RemoteDataDirSource)
    try:
        assert remote.topics() == local.topics() == {"ev": 2, "other": 1}
        assert remote.partitions("ev") == local.partitions("ev") == [0, 1]
        for p in (0, 1):
            assert remote.watermarks("ev", p) == local.watermarks("ev", p)
            for ts in probes(BASE, BASE + HOURS * HOUR):
                assert remote.offsets_for_time("ev", ts, [p]) == local.offsets_for_time("ev", ts, [p])
            assert list(remote.read("ev", p, 100, 900)) == list(local.read("ev", p, 100, 900))
            segments = list(zip(local.log("ev", p).segments, remote.log("ev", p).segments, strict=True))
            assert len(segments) > 5
            for a, b in segments:
                assert b.min_timestamp() == a.min_timestamp()
                assert b.largest_timestamp == a.largest_timestamp
            for ts in probes(BASE, BASE + HOURS * HOUR)[:12]:
                start = local.offsets_for_time("ev", ts - HOUR, [p])[p].offset
                assert proven_end(remote.log("ev", p), start, ts) == proven_end(local.log("ev", p), start, ts)
        with pytest.raises(UnknownTopicOrPartitionError):
            remote.partitions("nope")
        with pytest.raises(UnknownTopicOrPartitionError):
            remote.log("ev", 5)
    finally:
        local.close()
        remote.close()


def test_real_kafka_files_through_a_file_uri(kafka_segments_dir):
    local, remote = DataDirSource(kafka_segments_dir), open_data_dir(kafka_segments_dir.as_uri())
    try:
        topic = kafka_segments_dir.name
        assert remote.topics() == local.topics() == {topic: 1}
        assert remote.watermarks(topic, 0) == local.watermarks(topic, 0) == (0, 30565)
        records = list(local.read(topic, 0, 0, 30565))
        for ts in probes(records[0].timestamp, records[-1].timestamp) + [1753819246011]:
            assert remote.offsets_for_time(topic, ts) == local.offsets_for_time(topic, ts)
        assert list(remote.read(topic, 0, 0, 30565)) == records
        for a, b in zip(local.log(topic, 0).segments, remote.log(topic, 0).segments, strict=True):
            assert b.min_timestamp() == a.min_timestamp()
        for ts in probes(records[0].timestamp, records[-1].timestamp)[:12]:
            assert proven_end(remote.log(topic, 0), 0, ts) == proven_end(local.log(topic, 0), 0, ts)
    finally:
        local.close()
        remote.close()


@pytest.fixture()
def counted(data_dir):
    """(a source over `data_dir` through a filesystem that counts what is read, the local source, the
    counts), both closed afterwards."""
    fs, handler = counting_fs(data_dir.parent)
    source = RemoteDataDirSource(data_dir.name, filesystem=fs)
    local = DataDirSource(data_dir)
    yield source, local, handler
    source.close()
    local.close()


def test_an_hour_of_a_day_reads_a_small_part_of_the_log_files(counted, data_dir):
    source, local, handler = counted
    t1, t2 = BASE + 12 * HOUR, BASE + 13 * HOUR
    total = sum(f.stat().st_size for f in data_dir.glob("ev-*/*.log"))
    want, got = [], []
    for p in (0, 1):
        start = source.offsets_for_time("ev", t1, [p])[p].offset
        end = source.offsets_for_time("ev", t2 + 600_000, [p])[p].offset  # the data's lateness bound
        got += [(p, r.offset) for r in source.read("ev", p, start, end) if t1 <= r.timestamp < t2]
        want += [(p, r.offset) for r in local.read("ev", p, 0, 10**9) if t1 <= r.timestamp < t2]
    assert got == want and len(want) > 100
    log_bytes = sum(n for name, n in handler.bytes_read.items() if name.endswith(".log"))
    assert total > 5_000_000 and 0 < log_bytes < total / 8, (log_bytes, total)


def test_a_reader_opens_only_the_segments_of_its_range(counted):
    source, local, handler = counted
    bases = [seg.base_offset for seg in local.log("ev", 0).segments]
    assert len(bases) > 5
    start, end = bases[2] + 10, bases[3] + 10  # the end of one segment and the start of the next
    assert list(source.read("ev", 0, start, end)) == list(local.read("ev", 0, start, end))
    opened = {name[:20] for name in handler.opened}
    # The two segments of the range, and the last one for the log end offset.
    assert opened == {f"{b:020d}" for b in (bases[2], bases[3], bases[-1])}, sorted(handler.opened)


def test_a_small_range_reads_about_its_own_bytes(counted):
    source, local, handler = counted
    seg = local.log("ev", 0).segments[2]
    start, end = seg.base_offset + 100, seg.base_offset + 200  # ~18 KB early in a ~500 KB segment
    assert list(source.read("ev", 0, start, end)) == list(local.read("ev", 0, start, end))
    # The offset index bounds the read: the file's first chunks grow (16 KiB, 64 KiB, 1 MiB), and
    # without the bound the reader would fetch the rest of the segment.
    assert handler.bytes_read[seg.log_path.name] < 64 << 10, handler.bytes_read[seg.log_path.name]


def test_missing_indexes_are_rebuilt_without_writing_into_the_source(data_dir, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(data_dir, copy)
    for idx in copy.glob("ev-0/*.index"):
        idx.unlink()
    (next(iter(sorted(copy.glob("ev-0/*.timeindex"))))).write_bytes(b"\x00" * 13)  # not a whole entry
    before = sorted(p.name for p in copy.glob("ev-0/*"))
    remote, local = open_data_dir(copy.as_uri()), DataDirSource(data_dir)
    try:
        for ts in probes(BASE, BASE + HOURS * HOUR):
            assert remote.offsets_for_time("ev", ts, [0]) == local.offsets_for_time("ev", ts, [0])
        assert list(remote.read("ev", 0, 0, 10**9)) == list(local.read("ev", 0, 0, 10**9))
    finally:
        remote.close()
        local.close()
    assert sorted(p.name for p in copy.glob("ev-0/*")) == before


def test_files_are_closed(data_dir):
    fds = open_files_under(data_dir)
    for _ in range(3):
        source = open_data_dir(data_dir.as_uri())
        list(source.read("ev", 1, 0, 500))
        source.offsets_for_time("ev", BASE + HOUR)
        source.close()
    assert open_files_under(data_dir) == fds


@pytest.mark.parametrize("uri,message", [
    ("file:///nonexistent/chronolog/dir", "does not exist"),
    ("nosuchscheme://bucket/prefix", "cannot open nosuchscheme://bucket/prefix"),
])
def test_a_wrong_uri_is_one_clear_line(uri, message):
    with pytest.raises(ChronologError) as info:
        open_data_dir(uri)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_credentials_in_a_uri_are_not_shown_in_errors():
    with pytest.raises(ChronologError) as info:
        open_data_dir("nosuchscheme://key:secret@bucket/prefix")
    assert "secret" not in str(info.value) and "nosuchscheme://***@bucket/prefix" in str(info.value)


def test_a_file_is_not_a_data_dir(data_dir):
    log_file = next(data_dir.glob("ev-0/*.log"))
    with pytest.raises(ChronologError, match="is not a directory"):
        open_data_dir(log_file.as_uri())


@pytest.fixture()
def s3_backups():
    """The `backups` bucket on moto's S3-compatible server, so `s3://` goes through pyarrow's S3 client."""
    with s3_server("backups") as (_, client, query):
        yield client, query


def test_s3_uri_through_an_s3_compatible_server(s3_backups, data_dir, kafka_segments_dir):
    client, query = s3_backups
    for f in data_dir.glob("ev-*/*"):
        client.upload_file(str(f), "backups", f"logs/{f.parent.name}/{f.name}")
    for f in kafka_segments_dir.iterdir():
        client.upload_file(str(f), "backups", f"kafka/{kafka_segments_dir.name}/{f.name}")
    remote, local = open_data_dir(f"s3://backups/logs{query}"), DataDirSource(data_dir)
    try:
        assert remote.topics() == {"ev": 2}
        for ts in probes(BASE, BASE + HOURS * HOUR)[:10]:
            assert remote.offsets_for_time("ev", ts) == local.offsets_for_time("ev", ts)
        assert list(remote.read("ev", 1, 20_000, 21_000)) == list(local.read("ev", 1, 20_000, 21_000))
    finally:
        remote.close()
        local.close()
    topic = kafka_segments_dir.name
    remote, local = open_data_dir(f"s3://backups/kafka/{topic}{query}"), DataDirSource(kafka_segments_dir)
    try:
        assert remote.watermarks(topic, 0) == (0, 30565)
        for ts in (1753819116820, 1753819246011, 1753819281929, 1753819281930):
            assert remote.offsets_for_time(topic, ts) == local.offsets_for_time(topic, ts)
        assert list(remote.read(topic, 0, 7000, 9000)) == list(local.read(topic, 0, 7000, 9000))
    finally:
        remote.close()
        local.close()
    with pytest.raises(ChronologError, match="does not exist"):
        open_data_dir(f"s3://backups/nothing{query}")
