"""A test broker whose data is deleted at its stop does not make that data durable first: the clean stop's
`syncfs` writes back the whole file system's dirty pages, other programs' too, and on a busy disk took longer
than a test waited for the stop (a standalone broker missed its 30 s after SIGTERM while another xdist worker
wrote). A broker whose data is kept still stops cleanly and durably."""

from __future__ import annotations

import os

from confluent_kafka import Producer

from chronolog import diskio
from chronolog.testing import TestBroker


def _write_some(broker: TestBroker) -> None:
    topic = broker.create_topic(partitions=2)
    producer = Producer(broker.client_config())
    for i in range(20):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(30) == 0


def _count_syncs(monkeypatch) -> list[str]:
    calls: list[str] = []
    real_sync, real_fsync = diskio.FileSystemSync.sync, os.fsync

    def sync(self) -> None:
        calls.append("syncfs")
        real_sync(self)

    def fsync(fd) -> None:
        calls.append("fsync")
        real_fsync(fd)

    monkeypatch.setattr(diskio.FileSystemSync, "sync", sync)
    monkeypatch.setattr(os, "fsync", fsync)
    return calls


def test_a_broker_whose_data_goes_with_it_syncs_nothing_at_its_stop(monkeypatch):
    broker = TestBroker().start()
    data_dir = broker.data_dir
    _write_some(broker)
    calls = _count_syncs(monkeypatch)
    broker.stop()
    assert calls == []
    assert not data_dir.exists()


def test_a_broker_whose_data_is_kept_stops_durably(tmp_path, monkeypatch):
    broker = TestBroker(tmp_path / "kept").start()
    _write_some(broker)
    calls = _count_syncs(monkeypatch)
    broker.stop()
    assert "syncfs" in calls or calls.count("fsync") > 2  # syncfs where the kernel has it, else file by file
    assert (tmp_path / "kept" / ".kafka_cleanshutdown").exists()
