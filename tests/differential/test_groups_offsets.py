"""OffsetCommit and OffsetFetch v9 from KIP-848 members, on chronolog and Kafka 4.4: the same error codes.
Kafka 4.4 (ConsumerGroup.validateOffsetCommit/validateOffsetFetch) answers STALE_MEMBER_EPOCH for an epoch
above the member's too (earlier versions answered FENCED_MEMBER_EPOCH), and takes a commit with an older
epoch for partitions held since that epoch (KIP-1251)."""

from __future__ import annotations

import uuid

from tests.differential.groups_wire import Member848, call, coordinator_ready


def _commit(side, group: str, topic: str, member: str, epoch: int, version: int = 9) -> int:
    answer = call(side, 8, version, group_id=group, generation_id_or_member_epoch=epoch, member_id=member,
                  topics=[{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 4,
                                                          "committed_leader_epoch": -1, "committed_metadata": ""}]}])
    return answer["topics"][0]["partitions"][0]["error_code"]


def _fetch(side, group: str, topic: str, member: str | None, epoch: int) -> int:
    answer = call(side, 9, 9, groups=[{"group_id": group, "member_id": member, "member_epoch": epoch,
                                       "topics": [{"name": topic, "partition_indexes": [0]}]}], require_stable=False)
    return answer["groups"][0]["error_code"]


def member_commits_and_fetches(side) -> dict:
    topic = side.create_topic(partitions=1, prefix="oc")
    group = f"goc-{uuid.uuid4().hex[:10]}"
    coordinator_ready(side, group)
    member = Member848(side, group, topics=[topic])
    member.settle(lambda m: bool(m.owned))
    e, mid = member.epoch, member.member_id
    return {
        "commit current": _commit(side, group, topic, mid, e),
        "commit newer": _commit(side, group, topic, mid, e + 1),
        "commit older": _commit(side, group, topic, mid, e - 1),
        "commit unknown": _commit(side, group, topic, "nobody", e),
        "commit no member": _commit(side, group, topic, "", -1),
        "commit v8": _commit(side, group, topic, mid, e, version=8),
        "fetch current": _fetch(side, group, topic, mid, e),
        "fetch newer": _fetch(side, group, topic, mid, e + 1),
        "fetch older": _fetch(side, group, topic, mid, e - 1),
        "fetch unknown": _fetch(side, group, topic, "nobody", e),
        "fetch admin": _fetch(side, group, topic, None, -1),
        "leave": member.leave()["error_code"],
        "commit after leaving": _commit(side, group, topic, "", -1),
    }


def test_kip848_member_offset_commit_and_fetch(both):
    seen = both.same(member_commits_and_fetches)
    assert seen["commit current"] == 0
