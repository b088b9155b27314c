"""The way out: chronolog's time tools against Apache Kafka 4.4 — one broker, and a 3-node cluster with a
node killed while the tools run. The answers must be the exact ones, or one line and a non-zero exit; never
a partial window with exit 0."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from typer.testing import CliRunner

from chronolog.cli.main import app

BASE = 1_700_000_000_000
PARTITIONS = 6
# partition p: 40 records, CreateTime out of order every 7th record, so the first offset at a time is not
# simply the count of earlier records
# (times of 2023: the topics keep them with retention.ms=-1, or Kafka's retention deletes them within seconds)
KEEP = {"retention.ms": "-1"}
STAMPS = {p: [BASE + 1000 * i - (3500 if i % 7 == 3 else 0) + p for i in range(40)] for p in range(PARTITIONS)}


def run(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result.output


def first_at_or_after(stamps: list[int], t: int) -> int:
    return next((i for i, ts in enumerate(stamps) if ts >= t), len(stamps))


def load(bootstrap: str, topic: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for part, stamps in STAMPS.items():
        for i, ts in enumerate(stamps):
            p.produce(topic, value=b"v%d-%d" % (part, i), key=b"k%d" % i, partition=part, timestamp=ts,
                      headers=[("h", b"%d" % i)])
    assert p.flush(60) == 0


def check_offsets(bootstrap: str, topic: str, t: int) -> None:
    out = json.loads(run("offsets", topic, "--time", str(t), "--bootstrap-server", bootstrap, "--json"))
    got = {r["partition"]: r["offset"] for r in out["partitions"]}
    assert got == {p: first_at_or_after(s, t) for p, s in STAMPS.items()}


def check_window(bootstrap: str, topic: str, t1: int, t2: int) -> None:
    out = run("consume", topic, "--from", str(t1), "--to", str(t2), "--bootstrap-server", bootstrap,
              "--format", "json")
    rows = [json.loads(line) for line in out.splitlines()]
    got = sorted((r["partition"], r["offset"], r["timestamp"]) for r in rows)
    want = sorted((p, i, ts) for p, s in STAMPS.items() for i, ts in enumerate(s) if t1 <= ts < t2)
    assert got == want
    first = next(r for r in rows if (r["partition"], r["offset"]) == (want[0][0], want[0][1]))
    assert first["key"] == f"k{want[0][1]}"


def check_reset(bootstrap: str, topic: str, group: str, t: int) -> None:
    run("reset-offsets", "--group", group, "--topic", topic, "--to-datetime", str(t), "--execute",
        "--bootstrap-server", bootstrap)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        committed = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
    finally:
        c.close()
    assert {tp.partition: tp.offset for tp in committed} == {p: first_at_or_after(s, t) for p, s in STAMPS.items()}
    lag = json.loads(run("lag", "--group", group, "--bootstrap-server", bootstrap, "--json"))
    rows = lag["partitions"] if isinstance(lag, dict) else lag
    assert sum(r["lag"] for r in rows) == sum(len(s) - first_at_or_after(s, t) for s in STAMPS.values())


def test_time_tools_read_a_kafka_broker_exactly(kafka_broker):
    topic = kafka_broker.create_topic(partitions=PARTITIONS, configs=KEEP)
    load(kafka_broker.bootstrap, topic)
    for t in (BASE - 1, BASE + 10_000, BASE + 17_200, BASE + 99_000):
        check_offsets(kafka_broker.bootstrap, topic, t)
    check_window(kafka_broker.bootstrap, topic, BASE + 5_000, BASE + 21_000)
    check_reset(kafka_broker.bootstrap, topic, "tools-kafka", BASE + 12_000)


@pytest.mark.slow
def test_time_tools_read_a_cluster_while_a_node_dies(kafka_cluster):
    topic = kafka_cluster.create_topic(partitions=PARTITIONS, configs=KEEP, replication=3)
    load(kafka_cluster.bootstrap, topic)
    bootstrap = kafka_cluster.bootstrap
    check_offsets(bootstrap, topic, BASE + 10_000)
    victim = kafka_cluster.nodes[1]
    victim.kill()  # its partitions' leaders move to the other two nodes while the tools ask
    try:
        check_offsets(bootstrap, topic, BASE + 17_200)
        check_window(bootstrap, topic, BASE + 5_000, BASE + 21_000)
        check_reset(bootstrap, topic, "tools-cluster", BASE + 12_000)
    finally:
        victim.start()  # the session's cluster whole again for the next test
        kafka_cluster.wait_ready(120)
