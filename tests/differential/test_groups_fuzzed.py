"""The classic and KIP-848 group APIs' differences the wire fuzzer found (issue #36), each a short request
sequence answered alike by chronolog and Kafka 4.4: which requests make a group (a JoinGroup with a member id
does not; one without does, even when refused), KIP-394's pending members (not members: the group stays
Empty and deletable), members removed when they send no SyncGroup within the rebalance timeout, the order of
SyncGroup's and ConsumerGroupHeartbeat's checks, partitions asked twice in OffsetFetch and OffsetDelete,
OffsetDelete of a non-consumer group with members, and the subscriptions OffsetDelete reads. Plus the one
case the fuzzer leaves out: a JoinGroup naming a protocol twice, which Kafka 4.4 never answers."""

from __future__ import annotations

import struct
import time
import uuid

from tests.differential import wirefuzz
from tests.differential.groups_wire import (
    assignment,
    call,
    coordinator_ready,
    join_and_sync,
    port_of,
    retry,
    subscription,
)

GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, INVALID_REQUEST, INCONSISTENT_GROUP_PROTOCOL = 69, 68, 42, 23
GROUP_SUBSCRIBED_TO_TOPIC = 86


def _group(side, prefix: str) -> str:
    group = f"{prefix}-{uuid.uuid4().hex[:8]}"
    coordinator_ready(side, group)
    return group


def _state(side, group: str) -> tuple[int, str, int]:
    """DescribeGroups v5: (error, state, number of members)."""
    g = call(side, 15, 5, groups=[group], include_authorized_operations=False)["groups"][0]
    return g["error_code"], g["group_state"], len(g["members"])


def _settled(side, group: str) -> tuple[int, str, int]:
    """`_state` once the group is there: Kafka answers a refused join before the new group's record is
    committed, and describes the group (Dead) as committed until then."""
    deadline = time.monotonic() + 10
    while (state := _state(side, group))[1] == "Dead" and time.monotonic() < deadline:
        time.sleep(0.05)
    return state


def _delete(side, group: str) -> int:
    return call(side, 42, 2, groups_names=[group])["results"][0]["error_code"]


def _join_values(group: str, **extra) -> dict:
    return {"group_id": group, "session_timeout": 10000, "rebalance_timeout": 10000, "member_id": "",
            "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": subscription(["t"])}], **extra}


def test_which_joins_make_a_group(both):
    def steps(side) -> dict:
        absent, refused = _group(side, "gfa"), _group(side, "gfr")
        out = {"known member, absent group": retry(side, 11, 5, **_join_values(absent, member_id="m"))["error_code"],
               "absent stays absent": (_state(side, absent)[0:2],
                                       call(side, 15, 6, groups=[absent], include_authorized_operations=False)
                                       ["groups"][0]["error_code"], _delete(side, absent),
                                       call(side, 47, 0, group_id=absent, topics=[])["error_code"]),
               # no protocols: INCONSISTENT_GROUP_PROTOCOL, but the group was made (written Empty)
               "refused join": retry(side, 11, 5, **_join_values(refused, protocols=[]))["error_code"],
               "refused made it": _settled(side, refused)}
        out["deleted"] = _delete(side, refused)
        return out

    seen = both.same(steps)
    assert seen["known member, absent group"] == 25 and seen["refused made it"] == (0, "Empty", 0)


def test_a_pending_member_is_not_a_member(both):
    def steps(side) -> dict:
        group, other = _group(side, "gfp"), _group(side, "gfq")
        first = retry(side, 11, 4, **_join_values(group))
        pending = retry(side, 11, 4, **_join_values(other))["member_id"]
        left = call(side, 13, 3, group_id=other, members=[{"member_id": pending, "group_instance_id": None},
                                                          {"member_id": "nobody", "group_instance_id": None}])
        return {"join": first["error_code"], "state": _settled(side, group), "delete": _delete(side, group),
                "leave": [m["error_code"] for m in left["members"]], "heartbeat": call(
                    side, 12, 3, group_id=other, generation_id=0, member_id=pending)["error_code"]}

    assert both.same(steps) == {"join": 79, "state": (0, "Empty", 0), "delete": 0, "leave": [0, 25],
                                "heartbeat": 25}


def test_a_member_without_sync_group_is_removed_after_the_rebalance_timeout(both):
    def steps(side) -> dict:
        group = _group(side, "gfs")
        joined = retry(side, 11, 5, **_join_values(group, group_instance_id="i", rebalance_timeout=200))
        deadline = time.monotonic() + 30
        while _state(side, group)[1] != "Empty" and time.monotonic() < deadline:
            time.sleep(0.05)
        return {"join": joined["error_code"], "state": _state(side, group), "delete": _delete(side, group)}

    assert both.same(steps) == {"join": 0, "state": (0, "Empty", 0), "delete": 0}


def test_sync_group_checks_in_kafkas_order(both):
    topic = both.create_topic(prefix="gfo")

    def steps(side) -> dict:
        group = _group(side, "gfo")
        member, generation = join_and_sync(side, group, topic)
        base = {"group_id": group, "generation_id": generation, "member_id": member, "group_instance_id": None,
                "assignments": [{"member_id": member, "assignment": assignment({topic: [0]})}]}
        return {
            # v5 without protocol type or name: KafkaApis answers before it looks at the group id
            "no name": call(side, 14, 5, **{**base, "group_id": ""}, protocol_type="consumer",
                            protocol_name=None)["error_code"],
            "other type": call(side, 14, 5, **base, protocol_type="connect", protocol_name="range")["error_code"],
            "other name": call(side, 14, 5, **base, protocol_type="consumer", protocol_name="rr")["error_code"],
            "old generation": call(side, 14, 5, **{**base, "generation_id": generation - 1},
                                   protocol_type="connect", protocol_name="rr")["error_code"],
            "same": call(side, 14, 5, **base, protocol_type="consumer", protocol_name="range")["error_code"],
            "offset delete of a subscribed topic": [p["error_code"] for t in call(
                side, 47, 0, group_id=group, topics=[{"name": topic, "partitions": [{"partition_index": 0}]}]
            )["topics"] for p in t["partitions"]]}

    assert both.same(steps) == {"no name": 23, "other type": 23, "other name": 23, "old generation": 22,
                                "same": 0, "offset delete of a subscribed topic": [86]}


def test_partitions_asked_twice_are_answered_twice(both):
    topic = both.create_topic(partitions=2, prefix="gft")

    def steps(side) -> dict:
        group = _group(side, "gft")
        commit = call(side, 8, 8, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                      group_instance_id=None, topics=[{"name": topic, "partitions": [
                          {"partition_index": 0, "committed_offset": 3, "committed_leader_epoch": -1,
                           "committed_metadata": ""}]}])
        fetched = call(side, 9, 7, group_id=group, require_stable=False, topics=[
            {"name": topic, "partition_indexes": [0, 0, 9]}, {"name": topic, "partition_indexes": [1]}])
        deleted = call(side, 47, 0, group_id=group, topics=[
            {"name": topic, "partitions": [{"partition_index": 0}, {"partition_index": 0}]},
            {"name": topic, "partitions": [{"partition_index": 9}, {"partition_index": 9}]}])
        return {"commit": commit["topics"][0]["partitions"][0]["error_code"],
                "fetched": sorted((p["partition_index"], p["committed_offset"]) for t in fetched["topics"]
                                  for p in t["partitions"]),
                "deleted": sorted((p["partition_index"], p["error_code"]) for t in deleted["topics"]
                                  for p in t["partitions"])}

    assert both.same(steps) == {"commit": 0, "fetched": [(0, 3), (0, 3), (1, -1), (9, -1)],
                                "deleted": [(0, 0), (0, 0), (9, 3), (9, 3)]}


def test_offset_delete_of_a_group_with_members_not_of_the_consumer_protocol(both):
    topic = both.create_topic(prefix="gfn")

    def steps(side) -> int:
        group = _group(side, "gfn")
        values = {"group_id": group, "session_timeout": 30000, "rebalance_timeout": 30000,
                  "group_instance_id": None, "protocol_type": "connect",
                  "protocols": [{"name": "sessioned", "metadata": b"x"}]}
        joined = retry(side, 11, 5, member_id="", **values)
        joined = retry(side, 11, 5, member_id=joined["member_id"], **values)  # (MEMBER_ID_REQUIRED first)
        assert joined["error_code"] == 0, joined
        return call(side, 47, 0, group_id=group, topics=[{"name": topic, "partitions": [{"partition_index": 0}]}]
                    )["error_code"]

    assert both.same(steps) == NON_EMPTY_GROUP


def test_offset_delete_reads_the_subscriptions_as_kafka_does(both):
    """ClassicGroup.computeSubscribedTopics reads each member's subscription as version 0: a negative count of
    topics does not parse (so any topic counts as subscribed), a name that is not UTF-8 decodes as Java
    decodes it (so the group's topics are known, and this one is not among them)."""
    topic = both.create_topic(prefix="gfs")
    named = struct.pack(">hi", 0, 1) + struct.pack(">h", len(topic)) + topic.encode() + struct.pack(">i", -1)
    metadata = {"negative count": struct.pack(">hii", 0, -3, -1), "not UTF-8": struct.pack(">hih", 0, 1, 2)
                + b"\xff\xfe" + struct.pack(">i", -1), "none": struct.pack(">hii", 0, 0, -1), "the topic": named}

    def steps(side) -> dict:
        out = {}
        for name, data in metadata.items():
            group = _group(side, "gfs")
            joined = retry(side, 11, 9, group_id=group, session_timeout=30000, rebalance_timeout=30000,
                           member_id="", group_instance_id="i", protocol_type="consumer", reason=None,
                           protocols=[{"name": "range", "metadata": data}])
            assert joined["error_code"] == 0, joined
            deleted = call(side, 47, 0, group_id=group, topics=[{"name": topic, "partitions": [{"partition_index": 0}]}])
            out[name] = [p["error_code"] for t in deleted["topics"] for p in t["partitions"]]
        return out

    assert both.same(steps) == {"negative count": [GROUP_SUBSCRIBED_TO_TOPIC], "not UTF-8": [0], "none": [0],
                                "the topic": [GROUP_SUBSCRIBED_TO_TOPIC]}


def test_streams_heartbeat_refuses_regexes_and_tasks_on_joining(both):
    """Kafka 4.4 refuses a topology with source-topic regexes (INVALID_REQUEST, after the topic names' check
    and before any other), and a join listing a task even of no partitions."""
    sub = {"subtopology_id": "s", "source_topics": ["x"], "source_topic_regex": [], "state_changelog_topics": [],
           "repartition_sink_topics": [], "repartition_source_topics": [], "copartition_groups": []}
    hb = {"group_id": "gfr", "member_id": "m", "member_epoch": 0, "endpoint_information_epoch": 0,
          "instance_id": None, "rack_id": None, "rebalance_timeout": 30000, "topology": {"epoch": 0,
          "subtopologies": [sub]}, "active_tasks": [], "standby_tasks": [], "warmup_tasks": [], "process_id": "p",
          "user_endpoint": None, "client_tags": [], "task_offsets": [], "task_end_offsets": [],
          "shutdown_application": False}
    regex = {"subtopologies": [{**sub, "source_topic_regex": ["x.*"]}], "epoch": 0}
    cases = {"regex": {"topology": regex}, "regex, no member id": {"topology": regex, "member_id": ""},
             "regex and a bad name": {"topology": {"epoch": 0, "subtopologies": [
                 {**sub, "source_topics": ["bad name!"], "source_topic_regex": ["x.*"]}]}},
             "a task of no partitions": {"standby_tasks": [{"subtopology_id": "s", "partitions": []}]}}

    def steps(side) -> dict:
        coordinator_ready(side, "gfr")
        wire = wirefuzz.Wire(port_of(side))
        try:
            return {name: wirefuzz.error_codes(wire.call(88, 0, wirefuzz.build(88, 0, {**hb, **extra}, {})))
                    for name, extra in cases.items()}
        finally:
            wire.close()

    assert both.same(steps) == {"regex": [("error_code", INVALID_REQUEST)],
                                "regex, no member id": [("error_code", INVALID_REQUEST)],
                                "regex and a bad name": [("error_code", 130)],
                                "a task of no partitions": [("error_code", INVALID_REQUEST)]}


def test_consumer_group_requests_check_the_member_id_first(both):
    def steps(side) -> dict:
        coordinator_ready(side, "gfc")
        wire = wirefuzz.Wire(port_of(side))
        hb = {"group_id": "", "member_id": "", "member_epoch": -1, "instance_id": None, "rack_id": None,
              "rebalance_timeout": 30000, "subscribed_topic_names": None, "server_assignor": None,
              "topic_partitions": None}
        try:
            def ask(key: int, version: int, values: dict) -> list:
                return wirefuzz.error_codes(wire.call(key, version, wirefuzz.build(key, version, values, {})))
            return {"no member, no group": ask(68, 0, hb),
                    "a member, no group": ask(68, 0, {**hb, "member_id": "m"}),
                    "v1 join without member id": ask(68, 1, {**hb, "group_id": "gfc", "member_epoch": 0,
                                                             "subscribed_topic_names": ["t"],
                                                             "subscribed_topic_regex": None,
                                                             "topic_partitions": []}),
                    "describe ''": ask(69, 0, {"group_ids": [""], "include_authorized_operations": False})}
        finally:
            wire.close()

    assert both.same(steps) == {"no member, no group": [("error_code", INVALID_REQUEST)],
                                "a member, no group": [("error_code", INVALID_REQUEST)],
                                "v1 join without member id": [("error_code", INVALID_REQUEST)],
                                "describe ''": [("groups.error_code", 24)]}


def test_a_join_naming_a_protocol_twice(both):
    """Kafka 4.4 never answers it (its group stays PreparingRebalance); chronolog lets the member join with
    the protocol's last metadata. The fuzzer names each protocol once (wirefuzz._fix_join)."""
    def steps(side) -> list:
        group = _group(side, "gfd")
        wire = wirefuzz.Wire(port_of(side), timeout=3)
        values = {**_join_values(group, group_instance_id="i"), "session_timeout": 6000, "rebalance_timeout": 1000,
                  "protocols": [{"name": "range", "metadata": subscription(["t"])},
                                {"name": "range", "metadata": subscription(["u"])}]}
        try:
            return wirefuzz.error_codes(wire.call(11, 5, wirefuzz.build(11, 5, values, {})))
        finally:
            wire.close()

    chronolog, kafka = both.run(steps)
    assert chronolog == [("error_code", 0)]
    assert kafka == [(wirefuzz.TIMED_OUT, -1)]


def test_the_classic_apis_on_a_share_groups_id(both):
    topic = both.create_topic(prefix="gfh")

    def steps(side) -> dict:
        group = _group(side, "gfh")
        wire = wirefuzz.Wire(port_of(side))
        try:
            def ask(key: int, version: int, values: dict) -> list:
                return wirefuzz.error_codes(wire.call(key, version, wirefuzz.build(key, version, values, {})))
            member, deadline = uuid.uuid4().hex[:22], time.monotonic() + 30
            while (joined := ask(76, 1, {"group_id": group, "member_id": member, "member_epoch": 0,
                                         "rack_id": None, "subscribed_topic_names": [topic]})) in (
                    [("error_code", 14)], [("error_code", 15)], [("error_code", 16)]) and time.monotonic() < deadline:
                time.sleep(0.1)  # the share coordinator still starting
        finally:
            wire.close()
        commit = call(side, 8, 8, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                      group_instance_id=None, topics=[{"name": topic, "partitions": [
                          {"partition_index": 0, "committed_offset": 3, "committed_leader_epoch": -1,
                           "committed_metadata": ""}]}])
        return {"share join": joined,
                "classic join": retry(side, 11, 7, **_join_values(group))["error_code"],
                "commit": commit["topics"][0]["partitions"][0]["error_code"],
                "offset delete": call(side, 47, 0, group_id=group, topics=[
                    {"name": topic, "partitions": [{"partition_index": 0}]}])["error_code"],
                "heartbeat": call(side, 12, 4, group_id=group, generation_id=1, member_id="m")["error_code"]}

    assert both.same(steps) == {"share join": [("error_code", 0)], "classic join": INCONSISTENT_GROUP_PROTOCOL,
                                "commit": GROUP_ID_NOT_FOUND, "offset delete": GROUP_ID_NOT_FOUND,
                                "heartbeat": 25}
