"""The Apache Kafka fixture itself: the oracle must be the real broker, answering on loopback."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition

from chronolog.testing.kafka import KAFKA_VERSION, random_cluster_id, run_tool


def test_kafka_broker_round_trips_a_record_by_time(kafka_broker):
    # the session's Kafka checks retention every 500 ms, and a 2023 record is past the default 7 days
    topic = kafka_broker.create_topic(partitions=2, configs={"retention.ms": "-1"})
    producer = Producer(kafka_broker.client_config())
    delivered = []
    producer.produce(topic, b"v", key=b"k", partition=1, timestamp=1_700_000_000_123,
                     on_delivery=lambda err, msg: delivered.append((err, msg.offset())))
    assert producer.flush(30) == 0
    assert delivered == [(None, 0)]  # flush counts a failed delivery as done too
    consumer = Consumer(kafka_broker.client_config(**{"group.id": "fixture"}))
    try:
        found = consumer.offsets_for_times([TopicPartition(topic, 1, 1_700_000_000_000)], 30)
        assert [(tp.partition, tp.offset) for tp in found] == [(1, 0)]
    finally:
        consumer.close()
    # its own files, where Kafka's rules put them
    assert (kafka_broker.log_dir / f"{topic}-1" / "00000000000000000000.timeindex").exists()


def test_kafka_tools_run_against_it(kafka_broker):
    out = run_tool("kafka-topics", "--bootstrap-server", kafka_broker.bootstrap, "--version", check=True)
    assert KAFKA_VERSION in out.stdout


def test_cluster_ids_are_kafka_shaped():
    ids = {random_cluster_id() for _ in range(2000)}  # about 31 would start with "-" if drawn blindly
    assert len(ids) == 2000 and all(len(i) == 22 and "=" not in i and not i.startswith("-") for i in ids)
