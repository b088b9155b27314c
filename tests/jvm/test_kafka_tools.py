"""Kafka's CLI tools, unmodified (Kafka 4.4's jars), against a chronolog broker: each works, answers as a
single-node Kafka would, or refuses in one clear line."""

from __future__ import annotations

import uuid

from chronolog.testing.kafka import run_tool


def _topic(prefix: str = "jvm") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def test_kafka_topics_create_exits_0(chronolog):
    """The Java AdminClient reads CreateTopics v7's configs of the created topic (`configs.stream()`): a null
    list made `kafka-topics --create` fail with a NullPointerException after creating the topic (and Kafka
    Streams and Connect die creating their internal topics)."""
    name = _topic()
    proc = run_tool("kafka-topics", "--bootstrap-server", chronolog.bootstrap, "--create", "--topic", name,
                    "--partitions", "3", "--config", "cleanup.policy=compact")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"Created topic {name}."
    assert chronolog.topics()[name] == 3
