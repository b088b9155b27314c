"""KIP-848 consumer groups, sans I/O: the coordinator's heartbeat state machine and the handlers of the newer
admin APIs. Each test is named after the Kafka test it mirrors (GroupMetadataManagerTest, ConsumerGroupTest,
RangeAssignorTest, UniformHomogeneousAssignmentBuilderTest, KafkaApisTest,
DescribeTopicPartitionsRequestHandlerTest)."""

from __future__ import annotations

import asyncio
import struct
import time
import uuid
from types import SimpleNamespace as NS

import pytest

from chronolog.config import BrokerConfig
from chronolog.errors import ErrorCode
from chronolog.protocol.consumer_groups import (
    consumer_group_describe,
    describe_cluster,
    describe_topic_partitions,
)
from chronolog.protocol.core import metadata, topic_uuid
from chronolog.protocol.registry import BrokerState, RequestContext
from chronolog.server.assignment import range_assign, uniform_assign
from chronolog.server.classic_group import Group, Member
from chronolog.server.consumer_group import ConsumerMember
from chronolog.server.coordinator import GroupCoordinator
from chronolog.storage import LogManager

TOPICS = {"foo": 4, "bar": 2}


@pytest.fixture
def coord(tmp_path):
    c = GroupCoordinator(tmp_path / "state", BrokerConfig({"group.consumer.heartbeat.interval.ms": "300"}))
    c.store.load()
    yield c
    c.consumer.close()
    c.store.close()


def hb(coord, member_id, epoch, subscribed=None, owned=None, group="g", assignor=None, topics=None, **kw):
    return coord.consumer.heartbeat(group, member_id, epoch, instance_id=kw.get("instance_id"), rack_id=None,
                                    rebalance_timeout_ms=kw.get("rebalance_timeout_ms", 5000), subscribed=subscribed,
                                    regex=kw.get("regex"), assignor=assignor, owned=owned, client_id="c",
                                    client_host="/127.0.0.1", topics=topics or TOPICS)


def join(coord, member_id, topics=("foo",), **kw):
    return hb(coord, member_id, 0, list(topics), {}, **kw)


def test_consumer_heartbeat_request_validation(coord):
    """GroupMetadataManagerTest.testConsumerHeartbeatRequestValidation."""
    assert hb(coord, "m", 0, None, {})["error_code"] == ErrorCode.INVALID_REQUEST  # no subscription on join
    assert hb(coord, "m", 0, ["foo"], None)["error_code"] == ErrorCode.INVALID_REQUEST  # owned must be []
    assert hb(coord, "m", 0, ["foo"], {"foo": frozenset({0})})["error_code"] == ErrorCode.INVALID_REQUEST
    assert hb(coord, "", 1, None, None)["error_code"] == ErrorCode.INVALID_REQUEST  # no member id
    assert hb(coord, "m", -3, None, None)["error_code"] == ErrorCode.INVALID_REQUEST  # no such epoch
    assert hb(coord, "m", -2, None, None)["error_code"] == ErrorCode.INVALID_REQUEST  # static leave, no instance
    assert hb(coord, "m", 0, ["foo"], {}, rebalance_timeout_ms=-1)["error_code"] == ErrorCode.INVALID_REQUEST
    assert hb(coord, "m", 0, None, {}, regex="(")["error_code"] == ErrorCode.INVALID_REGULAR_EXPRESSION
    # Kafka 4.4 (GroupCoordinatorService): "GroupId can't be empty." is INVALID_REQUEST, after the member id
    assert hb(coord, "m", 0, ["foo"], {}, group="")["error_code"] == ErrorCode.INVALID_REQUEST
    assert join(coord, "m", assignor="sticky")["error_code"] == ErrorCode.UNSUPPORTED_ASSIGNOR
    assert not coord.consumer.groups  # nothing was created by refused requests


def test_member_joins_empty_consumer_group(coord):
    """GroupMetadataManagerTest.testMemberJoinsEmptyConsumerGroup: epoch 1, the whole subscription."""
    r = join(coord, "m1")
    assert (r["error_code"], r["member_epoch"], r["heartbeat_interval_ms"]) == (0, 1, 300)
    assert r["assignment"] == {"foo": frozenset({0, 1, 2, 3})}
    again = hb(coord, "m1", 1, None, {"foo": frozenset({0, 1, 2, 3})})
    assert (again["member_epoch"], again["assignment"]) == (1, None)  # unchanged: no assignment sent
    assert coord.consumer.groups["g"].state == "Stable"


def test_reconciliation_process(coord):
    """GroupMetadataManagerTest.testReconciliationProcess: a new member gets a new group epoch but only the
    partitions nobody holds; the old member revokes first and keeps its epoch until it reports the revocation;
    then the new member receives the released partitions."""
    join(coord, "m1")
    r2 = join(coord, "m2")
    assert (r2["member_epoch"], r2["assignment"]) == (2, {})  # its share is still m1's
    r1 = hb(coord, "m1", 1, None, {"foo": frozenset({0, 1, 2, 3})})
    kept = r1["assignment"]["foo"]
    assert r1["member_epoch"] == 1 and len(kept) == 2  # revoke the other two, same epoch
    assert coord.consumer.groups["g"].state == "Reconciling"
    still = hb(coord, "m2", 2, None, {})
    assert not still["assignment"]  # m1 has not released yet
    done = hb(coord, "m1", 1, None, {"foo": kept})
    assert done["member_epoch"] == 2
    r2 = hb(coord, "m2", 2, None, {})
    assert r2["assignment"] == {"foo": frozenset({0, 1, 2, 3}) - kept}
    hb(coord, "m2", 2, None, r2["assignment"])
    assert coord.consumer.groups["g"].state == "Stable"


def test_leaving_member_bumps_group_epoch(coord):
    """GroupMetadataManagerTest.testLeavingMemberBumpsGroupEpoch: the leaver's partitions go to the others."""
    join(coord, "m1")
    join(coord, "m2")
    r1 = hb(coord, "m1", 1, None, {"foo": frozenset({0, 1, 2, 3})})
    hb(coord, "m1", 1, None, {"foo": r1["assignment"]["foo"]})
    left = hb(coord, "m2", -1)
    assert (left["error_code"], left["member_epoch"]) == (0, -1)
    r1 = hb(coord, "m1", 2, None, {"foo": r1["assignment"]["foo"]})
    assert (r1["member_epoch"], r1["assignment"]) == (3, {"foo": frozenset({0, 1, 2, 3})})


def test_member_epoch_fenced_and_unknown_member(coord):
    """GroupMetadataManagerTest.testMemberIdGenerated / testUnknownMemberIdJoins / testFencedMemberEpoch: a
    wrong epoch is fenced; the previous epoch is accepted while the member owns a subset (a lost response)."""
    join(coord, "m1")
    assert hb(coord, "m1", 5, None, None)["error_code"] == ErrorCode.FENCED_MEMBER_EPOCH
    assert hb(coord, "nobody", 1, None, None)["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    assert hb(coord, "m1", 1, None, None, group="gone")["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
    join(coord, "m2", topics=("foo", "bar"))  # epoch 2; m1 is still at 1
    r1 = hb(coord, "m1", 1, None, {"foo": frozenset({0, 1, 2, 3})})
    hb(coord, "m1", 1, None, {"foo": r1["assignment"]["foo"]})  # now epoch 2, previous 1
    assert hb(coord, "m1", 1, None, {"foo": r1["assignment"]["foo"]})["error_code"] == 0
    assert hb(coord, "m1", 1, None, {"bar": frozenset({0})})["error_code"] == ErrorCode.FENCED_MEMBER_EPOCH
    v0 = coord.consumer.heartbeat("g2", "", 0, instance_id=None, rack_id=None, rebalance_timeout_ms=1,
                                  subscribed=["foo"], regex=None, assignor=None, owned={}, client_id="c",
                                  client_host="h", topics=TOPICS)
    assert v0["error_code"] == 0 and uuid.UUID(v0["member_id"])  # version 0: the coordinator names the member


def test_session_timeout_and_rebalance_timeout_expiration(coord):
    """GroupMetadataManagerTest.testSessionTimeoutExpiration and testRebalanceTimeoutExpiration."""
    join(coord, "m1")
    join(coord, "m2", rebalance_timeout_ms=1000)
    hb(coord, "m1", 1, None, {"foo": frozenset({0, 1, 2, 3})})  # m1 must revoke, within 5 s
    coord.consumer.expire(time.monotonic() + 10)  # m1 did not revoke within its 5 s rebalance timeout
    assert list(coord.consumer.groups["g"].members) == ["m2"]
    assert coord.consumer.groups["g"].epoch == 3  # the fencing is a group change
    coord.consumer.expire(time.monotonic() + 46)  # group.consumer.session.timeout.ms: 45 s
    assert coord.consumer.groups["g"].members == {}
    assert coord.consumer.groups["g"].state == "Empty"


def test_consumer_group_heartbeat_with_non_empty_classic_group(coord):
    """GroupMetadataManagerTest.testConsumerGroupHeartbeatWithNonEmptyClassicGroup (migration disabled) and
    testConsumerGroupHeartbeatWithEmptyClassicGroup: an empty classic group gives way, its offsets stay."""
    classic = coord.groups["busy"] = Group("busy")
    classic.members["x"] = Member("x", None, "c", "h", 6000, 6000, "consumer", [])
    r = join(coord, "m1", group="busy")
    assert r["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND and "not a consumer group" in r["error_message"]
    coord.groups["idle"] = Group("idle")
    coord.commit("idle", -1, "", [("foo", 0, 7, -1, None)])
    assert join(coord, "m1", group="idle")["error_code"] == 0
    assert "idle" not in coord.groups and "idle" in coord.consumer.groups
    assert coord.fetch_offsets("idle", [("foo", 0)]) == {("foo", 0): (7, -1, "")}  # null metadata is kept as ""
    assert coord.consumer.give_way("idle") is False  # while it has members a classic join joins it instead
    hb(coord, "m1", -1, group="idle")
    assert coord.consumer.give_way("idle") is True and "idle" not in coord.consumer.groups


def test_validate_offset_commit(coord):
    """ConsumerGroupTest.testValidateOffsetCommit: version 9+, the member's epoch (Kafka 4.4: stale above it,
    and below it for partitions not held since that epoch, KIP-1251); a commit without a member only while
    the group is empty."""
    join(coord, "m1")
    offsets = [("foo", 0, 3, -1, None)]
    assert coord.commit("g", 1, "m1", offsets, api_version=8) == ErrorCode.UNSUPPORTED_VERSION
    assert coord.commit("g", 0, "m1", offsets, api_version=9) == ErrorCode.STALE_MEMBER_EPOCH
    assert coord.commit("g", 2, "m1", offsets, api_version=9) == ErrorCode.STALE_MEMBER_EPOCH
    assert coord.commit("g", 1, "zz", offsets, api_version=9) == ErrorCode.UNKNOWN_MEMBER_ID
    assert coord.commit("g", -1, "", offsets, api_version=9) == ErrorCode.UNKNOWN_MEMBER_ID
    assert coord.commit("g", 1, "m1", offsets, api_version=9) == 0
    assert coord.fetch_offsets("g", [("foo", 0)])[("foo", 0)][0] == 3
    assert "g" not in coord.groups  # the commit did not make a classic group of the same id
    assert coord.delete_group("g") == ErrorCode.NON_EMPTY_GROUP
    hb(coord, "m1", -1)
    assert coord.commit("g", -1, "", offsets, api_version=9) == 0
    assert [g["group_type"] for g in coord.list_groups()] == ["consumer"]
    assert coord.delete_group("g") == 0 and coord.fetch_offsets("g", None) == {}


def _members(subs: dict[str, tuple[str, ...]], held: dict[str, dict] | None = None) -> dict[str, ConsumerMember]:
    out = {}
    for m, topics in subs.items():
        out[m] = ConsumerMember(m, None, None, "c", "h", topics, None, 1000)
        out[m].assigned = (held or {}).get(m, {})
    return out


def test_range_assignor_co_partitioned_topics():
    """RangeAssignorTest.testFirstAssignmentTwoMembersTwoTopicsSameSubscriptions: member A gets partition
    ranges [0..] of every topic, B the next; the first (n % m) members get one more."""
    got = range_assign(_members({"A": ("foo", "bar"), "B": ("foo", "bar")}), {"foo": 3, "bar": 2})
    assert got == {"A": {"foo": frozenset({0, 1}), "bar": frozenset({0})},
                   "B": {"foo": frozenset({2}), "bar": frozenset({1})}}
    only = range_assign(_members({"A": ("foo",), "B": ("bar",)}), {"foo": 2, "bar": 2})
    assert only == {"A": {"foo": frozenset({0, 1})}, "B": {"bar": frozenset({0, 1})}}


def test_uniform_assignor_balanced_and_sticky():
    """UniformHomogeneousAssignmentBuilderTest.testReassignmentWhenOneMemberAddedAfterInitialAssignment:
    balanced (counts differ by at most one), and members keep what they held."""
    first = uniform_assign(_members({"A": ("foo",), "B": ("foo",)}), {"foo": 5})
    assert sorted(len(a["foo"]) for a in first.values()) == [2, 3]
    held = {m: a for m, a in first.items()}
    second = uniform_assign(_members({"A": ("foo",), "B": ("foo",), "C": ("foo",)}, held), {"foo": 5})
    counts = sorted(len(a.get("foo", ())) for a in second.values())
    assert counts == [1, 2, 2]
    for m in ("A", "B"):
        assert len(second[m]["foo"] & first[m]["foo"]) == len(second[m]["foo"])  # sticky: only gave some away
    assert set().union(*(a.get("foo", set()) for a in second.values())) == set(range(5))


@pytest.fixture
def ctx(tmp_path):
    with LogManager(tmp_path / "data", BrokerConfig()) as manager:
        manager.create_topic("alpha", 3)
        manager.create_topic("beta", 2)
        state = BrokerState(manager, manager.broker_config, "127.0.0.1", 9092)
        state.coordinator = GroupCoordinator(tmp_path / "state", manager.broker_config)
        yield lambda key, version: RequestContext(state, key, version, 1, "c", "127.0.0.1")


def test_describe_cluster_endpoint_types(ctx):
    """KafkaApisTest.testDescribeClusterRequest / AuthHelper: a broker answers broker endpoints; v0 answers
    INVALID_REQUEST, v1+ MISMATCHED_ENDPOINT_TYPE (controller) or UNSUPPORTED_ENDPOINT_TYPE (unknown)."""
    ok = describe_cluster(NS(include_cluster_authorized_operations=True, endpoint_type=1), ctx(60, 1))
    assert ok["error_code"] == 0 and ok["brokers"][0]["port"] == 9092 and ok["controller_id"] == 1
    assert ok["cluster_authorized_operations"] == sum(1 << c for c in (5, 7, 8, 9, 10, 11, 12))
    plain = describe_cluster(NS(include_cluster_authorized_operations=False, endpoint_type=1), ctx(60, 1))
    assert plain["cluster_authorized_operations"] == -2147483648
    assert describe_cluster(NS(include_cluster_authorized_operations=False, endpoint_type=2),
                            ctx(60, 1))["error_code"] == ErrorCode.MISMATCHED_ENDPOINT_TYPE
    assert describe_cluster(NS(include_cluster_authorized_operations=False, endpoint_type=0),
                            ctx(60, 1))["error_code"] == ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
    assert describe_cluster(NS(include_cluster_authorized_operations=False, endpoint_type=0),
                            ctx(60, 0))["error_code"] == ErrorCode.INVALID_REQUEST


def test_describe_topic_partitions_pagination(ctx):
    """DescribeTopicPartitionsRequestHandlerTest: topics sorted by name, a partition limit, a cursor to go on."""
    first = describe_topic_partitions(NS(topics=[], response_partition_limit=2, cursor=None), ctx(75, 0))
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in first["topics"]] == [
        ("alpha", [0, 1])]
    assert first["next_cursor"] == {"topic_name": "alpha", "partition_index": 2}
    cur = NS(topic_name="alpha", partition_index=2)
    second = describe_topic_partitions(NS(topics=[], response_partition_limit=2, cursor=cur), ctx(75, 0))
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in second["topics"]] == [
        ("alpha", [2]), ("beta", [0])]
    assert second["next_cursor"] == {"topic_name": "beta", "partition_index": 1}
    named = describe_topic_partitions(NS(topics=[NS(name="nope"), NS(name="beta")], response_partition_limit=10,
                                         cursor=None), ctx(75, 0))
    assert [(t["name"], t["error_code"], len(t["partitions"])) for t in named["topics"]] == [
        ("beta", 0, 2), ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 0)]
    assert named["next_cursor"] is None


def test_metadata_request_by_topic_id(ctx):
    """KafkaApisTest.testMetadataRequestWithTopicIds (v12, KIP-516): ids resolve to names; unknown ids answer
    UNKNOWN_TOPIC_ID. KIP-848 consumers look their assigned topic ids up this way."""
    c = ctx(3, 12)
    known = topic_uuid(c, "beta")
    req = NS(topics=[NS(name=None, topic_id=known), NS(name=None, topic_id=uuid.uuid4())],
             allow_auto_topic_creation=False, include_cluster_authorized_operations=False)
    topics = metadata(req, c)["topics"]
    assert [(t["name"], t["error_code"]) for t in topics] == [("beta", 0), (None, ErrorCode.UNKNOWN_TOPIC_ID)]


def test_consumer_group_describe(ctx, tmp_path):
    """GroupMetadataManagerTest.testConsumerGroupDescribeNoErrors / testConsumerGroupDescribeBeforeAndAfter
    Committing: members with their assignment and target; a classic or absent group is GROUP_ID_NOT_FOUND."""
    c = ctx(69, 0)
    coord = c.state.coordinator
    coord.consumer.heartbeat("g", "m1", 0, instance_id=None, rack_id=None, rebalance_timeout_ms=1000,
                             subscribed=["alpha"], regex=None, assignor="range", owned={}, client_id="cl",
                             client_host="/h", topics=c.log_manager.topics())
    coord.groups["old"] = Group("old")
    out = consumer_group_describe(NS(group_ids=["g", "old", "none"], include_authorized_operations=True), c)
    g, old, none = out["groups"]
    assert (g["error_code"], g["group_state"], g["group_epoch"], g["assignor_name"]) == (0, "Stable", 1, "range")
    (m,) = g["members"]
    assert m["member_epoch"] == 1 and m["assignment"]["topic_partitions"][0]["partitions"] == [0, 1, 2]
    assert m["assignment"]["topic_partitions"][0]["topic_id"] == topic_uuid(c, "alpha")
    assert old["error_code"] == none["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND


def test_consumer_group_heartbeat_with_regex(coord):
    """GroupMetadataManagerTest.testConsumerGroupMemberJoinsWithRegex...: SubscribedTopicRegex (v1) subscribes
    to every matching topic (full match, internal topics left out), and a topic created later that matches
    starts a new group epoch with it assigned."""
    topics = {"foo": 2, "food": 1, "bar": 1, "__consumer_offsets": 50}
    r = hb(coord, "m1", 0, None, {}, regex="fo.*", topics=topics)
    assert (r["error_code"], r["member_epoch"]) == (0, 1)
    assert r["assignment"] == {"foo": frozenset({0, 1}), "food": frozenset({0})}
    r = hb(coord, "m1", 1, None, {"foo": frozenset({0, 1}), "food": frozenset({0})},
           topics={**topics, "fox": 1})
    assert r["member_epoch"] == 2 and r["assignment"]["fox"] == frozenset({0})
    assert coord.consumer.groups["g"].members["m1"].names == ()


def test_static_member_rejoin(coord):
    """GroupMetadataManagerTest.testStaticMemberGetsBackAssignmentUponRejoin and
    testStaticMemberRejoinWithKnownInstanceIdWhileOtherMemberIsStillActive: an instance id in use answers
    UNRELEASED_INSTANCE_ID; after the static leave (epoch -2, no rebalance) the instance comes back under a
    new member id with the same assignment and epoch."""
    join(coord, "a1", instance_id="i-a")
    r = join(coord, "b1", instance_id="i-b")
    hb(coord, "a1", 1, None, {"foo": frozenset({0, 1, 2, 3})})
    kept = coord.consumer.groups["g"].members["a1"].assigned
    hb(coord, "a1", 1, None, kept)
    b = hb(coord, "b1", r["member_epoch"], None, {})
    assert join(coord, "a2", instance_id="i-a")["error_code"] == ErrorCode.UNRELEASED_INSTANCE_ID
    epoch = coord.consumer.groups["g"].epoch
    left = hb(coord, "a1", -2, instance_id="i-a")
    assert (left["error_code"], left["member_epoch"]) == (0, -2)
    assert coord.consumer.groups["g"].epoch == epoch  # no rebalance for a static leave
    back = join(coord, "a2", instance_id="i-a")
    assert (back["error_code"], back["member_epoch"], back["assignment"]) == (0, 2, kept)
    assert sorted(coord.consumer.groups["g"].members) == ["a2", "b1"]
    assert coord.consumer.groups["g"].epoch == epoch and b["error_code"] == 0


def test_validate_offset_fetch(coord):
    """ConsumerGroupTest.testValidateOffsetFetch (OffsetFetch v9): no member id and epoch -1 always goes;
    otherwise the member must be known and at its epoch."""
    join(coord, "m1")
    v = coord.consumer.validate_fetch
    assert (v("g", None, -1), v("g", "m1", 1), v("classic-or-absent", "x", 3)) == (0, 0, 0)
    assert v("g", "zz", 1) == ErrorCode.UNKNOWN_MEMBER_ID
    assert (v("g", "m1", 0), v("g", "m1", 2)) == (ErrorCode.STALE_MEMBER_EPOCH, ErrorCode.STALE_MEMBER_EPOCH)


def _classic_join(coord, member_id="", require_known=True, group="g", topics=("foo",), owned=None):
    """A classic JoinGroup with a ConsumerProtocolSubscription v1 (topics, owned partitions)."""
    meta = struct.pack(">hi", 1, len(topics)) + b"".join(struct.pack(">h", len(t)) + t.encode() for t in topics)
    meta += struct.pack(">i", -1)
    owned = owned or {}
    meta += struct.pack(">i", len(owned)) + b"".join(
        struct.pack(">h", len(t)) + t.encode() + struct.pack(f">i{len(ps)}i", len(ps), *sorted(ps))
        for t, ps in owned.items())
    return asyncio.run(coord.join(group, member_id, None, "classic", "/127.0.0.1", 10_000, 60_000, "consumer",
                                  [("range", meta)], require_known, topics=TOPICS))


def _assignment(raw: bytes) -> dict[str, frozenset[int]]:
    version, count = struct.unpack_from(">hi", raw)
    pos, out = 6, {}
    for _ in range(count):
        (n,) = struct.unpack_from(">h", raw, pos)
        topic = raw[pos + 2:pos + 2 + n].decode()
        pos += 2 + n
        (k,) = struct.unpack_from(">i", raw, pos)
        out[topic] = frozenset(struct.unpack_from(f">{k}i", raw, pos + 4))
        pos += 4 + 4 * k
    return out


def test_classic_group_join_to_consumer_group(coord):
    """GroupMetadataManagerTest's classic members in a consumer group (classicGroupJoinToConsumerGroup,
    classicGroupSyncToConsumerGroup, classicGroupHeartbeatToConsumerGroup), whatever the migration policy:
    a classic member joins a non-empty consumer group as a follower (generation = its member epoch), is
    assigned by the server-side assignor once the consumer member released its share, learns of it through
    REBALANCE_IN_PROGRESS on its heartbeat and a rejoin, commits with its generation, and its leave hands
    the partitions back."""
    join(coord, "m1")
    hb(coord, "m1", 1, None, {"foo": frozenset({0, 1, 2, 3})})
    first = _classic_join(coord)
    assert first["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
    cid = first["member_id"]
    joined = _classic_join(coord, cid)
    assert (joined["error_code"], joined["leader"], joined["members"], joined["protocol_name"]) == (0, "", [], "range")
    gen = joined["generation_id"]
    assert gen == coord.consumer.groups["g"].epoch == 2
    synced = asyncio.run(coord.sync("g", gen, cid, {}))
    assert synced["error_code"] == 0 and _assignment(synced["assignment"]) == {}  # its share is still m1's
    assert coord.heartbeat("g", gen, cid) == ErrorCode.REBALANCE_IN_PROGRESS
    r1 = hb(coord, "m1", 1, None, {"foo": frozenset({0, 1, 2, 3})})
    kept = r1["assignment"]["foo"]
    hb(coord, "m1", 1, None, {"foo": kept})  # released
    rejoined = _classic_join(coord, cid)
    assert rejoined["generation_id"] == gen
    synced = asyncio.run(coord.sync("g", gen, cid, {}))
    assert _assignment(synced["assignment"]) == {"foo": frozenset({0, 1, 2, 3}) - kept}
    assert coord.heartbeat("g", gen, cid) == 0
    assert coord.heartbeat("g", gen + 1, cid) == ErrorCode.ILLEGAL_GENERATION
    assert coord.commit("g", gen, cid, [("foo", 0, 5, -1, None)], api_version=8) == 0
    assert coord.commit("g", gen - 1, cid, [("foo", 0, 5, -1, None)], api_version=8) == ErrorCode.ILLEGAL_GENERATION
    assert coord.leave("g", [cid]) == [0]
    r1 = hb(coord, "m1", 2, None, {"foo": kept})
    assert r1["assignment"] == {"foo": frozenset({0, 1, 2, 3})}
