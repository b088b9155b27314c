"""TxnOffsetCommit from members of classic and KIP-848 groups, at every version, on chronolog and Kafka 4.4:
the error codes of the same requests must be equal, and the offsets a committed transaction leaves.

Kafka's rules (OffsetMetadataManager.validateTransactionalOffsetCommit, ClassicGroup/ConsumerGroup
.validateOffsetCommit): a commit naming no member (generation -1) is accepted whatever the group; a member
must be known (UNKNOWN_MEMBER_ID); a classic member needs its generation (ILLEGAL_GENERATION) and its
static instance (FENCED_INSTANCE_ID); a KIP-848 member its epoch, or an older one no older than the epoch
each committed partition was assigned at (KIP-1251); below version 6 a stale epoch answers
ILLEGAL_GENERATION.
"""

from __future__ import annotations

import time
import uuid

import pytest

from tests.differential.groups_wire import (
    Member848,
    Txn,
    committed,
    coordinator_ready,
    join_and_sync,
    topic_id,
)

VERSIONS = range(0, 7)


def _group(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def consumer_group_commits(side, version: int) -> dict:
    topic = side.create_topic(partitions=1, prefix="txc")
    group = _group("g848")
    coordinator_ready(side, group)
    member = Member848(side, group, topics=[topic])
    member.settle(lambda m: bool(m.owned))
    txn = Txn(side)
    out = {"add_offsets": txn.add_offsets(group)}
    if version >= 3:
        out["current epoch"] = txn.commit_offsets(group, topic, version=version, member_id=member.member_id,
                                                  generation=member.epoch, offset=5)
        out["newer epoch"] = txn.commit_offsets(group, topic, version=version, member_id=member.member_id,
                                                generation=member.epoch + 1, offset=6)
        out["older epoch"] = txn.commit_offsets(group, topic, version=version, member_id=member.member_id,
                                                generation=member.epoch - 1, offset=7)
        out["unknown member"] = txn.commit_offsets(group, topic, version=version, member_id="nobody",
                                                   generation=member.epoch, offset=8)
        out["unknown instance"] = txn.commit_offsets(group, topic, version=version, member_id=member.member_id,
                                                     generation=member.epoch, instance_id="nobody", offset=9)
    out["no member"] = txn.commit_offsets(group, topic, version=version, offset=10 if version < 3 else 11)
    out["end"] = txn.end(True)
    out["committed"] = committed(side, group, topic)
    return out


def classic_group_commits(side, version: int) -> dict:
    topic = side.create_topic(partitions=1, prefix="txk")
    group = _group("gclassic")
    coordinator_ready(side, group)
    member, generation = join_and_sync(side, group, topic, instance_id="inst-1")
    txn = Txn(side)
    out = {"add_offsets": txn.add_offsets(group)}
    if version >= 3:
        out["current generation"] = txn.commit_offsets(group, topic, version=version, member_id=member,
                                                       generation=generation, instance_id="inst-1", offset=5)
        out["no instance"] = txn.commit_offsets(group, topic, version=version, member_id=member,
                                                generation=generation, offset=6)
        out["other generation"] = txn.commit_offsets(group, topic, version=version, member_id=member,
                                                     generation=generation + 1, offset=7)
        out["unknown member"] = txn.commit_offsets(group, topic, version=version, member_id="nobody",
                                                   generation=generation, offset=8)
        out["fenced instance"] = txn.commit_offsets(group, topic, version=version, member_id="nobody",
                                                    generation=generation, instance_id="inst-1", offset=9)
        out["unknown instance"] = txn.commit_offsets(group, topic, version=version, member_id=member,
                                                     generation=generation, instance_id="inst-2", offset=10)
    out["no member"] = txn.commit_offsets(group, topic, version=version, offset=11 if version < 3 else 12)
    out["end"] = txn.end(True)
    out["committed"] = committed(side, group, topic)
    return out


def absent_group_commits(side, version: int) -> dict:
    topic = side.create_topic(partitions=1, prefix="txa")
    group = _group("gabsent")
    coordinator_ready(side, group)
    txn = Txn(side)
    out = {"add_offsets": txn.add_offsets(group)}
    if version >= 3:
        out["a generation"] = txn.commit_offsets(group, topic, version=version, member_id="m", generation=3)
        out["a member, no generation"] = txn.commit_offsets(group, topic, version=version, member_id="m", offset=3)
    out["no generation"] = txn.commit_offsets(group, topic, version=version, offset=4)
    out["end"] = txn.end(True)
    out["committed"] = committed(side, group, topic)
    return out


@pytest.mark.parametrize("version", VERSIONS)
def test_consumer_group_member_commits_in_a_transaction(both, version):
    """The defect of the exactly-once loop with `group.protocol=consumer`: Kafka accepts the member's id and
    epoch (chronolog answered UNKNOWN_MEMBER_ID)."""
    seen = both.same(consumer_group_commits, version)
    assert seen["end"] == 0
    if version >= 3:
        assert seen["current epoch"] == 0


@pytest.mark.parametrize("version", VERSIONS)
def test_classic_group_member_commits_in_a_transaction(both, version):
    seen = both.same(classic_group_commits, version)
    if version >= 3:
        assert seen["current generation"] == 0


@pytest.mark.parametrize("version", VERSIONS)
def test_commit_to_an_absent_group(both, version):
    both.same(absent_group_commits, version)


def kept_partition_commits(side) -> dict:
    """KIP-1251: a member whose epoch moved on may still commit with an older epoch the partitions it was
    assigned at or before that epoch, not those it got later or gave away."""
    topic = side.create_topic(partitions=2, prefix="txe")
    ids = {topic: topic_id(side, topic)}
    group = _group("gepoch")
    coordinator_ready(side, group)
    first = Member848(side, group, topics=[topic])
    first.settle(lambda m: sum(len(t["partitions"]) for t in m.owned) == 2)
    old_epoch = first.epoch
    second = Member848(side, group, topics=[topic])
    deadline = time.monotonic() + 30  # both reconciled, one partition each (Kafka batches assignments:
    while time.monotonic() < deadline:  # group.consumer.assignment.interval.ms)
        first.beat()
        second.beat()
        if len(first.owned_names(ids).get(topic, [])) == 1 and len(second.owned_names(ids).get(topic, [])) == 1 \
                and first.epoch == second.epoch:
            break
        time.sleep(0.05)
    kept = first.owned_names(ids)[topic][0]
    given = second.owned_names(ids)[topic][0]
    txn = Txn(side)
    out = {"add_offsets": txn.add_offsets(group), "epoch moved": first.epoch > old_epoch}
    for version in (3, 5, 6):
        out[f"kept, old epoch, v{version}"] = txn.commit_offsets(
            group, topic, version=version, member_id=first.member_id, generation=old_epoch, partition=kept)
        out[f"given away, old epoch, v{version}"] = txn.commit_offsets(
            group, topic, version=version, member_id=first.member_id, generation=old_epoch, partition=given)
        out[f"new partition, old epoch, v{version}"] = txn.commit_offsets(
            group, topic, version=version, member_id=second.member_id, generation=second.epoch - 1, partition=given)
    out["end"] = txn.end(False)
    return out


def test_older_member_epoch_per_partition(both):
    seen = both.same(kept_partition_commits)
    assert seen["epoch moved"]


def unknown_topic_id(side) -> dict:
    """v6 names topics by id (KIP-1319): an id no topic has answers UNKNOWN_TOPIC_ID, the others commit."""
    from tests.differential.groups_wire import call

    topic = side.create_topic(partitions=1, prefix="txu")
    group = _group("gid")
    coordinator_ready(side, group)
    txn = Txn(side)
    out = {"add_offsets": txn.add_offsets(group)}
    answer = call(side, 28, 6, transactional_id=txn.txn_id, group_id=group, producer_id=txn.pid,
                  producer_epoch=txn.epoch, generation_id=-1, member_id="", group_instance_id=None,
                  topics=[{"topic_id": str(uuid.uuid4()), "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                                          "committed_metadata": ""}]},
                          {"topic_id": topic_id(side, topic), "partitions": [{"partition_index": 0,
                                                                              "committed_offset": 2,
                                                                              "committed_metadata": ""}]}])
    out["errors"] = [p["error_code"] for t in answer["topics"] for p in t["partitions"]]
    out["end"] = txn.end(True)
    out["committed"] = committed(side, group, topic)
    return out


def test_v6_unknown_topic_id(both):
    assert both.same(unknown_topic_id)["errors"] == [100, 0]
