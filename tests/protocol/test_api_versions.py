"""ApiVersions advertises Kafka 4.4's newest version of every API chronolog serves (compared with a live
Kafka 4.4 broker), the deliberate exceptions listed with their reasons; Kafka's own Java client uses those
versions against chronolog and reads what it wrote; the topic-id versions (KIP-516) answer unknown ids as
Kafka does."""

from __future__ import annotations

import collections
import time
import uuid

import pytest

from chronolog.protocol import codec
from chronolog.protocol.registry import HANDLERS
from chronolog.protocol.topic_ids import uuid_of
from chronolog.records import SimpleRecord, build_batch
from tests.differential import wirefuzz

# API key -> (chronolog's max, why not Kafka 4.4's). docs/differences.md ("Protocol versions") says the same.
# An API raised to Kafka's newest version leaves this table; the test fails only for one below Kafka's that is
# not listed here.
BELOW_KAFKA: dict[int, tuple[int, str]] = {}


def _advertised(port: int) -> dict[int, tuple[int, int]]:
    wire = wirefuzz.Wire(port)
    try:
        body = wire.call(18, 3, wirefuzz.build(18, 3, {"client_software_name": "test",
                                                       "client_software_version": "1"}, {}))
    finally:
        wire.close()
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in body.api_keys}


def test_every_api_is_served_up_to_kafka_44s_newest_version(kafka_broker, chronolog_broker):
    ours, kafka = _advertised(chronolog_broker.port), _advertised(kafka_broker.port)
    assert ours.keys() <= kafka.keys()
    below = {key: (ours[key][1], kafka[key][1]) for key in ours if ours[key][1] < kafka[key][1]}
    assert not {key: v for key, v in below.items() if key not in BELOW_KAFKA}, below
    assert all(ours[key][1] >= mine for key, (mine, _) in BELOW_KAFKA.items())
    assert not {key for key in ours if ours[key][1] > kafka[key][1]}
    # the APIs whose versions this work raised
    for key, version in {0: 13, 1: 18, 2: 11, 3: 13, 10: 6, 8: 10, 9: 10, 11: 9, 13: 5, 15: 6, 16: 5, 24: 5, 25: 4,
                         26: 5, 28: 6, 42: 3}.items():
        assert ours[key][1] == kafka[key][1] == version


def test_a_version_past_ours_is_refused_with_our_range():
    """KIP-511: a version we do not know gets a v0 body, UNSUPPORTED_VERSION and ApiVersions' own range."""
    frame = codec.api_versions_error_v0(7, HANDLERS[18].min_version, HANDLERS[18].max_version)
    assert frame[4:8] == (7).to_bytes(4, "big") and frame[8:10] == (35).to_bytes(2, "big")
    assert frame[-4:] == (0).to_bytes(2, "big") + (5).to_bytes(2, "big")


def _cluster_and_node(port: int) -> tuple[str, int]:
    wire = wirefuzz.Wire(port)
    try:
        body = wire.call(3, 13, wirefuzz.build(3, 13, {"topics": []}, {}))
    finally:
        wire.close()
    return body.cluster_id, int(body.brokers[0].node_id)


@pytest.mark.parametrize("kind", ["chronolog", "kafka"])
def test_api_versions_v5_checks_the_cluster_and_node_the_client_means(kind, request):
    """KIP-1242, as Kafka 4.4 answers: both ids or neither (INVALID_REQUEST), and another cluster's or
    node's ids get REBOOTSTRAP_REQUIRED (129) with no API list."""
    broker = request.getfixturevalue("chronolog_broker" if kind == "chronolog" else "kafka_broker")
    cluster, node = _cluster_and_node(broker.port)
    answers = {}
    for name, (cluster_id, node_id) in {"neither": (None, -1), "both": (cluster, node), "cluster only": (cluster, -1),
                                        "node only": (None, node), "other cluster": ("other", node),
                                        "empty cluster": ("", node), "other node": (cluster, node + 7)}.items():
        wire = wirefuzz.Wire(broker.port)
        try:
            body = wire.call(18, 5, codec.request_schema(18, 5)(
                client_software_name="test", client_software_version="1", cluster_id=cluster_id, node_id=node_id))
        finally:
            wire.close()
        answers[name] = (int(body.error_code), bool(body.api_keys))
    assert answers == {"neither": (0, True), "both": (0, True), "cluster only": (42, False),
                       "node only": (42, False), "other cluster": (129, False), "empty cluster": (129, False),
                       "other node": (129, False)}


# -- topic ids (KIP-516) against chronolog --------------------------------------------------------------------
def _ids(port: int, topic: str) -> uuid.UUID:
    wire = wirefuzz.Wire(port)
    try:
        body = wire.call(3, 13, wirefuzz.build(3, 13, {"topics": [{"name": topic}]}, {}))
    finally:
        wire.close()
    assert body.error_code == 0  # v13's top-level error code
    return body.topics[0].topic_id


def _produce(port: int, version: int, topic_id: uuid.UUID) -> list[tuple[uuid.UUID, int, int]]:
    # a current time: the session's Kafka checks retention every 500 ms, and a record older than
    # retention.ms (7 days) is deleted before the fetch that follows reads it (OFFSET_OUT_OF_RANGE)
    batch = build_batch([SimpleRecord(int(time.time() * 1000), None, b"v")])
    wire = wirefuzz.Wire(port)
    try:
        body = wire.call(0, version, wirefuzz.build(0, version, {
            "acks": -1, "timeout": 1000, "transactional_id": None,
            "topic_data": [{"topic_id": topic_id, "partition_data": [{"index": 0, "records": batch}]}]}, {}))
    finally:
        wire.close()
    return [(t.topic_id, int(p.error_code), int(p.base_offset)) for t in body.responses for p in t.partition_responses]


def _fetch(port: int, version: int, topic_id: uuid.UUID) -> list[tuple[uuid.UUID, int, int]]:
    wire = wirefuzz.Wire(port)
    try:
        body = wire.call(1, version, wirefuzz.build(1, version, {
            "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "session_epoch": -1, "replica_id": -1,
            "topics": [{"topic_id": topic_id, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                             "partition_max_bytes": 1 << 20}]}]}, {}))
    finally:
        wire.close()
    return [(t.topic_id, int(p.error_code), len(p.records or b"")) for t in body.responses for p in t.partitions]


@pytest.mark.parametrize("kind", ["chronolog", "kafka"])
def test_produce_and_fetch_by_topic_id_and_unknown_ids(kind, request):
    """Produce v13 and Fetch v13+ name topics by id: a known id is written and read, an unknown one answers
    UNKNOWN_TOPIC_ID (100) with the id echoed, on both brokers."""
    broker = request.getfixturevalue("chronolog_broker" if kind == "chronolog" else "kafka_broker")
    topic = broker.create_topic()
    topic_id = _ids(broker.port, topic)
    assert _produce(broker.port, 13, topic_id) == [(topic_id, 0, 0)]
    for version in (13, 16, 18):
        ((tid, error, size),) = _fetch(broker.port, version, topic_id)
        assert (tid, error) == (topic_id, 0) and size > 0
    unknown = uuid.uuid4()
    assert _produce(broker.port, 13, unknown) == [(unknown, 100, -1)]
    assert [(t, e) for t, e, _ in _fetch(broker.port, 18, unknown)] == [(unknown, 100)]


def test_a_topic_made_again_has_a_new_id_and_the_old_one_is_unknown(chronolog_broker):
    topic = chronolog_broker.create_topic()
    old = _ids(chronolog_broker.port, topic)
    manager = chronolog_broker._manager()
    manager.delete_topic(topic)
    manager.create_topic(topic, 1, {})
    new = _ids(chronolog_broker.port, topic)
    assert new != old and new == uuid_of(manager.topic_id(topic))
    assert [(t, e) for t, e, _ in _fetch(chronolog_broker.port, 13, old)] == [(old, 100)]
    assert [(t, e) for t, e, _ in _fetch(chronolog_broker.port, 13, new)] == [(new, 0)]


def test_list_offsets_tiered_specials_answer_no_offset(chronolog_broker):
    """Without tiered storage Kafka answers -5 (v9+, KIP-1005) and -6 (v11+, KIP-1023) with offset -1 and no
    error; below those versions UNSUPPORTED_VERSION (measured against Kafka 4.4)."""
    topic = chronolog_broker.create_topic()
    wire = wirefuzz.Wire(chronolog_broker.port)
    try:
        answers = {}
        for version in (8, 9, 10, 11):
            for ts in (-4, -5, -6, -7):
                body = wire.call(2, version, wirefuzz.build(2, version, {
                    "replica_id": -1, "timeout": 1000, "topics": [{"name": topic, "partitions": [
                        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": ts}]}]}, {}))
                p = body.topics[0].partitions[0]
                answers[(version, ts)] = (int(p.error_code), int(p.offset), int(p.leader_epoch))
    finally:
        wire.close()
    no_offset, unsupported = (0, -1, -1), (35, -1, -1)
    assert answers[(8, -4)] == (0, 0, 0) and answers[(11, -4)] == (0, 0, 0)
    assert answers[(8, -5)] == unsupported and answers[(9, -5)] == no_offset
    assert answers[(10, -6)] == unsupported and answers[(11, -6)] == no_offset
    assert all(answers[(v, -7)] == unsupported for v in (8, 9, 10, 11))


# -- Kafka's Java client ------------------------------------------------------------------------------------
def test_the_java_client_uses_kafka_44s_versions_and_reads_what_it_wrote(monkeypatch):
    """The console producer and consumer and GetOffsetShell of Kafka 4.4 against chronolog: the request
    headers chronolog reads say which versions they sent."""
    from chronolog.testing import broker
    from chronolog.testing.kafka import kafka_available, run_tool

    reason = kafka_available()
    if reason:
        pytest.skip(f"Apache Kafka cannot run here: {reason}")
    seen: collections.Counter = collections.Counter()
    peek = codec.peek_header

    def spy(frame):
        header = peek(frame)
        seen[header[:2]] += 1
        return header
    monkeypatch.setattr(codec, "peek_header", spy)
    lines = [f"line-{i}" for i in range(20)]
    with broker() as b:
        topic = b.create_topic(partitions=2)
        produced = run_tool("kafka-console-producer", "--bootstrap-server", b.bootstrap, "--topic", topic,
                            input="\n".join(lines) + "\n")
        assert produced.returncode == 0, produced.stderr
        consumed = run_tool("kafka-console-consumer", "--bootstrap-server", b.bootstrap, "--topic", topic,
                            "--from-beginning", "--max-messages", str(len(lines)), "--timeout-ms", "60000")
        assert consumed.returncode == 0, consumed.stderr
        assert sorted(consumed.stdout.split()) == sorted(lines)
        offsets = run_tool("kafka-get-offsets", "--bootstrap-server", b.bootstrap, "--topic", topic)
        assert offsets.returncode == 0, offsets.stderr
        ends = {line.rsplit(":", 2)[1]: int(line.rsplit(":", 1)[1]) for line in offsets.stdout.split()}
        assert sum(ends.values()) == len(lines)
    # Produce 13 and Fetch 18 by topic id, ListOffsets 11, Metadata 13, FindCoordinator 6, ApiVersions 5
    for api_key, version in ((0, 13), (1, 18), (2, 11), (3, 13), (10, 6), (18, 5)):
        assert seen[(api_key, version)], (api_key, version, sorted(seen))
