"""kafka-python 3.0.12's lost rebalance (docs/reliability.md, "Known client issue"), bounded in time: the
hang needs the leader's rejoin after an empty generation 1; a consumer that subscribes once it knows the
topic's partitions assigns them in generation 1, so even polls of 1 ms (8 hangs in 10 runs when it
subscribes first) get the partitions."""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer

from tests.brokerproc import broker  # noqa: F401  (fixture)

pytestmark = pytest.mark.compat


def test_kafka_python_subscribed_after_metadata_settles_with_short_polls(broker):  # noqa: F811
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("kp", 3, 1)])["kp"].result(15)
    for run in range(3):
        c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=f"kp-{run}", session_timeout_ms=10_000)
        try:
            deadline = time.monotonic() + 20
            while not c.partitions_for_topic("kp") and time.monotonic() < deadline:
                time.sleep(0.05)
            c.subscribe(["kp"])
            while not c.assignment() and time.monotonic() < deadline:
                c.poll(timeout_ms=1)
            assert sorted(tp.partition for tp in c.assignment()) == [0, 1, 2], run
        finally:
            c.close()
