"""Static members of a classic group (KIP-345, Kafka's `classicGroupJoinNewStaticMember` and
`updateStaticMemberThenRebalanceOrCompleteJoin`): a consumer restarted with the same `group.instance.id`
takes over its old entry and assignment in a stable group without a rebalance, and the old member id is
fenced. Kafka's Java client relies on this (tests/jvm/test_java_client.py)."""

from __future__ import annotations

import asyncio

import pytest

from chronolog.config import BrokerConfig
from chronolog.errors import ErrorCode
from chronolog.server.classic_group import STABLE
from chronolog.server.coordinator import GroupCoordinator

SUBSCRIPTION = b"\x00\x00\x00\x00\x00\x01\x00\x03foo\xff\xff\xff\xff"


@pytest.fixture
def coord(tmp_path):
    c = GroupCoordinator(tmp_path / "state", BrokerConfig({"group.initial.rebalance.delay.ms": "100",
                                                           "group.min.session.timeout.ms": "1000"}))
    c.store.load()
    yield c
    c.consumer.close()
    c.store.close()


async def _join(coord, instance: str, member_id: str = "", protocols=None) -> dict:
    # JoinGroup v5+ (require_known_member): a static member still gets no MEMBER_ID_REQUIRED round trip
    return await coord.join("g", member_id, instance, f"client-{instance}", "/127.0.0.1", 10_000, 60_000,
                            "consumer", protocols or [("range", SUBSCRIPTION)], True)


async def _stable_pair(coord) -> dict[str, str]:
    """Static members a and b joined and synced generation 1: their member ids by instance id."""
    a, b = await asyncio.gather(_join(coord, "a"), _join(coord, "b"))
    assert a["error_code"] == b["error_code"] == 0 and a["generation_id"] == b["generation_id"] == 1
    ids = {"a": a["member_id"], "b": b["member_id"]}
    leader = a["leader"]
    follower = next(i for i in ids.values() if i != leader)
    pending = asyncio.create_task(coord.sync("g", 1, follower, {}))
    await asyncio.sleep(0)
    await coord.sync("g", 1, leader, {ids["a"]: b"for-a", ids["b"]: b"for-b"})
    await pending
    assert coord.groups["g"].state == STABLE
    return ids


def test_restarted_static_member_takes_over_without_rebalance(coord):
    async def scenario():
        ids = await _stable_pair(coord)
        group = coord.groups["g"]
        leader = group.leader
        back = await _join(coord, "a")
        assert back["error_code"] == 0 and back["member_id"] not in ids.values()
        assert back["member_id"].startswith("a-")
        # the same generation, answered at once, the leader as it was (even if a was it): nobody reassigns
        assert (back["generation_id"], back["leader"], back["members"]) == (1, leader, [])
        assert group.state == STABLE and group.generation == 1
        synced = await coord.sync("g", 1, back["member_id"], {})
        assert (synced["error_code"], synced["assignment"]) == (0, b"for-a")
        assert coord.heartbeat("g", 1, ids["b"]) == 0
        assert coord.heartbeat("g", 1, back["member_id"]) == 0
        # the old id of instance a (a consumer still running: a zombie) is fenced wherever it shows up, so
        # it stops instead of joining again and taking the instance back
        old = await _join(coord, "a", ids["a"])
        assert old["error_code"] == ErrorCode.FENCED_INSTANCE_ID
        assert coord.heartbeat("g", 1, ids["a"], "a") == ErrorCode.FENCED_INSTANCE_ID
        assert (await coord.sync("g", 1, ids["a"], {}, "a"))["error_code"] == ErrorCode.FENCED_INSTANCE_ID
        offsets = [("foo", 0, 5, -1, None)]
        assert coord.commit("g", 1, ids["a"], offsets, instance_id="a") == ErrorCode.FENCED_INSTANCE_ID
        assert coord.commit("g", 1, back["member_id"], offsets, instance_id="a") == 0
        assert coord.heartbeat("g", 1, ids["a"]) == ErrorCode.UNKNOWN_MEMBER_ID  # without its instance id
        assert coord.heartbeat("g", 1, back["member_id"], "b") == ErrorCode.FENCED_INSTANCE_ID
        assert set(group.members) == {back["member_id"], ids["b"]}

    asyncio.run(scenario())


@pytest.mark.parametrize("replaced", ["leader", "follower"])
def test_returning_static_leader_skips_assignment(coord, replaced):
    """JoinGroup v9+ (KIP-814): a static leader taking its entry back is named leader and told to skip the
    assignment (as leader it still watches the subscribed topics' partitions); a follower is answered as
    a follower."""
    async def scenario():
        ids = await _stable_pair(coord)
        group = coord.groups["g"]
        leader_instance = next(i for i, mid in ids.items() if mid == group.leader)
        instance = leader_instance if replaced == "leader" else ({"a", "b"} - {leader_instance}).pop()
        back = await coord.join("g", "", instance, "c", "/127.0.0.1", 10_000, 60_000, "consumer",
                                [("range", SUBSCRIPTION)], True, skip_assignment=True)
        assert back["error_code"] == 0 and back["generation_id"] == 1 and group.state == STABLE
        if replaced == "leader":
            assert (back["leader"], back["skip_assignment"]) == (back["member_id"], True)
            assert sorted(m["group_instance_id"] for m in back["members"]) == ["a", "b"]
            assert back["member_id"] in {m["member_id"] for m in back["members"]}
        else:
            assert (back["leader"], back["skip_assignment"], back["members"]) == (group.leader, False, [])
        synced = await coord.sync("g", 1, back["member_id"], {})
        assert synced["assignment"] == (b"for-a" if instance == "a" else b"for-b")

    asyncio.run(scenario())
