"""Data without timestamps (v2 records stamped -1, v0 messages) and the time rules that meet it, as Kafka's
`TimeIndex.maybeAppend` and `LogSegment.shouldRoll` have them; and the log's one injectable clock."""

from __future__ import annotations

import threading

from chronolog.config import TopicConfig
from chronolog.storage import PartitionLog
from tests.storage.helpers import NOW, WIDE, batch


class Clock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


def _log(path, clock, **configs) -> PartitionLog:
    cfg = {**WIDE, "index.interval.bytes": "1", **configs}
    return PartitionLog.open(path, TopicConfig.from_kafka(cfg), clock=clock)


def test_time_index_stays_empty_without_timestamps(tmp_path):
    """TimeIndex.maybeAppend ("if all the messages are in message format v0, the timestamp will always be
    NoTimestamp; in that case, the time index will be empty") and LogSegment.onBecomeInactiveSegment's final
    entry: no (-1, offset) entry, which Kafka's TimeIndex.sanityCheck would call corrupt."""
    clock = Clock(NOW)
    plog = _log(tmp_path / "t-0", clock)
    for _ in range(3):
        plog.append(batch(-1, -1))
    first = plog.segments[0]
    plog.roll()
    assert first.time_index.entries == 0 and first.time_index.path.stat().st_size == 0
    assert first.max_timestamp_so_far == -1
    plog.append(batch(NOW + 5))  # a stamped batch after them gets its final entry on the roll
    index = plog.active.time_index
    plog.roll()
    assert [(index.entry(i).timestamp, index.entry(i).offset) for i in range(index.entries)] == [(NOW + 5, 6)]
    plog.close()


def test_time_based_roll_without_timestamps(tmp_path):
    """LogSegment.shouldRoll (`timeWaitedForRoll`): when the first batch has no timestamp, segment.ms counts
    from the segment's creation on the log's clock, as UnifiedLogTest.testTimeBasedLogRoll drives it with
    MockTime."""
    clock = Clock(NOW)
    plog = _log(tmp_path / "t-0", clock, **{"segment.ms": "1000"})
    plog.append(batch(-1))
    clock.ms += 999
    plog.append(batch(-1))
    assert len(plog.segments) == 1
    clock.ms += 2
    plog.append(batch(-1))
    assert [s.base_offset for s in plog.segments] == [0, 2]  # 1001 ms after the segment was made
    plog.close()


def test_append_of_an_empty_record_set(tmp_path):
    """UnifiedLog.append ("return if we have no valid messages"): an empty record set appends nothing and
    answers unknown offsets; the log end offset does not move. (Produce v3+ refuses it before: INVALID_RECORD.)"""
    plog = _log(tmp_path / "t-0", Clock(NOW))
    plog.append(batch(NOW))
    info = plog.append(b"")
    assert (info.first_offset, info.last_offset, info.records_count) == (-1, -1, 0)
    assert plog.log_end_offset == 1 and plog.active.size == len(batch(NOW))
    plog.close()


def test_async_delete(tmp_path):
    """UnifiedLogTest.testAsyncDelete: segments removed by retention are renamed `.deleted` at once and
    removed when `file.delete.delay.ms` has passed on the log's clock (Kafka's mock time drives its
    scheduler; here the clock decides and the timer only wakes the check): not a millisecond before."""
    clock = Clock(NOW)
    plog = _log(tmp_path / "t-0", clock, **{"segment.bytes": "120", "retention.ms": "999",
                                            "file.delete.delay.ms": "1000"})
    for _ in range(5):
        plog.append(batch(NOW - 1000), now=NOW)
    assert plog.delete_old_segments() == 5 and len(plog.segments) == 1  # the active one too: rolled first
    deleted = sorted((tmp_path / "t-0").glob("*.deleted"))
    assert {p.suffixes[0] for p in deleted} >= {".log", ".index", ".timeindex"} and len(deleted) >= 12
    assert not any(p.with_suffix("").exists() for p in deleted)
    clock.ms += 999
    assert plog.delete_due_files() == 0 and all(p.exists() for p in deleted)
    clock.ms += 1
    assert plog.delete_due_files() == len(deleted) and not any(p.exists() for p in deleted)
    plog.close()


def test_async_delete_timer_waits_for_the_clock(tmp_path):
    """The timer armed for `file.delete.delay.ms` removes nothing while the log's clock has not moved: it
    re-arms itself, and the files go at the first wake-up after the clock has passed the due time."""
    clock = Clock(NOW)
    plog = _log(tmp_path / "t-0", clock, **{"segment.bytes": "120", "retention.ms": "0",
                                            "file.delete.delay.ms": "50"})
    plog.append(batch(NOW - 10), now=NOW)
    plog.append(batch(NOW - 5), now=NOW)
    assert plog.delete_old_segments() >= 1
    deleted = list((tmp_path / "t-0").glob("*.deleted"))
    woken = threading.Event()
    original = plog._deletions.on_timer

    def counting() -> None:
        original()
        woken.set()
    plog._deletions.on_timer = counting
    plog._deletions.cancel()
    plog._deletions.arm(50)
    assert woken.wait(10)
    assert all(p.exists() for p in deleted) and plog._deletions.timer is not None  # re-armed, clock unmoved
    woken.clear()
    clock.ms += 50
    assert woken.wait(10) and not any(p.exists() for p in deleted)
    plog.close()
    assert plog._deletions.timer is None
