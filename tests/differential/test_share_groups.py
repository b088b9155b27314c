"""Share groups (KIP-932) on the wire, chronolog against Kafka 4.4: the same requests, the same answers.

Group configs (DescribeConfigs and IncrementalAlterConfigs on GROUP resources); one member's share session
through ShareGroupHeartbeat, ShareFetch and ShareAcknowledge with the `latest` and `earliest` resets,
RELEASE, REJECT, acknowledgements of records not held, and session epochs; the share-group offset APIs
(90-92) and `kafka-share-groups`. Kafka initializes a share-partition's state asynchronously, so fetches
are repeated (bounded) until records come, on both brokers alike."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer

from chronolog.protocol.group_configs import GROUP_RESOURCE
from tests.differential import wirefuzz
from tests.differential.admin_pair import describe, incremental, norm, pair, same, unique  # noqa: F401

SET, DELETE, APPEND = 0, 1, 2
RETRIABLE = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


# -- group configs ---------------------------------------------------------------------------------------
def test_group_configs_described_as_kafka(pair):  # noqa: F811
    """A group nobody configured: every group config, its default and the broker synonym."""
    group = unique("gc")
    same(pair, lambda b: describe(b, GROUP_RESOURCE, group))


@pytest.mark.parametrize("ops", [
    [("share.auto.offset.reset", SET, "earliest")],
    [("share.auto.offset.reset", SET, "by_duration:PT1H")],
    [("share.auto.offset.reset", SET, "by_duration:xx")],
    [("share.record.lock.duration.ms", SET, "1000")],
    [("share.record.lock.duration.ms", SET, "20000")],
    [("share.record.lock.duration.ms", SET, "abc")],
    [("share.delivery.count.limit", SET, "11")],
    [("share.delivery.count.limit", SET, "3")],
    [("share.delivery.count.limit", APPEND, "3")],
    [("share.isolation.level", SET, "read_committed")],
    [("share.isolation.level", SET, "bad")],
    [("share.partition.max.record.locks", SET, "1")],
    [("share.renew.acknowledge.enable", SET, "x")],
    [("consumer.session.timeout.ms", SET, "1000")],
    [("consumer.session.timeout.ms", SET, "50000")],
    [("consumer.heartbeat.interval.ms", SET, "16000")],
    [("foo.bar", SET, "1")],
    [("share.auto.offset.reset", DELETE, None)],
], ids=lambda ops: "-".join(f"{n}={v}" for n, _, v in ops))
def test_group_config_changes_as_kafka(pair, ops):  # noqa: F811
    """Each change's answer, then what the group describes (set values with source GROUP_CONFIG)."""
    group = unique("gc")

    def steps(b):
        return incremental(b, group, ops, rtype=GROUP_RESOURCE), \
            describe(b, GROUP_RESOURCE, group, keys=[n for n, _, _ in ops])
    same(pair, steps)


def test_consumer_group_takes_its_heartbeat_interval_from_a_group_config(pair):  # noqa: F811
    """KIP-848: consumer.heartbeat.interval.ms set on the group is what ConsumerGroupHeartbeat answers."""
    group = unique("cg")

    def steps(b):
        topic = b.create_topic(unique("ct"), 1)
        changed = incremental(b, group, [("consumer.heartbeat.interval.ms", SET, "7000")], rtype=GROUP_RESOURCE)
        wire = wirefuzz.Wire(b.port, timeout=30)
        try:
            deadline = time.monotonic() + 30
            while wire.call(10, 6, wirefuzz.build(10, 6, {"key_type": 0, "coordinator_keys": [group]}, {})) \
                    .coordinators[0].error_code:  # Kafka makes __consumer_offsets on the first FindCoordinator
                assert time.monotonic() < deadline, "no coordinator"
                time.sleep(0.2)
            while True:
                body = wire.call(68, 1, wirefuzz.build(68, 1, {
                    "group_id": group, "member_id": uuid.uuid4().hex[:22], "member_epoch": 0, "instance_id": None,
                    "rack_id": None, "rebalance_timeout": 30000, "subscribed_topic_names": [topic],
                    "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": []}, {}))
                if int(body.error_code) not in RETRIABLE or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
        finally:
            wire.close()
        return changed, int(body.error_code), int(body.heartbeat_interval.total_seconds() * 1000)
    assert same(pair, steps)[1:] == (0, 7000)


def test_default_group_resource_refused(pair):  # noqa: F811
    same(pair, lambda b: incremental(b, "", [("share.delivery.count.limit", SET, "3")], rtype=GROUP_RESOURCE))


# -- a share session on the wire ------------------------------------------------------------------------------
class Member:
    """One share-group member over raw requests, keeping its member epoch and share session epoch."""

    def __init__(self, broker: Any, group: str) -> None:
        self.wire = wirefuzz.Wire(broker.port, timeout=30)
        self.group = group
        self.member_id = uuid.uuid4().hex[:22]
        self.epoch = 0
        self.session = 0

    def call(self, key: int, version: int, values: dict) -> Any:
        return self.wire.call(key, version, wirefuzz.build(key, version, values, {}))

    def join(self, topic: str, bound_s: float = 30) -> int:
        """Heartbeat until partitions are assigned (the coordinator found first, as a client does)."""
        deadline = time.monotonic() + bound_s
        while True:
            found = self.call(10, 6, {"key_type": 0, "coordinator_keys": [self.group]})
            if not found.coordinators[0].error_code:
                break
            assert time.monotonic() < deadline, "no coordinator"
            time.sleep(0.2)
        while True:
            body = self.call(76, 1, {"group_id": self.group, "member_id": self.member_id, "member_epoch": self.epoch,
                                     "rack_id": None, "subscribed_topic_names": [topic] if self.epoch == 0 else None})
            if int(body.error_code) in RETRIABLE and time.monotonic() < deadline:
                time.sleep(0.2)
                continue
            if body.error_code:
                return int(body.error_code)
            self.epoch = int(body.member_epoch)
            if body.assignment is not None and body.assignment.topic_partitions:
                return 0
            assert time.monotonic() < deadline, "no assignment"
            time.sleep(0.2)

    def fetch(self, topic_id: uuid.UUID, acks: list | None = None, wait_ms: int = 500) -> Any:
        body = self.call(78, 2, {
            "group_id": self.group, "member_id": self.member_id, "share_session_epoch": self.session,
            "max_wait": wait_ms, "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 500, "batch_size": 500,
            "share_acquire_mode": 0, "is_renew_ack": False,
            "topics": [{"topic_id": topic_id, "partitions": [{"partition_index": 0,
                                                              "acknowledgement_batches": acks or []}]}],
            "forgotten_topics_data": []})
        if not body.error_code:
            self.session += 1
        return body

    def fetch_records(self, topic_id: uuid.UUID, bound_s: float = 30) -> list[tuple[int, int, int]]:
        """Fetch until some records are acquired: their (first, last, delivery count) ranges."""
        deadline = time.monotonic() + bound_s
        while time.monotonic() < deadline:
            body = self.fetch(topic_id)
            assert body.error_code == 0, body
            ranges = [(int(a.first_offset), int(a.last_offset), int(a.delivery_count))
                      for t in body.responses for p in t.partitions for a in p.acquired_records]
            if ranges:
                return ranges
        return []

    def acknowledge(self, topic_id: uuid.UUID, batches: list[tuple[int, int, int]]) -> list[int]:
        body = self.call(79, 2, {
            "group_id": self.group, "member_id": self.member_id, "share_session_epoch": self.session,
            "is_renew_ack": False, "topics": [{"topic_id": topic_id, "partitions": [{"partition_index": 0,
                "acknowledgement_batches": [{"first_offset": a, "last_offset": z, "acknowledge_types": [k]}
                                            for a, z, k in batches]}]}]})
        if not body.error_code:
            self.session += 1
            return [int(p.error_code) for t in body.responses for p in t.partitions]
        return [int(body.error_code)]

    def offsets(self, topic: str) -> list[tuple[int, int, int]]:
        body = self.call(90, 1, {"groups": [{"group_id": self.group, "topics": [{"topic_name": topic,
                                                                                "partitions": [0]}]}]})
        return [(int(p.error_code), int(p.lag), int(p.start_offset)) for g in body.groups for t in g.topics
                for p in t.partitions]

    def leave(self) -> int:
        body = self.call(76, 1, {"group_id": self.group, "member_id": self.member_id, "member_epoch": -1,
                                 "rack_id": None, "subscribed_topic_names": None})
        self.wire.close()
        return int(body.error_code)


def _produce(b: Any, topic: str, values: list[str]) -> None:
    p = Producer({"bootstrap.servers": b.bootstrap})
    for v in values:
        p.produce(topic, value=v.encode(), partition=0)
    assert p.flush(30) == 0


def _topic_id(b: Any, topic: str) -> uuid.UUID:
    wire = wirefuzz.Wire(b.port)
    try:
        body = wire.call(3, 13, wirefuzz.build(3, 13, {"topics": [{"name": topic}]}, {}))
    finally:
        wire.close()
    return body.topics[0].topic_id


def test_latest_release_and_redelivery(pair):  # noqa: F811
    """`latest` (the default): what was there before the first fetch is not delivered; RELEASE brings a
    record back with delivery count 2; the lag counts what is not done."""
    def steps(b):
        topic = b.create_topic(unique("sl"), 1)
        _produce(b, topic, ["before-0", "before-1"])
        member, tid = Member(b, unique("g")), _topic_id(b, topic)
        out: dict[str, Any] = {"join": member.join(topic)}
        first = member.fetch(tid, wait_ms=200)
        out["first"] = [int(p.error_code) for t in first.responses for p in t.partitions]
        _produce(b, topic, ["a", "b", "c"])
        out["acquired"] = member.fetch_records(tid)
        out["acks"] = member.acknowledge(tid, [(2, 2, 1), (3, 3, 2), (4, 4, 1)])
        out["again"] = member.fetch_records(tid)
        out["acks2"] = member.acknowledge(tid, [(3, 3, 1)])
        out["lag"] = [(e, lag) for e, lag, _ in member.offsets(topic)]
        out["leave"] = member.leave()
        return out
    got = same(pair, steps)
    assert got["acquired"] == [(2, 4, 1)] and got["again"] == [(3, 3, 2)]


def test_earliest_reject_and_acknowledging_what_is_not_held(pair):  # noqa: F811
    """`earliest` from a group config; REJECT archives; a second acknowledgement of a record already below
    the start offset is ignored, one of an offset never delivered is INVALID_RECORD_STATE; session epochs
    out of step are refused."""
    def steps(b):
        topic = b.create_topic(unique("se"), 1)
        _produce(b, topic, [f"v{i}" for i in range(4)])
        group = unique("g")
        incremental(b, group, [("share.auto.offset.reset", SET, "earliest")], rtype=GROUP_RESOURCE)
        member, tid = Member(b, group), _topic_id(b, topic)
        out: dict[str, Any] = {"join": member.join(topic), "acquired": member.fetch_records(tid)}
        out["acks"] = member.acknowledge(tid, [(0, 0, 3), (1, 3, 1)])
        out["twice"] = member.acknowledge(tid, [(1, 1, 1)])
        out["never"] = member.acknowledge(tid, [(9, 9, 1)])
        member.session += 5
        out["epoch"] = int(member.fetch(tid).error_code)
        stranger = Member(b, group)
        stranger.session = 1
        out["no_session"] = int(stranger.fetch(tid).error_code)
        out["lag"] = [(e, lag) for e, lag, _ in member.offsets(topic)]
        out["leave"] = member.leave()
        return out
    got = same(pair, steps)
    assert got["acquired"] == [(0, 3, 1)] and got["twice"] == [0] and got["never"] == [121]
    assert (got["epoch"], got["no_session"]) == (123, 122)


def test_share_groups_tool_as_on_kafka(pair):  # noqa: F811
    """kafka-share-groups on an empty share group: --reset-offsets (AlterShareGroupOffsets), --describe with
    --offsets and --state, --delete-offsets (DeleteShareGroupOffsets), --delete and --list print the same
    lines on both brokers but for the coordinator's address."""
    from chronolog.testing.kafka import kafka_available, run_tool

    if kafka_available():
        pytest.skip(kafka_available())
    tool = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
    group = unique("g")

    def steps(b):
        topic = b.create_topic(unique("st"), 1)
        _produce(b, topic, [f"v{i}" for i in range(5)])
        out = []
        for args in (["--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute"],
                     ["--describe", "--group", group],
                     ["--reset-offsets", "--group", group, "--topic", topic, "--to-offset", "3", "--execute"],
                     ["--describe", "--group", group, "--offsets", "--verbose"],
                     ["--describe", "--group", group, "--state"],
                     ["--list"],
                     ["--delete-offsets", "--group", group, "--topic", topic],
                     ["--describe", "--group", group],
                     ["--delete", "--group", group]):
            proc = run_tool(tool, "--bootstrap-server", b.bootstrap, *args)
            lines = [" ".join(ln.split()).replace(topic, "T").replace(b.bootstrap, "HOST")
                     for ln in proc.stdout.splitlines() if ln.strip()]
            if args[0] == "--list":
                lines = [ln for ln in lines if ln == group]
            out.append((args[0], proc.returncode, lines))
        return out
    got = same(pair, steps)
    assert got[3][2][1:] == [f"{group} T 0 0 3 2"] and got[5][2] == [group]


def test_read_committed_skips_aborted_records(pair):  # noqa: F811
    """share.isolation.level=read_committed: records of an aborted transaction are never acquired
    (SharePartition.maybeFilterAbortedTransactionalAcquiredRecords archives them); the committed ones and the
    transaction markers are, once."""
    group = unique("g")

    def steps(b):
        topic = b.create_topic(unique("sr"), 1)
        producer = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": unique("tx")})
        producer.init_transactions(30)
        for values, commit in ((["c0", "c1"], True), (["a0", "a1"], False), (["c2"], True)):
            producer.begin_transaction()
            for v in values:
                producer.produce(topic, value=v.encode(), partition=0)
            producer.flush(30)  # in the log before the abort (an abort drops what is still queued)
            producer.commit_transaction(30) if commit else producer.abort_transaction(30)
        incremental(b, group, [("share.auto.offset.reset", SET, "earliest"),
                               ("share.isolation.level", SET, "read_committed")], rtype=GROUP_RESOURCE)
        member, tid = Member(b, group), _topic_id(b, topic)
        out: dict[str, Any] = {"join": member.join(topic), "acquired": []}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(a <= 7 <= z for a, z, _ in out["acquired"]):
            got = member.fetch_records(tid, bound_s=5)
            out["acquired"] += got
            member.acknowledge(tid, [(a, z, 1) for a, z, _ in got])
        out["lag"] = [(e, lag) for e, lag, _ in member.offsets(topic)]
        member.leave()
        return out
    got = same(pair, steps)
    # c0 c1 [commit] a0 a1 [abort] c2 [commit]: the markers are acquired too (the client acknowledges them)
    assert got["acquired"] == [(0, 2, 1), (5, 7, 1)]
