"""Retention in Kafka's order (`UnifiedLog.deleteOldSegments`, KAFKA-12177): segments below the log start
offset first, then retention.bytes measured after them, then retention.ms; the log-start-offset rule also
runs without the delete policy. Named after `UnifiedLogTest`."""

from __future__ import annotations

import logging

from chronolog.config import TopicConfig
from chronolog.storage import PartitionLog
from tests.storage.helpers import NOW, WIDE, B, batch


def _log(path, log_start_offset: int = 0, **configs) -> PartitionLog:
    cfg = {**WIDE, "segment.bytes": str(B + 10), "file.delete.delay.ms": "0", **configs}
    return PartitionLog.open(path, TopicConfig.from_kafka(cfg), log_start_offset=log_start_offset, now=NOW)


def _five_segments(path) -> None:
    plog = _log(path)
    for i in range(5):
        plog.append(batch(NOW + i), now=NOW)
    assert [s.base_offset for s in plog.segments] == [0, 1, 2, 3, 4]
    plog.close()


def test_log_start_offset_breach_first_then_size(tmp_path, caplog):
    """UnifiedLogTest.testLogDeletionAfterDeleteRecords / KAFKA-12177: the size rule sees the log after the
    segments below the log start offset went, so each rule deletes what Kafka's deletes."""
    path = tmp_path / "t-0"
    _five_segments(path)
    plog = _log(path, log_start_offset=2, **{"retention.bytes": str(2 * B)})
    with caplog.at_level(logging.INFO, logger="chronolog.storage.log"):
        assert plog.delete_old_segments(NOW + 10) == 3
    reasons = [r.getMessage().split(" by ")[1].split(";")[0] for r in caplog.records
               if "deleted" in r.getMessage() and " by " in r.getMessage()]
    assert reasons == ["log start offset", "retention.bytes"]
    assert [s.base_offset for s in plog.segments] == [3, 4]


def test_log_start_offset_deletion_without_delete_policy(tmp_path):
    """UnifiedLogTest.testDeleteOldSegmentsWithCompactPolicy...: with cleanup.policy=compact only the log
    start offset rule runs, and it still frees the segments below it (as after DeleteRecords)."""
    path = tmp_path / "t-0"
    _five_segments(path)
    plog = _log(path, log_start_offset=2, **{"cleanup.policy": "compact", "retention.ms": "1"})
    assert plog.delete_old_segments(NOW + 10**9) == 2
    assert [s.base_offset for s in plog.segments] == [2, 3, 4]
