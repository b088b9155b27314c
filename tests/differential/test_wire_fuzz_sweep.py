"""What the wire fuzzer's sweeps over more seeds (test_wire_fuzz.py, every API, 20,000 requests a seed) found,
on both brokers: the rules chronolog now follows as Kafka 4.4 does, and the cases the fuzzer no longer
generates because Kafka's answer depends on its timing, pinned with both answers (docs/differences.md,
"Wire fuzzer")."""

from __future__ import annotations

import datetime
import time
import uuid
from typing import Any

import pytest

from tests.differential import wirefuzz
from tests.differential.groups_wire import RETRIABLE, Txn, call, committed, coordinator_ready

ELECT_LEADERS, ELECT_LEADERS_V2 = 43, 2
UNKNOWN_TOPIC_OR_PARTITION, REQUEST_TIMED_OUT, ELECTION_NOT_NEEDED = 3, 7, 84
RESULTS = "replica_election_results.partition_result.error_code"


def codes(side: Any, api_key: int, version: int, values: dict) -> list[tuple[str, int]]:
    wire = wirefuzz.Wire(side.raw.port, timeout=10)
    try:
        return wirefuzz.error_codes(wire.call(api_key, version, wirefuzz.build(api_key, version, values, {})))
    finally:
        wire.close()


def streams_join(group: str, member: str, topic: str, sub: dict | None = None, **fields: Any) -> dict:
    """A joining StreamsGroupHeartbeat (v1) of one subtopology reading `topic`; `sub` overrides fields of the
    subtopology, `fields` fields of the request."""
    return {"group_id": group, "member_id": member, "member_epoch": 0, "endpoint_information_epoch": 0,
            "instance_id": None, "rack_id": None, "rebalance_timeout": datetime.timedelta(seconds=30),
            "topology": {"epoch": 0, "subtopologies": [{
                "subtopology_id": "0", "source_topics": [topic], "source_topic_regex": [],
                "state_changelog_topics": [], "repartition_sink_topics": [], "repartition_source_topics": [],
                "copartition_groups": [], **(sub or {})}]},
            "active_tasks": [], "standby_tasks": [], "warmup_tasks": [], "process_id": "p", "user_endpoint": None,
            "client_tags": [], "task_offsets": [], "task_end_offsets": [], "shutdown_application": False, **fields}


def heartbeat(side: Any, values: dict) -> Any:
    """The StreamsGroupHeartbeat (v1) answer, whole."""
    import chronolog.protocol.streams_schemas  # noqa: F401  (StreamsGroupHeartbeat v1's schema)

    wire = wirefuzz.Wire(side.raw.port, timeout=10)
    try:
        return wire.call(88, 1, wirefuzz.build(88, 1, values, {}))
    finally:
        wire.close()


def coordinated_heartbeat(side: Any, values: dict) -> Any:
    """`heartbeat` once the group's coordinator serves it: Kafka loads the group's offsets partition after
    FindCoordinator and answers NOT_COORDINATOR meanwhile."""
    coordinator_ready(side, values["group_id"])
    deadline = time.monotonic() + 30
    while True:
        body = heartbeat(side, values)
        if body.error_code not in RETRIABLE or time.monotonic() > deadline:
            return body
        time.sleep(0.05)


def _elect(side: Any, topic: str, timeout_ms: int) -> list[tuple[str, int]]:
    return codes(side, ELECT_LEADERS, ELECT_LEADERS_V2, {
        "election_type": 0, "timeout": datetime.timedelta(milliseconds=timeout_ms),
        "topic_partitions": [{"topic": topic, "partitions": [0, 7]}, {"topic": "fz-sweep-missing", "partitions": [0]}]})


@pytest.mark.parametrize("timeout_ms", [0, -1])
def test_elect_leaders_timed_out_before_it_runs(broker, timeout_ms):
    """A deadline already past when the controller's queue reaches the election (KafkaEventQueue times the
    event out before it runs): REQUEST_TIMED_OUT at the top and for every partition asked, whatever they are."""
    topic = broker.create_topic(prefix="fz-elect")
    assert _elect(broker, topic, timeout_ms) == [("error_code", REQUEST_TIMED_OUT)] + [(RESULTS, REQUEST_TIMED_OUT)] * 3


def test_elect_leaders_with_a_short_timeout(broker):
    """A deadline of a millisecond: Kafka's controller answers the election if its event queue reaches it in
    time, REQUEST_TIMED_OUT otherwise (a race against its own load, so the fuzzer does not generate it);
    chronolog has no queue and answers the election."""
    topic = broker.create_topic(prefix="fz-elect")
    election = [("error_code", 0), (RESULTS, UNKNOWN_TOPIC_OR_PARTITION), (RESULTS, UNKNOWN_TOPIC_OR_PARTITION),
                (RESULTS, ELECTION_NOT_NEEDED)]
    timed_out = [("error_code", REQUEST_TIMED_OUT)] + [(RESULTS, REQUEST_TIMED_OUT)] * 3
    answer = _elect(broker, topic, 1)
    assert answer == election if broker.kind == "chronolog" else answer in (election, timed_out)
    assert _elect(broker, topic, 10_000) == election


# -- deleting a group's offsets deletes the pending transactional ones too (seed 6) ---------------------------
def test_deleted_offsets_take_pending_transactional_ones(broker):
    """OffsetMetadataManager: DeleteGroups writes a tombstone of each offset an open transaction holds pending
    (deleteAllOffsets), OffsetDelete of each partition that has one (deleteOffsets), and a tombstone drops the
    pending offsets of its partition: the transaction's commit afterwards leaves none of them."""
    topic = broker.create_topic(partitions=2, prefix="fz-pending")
    answers = {}
    for case in ("DeleteGroups", "OffsetDelete"):
        group = f"fz-pending-{uuid.uuid4().hex[:10]}"
        coordinator_ready(broker, group)
        txn = Txn(broker)
        assert txn.add_offsets(group) == 0
        assert [txn.commit_offsets(group, topic, partition=p, offset=5 + p) for p in (0, 1)] == [0, 0]
        if case == "DeleteGroups":
            deleted = call(broker, 42, 2, groups_names=[group])["results"]
        else:
            deleted = call(broker, 47, 0, group_id=group, topics=[
                {"name": topic, "partitions": [{"partition_index": 0}]}])["topics"]
        assert txn.end(True) == 0
        answers[case] = (deleted, [committed(broker, group, topic, p) for p in (0, 1)])
    assert answers["DeleteGroups"][1] == [-1, -1]
    assert answers["OffsetDelete"][1] == [-1, 6]
    assert [r["error_code"] for r in answers["DeleteGroups"][0]] == [0]
    assert [p["error_code"] for t in answers["OffsetDelete"][0] for p in t["partitions"]] == [0]


# -- left out of the fuzzer: streams heartbeats Kafka fails (seed 11) ----------------------------------------
def test_streams_heartbeats_kafka_fails(broker):
    """A joining streams member (KIP-1071) whose client tags name one key twice, or whose topology's epoch is
    negative: Kafka 4.4 fails the heartbeat with UNKNOWN_SERVER_ERROR (its map of the tags throws, so does
    StreamsTopology's constructor), chronolog takes the last value, the epoch as given. With each key once
    and epoch 0 both let the member join. Seed 27: so does a subtopology whose id is empty (chronolog refused
    it); one id twice Kafka fails too (chronolog: STREAMS_INVALID_TOPOLOGY); a changelog topic given a
    partition count is STREAMS_INVALID_TOPOLOGY on both (chronolog took a positive one)."""
    import chronolog.protocol.streams_schemas  # noqa: F401  (StreamsGroupHeartbeat v1's schema)

    topic = broker.create_topic(prefix="fz-streams")

    def join(tags: list[tuple[str, str]], epoch: int = 0, subtopologies: tuple[dict, ...] = ({},)
             ) -> list[tuple[str, int]]:
        group = f"fz-streams-{uuid.uuid4().hex[:10]}"
        coordinator_ready(broker, group)
        deadline = time.monotonic() + 30
        while True:  # Kafka loads the group's offsets partition after FindCoordinator: NOT_COORDINATOR meanwhile
            answer = heartbeat(group, tags, epoch, subtopologies)
            if answer[0][1] not in RETRIABLE or time.monotonic() > deadline:
                return answer
            time.sleep(0.05)

    def heartbeat(group: str, tags: list[tuple[str, str]], epoch: int, subtopologies: tuple[dict, ...]
                  ) -> list[tuple[str, int]]:
        return codes(broker, 88, 1, {
            "group_id": group, "member_id": f"m-{uuid.uuid4().hex[:8]}", "member_epoch": 0,
            "endpoint_information_epoch": 0, "instance_id": None, "rack_id": None,
            "rebalance_timeout": datetime.timedelta(seconds=30), "topology": {"epoch": epoch, "subtopologies": [{
                "subtopology_id": "0", "source_topics": [topic], "source_topic_regex": [],
                "state_changelog_topics": [], "repartition_sink_topics": [], "repartition_source_topics": [],
                "copartition_groups": [], **sub} for sub in subtopologies]},
            "active_tasks": [], "standby_tasks": [], "warmup_tasks": [], "process_id": "p", "user_endpoint": None,
            "client_tags": [{"key": k, "value": v} for k, v in tags], "task_offsets": [], "task_end_offsets": [],
            "shutdown_application": False})

    assert join([("zone", "a"), ("rack", "b")]) == [("error_code", 0)]
    failed = [("error_code", 0 if broker.kind == "chronolog" else -1)]
    assert join([("zone", "a"), ("zone", "b")]) == failed
    assert join([], epoch=-1) == failed
    assert join([], subtopologies=({"subtopology_id": ""},)) == [("error_code", 0)]
    assert join([], subtopologies=({}, {})) == [("error_code", 130 if broker.kind == "chronolog" else -1)]
    counted = {"state_changelog_topics": [{"name": f"{topic}-store-changelog", "partitions": 1,
                                           "replication_factor": 0, "topic_configs": []}]}
    assert join([], subtopologies=(counted,)) == [("error_code", 130)]  # STREAMS_INVALID_TOPOLOGY


def test_streams_join_needs_empty_task_lists(broker):
    """Seed 18: a joining streams member must send ActiveTasks, StandbyTasks and WarmupTasks as empty lists:
    Kafka's throwIfNotEmptyCollection refuses a null list as it refuses a full one (INVALID_REQUEST, one
    message per list, in that order); chronolog let a member with null lists join. A repartition source topic
    of a negative partition count is not generated (docs/differences.md)."""
    import chronolog.protocol.streams_schemas  # noqa: F401  (StreamsGroupHeartbeat v1's schema)

    topic = broker.create_topic(prefix="fz-streams")

    def join(sub: dict | None = None, **tasks: list | None) -> tuple[int, str | None]:
        values = streams_join(f"fz-streams-{uuid.uuid4().hex[:10]}", f"m-{uuid.uuid4().hex[:8]}", topic, sub,
                              **{f"{k}_tasks": v for k, v in tasks.items()})
        body = coordinated_heartbeat(broker, values)
        return int(body.error_code), body.error_message

    assert join() == (0, None)
    assert join(active=None, standby=None, warmup=None) == (42, "ActiveTasks must be empty when (re-)joining.")
    assert join(standby=None) == (42, "StandbyTasks must be empty when (re-)joining.")
    assert join(warmup=None) == (42, "WarmupTasks must be empty when (re-)joining.")
    # not generated: a repartition source topic of a negative partition count fails in Kafka 4.4
    # (UNKNOWN_SERVER_ERROR); chronolog calls the topology invalid (STREAMS_INVALID_TOPOLOGY)
    negative = join({"repartition_source_topics": [{"name": f"{topic}-rep", "partitions": -2,
                                                     "replication_factor": 0, "topic_configs": []}]})
    assert negative[0] == (130 if broker.kind == "chronolog" else -1), negative


def test_streams_owned_tasks_outside_the_topology(broker):
    """A streams member's heartbeat owning a task of a subtopology the configured topology does not have, or
    of a partition outside that subtopology's task count, is INVALID_REQUEST and changes nothing
    (GroupMetadataManager.throwIfRequestContainsInvalidTasks: ActiveTasks, StandbyTasks, then WarmupTasks).
    It runs after the member's checks (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH) and before the task offsets'
    (a duplicate entry), and only once the topology is ready: while a source topic is missing it is skipped."""
    topic = broker.create_topic(prefix="fz-streams")
    join = streams_join(f"fz-streams-{uuid.uuid4().hex[:10]}", f"m-{uuid.uuid4().hex[:8]}", topic)
    joined = coordinated_heartbeat(broker, join)
    assert (joined.error_code, joined.member_epoch) == (0, 1)

    def owning(active: list | None = None, standby: list | None = None, warmup: list | None = None,
               **fields: Any) -> tuple[int, str | None]:
        answer = heartbeat(broker, {**join, "member_epoch": 1, "topology": None, "active_tasks": active or [],
                                    "standby_tasks": standby or [], "warmup_tasks": warmup or [], **fields})
        return int(answer.error_code), answer.error_message

    def task(subtopology: str, *partitions: int) -> list[dict]:
        return [{"subtopology_id": subtopology, "partitions": list(partitions)}]

    nope = (42, "Subtopology nope does not exist in the topology.")

    def past(partition: int) -> tuple[int, str]:
        return 42, f"Task {partition} for subtopology 0 is invalid. Number of tasks for this subtopology: 1"

    assert owning(task("nope", 0)) == nope
    assert owning(task("nope")) == nope  # even with no partitions listed
    assert owning(task("0", 5)) == past(5)
    assert owning(task("0", 0, -1)) == past(-1)
    assert owning(standby=task("nope", 0)) == nope
    assert owning(warmup=task("0", 3)) == past(3)
    assert owning(task("0", 0) + task("0", 7), standby=task("nope", 0)) == past(7)  # ActiveTasks first
    assert owning(standby=task("0", 9), warmup=task("nope", 0)) == past(9)  # then StandbyTasks
    # after the member's checks, before the task offsets' check
    assert owning(task("nope", 0), member_epoch=7)[0] == 110  # FENCED_MEMBER_EPOCH
    assert owning(task("nope", 0), member_id="m-unknown")[0] == 25  # UNKNOWN_MEMBER_ID
    twice = [{"subtopology_id": "0", "partition": 0, "offset": 1}, {"subtopology_id": "0", "partition": 0, "offset": 2}]
    assert owning(task("nope", 0), task_end_offsets=twice) == nope
    # the refusals changed nothing: the member owns its task at its epoch
    assert owning(task("0", 0)) == (0, None)

    # a topology not ready (a source topic missing): the owned tasks are not checked, until it is
    missing = f"fz-streams-missing-{uuid.uuid4().hex[:8]}"
    waiting = streams_join(f"fz-streams-{uuid.uuid4().hex[:10]}", f"m-{uuid.uuid4().hex[:8]}", missing)
    joined = coordinated_heartbeat(broker, waiting)
    assert joined.error_code == 0
    unready = {**waiting, "member_epoch": joined.member_epoch, "topology": None, "active_tasks": task("nope", 0)}
    answer = heartbeat(broker, unready)
    assert (answer.error_code, answer.error_message) == (0, None)
    broker.create_topic(missing)
    deadline = time.monotonic() + 30
    while (answer := heartbeat(broker, unready)).error_code == 0 and time.monotonic() < deadline:
        time.sleep(0.05)  # Kafka's coordinator sees the new topic a moment after it is made
    assert (answer.error_code, answer.error_message) == nope


def test_streams_member_fetches_and_commits_offsets(broker):
    """Seed 27: a streams group's member (KIP-1071) is checked by OffsetFetch v9+ as a consumer group's is
    (StreamsGroup.validateOffsetFetch: UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH; chronolog checked no streams
    member), and commits with OffsetCommit v9+ only (UNSUPPORTED_VERSION before, as Kafka 4.4 answers).
    Seed 39: a heartbeat whose task offsets name a task twice is INVALID_REQUEST and changes nothing."""
    import chronolog.protocol.streams_schemas  # noqa: F401  (StreamsGroupHeartbeat v1's schema)

    topic = broker.create_topic(prefix="fz-streams")
    group, member = f"fz-streams-{uuid.uuid4().hex[:10]}", f"m-{uuid.uuid4().hex[:8]}"
    join = streams_join(group, member, topic)
    joined = wirefuzz.error_codes(coordinated_heartbeat(broker, join))
    assert joined == [("error_code", 0)]  # member epoch 1 on both

    def fetch(member_id: str | None, epoch: int) -> list[tuple[str, int]]:
        return codes(broker, 9, 9, {"groups": [{"group_id": group, "member_id": member_id, "member_epoch": epoch,
                                                "topics": None}], "require_stable": False})

    def commit(version: int, epoch: int) -> list[tuple[str, int]]:
        return codes(broker, 8, version, {
            "group_id": group, "generation_id_or_member_epoch": epoch, "member_id": member, "group_instance_id": None,
            "retention_time": -1, "topics": [{"name": topic, "partitions": [
                {"partition_index": 0, "committed_offset": 0, "committed_leader_epoch": -1,
                 "committed_metadata": None}]}]})

    group_code = "groups.error_code"
    assert fetch(None, -1) == [(group_code, 0)]
    assert fetch(member, 1) == [(group_code, 0)]
    assert fetch(member, 0) == [(group_code, 113)]  # STALE_MEMBER_EPOCH
    assert fetch("", 0) == [(group_code, 25)]  # UNKNOWN_MEMBER_ID
    assert commit(8, 1) == [("topics.partitions.error_code", 35)]  # UNSUPPORTED_VERSION
    assert commit(9, 1) == [("topics.partitions.error_code", 0)]
    # seed 39: task offsets naming a task twice are INVALID_REQUEST (MemberTaskOffsets), and change nothing
    twice = [{"subtopology_id": "0", "partition": 0, "offset": 1}, {"subtopology_id": "0", "partition": 0, "offset": 2}]
    assert codes(broker, 88, 1, {**join, "member_epoch": 1, "topology": None, "active_tasks": None,
                                 "standby_tasks": None, "warmup_tasks": None, "task_end_offsets": twice}) == [
        ("error_code", 42)]
    assert fetch(member, 1) == [(group_code, 0), ("groups.topics.partitions.error_code", 0)]  # the committed one
    other = f"{group}-2"
    coordinator_ready(broker, other)
    assert codes(broker, 88, 1, {**join, "group_id": other, "task_offsets": twice}) == [("error_code", 42)]
    assert codes(broker, 89, 0, {"group_ids": [other], "include_authorized_operations": False}) == [
        ("groups.error_code", 69)]  # GROUP_ID_NOT_FOUND: the refused join made no group


def test_streams_join_with_an_endpoint_and_missing_topics(broker):
    """Seed 11: a joining streams member with a user endpoint whose topology reads a topic that does not exist:
    Kafka 4.4 fails the heartbeat with UNKNOWN_SERVER_ERROR (its EndpointToPartitionsManager finds no
    partitions for the missing topic: NoSuchElementException), chronolog lets the member join, as both do
    without the endpoint or with the topic there; the fuzzer does not generate it. A repartition sink no
    subtopology reads is no invalid topology on either (chronolog refused it before); a subtopology reading
    nothing is (STREAMS_INVALID_TOPOLOGY) once the source topics exist."""
    import chronolog.protocol.streams_schemas  # noqa: F401  (StreamsGroupHeartbeat v1's schema)

    topic = broker.create_topic(prefix="fz-streams")

    def join(source: str, sinks: list[str], endpoint: dict | None, *, empty: bool = False) -> list[tuple[str, int]]:
        group = f"fz-streams-{uuid.uuid4().hex[:10]}"
        coordinator_ready(broker, group)
        deadline = time.monotonic() + 30
        while True:  # Kafka loads the group's offsets partition after FindCoordinator: NOT_COORDINATOR meanwhile
            answer = codes(broker, 88, 1, {
                "group_id": group, "member_id": f"m-{uuid.uuid4().hex[:8]}", "member_epoch": 0,
                "endpoint_information_epoch": 0, "instance_id": None, "rack_id": None,
                "rebalance_timeout": datetime.timedelta(seconds=30), "topology": {"epoch": 0, "subtopologies": [{
                    "subtopology_id": str(i), "source_topics": [] if i else [source], "source_topic_regex": [],
                    "state_changelog_topics": [], "repartition_sink_topics": sinks, "repartition_source_topics": [],
                    "copartition_groups": []} for i in range(2 if empty else 1)]},
                "active_tasks": [], "standby_tasks": [], "warmup_tasks": [], "process_id": "p",
                "user_endpoint": endpoint, "client_tags": [], "task_offsets": [], "task_end_offsets": [],
                "shutdown_application": False})
            if answer[0][1] not in RETRIABLE or time.monotonic() > deadline:
                return answer
            time.sleep(0.05)

    ok, endpoint, missing = [("error_code", 0)], {"host": "h", "port": 1}, "fz-streams-missing"
    cases = [(source, sink, e) for source in (topic, missing) for sink in ("", "fz-streams-sink")
             for e in (None, endpoint)]
    assert {(source, sink, bool(e)): join(source, [sink] if sink else [], e) for source, sink, e in cases} == {
        (source, sink, bool(e)): [("error_code", -1)] if source == missing and e and broker.kind == "kafka" else ok
        for source, sink, e in cases}
    invalid = [("error_code", 130)]  # STREAMS_INVALID_TOPOLOGY
    assert join(topic, [], None, empty=True) == join(topic, [], endpoint, empty=True) == invalid
    assert join(missing, [], None, empty=True) == ok
