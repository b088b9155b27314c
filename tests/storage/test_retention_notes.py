"""Retention is never silent: every deleted segment is logged with the breach that deleted it (Kafka's
`RetentionMsBreach` / `RetentionSizeBreach` / `StartOffsetBreach` wording), a produce of records already
past `retention.ms` is a WARNING naming the configs that keep them (once per partition per period), and a
time lookup below the log start says the records were deleted."""

from __future__ import annotations

import logging

from chronolog.records import SimpleRecord, build_batch
from chronolog.storage.retention import EXPIRED_ARRIVAL_WARNING_EVERY_MS
from chronolog.timetravel.sources import DataDirSource
from tests.storage.helpers import NOW, B, batch, open_log, write_data_dir

WEEK = 604_800_000
YEAR_2005 = 1_118_761_200_000  # 2005-06-14T15:00:00Z


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_records_already_past_retention_warn_once_per_period_naming_the_configs(tmp_path, caplog):
    plog = open_log(tmp_path, segment_bytes=10 * B)  # default retention.ms: 7 days
    caplog.set_level(logging.INFO, logger="chronolog")
    plog.append(batch(NOW - 3_600_000), now=NOW)  # one hour old: kept
    assert _warnings(caplog) == []
    plog.append(batch(YEAR_2005, YEAR_2005 + 5), now=NOW)
    [first] = _warnings(caplog)
    assert "t-0" in first and f"retention.ms={WEEK} (7 days)" in first and "2005-06-14T15:00:00.005Z" in first
    assert "retention.ms=-1" in first and "log.retention.hours=-1" in first
    for i in range(3):  # the same period: counted, not repeated
        plog.append(batch(YEAR_2005 + 10 + i), now=NOW + 1000 * i)
    assert len(_warnings(caplog)) == 1
    plog.append(batch(YEAR_2005 + 20), now=NOW + EXPIRED_ARRIVAL_WARNING_EVERY_MS)
    [_, second] = _warnings(caplog)
    assert "4 produced batch(es)" in second and "2005-06-14T15:00:00.010Z" in second


def test_no_warning_when_history_is_kept_or_time_is_the_brokers(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="chronolog")
    for name, overrides in (("keep", {"retention_ms": -1}), ("append", {"message_timestamp_type": "LogAppendTime"}),
                            ("compact", {"cleanup_policy": "compact"})):
        plog = open_log(tmp_path / name, **overrides)
        keyed = build_batch([SimpleRecord(YEAR_2005, b"key", b"v")])  # a compacted topic needs keys
        plog.append(keyed if name == "compact" else batch(YEAR_2005), now=NOW)
        plog.close()
    assert _warnings(caplog) == []


def test_each_deleted_segment_is_logged_with_its_breach(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="chronolog")
    plog = open_log(tmp_path, segment_bytes=2 * B, file_delete_delay_ms=0)
    for i in range(5):
        plog.append(batch(YEAR_2005 + i), now=NOW)
    plog.append(batch(NOW), now=NOW)
    assert [s.base_offset for s in plog.segments] == [0, 2, 4, 5]  # the new record's time rolled (segment.ms)
    assert plog.delete_old_segments(NOW) == 3
    lines = [r.getMessage() for r in caplog.records if "Deleting segment" in r.getMessage()]
    assert lines == [
        f"[UnifiedLog partition=t-0, dir={tmp_path}] Deleting segment LogSegment(baseOffset={base}, size={size}, "
        f"largestRecordTimestamp={YEAR_2005 + last}) due to log retention time {WEEK}ms breach based on the "
        "largest record timestamp in the segment" for base, size, last in ((0, 2 * B, 1), (2, 2 * B, 3), (4, B, 4))]
    plog.close()


def test_size_and_start_offset_breaches_are_logged(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="chronolog")
    plog = open_log(tmp_path, segment_bytes=2 * B, retention_bytes=3 * B, retention_ms=-1, file_delete_delay_ms=0)
    for i in range(6):
        plog.append(batch(NOW + i), now=NOW)
    assert plog.delete_old_segments(NOW) == 1
    sizes = [r.getMessage() for r in caplog.records if "retention size" in r.getMessage()]
    assert sizes == [f"[UnifiedLog partition=t-0, dir={tmp_path}] Deleting segment LogSegment(baseOffset=0, "
                     f"size={2 * B}, largestRecordTimestamp={NOW + 1}) due to log retention size {3 * B} breach. "
                     f"Log size after deletion will be {4 * B}."]
    plog.delete_records_before(5)
    plog.delete_old_segments(NOW)
    starts = [r.getMessage() for r in caplog.records if "log start offset 5 breach" in r.getMessage()]
    assert len(starts) == 1 and "LogSegment(baseOffset=2," in starts[0]
    plog.close()


def test_a_lookup_below_the_log_start_says_the_records_were_deleted(tmp_path):
    data = write_data_dir(tmp_path / "data", "old", {0: [batch(YEAR_2005 + i) for i in range(4)] + [batch(NOW)]},
                          {"segment.bytes": str(2 * B), "file.delete.delay.ms": "0"})
    from chronolog.config import BrokerConfig
    from chronolog.storage import LogManager
    with LogManager(data, BrokerConfig()) as manager:
        assert manager.run_retention_once(NOW + 1) == 2
    source = DataDirSource(data)
    found = source.offsets_for_time("old", YEAR_2005)[0]
    assert (found.offset, found.start_offset) == (4, 4)
    assert found.deleted_note(YEAR_2005) == ("T is before the log start: earlier records deleted by retention "
                                             "(log start offset 4)")
    assert source.offsets_for_time("old", NOW)[0].deleted_note(NOW) is None  # the record at the start itself
    source.close()
