"""CreatePartitions and DeleteTopics against chronolog and Kafka 4.4 over the wire."""

from __future__ import annotations

import time

import pytest

from tests.differential.admin_pair import (  # noqa: F401  (fixture)
    CREATE_PARTITIONS,
    DELETE_TOPICS,
    create,
    metadata_partitions,
    pair,
    same,
    unique,
    visible,
)
from tests.differential.admin_wire import request


def create_partitions(broker, *topics, validate_only=False, version=3):
    """CreatePartitions of (name, count[, assignments]) tuples."""
    body = [{"name": t[0], "count": t[1],
             "assignments": None if len(t) < 3 else [{"broker_ids": b} for b in t[2]]} for t in topics]
    return request(broker.port, CREATE_PARTITIONS, version, {"topics": body, "timeout": 30000,
                                                              "validate_only": validate_only})


def delete_topics(broker, *names, version=6):
    return shuffled(request(broker.port, DELETE_TOPICS, version, {
        "topics": [{"name": n, "topic_id": None} for n in names], "timeout": 30000}))


def shuffled(answer):
    """A DeleteTopics answer in a fixed order: Kafka shuffles it (ControllerApis.deleteTopics)."""
    answer["responses"].sort(key=lambda r: (str(r["name"]), str(r.get("topic_id")), r["error_code"]))
    return answer


@pytest.fixture
def topic(pair):  # noqa: F811
    name = unique("parts")
    for b in pair:
        create(b, (name, 2, 1))
        assert visible(b, name, 2) == (0, 2)
    return name


CASES = {
    "grow": (3,), "same": (2,), "shrink": (1,), "zero": (0,), "negative": (-1,),
    "assigned": (4, [[1], [1]]), "assignment-count": (4, [[1]]), "unknown-broker": (3, [[2]]),
    "broker-twice": (3, [[1, 1]]), "empty-assignment": (3, [[]]),
}


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
@pytest.mark.parametrize("validate_only", [False, True], ids=["apply", "validate-only"])
def test_create_partitions(pair, topic, case, validate_only):  # noqa: F811
    answer = same(pair, create_partitions, (topic, *case), validate_only=validate_only)
    grown = answer["results"][0]["error_code"] == 0 and not validate_only
    same(pair, visible, topic, case[0] if grown else 2)


@pytest.mark.parametrize("name", ["no-such-topic", "bad name", ""], ids=["unknown", "bad-name", "empty"])
def test_create_partitions_of_what_does_not_exist(pair, name):  # noqa: F811
    same(pair, create_partitions, (name, 3))


def test_create_partitions_names_a_topic_twice(pair, topic):  # noqa: F811
    same(pair, create_partitions, (topic, 3), (topic, 4))
    same(pair, visible, topic, 2)


def settled(broker, name, timeout=15.0):
    """Metadata of a deleted topic once it is gone (Kafka's brokers learn of a deletion from the metadata
    log a moment after DeleteTopics is answered)."""
    deadline = time.monotonic() + timeout
    while (state := metadata_partitions(broker, name))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    return state


def test_delete_topics(pair, topic):  # noqa: F811
    same(pair, delete_topics, topic, "no-such-topic-x", "bad name")
    same(pair, settled, topic)
    same(pair, delete_topics, topic)


def test_delete_a_topic_named_twice(pair, topic):  # noqa: F811
    same(pair, delete_topics, topic, topic)


@pytest.mark.parametrize("version", [1, 3, 5])
def test_delete_topics_older_versions(pair, version):  # noqa: F811
    name = unique("del")
    for b in pair:
        create(b, (name, 1, 1))

    def by_names(b):
        return shuffled(request(b.port, DELETE_TOPICS, version, {"topic_names": [name, "no-such-topic-y"],
                                                                 "timeout": 30000}))
    same(pair, by_names)


def test_delete_topics_by_id(pair, topic):  # noqa: F811
    def by_id(b):
        answer = request(b.port, 3, 12, {"topics": [{"name": topic, "topic_id": None}],
                                          "allow_auto_topic_creation": False})
        topic_id = answer["topics"][0]["topic_id"]
        unknown = "00000000-0000-0000-0000-00000000000f"
        return shuffled(request(b.port, DELETE_TOPICS, 6, {"topics": [
            {"name": None, "topic_id": topic_id}, {"name": None, "topic_id": unknown},
            {"name": None, "topic_id": None}, {"name": "x", "topic_id": unknown}], "timeout": 30000}))
    same(pair, by_id)
    same(pair, settled, topic)


def test_elect_leaders_and_list_reassignments_on_one_node(pair, topic):  # noqa: F811
    """A one-node cluster: every partition already has its preferred leader, none is being reassigned."""
    def elect(b, partitions):
        topics = None if partitions is None else [{"topic": t, "partitions": ps} for t, ps in partitions]
        answer = request(b.port, 43, 2, {"election_type": 0, "topic_partitions": topics, "timeout": 30000})
        if partitions is None:  # every topic of the broker: only the test's own are comparable
            answer["replica_election_results"] = [r for r in answer["replica_election_results"]
                                                  if r["topic"] == topic]
        return answer
    same(pair, elect, [(topic, [0, 1, 7]), ("no-such-topic-z", [0])])
    same(pair, elect, None)
    same(pair, lambda b: request(b.port, 46, 0, {"timeout": 30000, "topics": None}))
    same(pair, lambda b: request(b.port, 46, 0, {"timeout": 30000, "topics": [{"name": topic, "partition_indexes": [0]}]}))


def test_delegation_tokens_on_a_plaintext_listener(pair):  # noqa: F811
    """As a Kafka broker without delegation tokens configured: DELEGATION_TOKEN_REQUEST_NOT_ALLOWED on PLAINTEXT
    (Kafka's -1 timestamps in the other three answers cannot be decoded by kio: DescribeDelegationToken only)."""
    same(pair, lambda b: request(b.port, 41, 3, {"owners": None}))
    same(pair, lambda b: request(b.port, 41, 1, {"owners": [{"principal_type": "User", "principal_name": "x"}]}))
