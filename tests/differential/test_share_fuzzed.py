"""The share-group requests the wire fuzzer does not generate (wirefuzz.FIXES), each answered on both brokers:
Kafka 4.4 fails them with UNKNOWN_SERVER_ERROR or never answers, chronolog answers them (docs/differences.md,
"Wire fuzzer"). Also the cases the fuzzer found that chronolog now answers as Kafka does."""

from __future__ import annotations

import time
import uuid
from typing import Any

from tests.differential import wirefuzz

RETRIABLE = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
UNKNOWN_SERVER_ERROR, UNKNOWN_TOPIC_OR_PARTITION, GROUP_ID_NOT_FOUND = -1, 3, 69


def _codes(wire: wirefuzz.Wire, key: int, version: int, values: dict) -> list[tuple[str, int]]:
    return wirefuzz.error_codes(wire.call(key, version, wirefuzz.build(key, version, values, {})))


def _alter(wire: wirefuzz.Wire, group: str, topic: str, partition: int) -> list[tuple[str, int]]:
    return _codes(wire, 91, 0, {"group_id": group, "topics": [
        {"topic_name": topic, "partitions": [{"partition_index": partition, "start_offset": 0}]}]})


def _topic_id(wire: wirefuzz.Wire, topic: str) -> Any:
    """The topic's id, from a Metadata v12 answer."""
    body = wirefuzz.build(3, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False}, {})
    return wire.call(3, 12, body).topics[0].topic_id


def _ready(wire: wirefuzz.Wire, topic: str, bound_s: float = 60) -> None:
    """The group coordinator loaded and the topic known to it: Kafka answers a fresh topic's partitions
    UNKNOWN_TOPIC_OR_PARTITION for a moment after making it."""
    deadline = time.monotonic() + bound_s
    probe = f"probe-{uuid.uuid4().hex[:8]}"
    while True:
        found = _codes(wire, 10, 6, {"key_type": 0, "coordinator_keys": [probe]})
        answer = _alter(wire, probe, topic, 0) if found == [("coordinators.error_code", 0)] else found
        if answer == [("error_code", 0), ("responses.partitions.error_code", 0)]:
            return
        assert time.monotonic() < deadline, answer
        time.sleep(0.2)


def _left_out(side: Any) -> dict[str, Any]:
    topic = side.create_topic(f"sfz-{uuid.uuid4().hex[:8]}", 2)
    wire = wirefuzz.Wire(side.raw.port, timeout=3)
    try:
        _ready(wire, topic)
        group = f"sfz-{uuid.uuid4().hex[:8]}"
        _alter(wire, group, topic, 0)

        def describe(group_id: str, partitions: list[int]) -> list[tuple[str, int]]:
            return _codes(wire, 90, 1, {"groups": [{"group_id": group_id, "topics": [
                {"topic_name": topic, "partitions": partitions}]}]})

        out = {
            "describe empty group id": describe("", [0]),
            "describe negative partition": describe(group, [-1]),
            "describe topic with no partitions": describe(group, []),
        }
        negative = f"sfz-{uuid.uuid4().hex[:8]}"
        out["alter negative partition"] = _alter(wire, negative, topic, -1)
        out["delete that group"] = _codes(wire, 42, 2, {"groups_names": [negative]})
        out["delete it again"] = _codes(wire, 42, 2, {"groups_names": [negative]})
        out["describe missing partition"] = describe(group, [7])  # last: Kafka never answers it
        return out
    finally:
        wire.close()


def test_share_offset_requests_left_out_of_the_fuzzer(chronolog_side, kafka_side):
    groups, parts = "groups.error_code", "groups.topics.partitions.error_code"
    ok = [("error_code", 0)]
    assert _left_out(chronolog_side) == {
        "describe empty group id": [(groups, 0), (parts, 0)],
        "describe negative partition": [(groups, 0), (parts, UNKNOWN_TOPIC_OR_PARTITION)],
        "describe topic with no partitions": [(groups, 0)],
        "alter negative partition": ok + [("responses.partitions.error_code", UNKNOWN_TOPIC_OR_PARTITION)],
        "delete that group": [("results.error_code", 0)],  # the topic exists: the group was made
        "delete it again": [("results.error_code", GROUP_ID_NOT_FOUND)],
        "describe missing partition": [(groups, 0), (parts, UNKNOWN_TOPIC_OR_PARTITION)],
    }
    assert _left_out(kafka_side) == {
        "describe empty group id": [(groups, UNKNOWN_SERVER_ERROR)],
        "describe negative partition": [(groups, UNKNOWN_SERVER_ERROR)],
        "describe topic with no partitions": [(groups, UNKNOWN_SERVER_ERROR)],
        # the group is made, its state of partition -1 cannot be: the first DeleteGroups fails, the second
        # deletes it
        "alter negative partition": [("error_code", UNKNOWN_SERVER_ERROR)],
        "delete that group": [("results.error_code", UNKNOWN_SERVER_ERROR)],
        "delete it again": [("results.error_code", 0)],
        "describe missing partition": [(wirefuzz.TIMED_OUT, -1)],
    }


def _answered(side: Any) -> dict[str, Any]:
    """What the fuzzer found differing, now answered alike."""
    topic = side.create_topic(f"sfz-{uuid.uuid4().hex[:8]}", 2)
    missing = f"sfz-missing-{uuid.uuid4().hex[:8]}"
    wire = wirefuzz.Wire(side.raw.port, timeout=10)
    try:
        _ready(wire, topic)
        topic_id = _topic_id(wire, topic)
        group = f"sfz-{uuid.uuid4().hex[:8]}"
        made = f"sfz-{uuid.uuid4().hex[:8]}"
        out = {
            # a topic that does not exist: no state, no error
            "describe missing topic": _codes(wire, 90, 1, {"groups": [{"group_id": group, "topics": [
                {"topic_name": missing, "partitions": [0, 3]}]}]}),
            # naming a topic that exists makes the group, even with no partition of it to alter
            "alter no partitions": _codes(wire, 91, 0, {"group_id": made, "topics": [
                {"topic_name": topic, "partitions": []}]}),
            "made": _codes(wire, 77, 1, {"group_ids": [made], "include_authorized_operations": False}),
            # a new share session without records to give: no partitions answered
            "first fetch": _codes(wire, 78, 1, {
                "group_id": group, "member_id": "sfz-member", "share_session_epoch": 0, "max_wait": 10,
                "min_bytes": 1, "max_bytes": 1 << 20, "forgotten_topics_data": [], "topics": [
                    {"topic_id": topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": []}]}]}),
        }
        return out
    finally:
        wire.close()


def test_share_answers_the_fuzzer_compared(chronolog_side, kafka_side):
    assert _answered(chronolog_side) == _answered(kafka_side) == {
        "describe missing topic": [("groups.error_code", 0)] + [("groups.topics.partitions.error_code", 0)] * 2,
        "alter no partitions": [("error_code", 0)],
        "made": [("groups.error_code", 0)],
        "first fetch": [("error_code", 0)],
    }


def _session_after_disconnect(side: Any) -> dict[str, Any]:
    group = f"sfz-{uuid.uuid4().hex[:8]}"

    def fetch(wire: wirefuzz.Wire, epoch: int) -> list[tuple[str, int]]:
        return _codes(wire, 78, 1, {"group_id": group, "member_id": "sfz-member", "share_session_epoch": epoch,
                                    "max_wait": 10, "min_bytes": 1, "max_bytes": 1 << 20, "topics": [],
                                    "forgotten_topics_data": []})
    first, second, third = (wirefuzz.Wire(side.raw.port, timeout=10) for _ in range(3))
    try:
        out = {"open": fetch(first, 0), "next": fetch(first, 1)}
        first.close()
        deadline = time.monotonic() + 10  # the broker notices the close a moment later
        while (gone := fetch(second, 2)) == [("error_code", 0)] and time.monotonic() < deadline:
            time.sleep(0.1)
        out["after its connection closed"] = gone
        out["reopened"] = fetch(second, 0)
        out["from another connection"] = fetch(third, 1)
        return out
    finally:
        for wire in (first, second, third):
            wire.close()


def test_a_share_session_ends_with_the_connection_that_opened_it(chronolog_side, kafka_side):
    """Kafka 4.4's ShareSessionCache drops a session when the connection that opened it closes; the
    session serves requests from any other connection meanwhile."""
    ok = [("error_code", 0)]
    assert _session_after_disconnect(chronolog_side) == _session_after_disconnect(kafka_side) == {
        "open": ok, "next": ok, "after its connection closed": [("error_code", 122)], "reopened": ok,
        "from another connection": ok}


def _sessions_of_one_connection(side: Any) -> dict[str, Any]:
    groups = [f"sfz-{uuid.uuid4().hex[:8]}" for _ in range(2)]

    def fetch(wire: wirefuzz.Wire, group: str, epoch: int) -> list[tuple[str, int]]:
        return _codes(wire, 78, 1, {"group_id": group, "member_id": "sfz-member", "share_session_epoch": epoch,
                                    "max_wait": 10, "min_bytes": 1, "max_bytes": 1 << 20, "topics": [],
                                    "forgotten_topics_data": []})
    first, second = (wirefuzz.Wire(side.raw.port, timeout=10) for _ in range(2))
    try:
        out = {"open both": [fetch(first, g, 0) for g in groups]}
        first.close()
        deadline = time.monotonic() + 10  # the broker notices the close a moment later; a wrong epoch leaves
        while (last := fetch(second, groups[1], 99)) == [("error_code", 123)] and time.monotonic() < deadline:
            time.sleep(0.1)  # the session as it is (INVALID_SHARE_SESSION_EPOCH while it exists)
        out["the last one opened"] = last
        out["the one opened before"] = fetch(second, groups[0], 1)
        out["acknowledged"] = _codes(second, 79, 1, {"group_id": groups[0], "member_id": "sfz-member",
                                                      "share_session_epoch": 2, "topics": []})
        return out
    finally:
        first.close()
        second.close()


def test_a_connection_ends_only_the_last_share_session_it_opened(chronolog_side, kafka_side):
    """Wire fuzzer seed 16: Kafka 4.4's ShareSessionCache maps a connection to one session, the last it opened
    (connectionIdToSessionMap): its close ends that one only, and a session the same connection opened before
    for another group stays, serving its next epochs."""
    ok = [("error_code", 0)]
    assert _sessions_of_one_connection(chronolog_side) == _sessions_of_one_connection(kafka_side) == {
        "open both": [ok, ok], "the last one opened": [("error_code", 122)], "the one opened before": ok,
        "acknowledged": ok}


def _fetch(wire: wirefuzz.Wire, group: str, epoch: int, topics: list, version: int = 1, **extra: Any) -> list:
    values = {"group_id": group, "member_id": "sfz-member", "share_session_epoch": epoch, "max_wait": 0,
              "min_bytes": 0, "max_bytes": 1 << 20, "max_records": 10, "batch_size": 10, "topics": topics,
              "forgotten_topics_data": [], **extra}
    if version >= 2:
        values = {"share_acquire_mode": 0, "is_renew_ack": False, **values}
    return _codes(wire, 78, version, values)


def _partitions(topic_id: Any, *indexes: int, acks: tuple = ()) -> dict:
    return {"topic_id": topic_id, "partitions": [{"partition_index": i, "acknowledgement_batches": list(acks)}
                                                 for i in indexes]}


def _fetches_left_out(side: Any, polls: int) -> dict[str, Any]:
    topic = side.create_topic(f"sfz-{uuid.uuid4().hex[:8]}", 2)
    wire = wirefuzz.Wire(side.raw.port, timeout=10)
    try:
        _ready(wire, topic)
        topic_id = _topic_id(wire, topic)
        group = f"sfz-{uuid.uuid4().hex[:8]}"
        out = {
            # a new session naming a partition twice (Kafka's ShareSessionCache cannot add it twice)
            "twice": _fetch(wire, group, 0, [_partitions(topic_id, 0, 0)]),
            # an acquire mode Kafka 4.4 does not know, with a partition to fetch
            "acquire mode 2": _fetch(wire, group, 0, [_partitions(topic_id, 0)], version=2, share_acquire_mode=2),
        }
        # a share group with state for partition 0 only: its partition 1's state cannot be read, which Kafka
        # answers if its read fails while the fetch waits (MaxWaitMs 1 s; polled, the session's epochs counting
        # up: a read that fails after the fetch was answered is lost, the next fetch reads again)
        share = f"sfz-{uuid.uuid4().hex[:8]}"
        _alter(wire, share, topic, 0)
        answer = _fetch(wire, share, 0, [_partitions(topic_id, 1)], max_wait=1000)
        for epoch in range(1, polls + 1):
            if answer != [("error_code", 0)]:
                break
            answer = _fetch(wire, share, epoch, [], max_wait=1000)
        out["state never set"] = answer
        return out
    finally:
        wire.close()


def test_share_fetches_left_out_of_the_fuzzer(chronolog_side, kafka_side):
    ok = [("error_code", 0)]
    failed = [("error_code", 0), ("responses.partitions.acknowledge_error_code", 0),
              ("responses.partitions.error_code", UNKNOWN_SERVER_ERROR)]
    assert _fetches_left_out(chronolog_side, polls=1) == {"twice": ok, "acquire mode 2": ok, "state never set": ok}
    assert _fetches_left_out(kafka_side, polls=30) == {
        "twice": [("error_code", UNKNOWN_SERVER_ERROR)], "acquire mode 2": [("error_code", UNKNOWN_SERVER_ERROR)],
        "state never set": failed}


def _sessions(side: Any) -> dict[str, Any]:
    """A session's partitions a broker cannot serve stay in it, answered with their error in each response;
    acknowledgements answered from KafkaApis' maps."""
    topic = side.create_topic(f"sfz-{uuid.uuid4().hex[:8]}", 2)
    wire = wirefuzz.Wire(side.raw.port, timeout=10)
    try:
        _ready(wire, topic)
        topic_id = _topic_id(wire, topic)
        unknown = uuid.UUID(int=12345)
        group = f"sfz-{uuid.uuid4().hex[:8]}"
        bad = {"first_offset": 5, "last_offset": 0, "acknowledge_types": [1]}
        good = {"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}
        # MaxRecords 0: nothing fetched, so Kafka reads no share-partition state (whose failed read it would
        # answer UNKNOWN_SERVER_ERROR at a moment of its own, see above)
        nothing = {"max_records": 0}
        return {
            "open": _fetch(wire, group, 0, [_partitions(topic_id, 0, 7), _partitions(unknown, 1)], **nothing),
            "next": _fetch(wire, group, 1, [], **nothing),
            "added": _fetch(wire, group, 2, [_partitions(topic_id, 1)], **nothing, forgotten_topics_data=[
                {"topic_id": unknown, "partitions": [1]}]),
            # a partition with batches, then without: its last occurrence counts, and with nothing acknowledged
            # the partitions without batches are not answered
            "acknowledge": _codes(wire, 79, 2, {"group_id": group, "member_id": "sfz-member",
                                                "share_session_epoch": 3, "is_renew_ack": False, "topics": [
                {"topic_id": topic_id, "partitions": [
                    {"partition_index": 0, "acknowledgement_batches": [good]},
                    {"partition_index": 1, "acknowledgement_batches": [bad]},
                    {"partition_index": 0, "acknowledgement_batches": []},
                    {"partition_index": 7, "acknowledgement_batches": []}]}]}),
            "acknowledge in a fetch": _fetch(wire, group, 4, [_partitions(topic_id, 0, acks=(good,))], **nothing),
            "final": _fetch(wire, group, -1, []),
        }
    finally:
        wire.close()


def test_share_sessions_answer_as_kafka(chronolog_side, kafka_side):
    p, ack = "responses.partitions.error_code", "responses.partitions.acknowledge_error_code"
    ok = [("error_code", 0)]
    assert _sessions(chronolog_side) == _sessions(kafka_side) == {
        "open": ok + [(ack, 0)] * 2 + [(p, 3), (p, 100)],
        "next": ok + [(ack, 0)] * 2 + [(p, 3), (p, 100)],
        "added": ok + [(ack, 0)] + [(p, 3)],
        "acknowledge": ok + [(p, 3), (p, 42)],
        # partition 7 answered with its error; 0 with its acknowledgement's (no share-partition: nothing fetched)
        "acknowledge in a fetch": ok + [(ack, 0), (ack, 3), (p, 0), (p, 3)],
        "final": ok,
    }
