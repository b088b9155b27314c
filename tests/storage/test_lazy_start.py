"""The broker's lazy start (`LogManager.startup(lazy=True)`): partitions are listed at start and opened by
the recovery threads in the background or by the first request for them. A request never sees a
half-loaded log, a partition is opened once, the checkpoints keep what they said for partitions not
opened yet, and a stop before everything was recovered leaves the next start to recover it."""

from __future__ import annotations

import errno
import logging
import threading

import pytest

from chronolog.config import BrokerConfig
from chronolog.errors import KafkaStorageErrorError, UnknownTopicOrPartitionError
from chronolog.storage import LogManager
from chronolog.storage.checkpoints import read_checkpoint
from chronolog.storage.log import PartitionLog
from tests.storage.helpers import NOW, WIDE, batch

PARTITIONS = 6


def _write(path, *, clean: bool = True) -> None:
    """Topic `t` with PARTITIONS partitions, partition p holding p + 1 records, the log start offset of
    partition 0 moved to 1 by DeleteRecords; checkpoints written. Without `clean` the writer is dropped as
    a killed process is (no clean-shutdown marker: the next start recovers)."""
    manager = LogManager(path, BrokerConfig())
    manager.startup(background=False)
    manager.create_topic("t", PARTITIONS, WIDE)
    for p in range(PARTITIONS):
        for i in range(p + 1):
            manager.get_log("t", p).append(batch(NOW + i), now=NOW)
    manager.get_log("t", 0).delete_records_before(1)
    if clean:
        manager.shutdown()
        return
    manager.checkpoint()
    manager._stop.set()
    manager._dir_lock.release()  # what the kernel does for a process that dies


class GatedOpen:
    """PartitionLog.open as the manager calls it, counted per partition; the open of `gated` waits for
    `release` (a slow recovery), and `fail` raises an I/O error."""

    def __init__(self, monkeypatch, gated=None, fail=None) -> None:
        self.real = PartitionLog.open
        self.gated, self.fail = gated, fail
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls: dict[str, int] = {}
        monkeypatch.setattr(PartitionLog, "open", self)

    def __call__(self, directory, *args, **kwargs):
        name = directory.name
        self.calls[name] = self.calls.get(name, 0) + 1
        if name == self.fail:
            raise OSError(errno.EIO, "Input/output error", str(directory / "00000000000000000000.log"))
        if name == self.gated:
            self.entered.set()
            assert self.release.wait(30)
        return self.real(directory, *args, **kwargs)


def _lazy(path, threads: int = 1) -> LogManager:
    manager = LogManager(path, BrokerConfig({"num.recovery.threads.per.data.dir": str(threads)}))
    manager.startup(lazy=True)
    return manager


@pytest.mark.parametrize("clean", [True, False])
def test_every_partition_is_served_whole_after_a_lazy_start(tmp_path, clean):
    _write(tmp_path, clean=clean)
    manager = _lazy(tmp_path, threads=2)
    try:
        assert manager.topics() == {"t": PARTITIONS}  # known before any partition is opened
        for p in reversed(range(PARTITIONS)):  # against the loaders' order: some are opened here
            plog = manager.get_log("t", p)
            assert plog.log_end_offset == p + 1 and plog is manager.get_log("t", p)
        assert manager.get_log("t", 0).log_start_offset == 1
        assert manager.wait_loaded(30) and len(manager.opened_logs()) == PARTITIONS
        with pytest.raises(UnknownTopicOrPartitionError):
            manager.get_log("t", PARTITIONS)
    finally:
        manager.shutdown()
    assert (tmp_path / ".kafka_cleanshutdown").exists()


def test_a_request_waits_for_the_partition_being_opened_and_it_is_opened_once(tmp_path, monkeypatch):
    """The recovery thread is held inside the open of t-0 (its first partition); a request for t-0 waits
    for it instead of opening it a second time or seeing a log without its segments, while requests for
    other partitions are served meanwhile."""
    _write(tmp_path, clean=False)
    gate = GatedOpen(monkeypatch, gated="t-0")
    manager = _lazy(tmp_path, threads=1)
    try:
        assert gate.entered.wait(30)
        got: list = []
        request = threading.Thread(target=lambda: got.append(manager.get_log("t", 0)))
        request.start()
        assert manager.get_log("t", 3).log_end_offset == 4  # another partition is served meanwhile
        request.join(0.3)
        assert request.is_alive() and not got  # still waiting for the recovery thread
        gate.release.set()
        request.join(30)
        assert len(got) == 1 and got[0] is manager.get_log("t", 0)
        assert got[0].log_end_offset == 1 and got[0].log_start_offset == 1 and got[0].segments
        assert manager.wait_loaded(30)
        assert all(n == 1 for n in gate.calls.values()) and len(gate.calls) == PARTITIONS, gate.calls
    finally:
        gate.release.set()
        manager.shutdown()


def test_checkpoints_keep_the_partitions_not_opened_yet(tmp_path, monkeypatch):
    """A checkpoint taken while partitions are still pending writes what the start read for them: the
    log start offset moved by DeleteRecords stays (else those records would come back)."""
    _write(tmp_path)
    opens = GatedOpen(monkeypatch)
    manager = LogManager(tmp_path, BrokerConfig())
    manager._dir_lock.acquire()
    manager._lazy = True
    manager._open_logs()  # no recovery thread: only t-5 is opened, by a request
    manager.started = True
    try:
        manager.get_log("t", 5)
        assert list(opens.calls) == ["t-5"]
        assert manager.checkpoint()
        starts = read_checkpoint(tmp_path / "log-start-offset-checkpoint")
        recovery = read_checkpoint(tmp_path / "recovery-point-offset-checkpoint")
        assert starts[("t", 0)] == 1 and len(starts) == PARTITIONS
        assert recovery[("t", 5)] == 6 and len(recovery) == PARTITIONS
    finally:
        manager.shutdown()


def test_a_stop_before_a_crashed_log_is_recovered_leaves_the_recovery_to_the_next_start(tmp_path, monkeypatch):
    _write(tmp_path, clean=False)
    manager = LogManager(tmp_path, BrokerConfig())
    manager._dir_lock.acquire()
    manager._lazy = True
    manager._open_logs()
    manager.started = True
    manager.get_log("t", 2)  # one opened (and recovered), the others never
    manager.shutdown()
    assert not (tmp_path / ".kafka_cleanshutdown").exists()
    assert read_checkpoint(tmp_path / "log-start-offset-checkpoint")[("t", 0)] == 1
    manager = _lazy(tmp_path)
    try:
        assert [manager.get_log("t", p).log_end_offset for p in range(PARTITIONS)] == list(range(1, PARTITIONS + 1))
    finally:
        manager.shutdown()
    assert (tmp_path / ".kafka_cleanshutdown").exists()


def test_a_partition_that_cannot_be_opened_is_offline_and_the_others_are_served(tmp_path, monkeypatch, caplog):
    """t-0 cannot be opened: its requests get KAFKA_STORAGE_ERROR, the others are served, one ERROR line
    says why, and its checkpoint entries stay (its log start offset, moved by DeleteRecords, is not lost)."""
    _write(tmp_path, clean=False)
    GatedOpen(monkeypatch, fail="t-0")
    with caplog.at_level(logging.ERROR, logger="chronolog.logdir"):
        manager = _lazy(tmp_path, threads=2)
        try:
            assert manager.wait_loaded(30)
            with pytest.raises(KafkaStorageErrorError, match="t-0 is offline"):
                manager.get_log("t", 0)
            assert manager.get_log("t", 5).log_end_offset == 6
        finally:
            manager.shutdown()
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "t-0" in errors[0] and "Input/output error" in errors[0], errors
    assert not (tmp_path / ".kafka_cleanshutdown").exists()  # the failed partition is recovered next time
    assert read_checkpoint(tmp_path / "log-start-offset-checkpoint")[("t", 0)] == 1


def test_deleting_a_topic_whose_partitions_are_not_opened_yet_removes_them(tmp_path, monkeypatch):
    _write(tmp_path)
    manager = LogManager(tmp_path, BrokerConfig())
    manager._dir_lock.acquire()
    manager._lazy = True
    manager._open_logs()
    manager.started = True
    try:
        manager.alter_topic_config("t", {"retention.ms": "1000"})
        assert manager.get_log("t", 3).config.retention_ms == 1000
        manager.delete_topic("t")
        assert manager.topics() == {} and not list(tmp_path.glob("t-*"))
        assert not manager._pending
    finally:
        manager.shutdown()
