"""Time formats beyond strptime (issue #40), shared by produce, the pipeline, the console and --from/--to
through `timefmt.TimeFormat`: unpadded fields (HealthApp's `20171223-22:15:29:11` is 11 ms), Java patterns,
epoch units; a format that misreads shows as times going back where the text goes forward."""

from __future__ import annotations

import csv
from datetime import UTC, datetime

import pytest

from chronolog.timetravel.timefmt import OrderCheck, TimeFormat, TimeFormatError, format_time, parse_time
from tests.cli.conftest import chronolog
from tests.cli.test_produce_bytes import values


@pytest.mark.parametrize("spec, text, want", [
    ("yyyyMMdd-HH:mm:ss:SSS", "20171223-22:15:29:606", "2017-12-23T22:15:29.606Z"),
    ("yyyyMMdd-HH:mm:ss:SSS", "20171223-22:15:29:11", "2017-12-23T22:15:29.011Z"),
    ("yyyyMMdd-HH:mm:ss:SSS", "20171223-22:15:29:1", "2017-12-23T22:15:29.001Z"),
    ("yyyy-MM-dd'T'HH:mm:ss.SSSXXX", "2024-06-14T15:00:00.123+02:00", "2024-06-14T13:00:00.123Z"),
    ("yyyy-MM-dd HH:mm:ss,SSS", "2024-06-14 15:00:00,5", "2024-06-14T15:00:00.005Z"),
    ("dd/MMM/yyyy:HH:mm:ss Z", "14/Jun/2024:15:00:00 -0500", "2024-06-14T20:00:00.000Z"),
    ("d MMMM yyyy h:mm a", "4 June 2024 3:07 PM", "2024-06-04T15:07:00.000Z"),
    ("%Y-%m-%d %H:%M:%S.%f", "2024-06-14 15:00:00.5", "2024-06-14T15:00:00.500Z"),  # %f: a decimal fraction
    ("%Y-%m-%d %H:%M:%S", "2024-6-4 5:7:9", "2024-06-04T05:07:09.000Z"),  # unpadded, as strptime reads them
    ("%d/%b/%Y:%H:%M:%S %z", "31/Dec/2015:22:00:00 -0500", "2016-01-01T03:00:00.000Z"),
    ("%s", "1718377200", "2024-06-14T15:00:00.000Z"),
    ("epoch_s", "1718377200.25", "2024-06-14T15:00:00.250Z"),
    ("epoch_ms", "1718377200250", "2024-06-14T15:00:00.250Z"),
    ("epoch_us", "1718377200250999", "2024-06-14T15:00:00.250Z"),
    ("epoch_ns", "1718377200250999999", "2024-06-14T15:00:00.250Z"),
    ("iso", "2024-06-14T15:00:00.25", "2024-06-14T15:00:00.250Z"),
])
def test_formats_read(spec, text, want):
    assert format_time(TimeFormat(spec).read(text)) == want
    assert format_time(TimeFormat(spec).read(text.encode())) == want  # lines are bytes


def test_formats_without_a_year_and_zones():
    syslog = TimeFormat("syslog", year=2024)
    assert format_time(syslog.read("Feb 29 23:59:59")) == "2024-02-29T23:59:59.000Z"
    assert format_time(syslog.read("Mar  1 00:00:00")) == "2024-03-01T00:00:00.000Z"
    assert syslog.read("Foo  1 00:00:00") is None and syslog.read("Feb 30 00:00:00") is None
    paris = TimeFormat("yyyy-MM-dd HH:mm", zone="Europe/Paris")
    assert format_time(paris.read("2024-06-14 15:00")) == "2024-06-14T13:00:00.000Z"
    assert TimeFormat("iso").read("not a time") is None and TimeFormat("epoch_ms").read("12a") is None


@pytest.mark.parametrize("spec, year, words", [
    ("what", None, "'w' is not a pattern letter"),
    ("%Q", None, "%Q is not a strptime directive"),
    ("HH:mm", None, "has no year"),
    ("yyyy-MM-dd", 2024, "has its own year"),
    ("'open", None, "quote is not closed"),
])
def test_bad_formats_are_refused(spec, year, words):
    with pytest.raises(TimeFormatError, match=words):
        TimeFormat(spec, year=year)


def test_from_and_to_read_the_log_own_format():
    assert parse_time("20171223-22:15:29:11", fmt="yyyyMMdd-HH:mm:ss:SSS") == 1514067329011
    assert parse_time("2017-12-23T22:15:29Z", fmt="yyyyMMdd-HH:mm:ss:SSS") == 1514067329000  # ISO still works
    assert parse_time("1h ago", now=7_200_000, fmt="epoch_s") == 3_600_000


def test_order_check_sees_a_misread_only_where_the_text_is_in_order():
    check = OrderCheck()
    check.see(2, "20171223-22:15:35:98", "20171223-22:15:35:104", 980, 104)  # text forward, time back
    check.see(9, "Mar 31 23:59:59", "Mar 30 00:00:00", 2, 1)  # the file itself goes back: not a misread
    assert check.count == 1 and check.first == (2, "20171223-22:15:35:98", "20171223-22:15:35:104")
    assert TimeFormat("yyyyMMdd-HH:mm:ss:SSS").sortable and not TimeFormat("%d/%b/%Y:%H:%M:%S").sortable


HEALTH = ["20171223-22:15:35:98|Step_LSC|30002312|a", "20171223-22:15:35:104|Step_LSC|30002312|b",
          "20171223-22:15:35:5|Step_LSC|30002312|c", "20171223-22:15:36:11|Step_LSC|30002312|d"]


def test_produce_reads_unpadded_milliseconds_and_warns_of_a_misreading_format(cli_broker):
    b = cli_broker.bootstrap
    for topic in ("health", "health-f"):
        assert chronolog("topics", "create", topic, "-c", "retention.ms=-1", "-b", b).rc == 0
    text = "\n".join(HEALTH) + "\n"
    r = chronolog("produce", "health", "--time-regex", r"^([^|]+)\|", "--time-format", "yyyyMMdd-HH:mm:ss:SSS",
                  "-b", b, stdin=text)
    assert r.rc == 0, r.err
    assert "warning" not in r.err
    base = 1514067335000
    assert [ts for _, ts in values(b, "health")] == [base + 98, base + 104, base + 5, base + 1011]
    r = chronolog("produce", "health-f", "--time-regex", r"^([^|]+)\|", "--time-format", "%Y%m%d-%H:%M:%S:%f",
                  "-b", b, stdin=text)
    assert r.rc == 0, r.err
    assert "times go back 1 time(s) where the text goes forward, first at line 2 ('20171223-22:15:35:104' read " \
           "as earlier than '20171223-22:15:35:98' before it)" in r.err


def test_real_healthapp_sample_against_its_ground_truth(cli_broker, shared_data):
    """loghub's HealthApp_2k (when the shared data has it): every time as loghub's own parse writes it."""
    log = shared_data / "loghub" / "HealthApp_2k.log"
    truth = shared_data / "loghub" / "HealthApp_2k.log_structured.csv"
    if not log.exists() or not truth.exists():
        pytest.skip("no HealthApp_2k sample in the shared data")
    b = cli_broker.bootstrap
    assert chronolog("topics", "create", "healthapp", "-c", "retention.ms=-1", "-b", b).rc == 0
    r = chronolog("produce", "healthapp", str(log), "--time-regex", r"^([^|]+)\|", "--time-format",
                  "yyyyMMdd-HH:mm:ss:SSS", "-b", b)
    assert r.rc == 0 and "warning" not in r.err, r.err
    want = []
    with truth.open(newline="") as f:
        for row in csv.DictReader(f):
            day, clock = row["Time"].split("-")
            hh, mm, ss, ms = (int(x) for x in clock.split(":"))
            dt = datetime(int(day[:4]), int(day[4:6]), int(day[6:]), hh, mm, ss, tzinfo=UTC)
            want.append(int(dt.timestamp()) * 1000 + ms)
    got = values(b, "healthapp")
    assert [ts for _, ts in got] == want
    assert [v for v, _ in got] == log.read_bytes().rstrip(b"\n").split(b"\n")
