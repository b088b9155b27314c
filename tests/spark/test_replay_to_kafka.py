"""`pipeline --replay-to`'s replay against Apache Kafka 4.4: a window of a Kafka topic re-ingested into
another Kafka topic through chronolog's Spark source and sink keeps each record's partition, key, value,
headers and CreateTime, and only the window's records."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from chronolog.server.embedded import EmbeddedBroker
from chronolog.spark.pipeline import replay_window

from .test_replay_to import records

pytestmark = pytest.mark.spark

BASE = 1_700_000_000_000


def produce_window(bootstrap: str, source: str) -> tuple[int, int, list]:
    """60 records over the 3 partitions of `source`, a few of them late; the window (t1, t2) the tests
    replay and the records in it."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(60):
        p.produce(source, key=b"k%d" % i, value=b"v%d" % i, partition=i % 3,
                  timestamp=BASE + 1000 * i - (2500 if i % 7 == 3 else 0), headers=[("h", b"%d" % i)])
    assert p.flush(60) == 0
    everything = records(bootstrap, source, 3, 60)
    t1, t2 = BASE + 10_000, BASE + 40_000
    want = [r for r in everything if t1 <= r[4][1] < t2]
    assert 0 < len(want) < len(everything)
    return t1, t2, want


def test_replay_to_within_kafka_keeps_times_keys_and_headers(spark, kafka_broker):
    source = kafka_broker.create_topic(partitions=3, configs={"retention.ms": "-1"})
    t1, t2, want = produce_window(kafka_broker.bootstrap, source)
    target = f"{source}-replayed"
    assert replay_window(spark, kafka_broker.bootstrap, t1, t2, target, print, source=source) == len(want)
    assert records(kafka_broker.bootstrap, target, 3, len(want)) == want


def test_replay_to_chronolog_to_kafka_and_back(spark, kafka_broker, tmp_path):
    with EmbeddedBroker(tmp_path / "data") as broker:
        source = "moving"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept alive until the result
        admin.create_topics([NewTopic(source, 3, 1, config={"retention.ms": "-1"})])[source].result(15)
        t1, t2, want = produce_window(broker.bootstrap, source)
        on_kafka = f"moved-{tmp_path.name[-8:]}"
        assert replay_window(spark, broker.bootstrap, t1, t2, on_kafka, print, source=source,
                             target_bootstrap=kafka_broker.bootstrap) == len(want)
        assert records(kafka_broker.bootstrap, on_kafka, 3, len(want)) == want
        assert replay_window(spark, kafka_broker.bootstrap, None, None, "back", print, source=on_kafka,
                             target_bootstrap=broker.bootstrap) == len(want)
        assert records(broker.bootstrap, "back", 3, len(want)) == want
