"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs against chronolog and Kafka 4.4 over the wire:
names, values, sources, synonyms, types, read-only and sensitive flags; every incremental operation,
on list-valued configs (cleanup.policy, the replication throttles) and on others; validate_only."""

from __future__ import annotations

import pytest

from tests.differential.admin_pair import (  # noqa: F401  (fixture)
    APPEND,
    BROKER,
    DELETE,
    SET,
    SUBTRACT,
    TOPIC,
    alter,
    create,
    describe,
    incremental,
    norm,
    pair,
    same,
    unique,
    visible,
)

# Broker configs both brokers describe whose value does not depend on the host, the port or the data dir,
# nor on a default chronolog sets otherwise on purpose (docs/differences.md).
BROKER_KEYS = [
    "auto.create.topics.enable", "num.partitions", "default.replication.factor", "min.insync.replicas",
    "delete.topic.enable", "message.max.bytes", "compression.type", "log.cleanup.policy", "log.segment.bytes",
    "log.roll.ms", "log.roll.hours", "log.roll.jitter.ms", "log.roll.jitter.hours", "log.retention.ms",
    "log.retention.minutes", "log.retention.hours", "log.retention.bytes", "log.index.size.max.bytes",
    "log.index.interval.bytes", "log.cleaner.min.cleanable.ratio", "log.cleaner.delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms", "log.message.timestamp.type",
    "log.message.timestamp.before.max.ms", "log.message.timestamp.after.max.ms", "log.segment.delete.delay.ms",
    "log.flush.interval.messages", "log.flush.interval.ms", "log.preallocate", "unclean.leader.election.enable",
    "compression.gzip.level", "compression.lz4.level", "compression.zstd.level", "max.decompressed.message.bytes",
    "log.local.retention.ms", "log.local.retention.bytes", "log.remote.copy.lag.ms", "log.remote.copy.lag.bytes",
    "log.cleaner.enable", "log.cleaner.threads", "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.load.factor",
    "log.cleaner.io.max.bytes.per.second", "offsets.retention.minutes", "offsets.retention.check.interval.ms",
    "offsets.topic.segment.bytes", "transaction.max.timeout.ms", "transactional.id.expiration.ms",
    "transaction.state.log.num.partitions", "transaction.state.log.segment.bytes",
    "transaction.partition.verification.enable", "producer.id.expiration.ms", "group.min.session.timeout.ms",
    "group.max.session.timeout.ms", "group.consumer.heartbeat.interval.ms", "group.consumer.session.timeout.ms",
    "group.consumer.assignors", "group.initial.rebalance.delay.ms", "socket.request.max.bytes",
    "queued.max.requests", "connections.max.idle.ms", "connections.max.reauth.ms", "max.connections",
    "max.connections.per.ip", "max.connections.per.ip.overrides", "quota.window.num", "quota.window.size.seconds",
    "ssl.key.password", "ssl.keystore.key", "ssl.client.auth", "ssl.enabled.protocols", "authorizer.class.name",
    "num.recovery.threads.per.data.dir", "log.flush.offset.checkpoint.interval.ms", "sasl.server.max.receive.size",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms",
    "transaction.remove.expired.transaction.cleanup.interval.ms",
]


@pytest.fixture
def topic(pair):  # noqa: F811
    name = unique("cfg")
    for b in pair:
        create(b, (name, 1, 1, {"retention.ms": "1000", "cleanup.policy": "compact"}))
        assert visible(b, name, 1) == (0, 1)  # Kafka's DescribeConfigs asks the broker's metadata cache
    return name


@pytest.mark.parametrize("synonyms", [True, False], ids=["synonyms", "plain"])
def test_describe_a_topic(pair, topic, synonyms):  # noqa: F811
    answer = same(pair, describe, TOPIC, topic, synonyms=synonyms)
    assert len(answer["results"][0]["configs"]) == 37


def test_describe_some_keys_of_a_topic_with_documentation(pair, topic):  # noqa: F811
    same(pair, describe, TOPIC, topic, ["retention.ms", "no.such.key", "segment.ms", "cleanup.policy"], docs=True)


@pytest.mark.parametrize("rtype,name", [(TOPIC, "no-such-topic"), (TOPIC, "bad name"), (TOPIC, ""),
                                        (BROKER, "2"), (BROKER, "x"), (3, "g"), (99, "g")],
                         ids=["unknown-topic", "bad-topic-name", "empty-topic-name", "other-broker",
                              "broker-not-a-number", "type-3", "type-99"])
def test_describe_what_does_not_exist(pair, rtype, name):  # noqa: F811
    same(pair, describe, rtype, name)


@pytest.mark.parametrize("synonyms", [True, False], ids=["synonyms", "plain"])
def test_describe_the_broker(pair, synonyms):  # noqa: F811
    same(pair, describe, BROKER, "1", BROKER_KEYS, synonyms=synonyms)


def test_describe_the_cluster_default_broker_configs(pair):  # noqa: F811
    same(pair, describe, BROKER, "")


def test_describe_two_resources_in_one_request(pair, topic):  # noqa: F811
    from tests.differential.admin_wire import request

    def both(b):
        return request(b.port, 32, 4, {"resources": [
            {"resource_type": TOPIC, "resource_name": topic, "configuration_keys": ["retention.ms"]},
            {"resource_type": BROKER, "resource_name": "1", "configuration_keys": ["log.retention.hours"]}],
            "include_synonyms": True, "include_documentation": False})
    same(pair, both)


def same_change(pair, change, topic: str, configs, validate_only: bool) -> None:  # noqa: F811
    """The same answer to `change` (an IncrementalAlterConfigs or AlterConfigs) and the same topic config
    after it, synonyms included."""
    same(pair, change, topic, configs, validate_only=validate_only)
    same(pair, describe, TOPIC, topic, synonyms=True)


# Each step an IncrementalAlterConfigs, then the topic's config described.
INCREMENTAL = {
    "append-to-override": [("cleanup.policy", APPEND, "delete")],
    "append-present": [("cleanup.policy", APPEND, "compact")],
    "subtract": [("cleanup.policy", SUBTRACT, "compact")],
    "subtract-absent": [("cleanup.policy", SUBTRACT, "delete")],
    "delete": [("cleanup.policy", DELETE, None)],
    "delete-then-append": [("retention.ms", DELETE, None), ("cleanup.policy", DELETE, None)],
    "set-list": [("cleanup.policy", SET, "delete,compact")],
    "append-throttles": [("leader.replication.throttled.replicas", APPEND, "0:1")],
    "append-star": [("follower.replication.throttled.replicas", APPEND, "*")],
    "append-bad-item": [("cleanup.policy", APPEND, "foo")],
    "append-non-list": [("retention.ms", APPEND, "5")],
    "subtract-non-list": [("retention.ms", SUBTRACT, "5")],
    "set-unknown": [("no.such", SET, "1")],
    "delete-unknown": [("no.such", DELETE, None)],
    "set-null": [("retention.ms", SET, None)],
    "unknown-op": [("retention.ms", 7, "1")],
    "same-key-twice": [("retention.ms", SET, "1"), ("retention.ms", SET, "2")],
    "set-bad-value": [("retention.ms", SET, "abc")],
    "lag-conflict": [("min.compaction.lag.ms", SET, "200"), ("max.compaction.lag.ms", SET, "100")],
    "set-several": [("retention.ms", SET, "5000"), ("segment.ms", SET, "100000"), ("cleanup.policy", DELETE, None)],
    "unsupported-default": [("preallocate", SET, "false"), ("compression.zstd.level", SET, "3")],
    "tiered": [("remote.storage.enable", SET, "true")],
}


@pytest.mark.parametrize("ops", list(INCREMENTAL.values()), ids=list(INCREMENTAL))
@pytest.mark.parametrize("validate_only", [False, True], ids=["apply", "validate-only"])
def test_incremental_alter_configs(pair, topic, ops, validate_only):  # noqa: F811
    same_change(pair, incremental, topic, ops, validate_only)


def test_append_and_subtract_until_the_list_is_empty(pair, topic):  # noqa: F811
    for ops in ([("cleanup.policy", APPEND, "delete")], [("cleanup.policy", SUBTRACT, "compact")],
                [("cleanup.policy", SUBTRACT, "delete")], [("cleanup.policy", APPEND, "compact,delete")],
                [("cleanup.policy", DELETE, None)], [("cleanup.policy", APPEND, "compact")]):
        same(pair, incremental, topic, ops)
        same(pair, describe, TOPIC, topic, ["cleanup.policy"])


@pytest.mark.parametrize("name", ["no-such-topic", "bad name"], ids=["unknown", "bad-name"])
def test_alter_what_does_not_exist(pair, name):  # noqa: F811
    same(pair, incremental, name, [("retention.ms", SET, "1")])
    same(pair, alter, name, {"retention.ms": "1"})


ALTER = {
    "replace": {"segment.ms": "100000"},
    "replace-with-nothing": {},
    "unknown": {"no.such": "1"},
    "null": {"retention.ms": None},
    "bad-value": {"cleanup.policy": "foo"},
    "list": {"cleanup.policy": "compact,delete", "retention.ms": "2000"},
}


@pytest.mark.parametrize("configs", list(ALTER.values()), ids=list(ALTER))
@pytest.mark.parametrize("validate_only", [False, True], ids=["apply", "validate-only"])
def test_alter_configs_replaces_the_overrides(pair, topic, configs, validate_only):  # noqa: F811
    same_change(pair, alter, topic, configs, validate_only)


def test_the_same_resource_twice(pair, topic):  # noqa: F811
    from tests.differential.admin_wire import request

    def twice(b):
        resource = {"resource_type": TOPIC, "resource_name": topic,
                    "configs": [{"name": "retention.ms", "config_operation": SET, "value": "5"}]}
        return request(b.port, 44, 1, {"resources": [resource, resource], "validate_only": False})
    same(pair, twice)


def test_broker_configs_are_not_changed_at_run_time(pair):  # noqa: F811
    """docs/differences.md: Kafka changes dynamic broker configs; chronolog refuses in one line (Kafka's side is
    asked with validate_only, so the session's Kafka keeps its configs)."""
    chronolog, kafka = pair
    ops = [("log.retention.ms", SET, "5000")]
    assert incremental(kafka, "1", ops, validate_only=True, rtype=BROKER)["responses"][0]["error_code"] == 0
    for validate_only in (True, False):
        (answer,) = incremental(chronolog, "1", ops, validate_only=validate_only, rtype=BROKER)["responses"]
        assert (answer["error_code"], answer["error_message"]) == (42, (
            "chronolog does not change broker configs at run time: set log.retention.ms in the broker's settings "
            "and restart it"))
    same(pair, incremental, "2", ops, validate_only=True, rtype=BROKER)


# Broker resources (per broker "1", or the cluster default ""): Kafka's checks in its order (the operations,
# APPEND/SUBTRACT only on known LIST configs, the values' types, then its controller's eligible-leader-replica
# rules for min.insync.replicas), and success when nothing would change. Asked with validate_only (Kafka's
# session broker keeps its configs); chronolog answers the same without it (it stores nothing).
BROKER_INCREMENTAL = {
    "nothing": ("1", []),
    "delete-unknown": ("", [("no.such", DELETE, None)]),
    "append-unknown": ("1", [("no.such", APPEND, "x")]),
    "subtract-non-list": ("", [("min.insync.replicas", SUBTRACT, "2")]),
    "unknown-op-first": ("1", [("min.insync.replicas", APPEND, "2"), ("x", 9, "1")]),
    "bad-value": ("1", [("no.such", SET, "1"), ("min.insync.replicas", SET, "abc")]),
    "below-minimum": ("", [("min.insync.replicas", SET, "0")]),
    "broker-min-isr": ("1", [("min.insync.replicas", SET, "2")]),
    "broker-min-isr-delete": ("1", [("min.insync.replicas", DELETE, None)]),
    "cluster-min-isr-delete": ("", [("min.insync.replicas", DELETE, None), ("no.such", SET, "1")]),
    "null-before-op": ("1", [("no.such", APPEND, None)]),
}
BROKER_ALTER = {
    "nothing": ("1", {}),
    "cluster-nothing": ("", {}),
    "cluster-without-min-isr": ("", {"no.such": "1"}),
    "broker-min-isr": ("1", {"min.insync.replicas": "2", "no.such": "1"}),
    "bad-value": ("1", {"min.insync.replicas": "x"}),
}


@pytest.mark.parametrize("name,ops", list(BROKER_INCREMENTAL.values()), ids=list(BROKER_INCREMENTAL))
def test_broker_incremental_alter_checks_in_kafkas_order(pair, name, ops):  # noqa: F811
    answer = same(pair, incremental, name, ops, validate_only=True, rtype=BROKER)
    assert norm(incremental(pair[0], name, ops, validate_only=False, rtype=BROKER)) == answer


@pytest.mark.parametrize("name,configs", list(BROKER_ALTER.values()), ids=list(BROKER_ALTER))
def test_broker_alter_checks_in_kafkas_order(pair, name, configs):  # noqa: F811
    answer = same(pair, alter, name, configs, validate_only=True, rtype=BROKER)
    assert norm(alter(pair[0], name, configs, validate_only=False, rtype=BROKER)) == answer


def test_legacy_alter_of_one_resource_twice(pair):  # noqa: F811
    """Left out of the wire fuzzer: Kafka 4.4 never answers an AlterConfigs naming a resource twice (unknown
    resource types all count as one, UNKNOWN); chronolog answers each INVALID_REQUEST, as Kafka's
    IncrementalAlterConfigs does. docs/differences.md, "Wire fuzzer"."""
    from tests.differential import wirefuzz

    requests = {
        "same topic": [{"resource_type": TOPIC, "resource_name": "t", "configs": []}] * 2,
        "unknown types": [{"resource_type": 1, "resource_name": "x", "configs": []},
                          {"resource_type": 99, "resource_name": "x", "configs": []}],
    }
    answers = {}
    for kind, b in zip(("chronolog", "kafka"), pair, strict=True):
        wire = wirefuzz.Wire(b.port, timeout=3)
        try:
            answers[kind] = {what: wirefuzz.error_codes(wire.call(33, 2, wirefuzz.build(33, 2, {
                "resources": resources, "validate_only": True}, {}))) for what, resources in requests.items()}
        finally:
            wire.close()
    assert answers["chronolog"] == {what: [("responses.error_code", 42)] * 2 for what in requests}
    assert answers["kafka"] == {what: [(wirefuzz.TIMED_OUT, -1)] for what in requests}


# -- chronolog's side of the documented differences (docs/differences.md, "Admin") -----------------------------
def test_broker_describe_lists_only_what_chronolog_has(pair):  # noqa: F811
    """Kafka describes all of KafkaConfig; chronolog its own broker settings and the topic configs' broker
    synonyms, not a Kafka default for a setting it does not have."""
    chronolog, kafka = pair
    ours = {e["name"] for e in describe(chronolog, BROKER, "1")["results"][0]["configs"]}
    theirs = {e["name"] for e in describe(kafka, BROKER, "1")["results"][0]["configs"]}
    assert set(BROKER_KEYS) <= ours & theirs
    assert "num.network.threads" in theirs and "num.network.threads" not in ours


@pytest.mark.parametrize("rtype,what", [(8, "broker logger (log4j)"), (16, "client metrics")])
def test_config_resources_chronolog_has_not(pair, rtype, what):  # noqa: F811
    chronolog, kafka = pair
    assert describe(kafka, rtype, "1")["results"][0]["error_code"] == 0
    (result,) = describe(chronolog, rtype, "1")["results"]
    assert (result["error_code"], result["error_message"]) == (42, f"chronolog has no {what} configs")


def test_min_insync_replicas_above_the_replication_factor(pair):  # noqa: F811
    """Kafka 4.x caps the effective min ISR at the replication factor: a single node takes acks=all writes to a
    topic with min.insync.replicas=2, and so does chronolog."""
    from confluent_kafka import Producer

    name = unique("mir")
    errors = []
    for b in pair:
        create(b, (name, 1, 1, {"min.insync.replicas": "2"}))
        assert visible(b, name, 1) == (0, 1)
        producer = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "retries": 0,
                             "message.timeout.ms": 10000, "log_level": 0})
        got: list = []
        producer.produce(name, b"v", on_delivery=lambda err, _msg, got=got: got.append(err))
        producer.flush(20)
        errors.append(got)
    assert errors == [[None], [None]]
