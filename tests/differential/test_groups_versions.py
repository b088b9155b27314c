"""The newest versions of the group and transaction APIs (Kafka 4.4's) on chronolog and Kafka: OffsetCommit and
OffsetFetch v10 (topics by id), JoinGroup v8/v9, DescribeGroups v6 (GROUP_ID_NOT_FOUND, KIP-1043), ListGroups v5
(group types, KIP-848), AddOffsetsToTxn v4, AddPartitionsToTxn v5. The same requests, the same answers."""

from __future__ import annotations

import re
import uuid

import pytest

from tests.differential.groups_wire import (
    Member848,
    Txn,
    call,
    coordinator_ready,
    join,
    join_and_sync,
    retry,
    topic_id,
)

UUID_TAIL = re.compile(r"-?[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _anon(value, names: dict[str, str]):
    """Group ids, topic names and ids of the scenario replaced by their roles; member ids by their prefix."""
    if isinstance(value, dict):
        return {k: _anon(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_anon(v, names) for v in value]
    if isinstance(value, str):
        if value in names:
            return names[value]
        return UUID_TAIL.sub("-<uuid>", value) if UUID_TAIL.search(value) else value
    return value


def offsets_by_topic_id(side) -> dict:
    topic = side.create_topic(partitions=2, prefix="v10")
    tid = topic_id(side, topic)
    group = f"gv10-{uuid.uuid4().hex[:8]}"
    coordinator_ready(side, group)
    ghost = str(uuid.uuid4())

    def commit(topic_ref: str, version: int = 10) -> dict:
        return retry(side, 8, version, error_of=lambda r: r["topics"][0]["partitions"][0]["error_code"],
                     group_id=group, generation_id_or_member_epoch=-1, member_id="",
                     topics=[{"topic_id": topic_ref, "name": topic_ref,
                              "partitions": [{"partition_index": 1, "committed_offset": 7,
                                              "committed_leader_epoch": -1, "committed_metadata": "m"}]}])

    def fetch(topics, version: int = 10) -> dict:
        return call(side, 9, version, groups=[{"group_id": group, "member_id": None, "member_epoch": -1,
                                               "topics": topics}], require_stable=True)

    out = {"commit by id": commit(tid), "commit unknown id": commit(ghost),
           "fetch by id": fetch([{"topic_id": tid, "partition_indexes": [0, 1]}]),
           "fetch unknown id": fetch([{"topic_id": ghost, "partition_indexes": [0]}]),
           "fetch all": fetch(None),
           "fetch all v9": fetch(None, version=9)}
    return _anon(out, {tid: "<topic id>", ghost: "<unknown id>", topic: "<topic>", group: "<group>"})


def test_offset_commit_and_fetch_v10(both):
    seen = both.same(offsets_by_topic_id)
    assert seen["commit by id"]["topics"][0]["partitions"][0]["error_code"] == 0


def describe_and_list(side, describe_version: int, list_version: int) -> dict:
    topic = side.create_topic(partitions=1, prefix="dl")
    tag = uuid.uuid4().hex[:8]
    classic, consumer, simple, absent = (f"g{k}-{tag}" for k in ("classic", "consumer", "simple", "absent"))
    for g in (classic, consumer, simple):
        coordinator_ready(side, g)
    join_and_sync(side, classic, topic)
    member = Member848(side, consumer, topics=[topic])
    member.settle(lambda m: bool(m.owned))
    retry(side, 8, 9, error_of=lambda r: r["topics"][0]["partitions"][0]["error_code"], group_id=simple,
          generation_id_or_member_epoch=-1, member_id="",
          topics=[{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 3,
                                                  "committed_leader_epoch": -1, "committed_metadata": ""}]}])
    described = sorted(call(side, 15, describe_version, groups=[classic, consumer, simple, absent],
                            include_authorized_operations=False)["groups"], key=lambda g: g["group_id"])
    for g in described:
        for m in g["members"]:
            m["member_metadata"] = m["member_assignment"] = "<bytes>"
            m["client_host"] = "<host>"
    mine = {classic, consumer, simple}
    listings = {}
    for name, filters in {"all": {}, "stable": {"states_filter": ["Stable"]}, "empty": {"states_filter": ["Empty"]},
                          "classic": {"types_filter": ["classic"]}, "consumer": {"types_filter": ["consumer"]},
                          "CONSUMER": {"types_filter": ["Consumer"]}}.items():
        if list_version < 5 and "types_filter" in filters or list_version < 4 and "states_filter" in filters:
            continue
        answer = call(side, 16, list_version, **filters)
        listings[name] = sorted((g for g in answer["groups"] if g["group_id"] in mine), key=lambda g: g["group_id"])
        listings[name + " error"] = answer["error_code"]
    member.leave()
    names = {classic: "<classic>", consumer: "<consumer>", simple: "<simple>", absent: "<absent>"}
    return _anon({"described": described, "listed": listings}, names)


@pytest.mark.parametrize(("describe_version", "list_version"), [(5, 4), (6, 5)])
def test_describe_groups_and_list_groups(both, describe_version, list_version):
    both.same(describe_and_list, describe_version, list_version)


def join_versions(side, version: int) -> dict:
    topic = side.create_topic(partitions=1, prefix="jv")
    group = f"gjv-{uuid.uuid4().hex[:8]}"
    coordinator_ready(side, group)
    answer = join(side, group, [topic], version=version)
    answer["members"] = [{**m, "metadata": "<bytes>"} for m in answer["members"]]
    return _anon(answer, {group: "<group>"})


@pytest.mark.parametrize("version", [7, 8, 9])
def test_join_group_versions(both, version):
    both.same(join_versions, version)


def txn_versions(side) -> dict:
    topic = side.create_topic(partitions=1, prefix="tv")
    group = f"gtv-{uuid.uuid4().hex[:8]}"
    coordinator_ready(side, group)
    txn = Txn(side)
    out = {"add offsets v4": retry(side, 25, 4, transactional_id=txn.txn_id, producer_id=txn.pid,
                                   producer_epoch=txn.epoch, group_id=group)["error_code"],
           "add partitions v3": retry(side, 24, 3, error_of=lambda r: r["results_by_topic_v3_and_below"][0]
                                      ["results_by_partition"][0]["partition_error_code"],
                                      v3_and_below_transactional_id=txn.txn_id, v3_and_below_producer_id=txn.pid,
                                      v3_and_below_producer_epoch=txn.epoch,
                                      v3_and_below_topics=[{"name": topic, "partitions": [0]}]),
           # the batched form is for brokers: ClusterAction on the cluster, which the anonymous user has
           "add partitions v5 verify": call(side, 24, 5, transactions=[{
               "transactional_id": txn.txn_id, "producer_id": txn.pid, "producer_epoch": txn.epoch,
               "verify_only": True, "topics": [{"name": topic, "partitions": [0]}]}]),
           "wrong epoch v4": retry(side, 25, 4, transactional_id=txn.txn_id, producer_id=txn.pid,
                                   producer_epoch=txn.epoch + 1, group_id=group)["error_code"],
           "end": txn.end(False)}
    return _anon(out, {txn.txn_id: "<txn>", topic: "<topic>"})


def test_transaction_api_versions(both):
    both.same(txn_versions)


def delete_groups(side, version: int) -> dict:
    topic = side.create_topic(partitions=1, prefix="dg")
    tag = uuid.uuid4().hex[:8]
    busy, empty, absent = f"gdb-{tag}", f"gde-{tag}", f"gda-{tag}"
    for g in (busy, empty):
        coordinator_ready(side, g)
    join_and_sync(side, busy, topic)
    retry(side, 8, 9, error_of=lambda r: r["topics"][0]["partitions"][0]["error_code"], group_id=empty,
          generation_id_or_member_epoch=-1, member_id="",
          topics=[{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 3,
                                                  "committed_leader_epoch": -1, "committed_metadata": ""}]}])
    answer = call(side, 42, version, groups_names=[busy, empty, absent])
    return _anon(sorted(answer["results"], key=lambda r: r["group_id"]),
                 {busy: "<busy>", empty: "<empty>", absent: "<absent>"})


@pytest.mark.parametrize("version", [2, 3])
def test_delete_groups_versions(both, version):
    seen = both.same(delete_groups, version)
    assert [r["error_code"] for r in seen] == [69, 68, 0]  # absent, busy, empty (sorted by their ids)
