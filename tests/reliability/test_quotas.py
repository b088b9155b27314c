"""Client quotas end to end: AlterClientQuotas / DescribeClientQuotas over the wire (raw frames: neither
confluent-kafka nor kafka-python has these admin calls), throttling that librdkafka reports in its statistics
(KIP-219), and `chronolog quotas` applied by a running broker to the next request."""

from __future__ import annotations

import io
import json
import socket
import struct
import subprocess
import time
import uuid

import pytest

from tests.brokerproc import BrokerProcess
from tests.clirun import chronolog_completed
from tests.frames import recv_frame

confluent_kafka = pytest.importorskip("confluent_kafka")
kio = pytest.importorskip("kio")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def quota_broker(tmp_path_factory):
    data = tmp_path_factory.mktemp("quotas") / "data"
    data.mkdir()
    proc = BrokerProcess(data).start()
    yield proc
    proc.stop()


def _call(proc: BrokerProcess, api_key: int, version: int, client_id: str = "test", sock=None, **fields):
    from kio.index import load_request_schema, load_response_schema
    from kio.serial import entity_reader, entity_writer

    from chronolog.protocol import codec
    body = codec.build(load_request_schema(api_key, version), fields)
    out = io.BytesIO()
    entity_writer(type(body))(out, body)
    cid = client_id.encode()  # (the versions used here have no flexible header)
    payload = struct.pack(">hhih", api_key, version, 7, len(cid)) + cid + out.getvalue()
    own = sock is None
    sock = sock or socket.create_connection(("127.0.0.1", proc.port), timeout=10)
    try:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        frame = recv_frame(sock)
    finally:
        if own:
            sock.close()
    return entity_reader(load_response_schema(api_key, version))(frame, 4)[0]


def _entity(user=..., client=...):
    out = []
    if user is not ...:
        out.append({"entity_type": "user", "entity_name": user})
    if client is not ...:
        out.append({"entity_type": "client-id", "entity_name": client})
    return out


def _alter(proc, entries, validate_only=False):
    return _call(proc, 49, 0, entries=entries, validate_only=validate_only).entries


def _describe(proc, components, strict=False):
    resp = _call(proc, 48, 0, components=components, strict=strict)
    assert int(resp.error_code) == 0, resp.error_message
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
            for entry in resp.entries}


def test_alter_and_describe_client_quotas_over_the_wire(quota_broker):
    user = f"u-{uuid.uuid4().hex[:6]}"
    results = _alter(quota_broker, [
        {"entity": _entity(user=user), "ops": [{"key": "producer_byte_rate", "value": 1048576.0, "remove": False}]},
        {"entity": _entity(user=user, client="app"), "ops": [{"key": "request_percentage", "value": 50.0,
                                                               "remove": False}]},
        {"entity": _entity(user=None), "ops": [{"key": "consumer_byte_rate", "value": 2097152.0, "remove": False}]},
        {"entity": _entity(client="x"), "ops": [{"key": "producer_byte_rate", "value": 1.5, "remove": False}]},
        {"entity": _entity(client="y"), "ops": [{"key": "bogus", "value": 1.0, "remove": False}]},
        {"entity": _entity(client="y"), "ops": [{"key": "bogus", "value": 1.0, "remove": True}]},
    ])
    # INVALID_REQUEST for the bad entries; an entity named twice is answered once (Kafka keys its answer by
    # entity), refused as a duplicate
    assert [int(r.error_code) for r in results] == [0, 0, 0, 42, 42]
    assert "whole number" in results[3].error_message and "duplicate entity" in results[4].error_message
    # validate_only checks and stores nothing
    dry = _alter(quota_broker, [{"entity": _entity(client="dry"), "ops": [{"key": "producer_byte_rate",
                                                                           "value": 10.0, "remove": False}]}], True)
    assert int(dry[0].error_code) == 0
    assert _describe(quota_broker, [{"entity_type": "client-id", "match_type": 0, "match": "dry"}]) == {}
    # exact user, not strict: the user entity and the user + client-id entity
    found = _describe(quota_broker, [{"entity_type": "user", "match_type": 0, "match": user}])
    assert found == {(("user", user),): {"producer_byte_rate": 1048576.0},
                     (("client-id", "app"), ("user", user)): {"request_percentage": 50.0}}
    # strict: only entities made of exactly the filter's types
    assert set(_describe(quota_broker, [{"entity_type": "user", "match_type": 0, "match": user}], strict=True)) == \
        {(("user", user),)}
    # DEFAULT matches the default entity (a null name)
    assert _describe(quota_broker, [{"entity_type": "user", "match_type": 1, "match": None}], strict=True) == \
        {(("user", None),): {"consumer_byte_rate": 2097152.0}}
    # remove
    removed = _alter(quota_broker, [{"entity": _entity(user=None), "ops": [{"key": "consumer_byte_rate",
                                                                             "value": 0.0, "remove": True}]}])
    assert int(removed[0].error_code) == 0
    assert _describe(quota_broker, [{"entity_type": "user", "match_type": 1, "match": None}]) == {}
    bad = _call(quota_broker, 48, 0, components=[{"entity_type": "group", "match_type": 0, "match": "g"}], strict=False)
    assert int(bad.error_code) == 35  # UNSUPPORTED_VERSION, as ClientQuotasImage.describe answers
    # The audit trail: each applied change once at INFO (not the refused entries, not the validate_only one).
    audit = [line for line in quota_broker.log_path.read_text().splitlines()
             if line.startswith("INFO chronolog.audit: User:ANONYMOUS from 127.0.0.1") and user in line]
    assert len(audit) == 2 and "AlterClientQuotas 'user=" in audit[0] and "producer_byte_rate=1048576" in audit[0]
    assert not any("client-id=dry" in line for line in quota_broker.log_path.read_text().splitlines())


def _throttle_stats(stats: list[str]) -> int:
    """The largest throttle time librdkafka saw from any broker (its `throttle` window, in ms)."""
    most = 0
    for raw in stats:
        for b in json.loads(raw).get("brokers", {}).values():
            most = max(most, int(b.get("throttle", {}).get("max", 0)))
    return most


def test_librdkafka_producer_and_consumer_are_throttled(quota_broker):
    """A producer above its client-id's producer_byte_rate is answered with throttle_time_ms, which
    librdkafka reports in its statistics; a consumer above consumer_byte_rate likewise. A client id
    without a quota is not throttled."""
    topic = f"q-{uuid.uuid4().hex[:6]}"
    _alter(quota_broker, [
        {"entity": _entity(client="noisy"), "ops": [{"key": "producer_byte_rate", "value": 20000.0, "remove": False}]},
        {"entity": _entity(client="slow"), "ops": [{"key": "consumer_byte_rate", "value": 20000.0, "remove": False}]},
    ])
    stats: list[str] = []
    producer = Producer({"bootstrap.servers": quota_broker.bootstrap, "client.id": "noisy", "linger.ms": 5,
                         "statistics.interval.ms": 200, "stats_cb": stats.append})
    value = b"x" * 1000
    sent = 0
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and sent < 1200 and not _throttle_stats(stats):
        try:
            producer.produce(topic, value)
            sent += 1
        except BufferError:
            pass
        producer.poll(0.001 if sent % 50 else 0.05)
    # What is still queued goes out at 20 kB/s: wait for it only until a throttle shows in the statistics
    # (waiting it all out, as a flush did, took some 10 s once the throttle had shown), then drop the rest.
    deadline = time.monotonic() + 60
    while len(producer) and not _throttle_stats(stats) and time.monotonic() < deadline:
        producer.poll(0.1)
    producer.poll(0.5)
    assert _throttle_stats(stats) > 0, f"no throttle after {sent} records"
    producer.purge()
    producer.flush(10)

    free_stats: list[str] = []
    free = Producer({"bootstrap.servers": quota_broker.bootstrap, "client.id": "free", "linger.ms": 5,
                     "statistics.interval.ms": 200, "stats_cb": free_stats.append})
    for _ in range(300):
        free.produce(topic, value)
        free.poll(0)
    free.flush(30)
    free.poll(0.5)
    assert free_stats and _throttle_stats(free_stats) == 0

    consumer_stats: list[str] = []
    consumer = Consumer({"bootstrap.servers": quota_broker.bootstrap, "client.id": "slow", "group.id": "slow",
                         "enable.auto.commit": False, "statistics.interval.ms": 200,
                         "stats_cb": consumer_stats.append,
                         "max.partition.fetch.bytes": 100000})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline and not _throttle_stats(consumer_stats):
            msg = consumer.poll(0.1)
            if msg is not None and not msg.error():
                got += 1
    finally:
        consumer.close()
    assert _throttle_stats(consumer_stats) > 0, f"no throttle after {got} records"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return chronolog_completed(*args)


def test_cli_quota_applies_to_the_next_request(quota_broker):
    """`chronolog quotas alter` on the data dir of a running broker: the next request of that client id is
    throttled (request_percentage, bounded by one quota window); deleting it ends the throttling."""
    client = f"cli-{uuid.uuid4().hex[:6]}"
    data = str(quota_broker.data_dir)
    assert _ms(_call(quota_broker, 3, 4, client_id=client, topics=[], allow_auto_topic_creation=False)
               .throttle_time) == 0
    done = _cli("quotas", "alter", "--data-dir", data, "--client", client, "--add-config",
                "request_percentage=0.000001")
    assert done.returncode == 0 and "Completed updating quotas for client-id=" in done.stdout, done.stderr
    throttled = _ms(_call(quota_broker, 3, 4, client_id=client, topics=[], allow_auto_topic_creation=False)
                    .throttle_time)
    assert 0 < throttled <= 1000
    listed = _cli("quotas", "describe", "--data-dir", data, "--client", client, "--json")
    assert json.loads(listed.stdout) == [{"entity": {"client-id": client}, "values": {"request_percentage": 1e-06}}]
    assert _cli("quotas", "alter", "--data-dir", data, "--client", client, "--delete-config",
                "request_percentage").returncode == 0
    assert _ms(_call(quota_broker, 3, 4, client_id=client, topics=[], allow_auto_topic_creation=False)
               .throttle_time) == 0
    bad = _cli("quotas", "alter", "--data-dir", data, "--client", client, "--add-config", "producer_byte_rate=abc")
    assert bad.returncode != 0 and "must be a number" in bad.stderr and "Traceback" not in bad.stderr


def _ms(value) -> int:
    return round(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)


def test_controller_mutation_rate_throttles_topic_creation(quota_broker):
    """KIP-599: a burst of rate x samples x window partitions goes through; beyond it CreateTopics is
    answered with the time to refill (permissive: the topics are created), and DeleteTopics counts too."""
    client = f"admin-{uuid.uuid4().hex[:6]}"
    _alter(quota_broker, [{"entity": _entity(client=client), "ops": [{"key": "controller_mutation_rate",
                                                                       "value": 1.0, "remove": False}]}])
    names = [f"m-{uuid.uuid4().hex[:6]}-{i}" for i in range(2)]

    def create(name: str, partitions: int):
        return _call(quota_broker, 19, 4, client_id=client, timeout=10000, validate_only=False,
                     topics=[{"name": name, "num_partitions": partitions, "replication_factor": 1}])
    started = time.monotonic()
    first = create(names[0], 10)  # within the burst of 1/s x 11 x 1 s
    assert int(first.topics[0].error_code) == 0 and _ms(first.throttle_time) == 0
    second = create(names[1], 5)  # 4 partitions short at 1/s: 4 s, less what refilled since the first call
    refilled_ms = (time.monotonic() - started) * 1000
    assert int(second.topics[0].error_code) == 0
    assert 4000 - refilled_ms - 50 <= _ms(second.throttle_time) <= 4050
    deleted = _call(quota_broker, 20, 3, client_id=client, timeout=10000, topic_names=[names[0]])
    assert int(deleted.responses[0].error_code) == 0 and _ms(deleted.throttle_time) > 4000


def test_controller_mutation_rate_is_strict_for_new_request_versions(quota_broker):
    """CreateTopics v6+ (KIP-599): once the bucket is below zero, further topics are refused with
    THROTTLING_QUOTA_EXCEEDED and not created, in the same request too."""
    client = f"strict-{uuid.uuid4().hex[:6]}"
    _alter(quota_broker, [{"entity": _entity(client=client), "ops": [{"key": "controller_mutation_rate",
                                                                       "value": 1.0, "remove": False}]}])
    names = [f"s-{uuid.uuid4().hex[:6]}-{i}" for i in range(3)]
    # v6 is a flexible version: its request header carries an (empty) tagged-field section.
    from kio.index import load_request_schema, load_response_schema
    from kio.serial import entity_reader, entity_writer

    from chronolog.protocol import codec
    body = codec.build(load_request_schema(19, 6), {
        "timeout": 10000, "validate_only": False,
        "topics": [{"name": n, "num_partitions": p, "replication_factor": 1} for n, p in zip(names, (10, 5, 1), strict=True)]})
    out = io.BytesIO()
    entity_writer(type(body))(out, body)
    cid = client.encode()
    payload = struct.pack(">hhih", 19, 6, 9, len(cid)) + cid + b"\0" + out.getvalue()
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", quota_broker.port), timeout=10) as s:
        s.sendall(struct.pack(">i", len(payload)) + payload)
        frame = recv_frame(s)
    refilled_ms = (time.monotonic() - started) * 1000
    resp = entity_reader(load_response_schema(19, 6))(frame, 5)[0]
    codes = [int(t.error_code) for t in resp.topics]
    assert codes == [0, 0, 89]  # 10 + 5 takes the bucket of 11 below zero; the third topic is refused
    assert "throttling quota" in resp.topics[2].error_message
    assert 4000 - refilled_ms - 50 <= _ms(resp.throttle_time) <= 4050  # as above
    listed = _call(quota_broker, 3, 4, topics=[{"name": n} for n in names], allow_auto_topic_creation=False)
    assert [int(t.error_code) for t in listed.topics] == [0, 0, 3]  # the refused one does not exist
