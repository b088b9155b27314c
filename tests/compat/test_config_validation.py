"""CreateTopics and IncrementalAlterConfigs refuse the topic configs Kafka's `LogConfig` refuses, with
INVALID_CONFIG and Kafka's message, as a librdkafka admin client sees them."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from tests.brokerproc import BrokerProcess, broker  # noqa: F401  (fixture)

pytestmark = pytest.mark.compat


def _error(future) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        future.result(15)
    return info.value.args[0]


def test_create_and_alter_answer_invalid_config_with_kafkas_message(broker):  # noqa: F811
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    cases = {
        "idx": ({"segment.index.bytes": "8"},
                "Invalid value 8 for configuration segment.index.bytes: Value must be at least 12"),
        "lag": ({"min.compaction.lag.ms": "200", "max.compaction.lag.ms": "100"},
                "conflict topic config setting min.compaction.lag.ms (200) > max.compaction.lag.ms (100)"),
        "seg": ({"segment.bytes": "13"}, "Invalid value 13 for configuration segment.bytes: Value must be at least 14"),
    }
    futures = admin.create_topics([NewTopic(name, 1, 1, config=cfg) for name, (cfg, _) in cases.items()])
    for name, (_, message) in cases.items():
        err = _error(futures[name])
        assert err.code() == KafkaError.INVALID_CONFIG and err.str() == message, name
    assert not set(cases) & set(admin.list_topics(timeout=15).topics)
    futures = admin.create_topics([NewTopic(name, 1, 1, config=cfg) for name, (cfg, _) in cases.items()],
                                  validate_only=True)
    for name, (_, message) in cases.items():
        err = _error(futures[name])
        assert err.code() == KafkaError.INVALID_CONFIG and err.str() == message, name

    admin.create_topics([NewTopic("ok", 1, 1, config={"max.compaction.lag.ms": "1000"})])["ok"].result(15)
    resource = ConfigResource(ConfigResource.Type.TOPIC, "ok", incremental_configs=[
        ConfigEntry("min.compaction.lag.ms", "2000", incremental_operation=AlterConfigOpType.SET)])
    err = _error(admin.incremental_alter_configs([resource])[resource])
    assert err.code() == KafkaError.INVALID_CONFIG
    assert err.str() == "conflict topic config setting min.compaction.lag.ms (2000) > max.compaction.lag.ms (1000)"
    resource = ConfigResource(ConfigResource.Type.TOPIC, "ok", incremental_configs=[
        ConfigEntry("segment.index.bytes", "11", incremental_operation=AlterConfigOpType.SET)])
    err = _error(admin.incremental_alter_configs([resource])[resource])
    assert err.code() == KafkaError.INVALID_CONFIG and "segment.index.bytes" in err.str()
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "ok")])
    configs = list(described.values())[0].result(15)
    assert (configs["min.compaction.lag.ms"].value, configs["segment.index.bytes"].value) == ("0", "10485760")


def test_validate_only_checks_against_the_broker_defaults(tmp_path):
    """CreateTopics with validate_only answers what the creation itself would: the request's configs on top
    of the broker's defaults (here `log.cleaner.max.compaction.lag.ms`) break LogConfig.validateValues' rule."""
    proc = BrokerProcess(tmp_path / "data", {"log.cleaner.max.compaction.lag.ms": "1000"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        message = "conflict topic config setting min.compaction.lag.ms (2000) > max.compaction.lag.ms (1000)"
        for validate_only in (True, False):
            future = admin.create_topics([NewTopic("t", 1, 1, config={"min.compaction.lag.ms": "2000"})],
                                         validate_only=validate_only)["t"]
            err = _error(future)
            assert (err.code(), err.str()) == (KafkaError.INVALID_CONFIG, message), validate_only
    finally:
        proc.stop()
