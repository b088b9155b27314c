"""Streams groups (KIP-1071) in the group coordinator: the topology configured against the topics (internal
topics created), the sticky task assignor, the members' lifecycle (join, reconcile with revocation first,
leave, session expiry, fencing), member-epoch commit checks, and the group's state replayed after a restart
from its record in `__consumer_offsets`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager

from chronolog.config import BrokerConfig
from chronolog.errors import ErrorCode
from chronolog.records import group_records as gr
from chronolog.server.coordinator import GroupCoordinator
from chronolog.server.streams_group import HeartbeatRequest
from chronolog.server.streams_topology import (
    MISSING_SOURCE_TOPICS,
    AssignorMember,
    Subtopology,
    TopicInfo,
    Topology,
    configure,
    sticky_assign,
)

CONFIG = {"group.streams.heartbeat.interval.ms": "300", "offsets.topic.num.partitions": "1",
          "group.streams.session.timeout.ms": "1000"}
REPARTITION, CHANGELOG = "app-agg-repartition", "app-agg-changelog"
# The count app's topology: subtopology 0 reads `in` and writes the repartition topic, 1 reads it and keeps a store
TOPOLOGY = Topology(1, (
    Subtopology("0", source_topics=("in",), repartition_sinks=(REPARTITION,)),
    Subtopology("1", repartition_sources=(TopicInfo(REPARTITION, 0, 0, (("cleanup.policy", "delete"),)),),
                changelogs=(TopicInfo(CHANGELOG, 0, 0, (("cleanup.policy", "compact"),)),))))


def start(path) -> GroupCoordinator:
    c = GroupCoordinator(path, BrokerConfig(CONFIG))

    async def go() -> None:
        await c.start()
        for task in (c._reaper, c._retention):
            task.cancel()
    asyncio.run(go())
    if not c.store.logs.has_topic("in"):
        c.store.logs.create_topic("in", 3, {})
    return c


def stop(c: GroupCoordinator) -> None:
    asyncio.run(c.stop())


@contextmanager
def running(path) -> Iterator[GroupCoordinator]:
    """A started coordinator on `path` (its reaper and retention tasks off), stopped after the block."""
    c = start(path)
    try:
        yield c
    finally:
        stop(c)


def hb(c, member, epoch, owned=None, process="p1", topology=None, **kw):
    if epoch == 0 and topology is None:
        topology = TOPOLOGY
    req = HeartbeatRequest("app", member, epoch, rebalance_timeout_ms=5000, topology=topology,
                           owned=None if owned is None else {"active": owned, "standby": {}, "warmup": {}},
                           process_id=process if epoch == 0 else None, client_id="c", client_host="/127.0.0.1", **kw)
    logs = c.store.logs
    return asyncio.run(c.streams.heartbeat_async(req, logs.topics(), logs.create_topic))


def active(result) -> dict[str, list[int]]:
    return {t["subtopology_id"]: t["partitions"] for t in result["active_tasks"]}


def test_configure_derives_repartition_and_changelog_partitions():
    conf = configure(TOPOLOGY, {"in": 3})
    assert conf.tasks == {"0": 3, "1": 3}
    assert conf.to_create == {REPARTITION: (3, {"cleanup.policy": "delete"}), CHANGELOG: (3, {"cleanup.policy":
                                                                                            "compact"})}
    missing = configure(TOPOLOGY, {})
    assert missing.tasks is None and missing.status[0][0] == MISSING_SOURCE_TOPICS


def test_sticky_assignor_balances_keeps_tasks_and_spreads_standbys():
    tasks = {"0": 3, "1": 3}
    first = sticky_assign([AssignorMember("a", "p1", {}, {}), AssignorMember("b", "p2", {}, {})], tasks)
    assert sorted(sum(len(ps) for ps in a.values()) for a, _s in first.values()) == [3, 3]
    second = sticky_assign([AssignorMember("a", "p1", first["a"][0], {}), AssignorMember("b", "p2", first["b"][0], {}),
                            AssignorMember("c", "p3", {}, {})], tasks, num_standby=1)
    for mid in ("a", "b"):  # each keeps two of its three tasks, the new member gets the third ones
        kept = {(s, p) for s, ps in second[mid][0].items() for p in ps}
        assert len(kept) == 2 and kept <= {(s, p) for s, ps in first[mid][0].items() for p in ps}
    owner = {(s, p): m for m, (a, _s) in second.items() for s, ps in a.items() for p in ps}
    standby = {(s, p): m for m, (_a, sb) in second.items() for s, ps in sb.items() for p in ps}
    assert len(owner) == len(standby) == 6
    assert all(standby[t] != owner[t] for t in owner)


def test_members_join_reconcile_leave_and_expire(tmp_path):
    with running(tmp_path) as c:
        one = hb(c, "m1", 0)
        assert one["error_code"] == 0 and one["member_epoch"] == 1
        assert active(one) == {"0": [0, 1, 2], "1": [0, 1, 2]}
        assert c.store.logs.topics()[REPARTITION] == 3 and c.store.logs.topics()[CHANGELOG] == 3
        owned = {"0": frozenset({0, 1, 2}), "1": frozenset({0, 1, 2})}
        two = hb(c, "m2", 0, process="p2")
        assert two["member_epoch"] == 2 and active(two) == {}  # the new epoch, its tasks still m1's
        revoking = hb(c, "m1", 1, owned=owned)
        assert revoking["member_epoch"] == 1 and sum(len(v) for v in active(revoking).values()) == 3
        kept = {s: frozenset(ps) for s, ps in active(revoking).items()}
        done = hb(c, "m1", 1, owned=kept)
        assert done["member_epoch"] == 2
        taken = hb(c, "m2", 2, owned={})
        assert taken["member_epoch"] == 2 and sum(len(v) for v in active(taken).values()) == 3
        assert c.streams.groups["app"].state == "Stable"
        # commits carry the member epoch (TxnOffsetCommit as Streams' EOS producer sends it)
        assert c._check_txn_commit("app", 2, "m1", None, [("in", 0, 1, -1, None)], 5) == 0
        assert c._check_txn_commit("app", 3, "m1", None, [("in", 0, 1, -1, None)], 6) == ErrorCode.STALE_MEMBER_EPOCH
        assert c._check_txn_commit("app", 2, "nobody", None, [], 5) == ErrorCode.UNKNOWN_MEMBER_ID
        fenced = hb(c, "m1", 7, owned=kept)
        assert fenced["error_code"] == ErrorCode.FENCED_MEMBER_EPOCH
        left = hb(c, "m2", -1)
        assert left["member_epoch"] == -1 and set(c.streams.groups["app"].members) == {"m1"}
        assert c.streams.expire(time.monotonic() + 2) == ["app"]
        assert c.streams.groups["app"].state == "Empty"
        assert {g["group_id"]: g["group_type"] for g in c.list_groups()}["app"] == "streams"


def persisted(group) -> tuple:
    """What a restart must bring back of a streams group: epochs, topology, members and target assignment."""
    return (group.epoch, group.assignment_epoch, group.topology, {
        mid: (m.epoch, m.process_id, m.assigned) for mid, m in group.members.items()}, group.target)


def test_the_group_comes_back_after_a_restart(tmp_path):
    with running(tmp_path) as c:
        hb(c, "m1", 0)
        snapshot = persisted(c.streams.groups["app"])
    with running(tmp_path) as c:
        after = c.streams.groups["app"]
        assert persisted(after) == snapshot
        assert after.configured.tasks == {"0": 3, "1": 3}
        assert "app" not in c.groups  # not also a classic group
        assert hb(c, "m1", 1, owned={"0": frozenset({0, 1, 2}), "1": frozenset({0, 1, 2})})["member_epoch"] == 1
        assert c.delete_group("app") == ErrorCode.NON_EMPTY_GROUP
        hb(c, "m1", -1)
        assert c.delete_group("app") == 0
    with running(tmp_path) as c:
        assert "app" not in c.streams.groups  # the tombstone
        plog = c.store.logs.get_log(gr.CONSUMER_OFFSETS_TOPIC, 0)
        keys = [gr.streams_group_of(r.key) for r in plog.read_records(plog.log_start_offset)]
        assert "app" in keys


def test_group_configs_override_the_broker_settings(tmp_path):
    """streams.* group configs (IncrementalAlterConfigs on the GROUP resource) over group.streams.*."""
    with running(tmp_path) as c:
        c.streams.group_configs["app"] = {"streams.session.timeout.ms": "60000",
                                          "streams.heartbeat.interval.ms": "7000"}
        assert hb(c, "m1", 0)["heartbeat_interval_ms"] == 7000
        assert c.streams.expire(time.monotonic() + 2) == []  # the broker's 1000 ms would have fenced it
        assert c.streams.expire(time.monotonic() + 61) == ["app"]


def test_offsets_of_an_empty_group_may_be_deleted(tmp_path):
    with running(tmp_path) as c:
        hb(c, "m1", 0)
        assert c.delete_offsets("app", [("in", 0)]) == {("in", 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC}
        hb(c, "m1", -1)
        assert c.delete_offsets("app", [("in", 0)]) == {("in", 0): 0}


def test_owned_tasks_outside_the_configured_topology_are_refused(tmp_path):
    """GroupMetadataManager.throwIfRequestContainsInvalidTasks: once the topology is ready, a heartbeat owning a
    task of a subtopology it lacks, or past that subtopology's task count, is INVALID_REQUEST and changes
    nothing; while a source topic is missing the owned tasks are not checked."""
    with running(tmp_path) as c:
        joined = hb(c, "m1", 0)
        assert joined["member_epoch"] == 1
        group = c.streams.groups["app"]
        before = persisted(group)
        unknown = hb(c, "m1", 1, owned={"9": frozenset({0})})
        assert (unknown["error_code"], unknown["error_message"]) == (
            ErrorCode.INVALID_REQUEST, "Subtopology 9 does not exist in the topology.")
        past = hb(c, "m1", 1, owned={"0": frozenset({0, 3})})
        assert past["error_message"] == "Task 3 for subtopology 0 is invalid. Number of tasks for this subtopology: 3"
        assert persisted(group) == before
        assert hb(c, "m1", 1, owned={"0": frozenset({0, 1, 2}), "1": frozenset({0, 1, 2})})["error_code"] == 0

        waiting = Topology(1, (Subtopology("0", source_topics=("not-yet",)),))
        other = HeartbeatRequest("waiting", "w1", 0, rebalance_timeout_ms=5000, topology=waiting, process_id="p",
                                 owned={"active": {}, "standby": {}, "warmup": {}})
        logs = c.store.logs
        epoch = asyncio.run(c.streams.heartbeat_async(other, logs.topics(), logs.create_topic))["member_epoch"]
        other.epoch, other.topology, other.owned = epoch, None, {"active": {"9": frozenset({0})}}
        assert asyncio.run(c.streams.heartbeat_async(other, logs.topics(), logs.create_topic))["error_code"] == 0
        logs.create_topic("not-yet", 1, {})
        refused = asyncio.run(c.streams.heartbeat_async(other, logs.topics(), logs.create_topic))
        assert refused["error_message"] == "Subtopology 9 does not exist in the topology."


def test_internal_topic_of_an_unreachable_replication_factor(tmp_path):
    """A changelog asked with replication factor 3 is not created on one broker (nor one of -2): the topology
    stays not ready, MISSING_INTERNAL_TOPICS names the topic, and from the next heartbeat on the refusal too
    (KafkaApis: the creation errors cached by earlier attempts). Its repartition topic (factor 0: the broker's
    default) is made; a member who may not CREATE every missing topic makes none of them."""
    with running(tmp_path) as c:
        def topology(factor: int) -> Topology:
            changelog = TopicInfo(CHANGELOG, 0, factor, (("cleanup.policy", "compact"),))
            return Topology(1, (TOPOLOGY.subtopologies[0], Subtopology(
                "1", repartition_sources=TOPOLOGY.subtopologies[1].repartition_sources, changelogs=(changelog,))))

        joined = hb(c, "m1", 0, topology=topology(3))
        assert joined["status"] == [{"status_code": 3, "status_detail": f"Internal topics are missing: {REPARTITION}, "
                                                                        f"{CHANGELOG}"}]  # a Java HashSet's order
        assert (joined["member_epoch"], active(joined)) == (1, {})
        logs = c.store.logs
        assert logs.has_topic(REPARTITION) and not logs.has_topic(CHANGELOG)
        unreachable = ("Unable to replicate the partition 3 time(s): The target replication factor of 3 cannot be "
                       "reached because only 1 broker(s) are registered or some brokers have all their log "
                       "directories cordoned.")
        for _ in range(2):
            again = hb(c, "m1", 1, owned={})
            assert again["status"] == [{"status_code": 3, "status_detail": f"Internal topics are missing: "
                                        f"{CHANGELOG}; Creation failed: {CHANGELOG} ({unreachable})."}]
            assert again["error_code"] == 0 and "active_tasks" not in again
        assert c.streams.groups["app"].state == "NotReady" and not logs.has_topic(CHANGELOG)
        hb(c, "m1", -1)

        rejoined = hb(c, "m1", 0, topology=topology(-2))  # the group is empty: a new topology takes its place
        assert hb(c, "m1", rejoined["member_epoch"], owned={})["status"][0]["status_detail"] == (
            f"Internal topics are missing: {CHANGELOG}; Creation failed: {CHANGELOG} (Replication factor must be "
            "larger than 0, or -1 to use the default value.).")
        hb(c, "m1", -1)

        def may_create(name: str) -> bool:
            return name != "other-changelog"

        req = HeartbeatRequest("other", "o1", 0, rebalance_timeout_ms=5000, topology=Topology(1, (
            Subtopology("0", source_topics=("in",), changelogs=(TopicInfo("other-changelog", 0, 1),
                                                                 TopicInfo(CHANGELOG + "-2", 0, 1))),)),
                               process_id="p", owned={"active": {}, "standby": {}, "warmup": {}})
        refused = asyncio.run(c.streams.heartbeat_async(req, logs.topics(), logs.create_topic, may_create))
        assert refused["status"][0]["status_detail"].endswith("; Unauthorized to CREATE on topics other-changelog.")
        assert not logs.has_topic(CHANGELOG + "-2") and not logs.has_topic("other-changelog")


def test_topics_listed_in_kafkas_order():
    """InternalTopicManager.summarizeTopics lists a HashSet: the orders Kafka 4.4 answered for these names."""
    from chronolog.server.streams_topology import java_hash_order, summarize_topics

    three = ["g2-96e7ef36-x-changelog", "g2-96e7ef36-y-changelog", "g2-96e7ef36-zz-repartition"]
    assert java_hash_order(three) == ["g2-96e7ef36-zz-repartition", "g2-96e7ef36-y-changelog",
                                      "g2-96e7ef36-x-changelog"]
    six = [f"g2-d3b3b803-{n}-changelog" for n in "bacde"] + ["g2-d3b3b803-zz-repartition"]
    assert summarize_topics(six) == ("g2-d3b3b803-b-changelog, g2-d3b3b803-d-changelog, g2-d3b3b803-zz-repartition "
                                     "and 3 additional topics")
    assert summarize_topics([n for n in six if "-d-" not in n]) == (
        "g2-d3b3b803-b-changelog, g2-d3b3b803-zz-repartition, g2-d3b3b803-e-changelog and 2 additional topics")
