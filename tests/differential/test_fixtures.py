"""The differential fixtures themselves: both brokers answer, a topic is made the same on both."""

from __future__ import annotations

from tests.differential.conftest import normalise


def test_both_brokers_list_a_new_topic(both):
    topic = both.create_topic(partitions=3, configs={"cleanup.policy": "compact"})

    def observe(side):
        md = side.admin().list_topics(topic, timeout=10)
        t = md.topics[topic]
        return {"error": t.error, "partitions": sorted((p.id, p.error) for p in t.partitions.values())}

    assert both.same(observe) == {"error": None, "partitions": [(0, None), (1, None), (2, None)]}


def test_each_broker_has_its_kind(broker):
    assert broker.kind in ("chronolog", "kafka")
    assert broker.bootstrap.startswith("127.0.0.1:")


def test_normalise_drops_what_legitimately_differs():
    from confluent_kafka import KafkaError

    obs = {"cluster_id": "x", "throttle_time_ms": 3, "topics": [{"name": "t", "error_message": "why",
                                                                   "error": KafkaError(3)}]}
    assert normalise(obs) == {"topics": [{"name": "t", "error": "UNKNOWN_TOPIC_OR_PART"}]}
    assert normalise(obs, keep=("error_message",))["topics"][0]["error_message"] == "why"
