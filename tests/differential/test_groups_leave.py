"""LeaveGroup on chronolog and Kafka 4.4: a static member named by its group.instance.id alone (v3+, an
empty member id: KIP-345's administrative removal, what `kafka-consumer-groups --delete` style tools and
client suites send) leaves at once, alone or in a batch, so a DeleteGroups right after succeeds. chronolog
answered UNKNOWN_MEMBER_ID and kept the member until its session timed out (GroupMetadataManager
.classicGroupLeaveToClassicGroup / classicGroupLeaveToConsumerGroup)."""

from __future__ import annotations

import re
import time
import uuid

import pytest

from tests.differential.groups_wire import Member848, call, coordinator_ready, join_and_sync


def _id(member_id: str) -> str:
    """A member id without its random part: `<client id or group.instance.id>-<uuid>`."""
    return re.sub(r"-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", "-<uuid>", member_id)


def _leave(side, group: str, members: list[tuple[str, str | None]], version: int) -> dict:
    answer = call(side, 13, version, group_id=group,
                  members=[{"member_id": m, "group_instance_id": i, "reason": None} for m, i in members])
    return {"error_code": answer["error_code"],
            "members": [(_id(m["member_id"]), m["group_instance_id"], m["error_code"]) for m in answer["members"]]}


def _describe(side, group: str) -> tuple[str, int]:
    (g,) = call(side, 15, 5, groups=[group], include_authorized_operations=False)["groups"]
    return g["group_state"], len(g["members"])


def _delete(side, group: str) -> int:
    return call(side, 42, 2, groups_names=[group])["results"][0]["error_code"]


def static_member_leaves_by_instance_id(side, version: int) -> dict:
    topic = side.create_topic(partitions=1, prefix="lv")
    group = f"glv-{uuid.uuid4().hex[:10]}"
    coordinator_ready(side, group)
    member, _generation = join_and_sync(side, group, topic, instance_id="inst-a")
    return {"described before": _describe(side, group),
            "other member, same instance": _leave(side, group, [("not-" + member, "inst-a")], version),
            "unknown instance": _leave(side, group, [("", "inst-z")], version),
            "leave": _leave(side, group, [("", "inst-a")], version),
            "described after": _describe(side, group),
            "again": _leave(side, group, [("", "inst-a")], version),
            "delete": _delete(side, group)}


@pytest.mark.parametrize("version", [3, 4, 5])
def test_a_static_member_leaves_by_instance_id(both, version):
    seen = both.same(static_member_leaves_by_instance_id, version)
    assert [tuple(m) for m in seen["leave"]["members"]] == [("", "inst-a", 0)] and seen["delete"] == 0


def static_members_leave_in_a_batch(side) -> dict:
    """Two static librdkafka consumers closed without leaving (a static member does not leave on close), then
    one LeaveGroup naming both instances, an unknown one and an unknown member id."""
    topic = side.create_topic(partitions=2, prefix="lvb")
    group = f"glb-{uuid.uuid4().hex[:10]}"
    consumers = [side.consumer(**{"group.id": group, "group.instance.id": f"inst-{i}",
                                  "session.timeout.ms": 45000}) for i in range(2)]
    for c in consumers:
        c.subscribe([topic])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(c.assignment() for c in consumers):
        for c in consumers:
            c.poll(0.1)
    assert all(c.assignment() for c in consumers), f"{side.kind}: the static consumers were not assigned"
    for c in consumers:
        c.close()
    before = _describe(side, group)
    leave = _leave(side, group, [("", "inst-0"), ("", "inst-9"), ("nobody", None), ("", "inst-1")], 5)
    return {"described before": before, "leave": leave, "described after": _describe(side, group),
            "delete": _delete(side, group)}


def test_static_members_leave_in_a_batch(both):
    seen = both.same(static_members_leave_in_a_batch)
    assert tuple(seen["described before"]) == ("Stable", 2) and seen["delete"] == 0


def leave_without_a_group_or_a_member(side, version: int) -> dict:
    topic = side.create_topic(partitions=1, prefix="lvn")
    group = f"gln-{uuid.uuid4().hex[:10]}"
    coordinator_ready(side, group)
    out = {}
    if version >= 3:
        out["absent group"] = _leave(side, group, [("", "inst-a")], version)
    else:
        out["absent group"] = call(side, 13, version, group_id=group, member_id="m")["error_code"]
    member, _generation = join_and_sync(side, group, topic)
    if version >= 3:
        out["unknown member"] = _leave(side, group, [("nobody", None)], version)
        out["dynamic member"] = _leave(side, group, [(member, None)], version)
    else:
        out["unknown member"] = call(side, 13, version, group_id=group, member_id="nobody")["error_code"]
        out["dynamic member"] = call(side, 13, version, group_id=group, member_id=member)["error_code"]
    out["described after"] = _describe(side, group)
    out["delete"] = _delete(side, group)
    return out


@pytest.mark.parametrize("version", [0, 1, 2, 3, 5])
def test_leave_group_errors(both, version):
    both.same(leave_without_a_group_or_a_member, version)


def consumer_protocol_static_member(side) -> dict:
    """A static member of the consumer protocol is removed by a LeaveGroup naming its instance id too (Kafka
    4.4 fences it at once); its next heartbeat answers UNKNOWN_MEMBER_ID."""
    topic = side.create_topic(partitions=1, prefix="lvc")
    group = f"glc-{uuid.uuid4().hex[:10]}"
    coordinator_ready(side, group)
    member = Member848(side, group, topics=[topic], instance_id="inst-k")
    member.settle(lambda m: bool(m.owned))
    out = {"by instance": _leave(side, group, [("", "inst-k")], 5)["members"][0][2],
           "by member id": _leave(side, group, [(member.member_id, None)], 5)["members"][0][2],
           "other member, same instance": _leave(side, group, [("x", "inst-k")], 5)["members"][0][2],
           "still there": member.beat()["error_code"]}
    member.leave()
    return out


def test_a_consumer_protocol_static_member_leaves_by_instance_id(both):
    both.same(consumer_protocol_static_member)
