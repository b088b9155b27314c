"""The data dir's `.lock` in one process: a second writer is refused before it opens a partition, the
lock is freed by shutdown and by a failed startup, and read-only opening never takes it."""

from __future__ import annotations

import os

import pytest

from chronolog.config import BrokerConfig
from chronolog.storage import LogManager
from chronolog.storage.dirlock import DataDirLock, DataDirLockedError
from chronolog.timetravel.sources import DataDirSource


def test_second_writer_is_refused_until_the_first_shuts_down(tmp_path):
    first = LogManager(tmp_path, BrokerConfig())
    first.startup(background=False)
    first.create_topic("t", 2)
    second = LogManager(tmp_path, BrokerConfig())
    with pytest.raises(DataDirLockedError, match=f"pid|process {os.getpid()}|this process"):
        second.startup(background=False)
    assert not second.started and second.logs() == {}
    assert (tmp_path / ".lock").read_text().strip() == str(os.getpid())
    reader = DataDirSource(tmp_path)  # readers never lock
    assert reader.partitions("t") == [0, 1]
    reader.close()
    first.shutdown()
    second.startup(background=False)
    assert second.topics() == {"t": 2}
    second.shutdown()


def test_a_failed_startup_releases_the_lock(tmp_path, monkeypatch):
    manager = LogManager(tmp_path, BrokerConfig())
    monkeypatch.setattr(LogManager, "_open_logs", lambda self: (_ for _ in ()).throw(OSError("disk gone")))
    with pytest.raises(OSError):
        manager.startup(background=False)
    monkeypatch.undo()
    with DataDirLock(tmp_path) as lock:
        assert lock.held


def test_a_data_dir_that_is_a_file_is_refused_untouched(tmp_path):
    target = tmp_path / "file"
    target.write_bytes(b"keep")
    from chronolog.errors import ChronologError
    with pytest.raises(ChronologError, match="not a directory"):
        LogManager(target).startup(background=False)
    assert target.read_bytes() == b"keep"
