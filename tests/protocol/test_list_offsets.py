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
    assert [(a["partition_index"], a["error_code"]) for a in answers] == [
        (0, ErrorCode.INVALID_REQUEST), (1, 0), (0, ErrorCode.INVALID_REQUEST)]
    assert (answers[1]["offset"], answers[1]["timestamp"]) == (0, NOW + 5)
