from __future__ import annotations

import pytest

from chronolog.timetravel.timefmt import TimeFormatError, format_time, parse_duration, parse_time

NOW = 1_718_377_200_000  # 2024-06-14T15:00:00Z


@pytest.mark.parametrize("text,want", [
    ("2024-06-14T15:00:00Z", NOW), ("2024-06-14T15:00:00", NOW), ("2024-06-14T17:00:00+02:00", NOW),
    ("1718377200000", NOW), ("now", NOW), ("2h ago", NOW - 7_200_000), ("-90m", NOW - 5_400_000),
    ("30 seconds ago", NOW - 30_000), ("1d ago", NOW - 86_400_000),
])
def test_parse_time(text, want):
    assert parse_time(text, now=NOW) == want


@pytest.mark.parametrize("bad", ["", "yesterday-ish", "2h from now", "-5 parsecs", "2024-13-45"])
def test_bad_times_are_one_clear_error(bad):
    with pytest.raises(TimeFormatError):
        parse_time(bad, now=NOW)


def test_durations_like_kafka_consumer_groups():
    assert parse_duration("PT2H") == 7_200_000
    assert parse_duration("P1DT30M") == 86_400_000 + 1_800_000
    assert parse_duration("PT0.5S") == 500
    with pytest.raises(TimeFormatError):
        parse_duration("2h")


def test_format_time():
    assert format_time(NOW + 5) == "2024-06-14T15:00:00.005Z"
    assert format_time(-1) == "-"


@pytest.mark.parametrize("bad, words", [("99999999999999999999", "after year 9999"), ("1900-01-01", "before 1970"),
                                        ("100000 days ago", "before 1970"), ("-1", "cannot read"),
                                        ("9999-12-31T23:59:59.999+00:00", None), ("10000-01-01", "cannot read")])
def test_times_outside_record_timestamps_are_refused(bad, words):
    if words is None:  # the last millisecond of year 9999 is still a time
        assert parse_time(bad, now=NOW) == 253_402_300_799_999
        return
    with pytest.raises(TimeFormatError, match=words):
        parse_time(bad, now=NOW)


def test_ten_digits_warn_naming_both_readings(caplog):
    with caplog.at_level("WARNING", logger="chronolog.time"):
        assert parse_time("1718377200", now=NOW) == 1_718_377_200
    [record] = caplog.records
    assert "1970-01-20T21:19:37.200Z" in record.getMessage() and "2024-06-14T15:00:00.000Z" in record.getMessage()
    caplog.clear()
    with caplog.at_level("WARNING", logger="chronolog.time"):
        parse_time("1718377200000", now=NOW)
    assert not caplog.records
