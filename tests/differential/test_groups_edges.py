"""Edge cases of the group and transaction APIs the wire fuzzer found, on chronolog and Kafka 4.4: an empty
group id (INVALID_GROUP_ID from Heartbeat, SyncGroup, LeaveGroup, JoinGroup and TxnOffsetCommit:
GroupCoordinatorService.isGroupIdNotEmpty), a JoinGroup with no protocols (INCONSISTENT_GROUP_PROTOCOL;
chronolog closed the connection), and commits of partitions the topic does not have (KafkaApis answers them
UNKNOWN_TOPIC_OR_PARTITION and asks the group nothing when nothing else is left)."""

from __future__ import annotations

import uuid

import pytest

from tests.differential.groups_wire import Txn, call, committed, coordinator_ready, join_and_sync, retry


@pytest.mark.parametrize("version", [0, 3, 5])
def test_an_empty_group_id(both, version):
    def steps(side) -> dict:
        out = {"heartbeat": call(side, 12, min(version, 4), group_id="", generation_id=1, member_id="m")["error_code"],
               "sync": call(side, 14, version, group_id="", generation_id=1, member_id="m", assignments=[],
                            protocol_type="consumer", protocol_name="range")["error_code"],
               "join": call(side, 11, version, group_id="", session_timeout=10000, rebalance_timeout=10000,
                            member_id="", protocol_type="consumer",
                            protocols=[{"name": "range", "metadata": b""}])["error_code"]}
        leave = call(side, 13, version, group_id="", member_id="m",
                     members=[{"member_id": "m", "group_instance_id": None}])
        out["leave"] = (leave["error_code"], len(leave.get("members") or []))
        return out

    assert both.same(steps)["heartbeat"] == 24


@pytest.mark.parametrize("version", [5, 7, 9])
def test_a_join_without_protocols(both, version):
    def steps(side) -> list:
        group = f"gjp-{uuid.uuid4().hex[:8]}"
        coordinator_ready(side, group)
        return [retry(side, 11, version, group_id=group, session_timeout=10000, rebalance_timeout=10000,
                      member_id="", group_instance_id=instance, protocol_type=ptype, protocols=protocols)["error_code"]
                for ptype, protocols, instance in (("", [], None), ("consumer", [], None), ("", [], "inst"),
                                                   ("", [{"name": "range", "metadata": b""}], None))]

    assert both.same(steps) == [23, 23, 23, 23]


def commits_of_missing_partitions(side) -> dict:
    topic = side.create_topic(partitions=2, prefix="mp")
    group = f"gmp-{uuid.uuid4().hex[:8]}"
    coordinator_ready(side, group)
    member, generation = join_and_sync(side, group, topic)

    def commit(partitions: list[int], member_id: str, gen: int, name: str = topic) -> dict[int, int]:
        """Partition -> error (Kafka answers the partitions it left out before the others)."""
        answer = call(side, 8, 9, group_id=group, generation_id_or_member_epoch=gen, member_id=member_id,
                      topics=[{"name": name, "partitions": [{"partition_index": p, "committed_offset": 5,
                                                             "committed_leader_epoch": -1, "committed_metadata": ""}
                                                            for p in partitions]}])
        return {p["partition_index"]: p["error_code"] for t in answer["topics"] for p in t["partitions"]}

    out = {"beyond the topic, a stranger": commit([2, 7], "nobody", 9),
           "beyond the topic and in it, a stranger": commit([1, 7], "nobody", 9),
           "beyond the topic and in it, the member": commit([1, 7], member, generation),
           "a missing topic, a stranger": commit([0], "nobody", 9, name=f"missing-{uuid.uuid4().hex[:6]}"),
           "committed": committed(side, group, topic, 1)}
    txn = Txn(side)
    out["add offsets"] = txn.add_offsets(group)
    out["txn beyond the topic"] = txn.commit_offsets(group, topic, partition=9)
    out["txn empty group id"] = txn.commit_offsets("", topic, partition=0)
    out["txn empty group id, beyond the topic"] = txn.commit_offsets("", topic, partition=9)
    out["end"] = txn.end(False)
    return out


def test_commits_of_partitions_the_topic_does_not_have(both):
    seen = both.same(commits_of_missing_partitions)
    assert seen["beyond the topic, a stranger"] == {2: 3, 7: 3} and seen["committed"] == 5


def commits_without_a_group(side) -> dict:
    """OffsetMetadataManager.validateOffsetCommit: a commit with a generation to a group that is not there is
    refused (ILLEGAL_GENERATION, GROUP_ID_NOT_FOUND from v9) and makes no group; one without a generation
    makes a simple group, whatever member id it names."""
    topic = side.create_topic(partitions=1, prefix="ng")
    tag = uuid.uuid4().hex[:8]
    out = {}
    for version, member, generation in ((8, "m", 1), (9, "m", 1), (9, "", 0), (9, "m", -1), (8, "", -1)):
        group = f"gng-{tag}-{version}-{member}-{generation}"
        coordinator_ready(side, group)
        answer = retry(side, 8, version, error_of=lambda r: r["topics"][0]["partitions"][0]["error_code"],
                       group_id=group, generation_id_or_member_epoch=generation, member_id=member,
                       topics=[{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 2,
                                                               "committed_leader_epoch": -1,
                                                               "committed_metadata": ""}]}])
        deleted = call(side, 42, 2, groups_names=[group])["results"][0]["error_code"]
        out[f"v{version} member {member!r} generation {generation}"] = (
            answer["topics"][0]["partitions"][0]["error_code"], deleted)
    return out


def test_commits_without_a_group(both):
    seen = both.same(commits_without_a_group)
    assert tuple(seen["v9 member 'm' generation 1"]) == (69, 69)
