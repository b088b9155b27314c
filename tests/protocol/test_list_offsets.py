"""ListOffsets details that real clients hide: a partition asked for twice in one request."""

from __future__ import annotations

from types import SimpleNamespace

from chronolog.config import BrokerConfig
from chronolog.errors import ErrorCode
from chronolog.protocol.core import list_offsets
from chronolog.protocol.registry import BrokerState, RequestContext
from chronolog.storage import LogManager
from tests.storage.helpers import NOW, WIDE, batch


def test_a_partition_asked_twice_answers_invalid_request_and_the_others_are_answered(tmp_path):
    """Once, after the others: measured against Kafka 4.4 (v5 and v9)."""
    with LogManager(tmp_path, BrokerConfig()) as manager:
        manager.create_topic("t", 2, WIDE)
        manager.get_log("t", 0).append(batch(NOW, NOW + 10), now=NOW)
        manager.get_log("t", 1).append(batch(NOW + 5), now=NOW)
        ctx = RequestContext(BrokerState(manager, manager.broker_config, "127.0.0.1", 0), 2, 5, 1, "c", "127.0.0.1")
        part = SimpleNamespace
        req = SimpleNamespace(topics=[SimpleNamespace(name="t", partitions=[
            part(partition_index=0, timestamp=NOW + 1), part(partition_index=1, timestamp=NOW),
            part(partition_index=0, timestamp=NOW)])])
        answers = list_offsets(req, ctx)["topics"][0]["partitions"]
    assert [(a["partition_index"], a["error_code"]) for a in answers] == [(1, 0), (0, ErrorCode.INVALID_REQUEST)]
    assert (answers[0]["offset"], answers[0]["timestamp"]) == (0, NOW + 5)


def _ask(manager, version: int, timestamp: int) -> dict:
    ctx = RequestContext(BrokerState(manager, manager.broker_config, "127.0.0.1", 0), 2, version, 1, "c", "h")
    req = SimpleNamespace(topics=[SimpleNamespace(name="t", partitions=[
        SimpleNamespace(partition_index=0, timestamp=timestamp)])])
    return list_offsets(req, ctx)["topics"][0]["partitions"][0]


def test_list_offsets_timestamp_unsupported_below_its_version(tmp_path):
    """ReplicaManager.isListOffsetsTimestampUnsupported: -3 (max timestamp) needs v7, -4 (earliest local)
    v8, -5 (latest tiered) v9; an unknown negative timestamp is UNSUPPORTED_VERSION at every version."""
    with LogManager(tmp_path, BrokerConfig()) as manager:
        manager.create_topic("t", 1, WIDE)
        manager.get_log("t", 0).append(batch(NOW + 5, NOW), now=NOW)
        assert _ask(manager, 6, -3)["error_code"] == ErrorCode.UNSUPPORTED_VERSION
        assert (_ask(manager, 7, -3)["error_code"], _ask(manager, 7, -3)["offset"]) == (0, 0)
        assert _ask(manager, 7, -4)["error_code"] == ErrorCode.UNSUPPORTED_VERSION
        assert (_ask(manager, 8, -4)["error_code"], _ask(manager, 8, -4)["offset"]) == (0, 0)
        assert _ask(manager, 8, -5)["error_code"] == ErrorCode.UNSUPPORTED_VERSION
        assert _ask(manager, 8, -7)["error_code"] == ErrorCode.UNSUPPORTED_VERSION
        assert (_ask(manager, 1, -1)["offset"], _ask(manager, 1, -2)["offset"]) == (2, 0)


def test_fetch_offset_by_max_timestamp_on_empty_log(tmp_path):
    """UnifiedLog.fetchOffsetByTimestamp(MAX_TIMESTAMP) on an empty log finds no batch: offset -1,
    timestamp -1 and leader epoch -1 (not the partition's epoch)."""
    with LogManager(tmp_path, BrokerConfig()) as manager:
        manager.create_topic("t", 1, WIDE)
        answer = _ask(manager, 8, -3)
    assert (answer["error_code"], answer["offset"], answer["timestamp"], answer["leader_epoch"]) == (0, -1, -1, -1)
