"""A segment's largest timestamp is found when first needed, not when the log is opened (Kafka's
`LogSegment.maxTimestampAndOffsetSoFar` is lazy too): opening reads no segment whole, even one whose records
all share a timestamp (its time index then holds a single entry), and every answer that depends on the
largest timestamp is what an eager scan gives."""

from __future__ import annotations

import dataclasses

from chronolog.storage import PartitionLog
from tests.storage.helpers import NOW, batch, counting_preads, open_log

VALUE = b"v" * 1000


def _flat_log(tmp_path):
    """Three segments of 200 batches (of two records, 2 KB) that each share one timestamp (NOW, NOW + 5,
    NOW + 2: not in order), then an active segment with rising timestamps."""
    plog = open_log(tmp_path, segment_bytes=200 * len(batch(NOW, NOW, value=VALUE)), index_interval_bytes=0)
    for ts in (NOW, NOW + 5, NOW + 2):
        for _ in range(200):
            plog.append(batch(ts, ts, value=VALUE), now=NOW)
    for i in range(10):
        plog.append(batch(NOW + 10 + i), now=NOW)
    truth = [max(b.max_timestamp for _p, b in seg.batches_from(0)) for seg in plog.segments]
    plog.close()
    return plog, truth


def test_opening_reads_no_segment_whole(tmp_path, monkeypatch):
    plog, truth = _flat_log(tmp_path)
    total = sum(seg.log_path.stat().st_size for seg in plog.segments)
    sizes = counting_preads(monkeypatch)
    reopened = PartitionLog.open(plog.dir, plog.config, recover=False)
    assert sum(sizes) < total / 4, (sum(sizes), total)  # the first batches only, not the segments
    assert [seg.largest_timestamp for seg in reopened.segments] == truth
    assert sum(sizes) >= total / 2  # now they were read, once
    reopened.close()


def test_answers_that_depend_on_the_largest_timestamp_are_unchanged(tmp_path):
    plog, truth = _flat_log(tmp_path)
    reopened = PartitionLog.open(plog.dir, plog.config, recover=False)
    # By time: the first segment whose largest timestamp reaches the target holds the answer.
    assert reopened.offset_for_timestamp(NOW + 3).offset == 400  # the second segment (NOW + 5)
    assert reopened.offset_for_timestamp(-3).timestamp == NOW + 19  # the max timestamp special
    reopened.close()
    reopened = PartitionLog.open(plog.dir, plog.config, recover=False)
    # An append into the active segment compares with its max: the time index gets the true running max.
    reopened.append(batch(NOW + 15), now=NOW)
    active = reopened.segments[-1]
    assert active.max_timestamp_so_far == NOW + 19
    reopened.roll()
    assert active.time_index.last_entry().timestamp == NOW + 19
    reopened.close()
    # Retention: segments whose largest timestamp has expired go, oldest first, the rest stay.
    cfg = dataclasses.replace(plog.config, retention_ms=4)
    reopened = PartitionLog.open(plog.dir, cfg, recover=False)
    reopened.delete_old_segments(now=NOW + 8)  # NOW and NOW + 2 expired, but NOW + 5 blocks the third
    assert reopened.segments[0].base_offset == 400
    reopened.close()
