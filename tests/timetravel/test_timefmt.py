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
