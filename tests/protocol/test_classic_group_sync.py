"""The classic group's JoinGroup/SyncGroup state machine (Kafka's `GroupMetadataManager` for classic groups,
`ClassicGroup`, `ClassicGroupMember`): the rejoin of a leader after an empty generation, driven frame by
frame over a socket in the order kafka-python 3.0.12 sends it, and the members a rebalance must keep.

The kafka-python hang this order came from (docs/reliability.md, "Known client issue") is the client's:
the broker answers every frame (below), and the client drops the answer it received."""

from __future__ import annotations

import asyncio
import socket
import struct
import time

import pytest

from chronolog.config import BrokerConfig
from chronolog.errors import ErrorCode
from chronolog.server.classic_group import COMPLETING, STABLE
from chronolog.server.coordinator import GroupCoordinator
from tests.brokerproc import broker  # noqa: F401  (fixture)
from tests.frames import recv_frame

JOIN_GROUP, SYNC_GROUP, HEARTBEAT = 11, 14, 12


def _str(s: str | None) -> bytes:
    return struct.pack(">h", -1) if s is None else struct.pack(">h", len(s)) + s.encode()


def _bytes(b: bytes) -> bytes:
    return struct.pack(">i", len(b)) + b


class RawClient:
    """JoinGroup v5, SyncGroup v3 and Heartbeat v3 (the last non-flexible versions), one request at a
    time on one connection, as a client's coordinator connection carries them."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=60)
        self.correlation = 0

    def call(self, api_key: int, version: int, body: bytes) -> bytes:
        self.correlation += 1
        header = struct.pack(">hhi", api_key, version, self.correlation) + _str("raw-client")
        self.sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
        frame = recv_frame(self.sock)  # socket timeout: an unanswered request fails the test, never hangs it
        assert struct.unpack_from(">i", frame)[0] == self.correlation
        return frame[4:]

    def join(self, group: str, member_id: str, metadata: bytes) -> dict:
        body = (_str(group) + struct.pack(">ii", 10_000, 300_000) + _str(member_id) + _str(None) + _str("consumer")
                + struct.pack(">i", 1) + _str("range") + _bytes(metadata))
        r = self.call(JOIN_GROUP, 5, body)
        _throttle, error, generation = struct.unpack_from(">ihi", r)
        pos = 10
        out = {"error_code": error, "generation": generation}
        for key in ("protocol_name", "leader", "member_id"):
            (n,) = struct.unpack_from(">h", r, pos)
            out[key] = r[pos + 2:pos + 2 + max(n, 0)].decode()
            pos += 2 + max(n, 0)
        (out["members"],) = struct.unpack_from(">i", r, pos)
        return out

    def sync(self, group: str, generation: int, member_id: str, assignments: dict[str, bytes]) -> dict:
        body = (_str(group) + struct.pack(">i", generation) + _str(member_id) + _str(None)
                + struct.pack(">i", len(assignments))
                + b"".join(_str(m) + _bytes(a) for m, a in assignments.items()))
        r = self.call(SYNC_GROUP, 3, body)
        _throttle, error, n = struct.unpack_from(">ihi", r)
        return {"error_code": error, "assignment": r[10:10 + max(n, 0)]}

    def heartbeat(self, group: str, generation: int, member_id: str) -> int:
        r = self.call(HEARTBEAT, 3, _str(group) + struct.pack(">i", generation) + _str(member_id) + _str(None))
        return struct.unpack_from(">ih", r)[1]


SUBSCRIPTION = struct.pack(">hi", 0, 1) + _str("load") + _bytes(b"")
EMPTY_ASSIGNMENT = struct.pack(">hii", 0, 0, 0)
FULL_ASSIGNMENT = struct.pack(">hi", 0, 1) + _str("load") + struct.pack(">iiiii", 4, 0, 1, 2, 3) + _bytes(b"")


def test_leader_rejoin_after_empty_generation_gets_its_sync_answered(broker):  # noqa: F811
    """kafka-python 3.0.12's order when it subscribes before it knows the topic's partitions: the KIP-394
    member id round trip, generation 1 assigned with no partitions, a heartbeat, then a rejoin from Stable
    (its metadata arrived) and generation 2's SyncGroup with the real assignment, which the coordinator
    must answer at once with that assignment; the member then heartbeats in generation 2."""
    c = RawClient(broker.bootstrap)
    first = c.join("gkp", "", SUBSCRIPTION)
    assert first["error_code"] == ErrorCode.MEMBER_ID_REQUIRED and first["member_id"]
    me = first["member_id"]
    gen1 = c.join("gkp", me, SUBSCRIPTION)
    assert (gen1["error_code"], gen1["generation"], gen1["leader"], gen1["members"]) == (0, 1, me, 1)
    assert c.sync("gkp", 1, me, {me: EMPTY_ASSIGNMENT}) == {"error_code": 0, "assignment": EMPTY_ASSIGNMENT}
    assert c.heartbeat("gkp", 1, me) == 0
    gen2 = c.join("gkp", me, SUBSCRIPTION)
    assert (gen2["error_code"], gen2["generation"], gen2["leader"]) == (0, 2, me)
    assert c.sync("gkp", 2, me, {me: FULL_ASSIGNMENT}) == {"error_code": 0, "assignment": FULL_ASSIGNMENT}
    assert c.heartbeat("gkp", 2, me) == 0
    assert c.sync("gkp", 1, me, {}) == {"error_code": ErrorCode.ILLEGAL_GENERATION, "assignment": b""}


@pytest.fixture
def coord(tmp_path):
    c = GroupCoordinator(tmp_path / "state", BrokerConfig({"group.initial.rebalance.delay.ms": "100",  # both join generation 1
                                                           "group.min.session.timeout.ms": "1000"}))
    c.store.load()
    yield c
    c.store.close()


async def _join(coord, client_id: str) -> dict:
    """A new member's JoinGroup without the KIP-394 round trip (JoinGroup v0-3)."""
    # a 30 s session: on a busy machine more than a second can pass between two steps of a scenario
    return await coord.join("g", "", None, client_id, "/127.0.0.1", 30_000, 60_000, "consumer",
                            [("range", SUBSCRIPTION)], False)


async def _two_members(coord) -> tuple[str, str]:
    """Both joined generation 1: (leader, follower) member ids; the group is CompletingRebalance."""
    a, b = await asyncio.gather(_join(coord, "a"), _join(coord, "b"))
    assert a["generation_id"] == b["generation_id"] == 1 and coord.groups["g"].state == COMPLETING
    leader = a["leader"]
    return leader, b["member_id"] if a["member_id"] == leader else a["member_id"]


def test_member_awaiting_sync_is_not_expired(coord):
    """ClassicGroupMember.hasSatisfiedHeartbeat: a member waiting for its SyncGroup answer (the leader is
    still assigning) satisfies its heartbeats, so the session timeout does not remove it; the leader's
    SyncGroup then answers it, and its session restarts from that answer."""
    async def scenario():
        leader, follower = await _two_members(coord)
        group = coord.groups["g"]
        waiting = asyncio.create_task(coord.sync("g", 1, follower, {}))
        await asyncio.sleep(0)  # the follower's SyncGroup is now pending
        group.members[follower].last_heartbeat -= 3600  # an hour of waiting: far past its 30 s session
        coord.expire_members(time.monotonic())
        assert follower in group.members and group.state == COMPLETING
        answer = await coord.sync("g", 1, leader, {follower: b"yours", leader: b"mine"})
        assert answer["error_code"] == 0 and answer["assignment"] == b"mine"
        assert await asyncio.wait_for(waiting, 5) == {"error_code": 0, "assignment": b"yours",
                                                      "protocol_type": "consumer", "protocol_name": "range"}
        assert group.state == STABLE
        coord.expire_members(time.monotonic())  # its session restarted with the answer
        assert follower in group.members
    asyncio.run(scenario())


def test_removed_member_gets_its_pending_sync_answered(coord):
    """A member that leaves (or is removed) while its SyncGroup waits gets an answer, UNKNOWN_MEMBER_ID,
    instead of a request left pending forever, which would hold its connection (answered in order)."""
    async def scenario():
        _leader, follower = await _two_members(coord)
        waiting = asyncio.create_task(coord.sync("g", 1, follower, {}))
        await asyncio.sleep(0)
        assert coord.leave("g", [follower]) == [0]
        assert await asyncio.wait_for(waiting, 5) == {"error_code": ErrorCode.UNKNOWN_MEMBER_ID}
    asyncio.run(scenario())
