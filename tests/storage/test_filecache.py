"""The open-file cache (storage.filecache): descriptors stay bounded by its capacity whatever is on disk,
and a read never gets a closed or another file's bytes (after rolls, retention, truncation and deletion,
with fetches running in other threads)."""

from __future__ import annotations

import os
import random
import threading
import time

import pytest

from chronolog.config import TopicConfig
from chronolog.records import SimpleRecord, build_batch, iter_batches
from chronolog.storage import PartitionLog, filecache
from tests.fds import open_files_under
from tests.storage.helpers import WIDE


@pytest.fixture
def tiny_cache():
    """The process's cache at a handful of descriptors for the test, then back."""
    cache = filecache.cache()
    before = cache.capacity
    filecache.configure(6)
    yield cache
    filecache.configure(before)


def config(**overrides) -> TopicConfig:
    cfg = dict(WIDE)
    cfg.update({"segment.bytes": "1200", "file.delete.delay.ms": "0", "retention.ms": "-1"})
    cfg.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
    return TopicConfig.from_kafka(cfg)


def value(name: str, offset: int) -> bytes:
    return f"{name}@{offset:08d}".encode().ljust(64, b".")


def append(plog: PartitionLog, name: str) -> int:
    offset = plog.log_end_offset
    plog.append(build_batch([SimpleRecord(1_700_000_000_000 + offset, None, value(name, offset))]))
    return offset


def read_values(plog: PartitionLog, offset: int) -> list[tuple[int, bytes]]:
    piece = plog.read(offset, 4096)
    if piece is None:
        return []
    data = piece.read_bytes()
    return [(r.offset, r.value) for b in iter_batches(data) for r in b.records()]


def test_descriptors_stay_bounded_by_the_capacity_not_by_the_files(tmp_path, tiny_cache):
    """20 partitions of 10 segments each (600 segment files with their indexes) are written and read
    back in full while the process holds no more descriptors than the cache's 6 (plus at most one
    holder being opened); before the cache every segment kept 5 open."""
    base = open_files_under(tmp_path)
    logs = {}
    for p in range(20):
        plog = logs[p] = PartitionLog.open(tmp_path / f"t-{p}", config())
        for _ in range(100):
            append(plog, f"t-{p}")
        assert len(plog.segments) >= 10
        assert open_files_under(tmp_path) - base <= tiny_cache.capacity + 2
    for p, plog in logs.items():
        offset = 0
        while offset < plog.log_end_offset:
            got = read_values(plog, offset)
            assert got and all(v == value(f"t-{p}", o) for o, v in got)
            offset = got[-1][0] + 1
            assert open_files_under(tmp_path) - base <= tiny_cache.capacity + 2
    assert tiny_cache.evictions > 0 and tiny_cache.held <= tiny_cache.capacity
    for plog in logs.values():
        plog.close()
    assert open_files_under(tmp_path) - base <= 0


def test_a_file_in_use_by_another_thread_is_never_closed(tmp_path, tiny_cache):
    """While a thread holds a log's lock (as every read does), other threads opening files close only
    other logs' files: the held log's descriptor stays the same open file."""
    held = PartitionLog.open(tmp_path / "held-0", config())
    append(held, "held-0")
    others = [PartitionLog.open(tmp_path / f"o-{p}", config()) for p in range(10)]
    taken, release = threading.Event(), threading.Event()
    seen = {}

    def reader() -> None:
        with held.lock:
            seg = held.active
            seen["fd"] = seg._fd
            seen["inode"] = os.fstat(seen["fd"]).st_ino
            taken.set()
            release.wait(10)
            seen["after"] = (seg._log_fd, os.fstat(seen["fd"]).st_ino)

    t = threading.Thread(target=reader)
    t.start()
    assert taken.wait(10)
    for plog in others:  # far more files than the cache holds
        append(plog, plog.dir.name)
    release.set()
    t.join(10)
    assert seen["after"] == (seen["fd"], seen["inode"])
    assert tiny_cache.held <= tiny_cache.capacity + 5
    for plog in [held, *others]:
        plog.close()


def test_reads_under_concurrent_roll_retention_truncation_and_deletion_never_see_another_file(tmp_path, tiny_cache):
    """Reader threads fetch random offsets of four partitions through a cache of 6 descriptors while a
    writer appends (rolling segments), deletes old segments (DeleteRecords/retention), truncates, and a
    partition is deleted and created again. Every record read must be the one written at that offset
    of that partition: a descriptor closed and reused under a read would return another file's bytes."""
    names = [f"c-{p}" for p in range(4)]
    logs = {n: PartitionLog.open(tmp_path / n, config()) for n in names}
    for n in names:
        for _ in range(60):
            append(logs[n], n)
    stop = threading.Event()
    wrong: list = []
    errors: list = []
    reads = [0]

    def reader(seed: int) -> None:
        rnd = random.Random(seed)
        while not stop.is_set():
            n = rnd.choice(names)
            plog = logs[n]
            try:
                start, end = plog.log_start_offset, plog.log_end_offset
                got = read_values(plog, rnd.randrange(start, max(start + 1, end)))
            except Exception as exc:  # an offset or a segment gone meanwhile is fine; another file's bytes are not
                errors.append(f"{type(exc).__name__}{getattr(exc, 'errno', '') or ''}")
                continue
            reads[0] += 1
            for offset, v in got:
                if v != value(n, offset):
                    wrong.append((n, offset, v[:24]))

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    try:
        _write_concurrently(tmp_path, names, logs)
    finally:  # the readers stop whatever the writer met, so a failure never leaves them spinning
        stop.set()
        for t in threads:
            t.join(10)
    for plog in logs.values():
        plog.close()
    assert not wrong, wrong[:5]
    # A segment deleted or truncated away between finding a range and reading it: EBADF (the
    # segment is closed), as before the cache; never another error.
    assert set(errors) <= {"OSError9", "OffsetOutOfRangeError"}, sorted(set(errors))
    assert reads[0] > 50 and tiny_cache.evictions > 0


def _write_concurrently(tmp_path, names: list[str], logs: dict) -> None:
    """The writer's side: appends, DeleteRecords, truncations, a partition deleted and made again."""
    rnd = random.Random(7)
    deadline = time.monotonic() + 5
    rounds = 0
    while time.monotonic() < deadline and rounds < 400:
        rounds += 1
        n = rnd.choice(names)
        plog = logs[n]
        action = rnd.random()
        if action < 0.6:
            for _ in range(5):
                append(plog, n)
        elif action < 0.8 and plog.log_end_offset - plog.log_start_offset > 20:
            plog.delete_records_before(plog.log_start_offset + 10)
        elif action < 0.95 and plog.log_end_offset - plog.log_start_offset > 20:
            plog.truncate_to(plog.log_end_offset - 7)  # the records written again at those offsets match
        else:
            fresh = PartitionLog.open(tmp_path / f"gen{rounds}" / n, config())
            for _ in range(30):
                append(fresh, n)
            old, logs[n] = logs[n], fresh
            old.delete()


@pytest.mark.parametrize("readonly", [False, True])
def test_a_log_being_opened_keeps_its_files_while_another_thread_evicts(tmp_path, tiny_cache, monkeypatch, readonly):
    """Another thread's eviction can take a log's lock only when no thread holds it; the opening of a log
    holds it, so a segment's new descriptor is not closed between its open and its first use (the
    concurrent test above once met EBADF in `fstat` right after the `open` of a new partition's segment)."""
    for name in ("x-0", "y-0"):
        existing = PartitionLog.open(tmp_path / name, config())
        append(existing, name)
        existing.close()
    real_fstat = os.fstat
    others: list[PartitionLog] = []

    def fstat_after_another_threads_open(fd):
        if not others and isinstance(fd, int) and os.readlink(f"/proc/self/fd/{fd}") == str(log_file):
            # Once, between x-0's segment's open and this fstat: another thread opens a log while the cache
            # holds one descriptor, so it evicts the least recently used holder it can lock.
            others.append(None)

            def open_another() -> None:
                tiny_cache.resize(1)
                others.append(PartitionLog.open_readonly(tmp_path / "y-0"))

            t = threading.Thread(target=open_another)
            t.start()
            t.join(10)
        return real_fstat(fd)

    log_file = (tmp_path / "x-0" / "00000000000000000000.log").resolve()
    monkeypatch.setattr(os, "fstat", fstat_after_another_threads_open)
    plog = PartitionLog.open_readonly(tmp_path / "x-0") if readonly else PartitionLog.open(tmp_path / "x-0", config())
    monkeypatch.setattr(os, "fstat", real_fstat)
    assert len(others) == 2, "the other thread did not open its log"
    assert [v for _, v in read_values(plog, 0)][:1] == [value("x-0", 0)]
    plog.close()
    others[1].close()
