"""The clean stop (`LogManager.shutdown`): every opened log is closed without a per-file fsync and made
durable by one `syncfs(2)` of the data dir's file system (per-log fsyncs where syncfs cannot be trusted);
the recovery points move to the log end and the `.kafka_cleanshutdown` marker is written only once that
sync succeeded. A sync that fails leaves the old recovery points and no marker, so the next start recovers
(Kafka's `LogManager.shutdown` writes the marker only after every log was flushed and closed)."""

from __future__ import annotations

import errno
import json
import logging
import os
from pathlib import Path

import pytest

from chronolog import diskio
from chronolog.config import BrokerConfig
from chronolog.storage import LogManager
from chronolog.storage import manager as manager_module
from chronolog.storage.checkpoints import CLEAN_SHUTDOWN, RECOVERY_POINT, read_checkpoint
from tests.storage.helpers import NOW, WIDE, batch

PARTITIONS = 20
needs_syncfs = pytest.mark.skipif(diskio._SYNCFS is None, reason="syncfs(2) reporting write-back errors: Linux >= 5.8")


def _manager(path) -> LogManager:
    manager = LogManager(path, BrokerConfig())
    manager.startup(background=False)
    return manager


def _fill(manager: LogManager, records: int = 3) -> None:
    """Topic `t`, partition p holding `records` + p records (not flushed: the default flush settings)."""
    if not manager.has_topic("t"):
        manager.create_topic("t", PARTITIONS, WIDE)
    for p in range(PARTITIONS):
        for i in range(records + p):
            manager.get_log("t", p).append(batch(NOW + i), now=NOW)


class Spy:
    """Counts os.fsync and diskio.syncfs calls on files under `root` (other tests' brokers in this worker
    process, their coordinators' threads, fsync their own files meanwhile); `fail_syncfs` / `fail_fsync_of`
    (a path fragment) make them raise EIO, as a disk that lost the pages in write-back does."""

    def __init__(self, monkeypatch, root, *, fail_syncfs: bool = False, fail_fsync_of: str | None = None) -> None:
        self.fsyncs = 0
        self.syncfs = 0
        real_fsync, real_syncfs = os.fsync, diskio.syncfs
        root = str(root)

        def ours(fd) -> str | None:
            try:
                path = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                return None
            return path if path == root or path.startswith(root + os.sep) else None

        def fsync(fd):
            path = ours(fd)
            if path is None:
                return real_fsync(fd)
            self.fsyncs += 1
            if fail_fsync_of is not None and fail_fsync_of in path:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            return real_fsync(fd)

        def syncfs(fd):
            if ours(fd) is None:
                return real_syncfs(fd)
            self.syncfs += 1
            if fail_syncfs:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            return real_syncfs(fd)

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(diskio, "syncfs", syncfs)


def _opened_line(caplog) -> str:
    lines = [r.getMessage() for r in caplog.records if "partitions opened in" in r.getMessage()]
    assert len(lines) == 1, lines
    return lines[0]


def _restart_lazily(path, caplog) -> LogManager:
    """The broker's start: partitions listed, opened in the background; returns once all are open."""
    caplog.clear()
    manager = LogManager(path, BrokerConfig())
    manager.startup(background=False, lazy=True)
    assert manager.wait_loaded(60)
    return manager


@needs_syncfs
def test_a_clean_stop_syncs_the_file_system_once_then_writes_the_marker(tmp_path, monkeypatch, caplog):
    """One syncfs for all partitions; the only fsyncs are the checkpoint files' and the marker's (a
    constant, not one per file); recovery points at the log ends; Kafka's marker; the next start trusts it."""
    caplog.set_level(logging.INFO)
    manager = _manager(tmp_path)
    _fill(manager)
    spy = Spy(monkeypatch, tmp_path)
    manager.shutdown()
    assert spy.syncfs == 1
    assert spy.fsyncs <= 8, spy.fsyncs  # 3 checkpoints and the marker: the file and its directory each
    assert read_checkpoint(tmp_path / RECOVERY_POINT) == {("t", p): 3 + p for p in range(PARTITIONS)}
    assert json.loads((tmp_path / CLEAN_SHUTDOWN).read_text()) == {"version": 0, "brokerEpoch": -1}
    monkeypatch.undo()
    again = _restart_lazily(tmp_path, caplog)
    assert "after a clean shutdown" in _opened_line(caplog)
    assert not (tmp_path / CLEAN_SHUTDOWN).exists()  # consumed: a crash of this run recovers
    assert [again.get_log("t", p).log_end_offset for p in range(PARTITIONS)] == [3 + p for p in range(PARTITIONS)]
    again.shutdown()


@needs_syncfs
def test_a_failed_sync_leaves_no_marker_and_the_next_start_recovers(tmp_path, monkeypatch, caplog):
    """The data was appended after a first clean stop (recovery points 3 + p); the second stop's syncfs
    fails: one ERROR line, the recovery points stay where the last flush left them, no marker, and the
    next start recovers from those points with every record there."""
    caplog.set_level(logging.INFO)
    manager = _manager(tmp_path)
    _fill(manager)
    manager.shutdown()
    manager = _manager(tmp_path)
    _fill(manager, records=2)  # now 5 + 2p records in partition p
    Spy(monkeypatch, tmp_path, fail_syncfs=True)
    caplog.clear()
    manager.shutdown()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "sync of" in errors[0] and "errno 5 (EIO" in errors[0], errors
    assert not (tmp_path / CLEAN_SHUTDOWN).exists()
    assert read_checkpoint(tmp_path / RECOVERY_POINT) == {("t", p): 3 + p for p in range(PARTITIONS)}
    monkeypatch.undo()
    again = _restart_lazily(tmp_path, caplog)
    assert "recovered from the recovery points" in _opened_line(caplog)
    for p in range(PARTITIONS):
        plog = again.get_log("t", p)
        assert plog.log_end_offset == 5 + 2 * p
        assert [r.offset for r in plog.read_records(0)] == list(range(5 + 2 * p))
    again.shutdown()
    assert (tmp_path / CLEAN_SHUTDOWN).exists()  # every partition recovered in that run: clean again


def test_without_syncfs_each_log_is_fsynced_and_a_failure_leaves_no_marker(tmp_path, monkeypatch, caplog):
    """Where syncfs cannot be trusted (not Linux, a kernel before 5.8) the logs are flushed file by file;
    a partition whose fsync fails keeps its recovery point, the others move, and no marker is written."""
    caplog.set_level(logging.INFO)
    monkeypatch.setattr(diskio, "_SYNCFS", None)
    manager = _manager(tmp_path)
    _fill(manager)
    spy = Spy(monkeypatch, tmp_path, fail_fsync_of="/t-3/")
    manager.shutdown()
    assert spy.syncfs == 0 and spy.fsyncs >= PARTITIONS
    assert not (tmp_path / CLEAN_SHUTDOWN).exists()
    points = read_checkpoint(tmp_path / RECOVERY_POINT)
    assert points == {("t", p): 0 if p == 3 else 3 + p for p in range(PARTITIONS)}
    monkeypatch.undo()
    again = _restart_lazily(tmp_path, caplog)
    assert "recovered from the recovery points" in _opened_line(caplog)
    assert again.get_log("t", 3).log_end_offset == 6
    again.shutdown()
    assert (tmp_path / CLEAN_SHUTDOWN).exists()


@needs_syncfs
def test_a_partition_on_another_file_system_is_fsynced_file_by_file(tmp_path, monkeypatch):
    """syncfs covers the data dir's file system only: a partition directory elsewhere (a mount point, a
    symlink) is flushed as it closes, the others by the one syncfs, and the stop is still clean."""
    manager = _manager(tmp_path)
    _fill(manager)
    real_covers = diskio.FileSystemSync.covers
    monkeypatch.setattr(diskio.FileSystemSync, "covers", lambda self, path: real_covers(self, path)
                        and not str(path).endswith("/t-1"))
    spy = Spy(monkeypatch, tmp_path)
    manager.shutdown()
    assert spy.syncfs == 1 and spy.fsyncs > 8  # t-1's .log and snapshot besides the checkpoints and marker
    assert read_checkpoint(tmp_path / RECOVERY_POINT) == {("t", p): 3 + p for p in range(PARTITIONS)}
    assert (tmp_path / CLEAN_SHUTDOWN).exists()


def test_the_start_removes_the_marker_durably_before_serving(tmp_path, monkeypatch):
    """The marker vouches for the files of the last stop only: the start removes it and fsyncs the data dir
    before anything is written, so an OS crash of this run is never taken for a clean stop."""
    manager = _manager(tmp_path)
    _fill(manager)
    manager.shutdown()
    assert (tmp_path / CLEAN_SHUTDOWN).exists()
    synced = []
    real = manager_module.fsync_dir

    def fsync_dir(directory):
        synced.append((Path(directory), (tmp_path / CLEAN_SHUTDOWN).exists()))
        return real(directory)

    monkeypatch.setattr(manager_module, "fsync_dir", fsync_dir)
    again = LogManager(tmp_path, BrokerConfig())
    again.startup(background=False, lazy=True)
    assert (tmp_path, False) in synced
    assert again.wait_loaded(60)
    again.shutdown()
