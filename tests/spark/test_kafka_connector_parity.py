"""Spark's own Kafka connector (`format("kafka")`, spark-sql-kafka-0-10 4.2.0) against chronolog: it reads by
time exactly the rows chronolog's own source reads with the same options, and writes records chronolog
serves back unchanged."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.spark.conftest import SPARK_KAFKA_JARS

pytestmark = [pytest.mark.spark, pytest.mark.slow,
              pytest.mark.skipif(not SPARK_KAFKA_JARS, reason="Spark's Kafka connector is not resolved (make jars)")]
BASE = 1_700_000_000_000
HOUR = 3_600_000
# 3 partitions, 24 "hours" of records; every 5th record of a partition arrives 40 minutes late
ROWS = [(p, i, BASE + i * HOUR // 10 - (40 * 60_000 if i % 5 == 4 else 0)) for p in range(3) for i in range(240)]
COLUMNS = ["partition", "offset", "timestamp_ms", "key", "value"]


@pytest.fixture(scope="module")
def loaded(chronolog_broker):
    topic = chronolog_broker.create_topic(partitions=3, prefix="spark-kafka", configs={"retention.ms": "-1"})
    p = Producer(chronolog_broker.client_config())
    for part, i, ts in ROWS:
        p.produce(topic, key=b"k%d" % i, value=b"v%d-%d" % (part, i), partition=part, timestamp=ts)
    assert p.flush(30) == 0
    return chronolog_broker.bootstrap, topic


def rows(df) -> list[tuple]:
    out = df.selectExpr("partition", "offset", "CAST(unix_millis(timestamp) AS BIGINT) AS timestamp_ms",
                        "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value").collect()
    return sorted(tuple(r) for r in out)


@pytest.mark.parametrize("start,end", [(BASE + 5 * HOUR, BASE + 6 * HOUR), (BASE - HOUR, BASE + 30 * HOUR),
                                       (BASE + 23 * HOUR + HOUR // 2, BASE + 48 * HOUR)])
def test_spark_kafka_connector_reads_the_rows_of_our_source(spark, loaded, start, end):
    bootstrap, topic = loaded
    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
               "startingTimestamp": str(start), "endingTimestamp": str(end)}
    theirs = rows(spark.read.format("kafka").options(**options).load())
    ours = rows(spark.read.format("chronolog").options(**options).load())
    assert theirs == ours and theirs  # the same offsets (late records included), never empty here
    # and the exact window through a filter, the same on both
    where = f"timestamp >= timestamp_millis({start}) AND timestamp < timestamp_millis({end})"
    assert rows(spark.read.format("kafka").options(**options).load().where(where)) == \
        rows(spark.read.format("chronolog").options(**options).load().where(where))


def test_spark_kafka_connector_writes_to_chronolog(spark, loaded, chronolog_broker):
    bootstrap, topic = loaded
    dest = chronolog_broker.create_topic(partitions=1, prefix="spark-kafka-out", configs={"retention.ms": "-1"})
    df = spark.read.format("chronolog").options(**{"kafka.bootstrap.servers": bootstrap, "subscribe": topic}).load()
    df.where("partition = 1").select("key", "value").write.format("kafka") \
        .option("kafka.bootstrap.servers", bootstrap).option("topic", dest).save()
    c = Consumer(chronolog_broker.client_config(**{"group.id": "spark-out", "enable.partition.eof": True}))
    try:
        c.assign([TopicPartition(dest, 0, 0)])
        got = []
        while True:
            m = c.poll(10)
            assert m is not None, "no end of partition within 10 s"
            if m.error():
                break
            got.append((m.key(), m.value()))
    finally:
        c.close()
    assert sorted(got) == sorted((b"k%d" % i, b"v1-%d" % i) for part, i, _ in ROWS if part == 1)
