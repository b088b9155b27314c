"""LogManager: topics and their configs persist in the data dir, clean vs unclean restarts, checkpoints,
background retention (Kafka's `LogManager`)."""

from __future__ import annotations

import time

import pytest

from chronolog.config import BrokerConfig, TopicConfig
from chronolog.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicExceptionError,
    PolicyViolationError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from chronolog.storage import LogManager, LogSegment
from chronolog.storage.checkpoints import read_checkpoint
from tests.storage.helpers import NOW, WIDE, batch


def test_topics_configs_and_partitions_survive_a_restart(tmp_path):
    with LogManager(tmp_path) as manager:
        manager.create_topic("logs", 2, {"retention.ms": "1000", **WIDE})
        manager.create_partitions("logs", 3)
        manager.alter_topic_config("logs", {"segment.bytes": "4096"}, ["retention.ms"])
        assert manager.get_log("logs", 2).config.segment_bytes == 4096  # applied to the live log at once
        manager.get_log("logs", 1).append(batch(NOW, NOW + 1), now=NOW)
    with LogManager(tmp_path) as manager:
        assert manager.topics() == {"logs": 3}
        assert manager.topic_overrides("logs") == {"segment.bytes": "4096", **WIDE}
        cfg = manager.topic_config("logs")
        assert (cfg.segment_bytes, cfg.retention_ms) == (4096, 604800000)
        assert manager.get_log("logs", 1).log_end_offset == 2
        manager.delete_topic("logs")
        assert manager.topics() == {} and not (tmp_path / "logs-0").exists()
    with LogManager(tmp_path) as manager:
        assert manager.topics() == {}


def test_bad_requests_raise_kafka_errors(tmp_path):
    with LogManager(tmp_path) as manager:
        manager.create_topic("t")
        with pytest.raises(TopicAlreadyExistsError):
            manager.create_topic("t")
        with pytest.raises(InvalidTopicExceptionError):
            manager.create_topic("bad/name")
        with pytest.raises(InvalidConfigError):
            manager.create_topic("u", 1, {"retention.ms": "soon"})
        with pytest.raises(InvalidConfigError):
            manager.alter_topic_config("t", {"no.such.config": "1"})
        with pytest.raises(InvalidPartitionsError):
            manager.create_partitions("t", 1)
        with pytest.raises(UnknownTopicOrPartitionError):
            manager.get_log("t", 1)
        assert "u" not in manager.topics()


def test_broker_synonyms_are_topic_defaults(tmp_path):
    broker = BrokerConfig({"log.retention.hours": "2", "log.segment.bytes": "5000"})
    with LogManager(tmp_path, broker) as manager:
        manager.create_topic("t", 1, {"segment.bytes": "6000"})
        cfg = manager.get_log("t", 0).config
        assert (cfg.retention_ms, cfg.segment_bytes) == (7_200_000, 6000)


@pytest.mark.parametrize("setting", [{"log.retention.hours": "-1"}, {"log.retention.minutes": "-5"},
                                     {"log.retention.ms": "-2"}, {"log.retention.hours": "1", "log.retention.ms": "-7"}])
def test_a_negative_broker_retention_means_no_time_limit(tmp_path, setting):
    """KafkaConfig.logRetentionTimeMillis: any negative log.retention.{ms,minutes,hours} is -1 (the topic
    config itself accepts -1 and nothing lower)."""
    with LogManager(tmp_path, BrokerConfig(setting)) as manager:
        manager.create_topic("t", 1)
        assert manager.get_log("t", 0).config.retention_ms == -1
    with pytest.raises(InvalidConfigError):
        TopicConfig.from_kafka({"retention.ms": "-2"})


def _count_recoveries(monkeypatch) -> list[int]:
    calls: list[int] = []
    original = LogSegment.recover

    def counting(self):
        calls.append(self.base_offset)
        return original(self)
    monkeypatch.setattr(LogSegment, "recover", counting)
    return calls


def test_clean_shutdown_skips_recovery_and_checkpoints_offsets(tmp_path, monkeypatch):
    with LogManager(tmp_path) as manager:
        manager.create_topic("t", 1, WIDE)
        for i in range(3):
            manager.get_log("t", 0).append(batch(NOW + i), now=NOW)
    assert (tmp_path / ".kafka_cleanshutdown").exists()
    assert read_checkpoint(tmp_path / "recovery-point-offset-checkpoint") == {("t", 0): 3}
    assert read_checkpoint(tmp_path / "log-start-offset-checkpoint") == {("t", 0): 0}
    assert read_checkpoint(tmp_path / "replication-offset-checkpoint") == {("t", 0): 3}
    calls = _count_recoveries(monkeypatch)
    manager = LogManager(tmp_path)
    manager.startup(background=False)
    assert calls == [] and not (tmp_path / ".kafka_cleanshutdown").exists()  # marker consumed at startup
    assert manager.get_log("t", 0).log_end_offset == 3
    manager.shutdown()


def test_unclean_stop_recovers_from_the_recovery_point(tmp_path, monkeypatch):
    manager = LogManager(tmp_path)
    manager.startup(background=False)
    manager.create_topic("t", 1, {**WIDE, "segment.bytes": "220"})
    plog = manager.get_log("t", 0)
    for i in range(6):
        plog.append(batch(NOW + i), now=NOW)
    manager.checkpoint()  # recovery point 0: nothing flushed yet
    plog.append_raw_for_test(batch(NOW + 9)[:-3])  # torn tail, and no clean shutdown
    calls = _count_recoveries(monkeypatch)
    manager._dir_lock.release()  # what the kernel does for a process that dies
    reopened = LogManager(tmp_path)
    reopened.startup(background=False)
    assert calls == [0, 2, 4]
    assert reopened.get_log("t", 0).log_end_offset == 6
    assert reopened.get_log("t", 0).offset_for_timestamp(NOW + 5).offset == 5
    reopened.shutdown()


def test_background_thread_runs_retention(tmp_path):
    # The segments are written before the background thread exists: a retention pass between the appends
    # would delete the active segment early and leave offset 3 beside the new record (also right).
    writer = LogManager(tmp_path)
    writer.startup(background=False)
    writer.create_topic("t", 1, {**WIDE, "segment.bytes": "220", "retention.ms": "60000",
                                 "file.delete.delay.ms": "0"})
    old = int(time.time() * 1000) - 3_600_000
    for i in range(4):
        writer.get_log("t", 0).append(batch(old + i))
    writer.get_log("t", 0).append(batch(int(time.time() * 1000)))
    assert [s.base_offset for s in writer.get_log("t", 0).segments] == [0, 2, 4]
    writer.shutdown()
    broker = BrokerConfig({"log.retention.check.interval.ms": "20"})
    with LogManager(tmp_path, broker) as manager:
        plog = manager.get_log("t", 0)
        deadline = time.monotonic() + 20
        while plog.log_start_offset == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert plog.log_start_offset == 4 and [s.base_offset for s in plog.segments] == [4]


def test_partition_counts_beyond_max_broker_partitions_are_refused_before_anything_is_made(tmp_path):
    with LogManager(tmp_path, BrokerConfig({"max.broker.partitions": "5"})) as manager:
        manager.create_topic("a", 3)
        for bad in (3, 2**31 - 1):
            with pytest.raises(PolicyViolationError):
                manager.create_topic("b", bad)
        with pytest.raises(PolicyViolationError):
            manager.create_partitions("a", 6)
        manager.create_partitions("a", 5)
        assert manager.topics() == {"a": 5}
        assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == [f"a-{i}" for i in range(5)]
