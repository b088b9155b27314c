"""Topic config values Kafka refuses when a topic is created or altered (`LogConfig`'s validators and
`LogConfig.validateValues`), refused here at the same moment instead of on a later append or restart."""

from __future__ import annotations

import re

import pytest

from chronolog.config import TOPIC_CONFIGS, BrokerConfig, TopicConfig
from chronolog.errors import InvalidConfigError
from chronolog.storage import LogManager
from tests.storage.helpers import NOW, batch

# LogConfigTest.testFromPropsInvalid: the values each config refuses ("not_a_number" and "-1" unless listed).
_INVALID = {
    "retention.bytes": ("not_a_number",),
    "retention.ms": ("not_a_number", "-2"),
    "cleanup.policy": ("true", "foobar"),
    "min.cleanable.dirty.ratio": ("not_a_number", "-0.1", "1.2"),
    "min.insync.replicas": ("not_a_number", "0", "-1"),
    "compression.gzip.level": ("not_a_number", "0", "10"),
    "compression.zstd.level": ("not_a_number", "23"),
    "local.retention.ms": ("not_a_number", "-3"),
    "local.retention.bytes": ("not_a_number", "-3"),
    "remote.copy.lag.ms": ("not_a_number",),
    "remote.copy.lag.bytes": ("not_a_number",),
    # ThrottledReplicaListValidator shows the value as a list
    "leader.replication.throttled.replicas": ("[x]", "[1:x]"),
    "follower.replication.throttled.replicas": ("[x]", "[*, 1:1]"),
}


@pytest.mark.parametrize("name", sorted(TOPIC_CONFIGS))
def test_from_props_invalid(name):
    for value in _INVALID.get(name, ("not_a_number", "-1")):
        given = value.strip("[]").replace(", ", ",")
        with pytest.raises(InvalidConfigError, match=re.escape(f"Invalid value {value} for configuration {name}")):
            TopicConfig.from_kafka({name: given})


def test_invalid_compaction_lag_config(tmp_path):
    """LogConfigTest.testInvalidCompactionLagConfig: min.compaction.lag.ms above max.compaction.lag.ms is
    refused with LogConfig.validateValues' message, whether the conflict comes from the request alone, from
    the request against the topic's other overrides, or against the broker's defaults."""
    message = r"conflict topic config setting min.compaction.lag.ms \(200\) > max.compaction.lag.ms \(100\)"
    with pytest.raises(InvalidConfigError, match=message):
        TopicConfig.from_kafka({"max.compaction.lag.ms": "100", "min.compaction.lag.ms": "200"})
    with pytest.raises(InvalidConfigError, match=message):
        BrokerConfig({"log.cleaner.max.compaction.lag.ms": "100", "log.cleaner.min.compaction.lag.ms": "200"})
    with LogManager(tmp_path, BrokerConfig({"log.cleaner.max.compaction.lag.ms": "100"})) as manager:
        with pytest.raises(InvalidConfigError, match=message):
            manager.create_topic("t", 1, {"min.compaction.lag.ms": "200"})
        assert "t" not in manager.topics()
        manager.create_topic("u", 1, {"max.compaction.lag.ms": "1000", "min.compaction.lag.ms": "200"})
        with pytest.raises(InvalidConfigError, match=message):
            manager.alter_topic_config("u", {"max.compaction.lag.ms": "100"})
        assert manager.topic_config("u").max_compaction_lag_ms == 1000


@pytest.mark.parametrize("size", [4, 8, 11])
def test_segment_index_bytes_below_one_time_index_entry_is_refused_at_creation(tmp_path, size):
    """Kafka's validator takes `segment.index.bytes` >= 4, but a .timeindex of fewer than 12 bytes has no
    slot for the final entry written when its segment rolls (`TimeIndex.maybeAppend` with skipFullCheck),
    so Kafka's first roll of such a topic fails. chronolog refuses it at creation and alteration, and
    12 bytes (one slot, one batch per segment) keeps working across a restart."""
    with LogManager(tmp_path) as manager:
        with pytest.raises(InvalidConfigError, match=f"Invalid value {size} for configuration "
                                                     "segment.index.bytes: Value must be at least 12"):
            manager.create_topic("t", 1, {"segment.index.bytes": str(size)})
        manager.create_topic("ok", 1, {"segment.index.bytes": "12"})
        with pytest.raises(InvalidConfigError, match="segment.index.bytes"):
            manager.alter_topic_config("ok", {"segment.index.bytes": str(size)})
        log = manager.get_log("ok", 0)
        for i in range(4):
            log.append(batch(NOW + i), now=NOW)
        assert len(log.segments) == 4
    with pytest.raises(InvalidConfigError, match="log.index.size.max.bytes"):
        BrokerConfig({"log.index.size.max.bytes": str(size)})
    with LogManager(tmp_path) as manager:
        log = manager.get_log("ok", 0)
        assert log.log_end_offset == 4 and len(log.segments) == 4


def test_stored_configs_from_before_a_rule_still_open(tmp_path):
    """A data dir whose stored topic config breaks a rule between configs added later (here the compaction
    lag rule) still starts and serves its log: the rule applies to creation and alteration."""
    import json
    with LogManager(tmp_path) as manager:
        manager.create_topic("old", 1, {"max.compaction.lag.ms": "1000"})
        manager.get_log("old", 0).append(batch(NOW), now=NOW)
    topics_file = next(tmp_path.glob("chronolog-topics.json"))
    stored = json.loads(topics_file.read_text())
    assert stored["old"]["configs"] == {"max.compaction.lag.ms": "1000"}
    stored["old"]["configs"]["min.compaction.lag.ms"] = "2000"
    topics_file.write_text(json.dumps(stored))
    with LogManager(tmp_path) as manager:
        assert manager.get_log("old", 0).log_end_offset == 1
        assert manager.topic_config("old").min_compaction_lag_ms == 2000
        with pytest.raises(InvalidConfigError, match="conflict topic config setting"):
            manager.alter_topic_config("old", {"segment.ms": "60000"})
