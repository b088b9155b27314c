"""Metadata for topics that do not exist, with and without auto-creation (the broker's
auto.create.topics.enable is on for both; the request's allow_auto_topic_creation decides), and a
producer sending to a topic nobody created, against chronolog and Kafka 4.4."""

from __future__ import annotations

import uuid

import pytest

from tests.differential.steps import consume, now_ms, produce, raw_call, wait_until


def _metadata(side, names: list[str], version: int, allow: bool) -> dict:
    body = {"topics": [{"name": n, "topic_id": uuid.UUID(int=0)} for n in names],
            "allow_auto_topic_creation": allow, "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False}
    resp = raw_call(side, 3, version, body)
    return {t["name"]: {"error_code": t["error_code"], "partitions": len(t["partitions"]),
                        "internal": t.get("is_internal")} for t in resp["topics"]}


SUFFIX = uuid.uuid4().hex[:8]


@pytest.mark.parametrize("version", [4, 9, 12])
def test_unknown_topics_without_auto_creation(both, version):
    """allow_auto_topic_creation=false: UNKNOWN_TOPIC_OR_PARTITION, a bad name INVALID_TOPIC_EXCEPTION (or
    unknown), and nothing is created."""
    names = [f"absent-{version}-{SUFFIX}", f"bad name {version}", "x" * 250]

    def steps(side):
        first = _metadata(side, names, version, False)
        again = _metadata(side, names, version, False)
        return {"first": first, "again": again}

    both.same(steps)


def auto_created_answers(side, name: str, version: int) -> dict:
    """The first Metadata answer that creates `name`, then the answer once its leader serves."""
    first = _metadata(side, [name], version, True)[name]
    ready = wait_until(lambda: (m := _metadata(side, [name], version, True)[name])["error_code"] == 0 and m,
                       what=f"{side.kind}: {name} served")
    return {"first": first, "ready": ready}


@pytest.mark.parametrize("version", [4, 12])
def test_auto_created_topic_once_ready(both, version):
    """Once created, the topic looks the same on both (num.partitions=1); the first answer is a documented
    difference (test_first_answer_for_an_auto_created_topic)."""
    name = f"auto-{version}-{uuid.uuid4().hex[:8]}"
    obs = both.same(lambda side: auto_created_answers(side, name, version)["ready"])
    assert obs == {"error_code": 0, "partitions": 1, "internal": False}


@pytest.mark.parametrize("version", [4, 12])
def test_first_answer_for_an_auto_created_topic(broker, version):
    """docs/differences.md: Kafka's first answer is UNKNOWN_TOPIC_OR_PARTITION with no partitions (its
    controller creates the topic after the answer); chronolog creates it before answering, with its
    partitions."""
    name = f"first-{version}-{uuid.uuid4().hex[:8]}"
    first = auto_created_answers(broker, name, version)["first"]
    if broker.kind == "kafka":
        assert first == {"error_code": 3, "partitions": 0, "internal": False}
    else:
        assert first == {"error_code": 0, "partitions": 1, "internal": False}


def test_invalid_names_with_auto_creation(both):
    names = [f"bad name {SUFFIX}", "x" * 250, "..", f"ok.but.{SUFFIX}_with_collision"]

    def steps(side):
        return _metadata(side, names[:3], 12, True)

    both.same(steps)


def test_producer_to_a_topic_nobody_created(both):
    """librdkafka produces to an unknown topic: the broker auto-creates it (Metadata), the records land."""
    name = f"produced-{uuid.uuid4().hex[:8]}"
    now = now_ms()

    def steps(side):
        delivered = produce(side, name, [[(b"k", b"v", now), (b"k2", b"v2", now)]], partition=-1)
        got = consume(side, name)
        return {"delivered": delivered, "values": [r["value"] for r in got]}

    assert both.same(steps)["values"] == [b"v", b"v2"]


def test_producer_without_auto_create_allowed(both):
    """allow.auto.create.topics=false on the producer: its records fail UNKNOWN_TOPIC_OR_PART."""
    name = f"refused-{uuid.uuid4().hex[:8]}"

    def steps(side):
        delivered = produce(side, name, [[(b"k", b"v", now_ms())]], partition=-1,
                            **{"allow.auto.create.topics": False, "message.timeout.ms": 1000, "linger.ms": 0})
        return {"delivered": [e for _p, _o, e in delivered],
                "exists": name in side.admin().list_topics(timeout=10).topics}

    both.same(steps)
