"""The admin answers as clients see them, against chronolog and Kafka 4.4: librdkafka's AdminClient
(confluent-kafka) and Kafka's Java AdminClient through Kafka's CLI tools, unmodified; and DescribeConfigs at
every version over the wire."""

from __future__ import annotations

import re

import pytest

from tests.differential.admin_pair import TOPIC, create, describe, pair, same, unique, visible  # noqa: F401


def admin(broker):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})


def outcome(future):
    try:
        future.result(30)
        return "ok"
    except Exception as exc:  # KafkaException(KafkaError)
        err = exc.args[0]
        return err.name(), err.str()


def test_librdkafka_create_topics(pair):  # noqa: F811
    from confluent_kafka.admin import NewTopic

    base = unique("lr")
    topics = [NewTopic(f"{base}-ok", 2, 1, config={"cleanup.policy": "compact,delete"}),
              NewTopic(f"{base}-rf", 1, 3), NewTopic(f"{base}-bad", 1, 1, config={"retention.ms": "x"}),
              NewTopic(f"{base} space", 1, 1), NewTopic(f"{base}-unknown", 1, 1, config={"no.such": "1"})]

    def steps(b):
        client = admin(b)  # kept until the futures are done: a destroyed client fails them
        futures = client.create_topics(topics, operation_timeout=30)
        return {name: outcome(f) for name, f in sorted(futures.items())}
    assert same(pair, steps)[f"{base}-ok"] == "ok"


def test_librdkafka_describe_and_incremental_alter(pair):  # noqa: F811
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    name = unique("lr")
    for b in pair:
        create(b, (name, 1, 1, {"cleanup.policy": "compact"}))
        assert visible(b, name, 1) == (0, 1)

    def described(b):
        resource = ConfigResource(ConfigResource.Type.TOPIC, name)
        client = admin(b)
        entries = client.describe_configs([resource])[resource].result(30)
        return {k: (e.value, str(e.source), e.is_read_only, e.is_sensitive, e.is_default,
                    sorted((s.name, s.value, str(s.source)) for s in e.synonyms.values()))
                for k, e in entries.items()}

    def alter(b, ops):
        resource = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[
            ConfigEntry(k, v, incremental_operation=op) for k, op, v in ops])
        client = admin(b)
        return outcome(client.incremental_alter_configs([resource])[resource])

    same(pair, described)
    for ops in ([("cleanup.policy", AlterConfigOpType.APPEND, "delete"), ("retention.ms", AlterConfigOpType.SET, "9000")],
                [("cleanup.policy", AlterConfigOpType.SUBTRACT, "compact")],
                [("retention.ms", AlterConfigOpType.APPEND, "1")],
                [("cleanup.policy", AlterConfigOpType.DELETE, None), ("retention.ms", AlterConfigOpType.DELETE, None)]):
        same(pair, alter, ops)
        same(pair, described)


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_describe_configs_at_every_version(pair, version):  # noqa: F811
    from tests.differential.admin_wire import request

    name = unique("dv")
    for b in pair:
        create(b, (name, 1, 1, {"retention.ms": "1000"}))
        assert visible(b, name, 1) == (0, 1)

    def steps(b):
        return request(b.port, 32, version, {
            "resources": [{"resource_type": TOPIC, "resource_name": name, "configuration_keys": None},
                          {"resource_type": 4, "resource_name": "1",
                           "configuration_keys": ["log.retention.hours", "num.partitions"]}],
            "include_synonyms": True, "include_documentation": True})
    same(pair, steps)


def _tool(broker, name, *args):
    from chronolog.testing.kafka import run_tool

    proc = run_tool(name, "--bootstrap-server", broker.bootstrap, *args)
    lines = [line for line in proc.stdout.splitlines()
             if not line.startswith("\tat ") and not re.match(r"\d{4}-\d\d-\d\dT", line)]
    text = re.sub(r"TopicId: \S+", "TopicId: -", "\n".join(lines))
    errors = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("\tat ")]
    return proc.returncode, text, re.sub(r"127\.0\.0\.1:\d+", "-", errors[0]) if errors else None


def test_java_admin_client_through_kafka_topics_and_kafka_configs(pair):  # noqa: F811
    """Kafka's Java AdminClient (kafka-topics, kafka-configs) prints the same against both brokers."""
    name = unique("java")
    same(pair, _tool, "kafka-topics", "--create", "--topic", name, "--partitions", "2", "--config",
         "retention.ms=5000", "--config", "cleanup.policy=compact")
    for b in pair:
        assert visible(b, name, 2) == (0, 2)
    same(pair, _tool, "kafka-topics", "--describe", "--topic", name)
    same(pair, _tool, "kafka-configs", "--describe", "--all", "--entity-type", "topics", "--entity-name", name)
    same(pair, _tool, "kafka-topics", "--create", "--topic", unique("java"), "--config", "segment.ms=0")
