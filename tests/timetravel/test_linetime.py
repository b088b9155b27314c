"""Reading each line's own time, key and value for `chronolog produce` (the command itself is tested
against a broker in tests/cli/test_produce.py)."""

from __future__ import annotations

import pytest

from chronolog.errors import ChronologError
from chronolog.timetravel.linetime import LineReader
from chronolog.timetravel.timefmt import TimeFormat, parse_time


class Line:
    """One line read as `chronolog produce` reads a block of one line."""

    def __init__(self, r: LineReader, line: bytes) -> None:
        keys, values = r.keys_values([line])
        self.key = keys[0] if keys is not None else None
        self.value = values[0]
        self.timestamp = r.times(values)[0] if r.timed else None


def reader(**kw):
    base = dict(time_field=None, time_regex=None, time_format=None, year=None, timezone=None, key_field=None,
                key_separator=None, field_separator=None)
    r = LineReader(**{**base, **kw})
    return lambda line: Line(r, line.encode() if isinstance(line, str) else line)


@pytest.mark.parametrize("fmt, text, iso", [
    ("iso", "2024-06-14T15:00:00Z", "2024-06-14T15:00:00Z"),
    ("iso", "2024-06-14 17:00:00.250+02:00", "2024-06-14T15:00:00.250Z"),
    ("epoch_s", "1718377200", "2024-06-14T15:00:00Z"),
    ("epoch_s", "1718377200.5", "2024-06-14T15:00:00.500Z"),
    ("epoch_ms", "1718377200000", "2024-06-14T15:00:00Z"),
    ("epoch_us", "1718377200000000", "2024-06-14T15:00:00Z"),
    ("epoch_ns", "1718377200000000000", "2024-06-14T15:00:00Z"),
    ("%d/%b/%Y:%H:%M:%S %z", "14/Jun/2024:17:00:00 +0200", "2024-06-14T15:00:00Z"),
    ("%Y-%m-%d %H:%M:%S,%f", "2024-06-14 15:00:00,125", "2024-06-14T15:00:00.125Z"),
])
def test_formats(fmt, text, iso):
    assert TimeFormat(fmt).read(text) == parse_time(iso)


def test_syslog_needs_a_year_and_reads_29_february():
    with pytest.raises(ChronologError, match="has no year"):
        reader(time_format="syslog")
    r = reader(time_format="syslog", year=2024)
    assert r("Feb 29 10:00:00 host prog: x").timestamp == parse_time("2024-02-29T10:00:00Z")
    assert r("Jun  4 01:02:03 host prog[1]: x").timestamp == parse_time("2024-06-04T01:02:03Z")
    assert reader(time_format="syslog", year=2023)("Feb 29 10:00:00 host prog: x").timestamp is None


def test_timezone_for_times_without_one():
    r = reader(time_field="1-2", time_format="%Y-%m-%d %H:%M:%S", timezone="Europe/Paris")
    assert r("2024-06-14 17:00:00 x").timestamp == parse_time("2024-06-14T15:00:00Z")  # summer: UTC+2
    assert r("2024-01-14 16:00:00 x").timestamp == parse_time("2024-01-14T15:00:00Z")  # winter: UTC+1


def test_fields_json_and_keys():
    r = reader(time_field="3", field_separator=",", key_field="2")
    p = r("a,b,2024-06-14T15:00:00Z,d")
    assert (p.key, p.value, p.timestamp) == (b"b", b"a,b,2024-06-14T15:00:00Z,d", parse_time("2024-06-14T15:00:00Z"))
    assert r("too,short").timestamp is None
    j = reader(time_field="meta.ts", time_format="epoch_ms", key_field="user")
    p = j('{"user": "alice", "meta": {"ts": 1718377200000}}')
    assert (p.key, p.timestamp) == (b"alice", 1718377200000)
    assert j("not json").timestamp is None and j('{"user": null}').key is None
    k = reader(key_separator="\t", time_field="1")
    p = k("key1\t2024-06-14T15:00:00Z rest")
    assert (p.key, p.value, p.timestamp) == (b"key1", b"2024-06-14T15:00:00Z rest", parse_time("2024-06-14T15:00:00Z"))


def test_times_outside_record_timestamps_are_unreadable():
    r = reader(time_field="1", time_format="epoch_ms")
    assert r("-5 x").timestamp is None and r("99999999999999999999 x").timestamp is None
    assert r("12x x").timestamp is None
