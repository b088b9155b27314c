"""chronolog's Spark source in broker mode against Apache Kafka 4.4: the same rows as Spark's own Kafka
connector on one broker, and the exact window from a 3-node cluster while a node is down."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from tests.spark.conftest import SPARK_KAFKA_JARS

pytestmark = [pytest.mark.spark, pytest.mark.slow]
BASE = 1_700_000_000_000
MINUTE = 60_000
# 4 partitions, 3 hours a minute apart; every 6th record 25 minutes late
STAMPS = {p: [BASE + i * MINUTE - (25 * MINUTE if i % 6 == 5 else 0) + p for i in range(180)] for p in range(4)}
KEEP = {"retention.ms": "-1"}  # times of 2023: kept, not deleted by Kafka's retention


def load(bootstrap: str, topic: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for part, stamps in STAMPS.items():
        for i, ts in enumerate(stamps):
            p.produce(topic, key=b"k%d" % i, value=b"v%d-%d" % (part, i), partition=part, timestamp=ts)
    assert p.flush(60) == 0


def window(spark, bootstrap: str, topic: str, fmt: str, start: int, end: int) -> list[tuple]:
    df = spark.read.format(fmt).options(**{"kafka.bootstrap.servers": bootstrap, "subscribe": topic}).load()
    df = df.where(f"timestamp >= timestamp_millis({start}) AND timestamp < timestamp_millis({end})")
    return sorted(tuple(r) for r in df.selectExpr("partition", "offset", "CAST(value AS STRING)").collect())


def expected(start: int, end: int) -> list[tuple]:
    return sorted((p, i, f"v{p}-{i}") for p, s in STAMPS.items() for i, ts in enumerate(s) if start <= ts < end)


@pytest.mark.skipif(not SPARK_KAFKA_JARS, reason="Spark's Kafka connector is not resolved (make jars)")
def test_source_reads_a_kafka_broker_as_sparks_connector_does(spark, kafka_broker):
    topic = kafka_broker.create_topic(partitions=4, configs=KEEP)
    load(kafka_broker.bootstrap, topic)
    start, end = BASE + 60 * MINUTE, BASE + 90 * MINUTE
    ours = window(spark, kafka_broker.bootstrap, topic, "chronolog", start, end)
    assert ours == expected(start, end)
    assert ours == window(spark, kafka_broker.bootstrap, topic, "kafka", start, end)


def test_source_reads_a_cluster_with_a_node_down(spark, kafka_cluster):
    topic = kafka_cluster.create_topic(partitions=4, configs=KEEP, replication=3)
    load(kafka_cluster.bootstrap, topic)
    victim = kafka_cluster.nodes[2]
    victim.kill()  # its partitions' leaders move while the query plans and reads
    try:
        start, end = BASE + 30 * MINUTE, BASE + 150 * MINUTE
        assert window(spark, kafka_cluster.bootstrap, topic, "chronolog", start, end) == expected(start, end)
    finally:
        victim.start()
        kafka_cluster.wait_ready(120)
