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


def in_a_transaction(side, version: int, prefix: str, join, member_commits, last: tuple[str, int]) -> dict:
    """The scenario all three groups share: a group `prefix`-... ready, its member joined (`join(side, group,
    topic)`), a transaction that adds the group's offsets, from version 3 on the commits naming a member
    (`member_commits(commit, member)`: {case: answer}), then `last`'s commit naming none (its case and
    offset), the transaction's commit and the offsets it left."""
    topic = side.create_topic(partitions=1, prefix="tx" + prefix)
    group = _group(prefix)
    coordinator_ready(side, group)
    member = join(side, group, topic)
    txn = Txn(side)
    out = {"add_offsets": txn.add_offsets(group)}
    if version >= 3:
        out.update(member_commits(lambda **fields: txn.commit_offsets(group, topic, version=version, **fields),
                                  member))
    case, offset = last
    out[case] = txn.commit_offsets(group, topic, version=version, offset=offset)
    out["end"] = txn.end(True)
    out["committed"] = committed(side, group, topic)
    return out


def consumer_group_commits(side, version: int) -> dict:
    def join(side, group, topic) -> Member848:
        member = Member848(side, group, topics=[topic])
        member.settle(lambda m: bool(m.owned))
        return member

    def member_commits(commit, member: Member848) -> dict:
        me, epoch = member.member_id, member.epoch
        return {"current epoch": commit(member_id=me, generation=epoch, offset=5),
                "newer epoch": commit(member_id=me, generation=epoch + 1, offset=6),
                "older epoch": commit(member_id=me, generation=epoch - 1, offset=7),
                "unknown member": commit(member_id="nobody", generation=epoch, offset=8),
                "unknown instance": commit(member_id=me, generation=epoch, instance_id="nobody", offset=9)}

    return in_a_transaction(side, version, "g848", join, member_commits, ("no member", 10 if version < 3 else 11))


def classic_group_commits(side, version: int) -> dict:
    def join(side, group, topic) -> tuple[str, int]:
        return join_and_sync(side, group, topic, instance_id="inst-1")

    def member_commits(commit, joined: tuple[str, int]) -> dict:
        me, generation = joined
        return {"current generation": commit(member_id=me, generation=generation, instance_id="inst-1", offset=5),
                "no instance": commit(member_id=me, generation=generation, offset=6),
                "other generation": commit(member_id=me, generation=generation + 1, offset=7),
                "unknown member": commit(member_id="nobody", generation=generation, offset=8),
                "fenced instance": commit(member_id="nobody", generation=generation, instance_id="inst-1", offset=9),
                "unknown instance": commit(member_id=me, generation=generation, instance_id="inst-2", offset=10)}

    return in_a_transaction(side, version, "gclassic", join, member_commits,
                            ("no member", 11 if version < 3 else 12))


def absent_group_commits(side, version: int) -> dict:
    def member_commits(commit, _) -> dict:
        return {"a generation": commit(member_id="m", generation=3),
                "a member, no generation": commit(member_id="m", offset=3)}

    return in_a_transaction(side, version, "gabsent", lambda *_: None, member_commits, ("no generation", 4))


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
