"""`demo` and `pipeline run` read syslog only: other input is refused with one line and a non-zero exit
before anything is written (it used to end in a KeyError traceback, or in "parsed 0 lines" and exit 0)."""

from __future__ import annotations

from chronolog.spark.pipeline import chart_bucket
from tests.cli.conftest import assert_one_line_error, chronolog


def _not_syslog(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "app.log").write_text("2024-06-14T15:00:00Z INFO started\n2024-06-14T15:00:01Z INFO ready\n")
    return folder


def test_demo_refuses_lines_without_a_syslog_time(tmp_path):
    r = chronolog("demo", "--data-dir", str(tmp_path / "d"), "--input", str(_not_syslog(tmp_path)))
    assert_one_line_error(r, "no line of app.log has a syslog time", "chronolog produce")
    assert not (tmp_path / "d" / "app-0").exists()


def test_pipeline_refuses_lines_without_a_syslog_time(tmp_path):
    r = chronolog("pipeline", "run", "--data-dir", str(tmp_path / "d"), "--out", str(tmp_path / "out"),
                  "--input", str(_not_syslog(tmp_path)))
    assert_one_line_error(r, "no line of app.log has a syslog time", "chronolog produce")
    assert not (tmp_path / "d").exists()  # refused before a broker started


def test_demo_with_leading_lines_without_time_takes_the_first_time(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "s.log").write_text("garbage first\nJun 14 15:16:01 combo sshd[1]: a\nJun 14 15:16:02 combo su: b\n")
    r = chronolog("demo", "--data-dir", str(tmp_path / "d"), "--input", str(folder))
    assert r.rc == 0, r.err
    from chronolog.storage import PartitionLog
    plog = PartitionLog.open_readonly(tmp_path / "d" / "s-0")
    try:
        stamps = [rec.timestamp for rec in plog.read_records(0)]
    finally:
        plog.close()
    assert stamps[0] == stamps[1] > 0 and stamps[2] == stamps[1] + 1000


def test_chart_bucket_follows_the_window_length():
    hour, day = 3_600_000, 86_400_000
    assert chart_bucket(hour) == "minute"
    assert chart_bucket(2 * day) == "hour"
    assert chart_bucket(200 * day) == "day"
    assert chart_bucket(4 * 365 * day) == "week"
    assert chart_bucket(20 * 365 * day) == "month"
    assert chart_bucket(60 * 365 * day) == "year"


def test_pipeline_with_a_broker_that_is_down_is_one_line(shared_data, tmp_path):
    from tests.brokerproc import free_port
    dead = f"127.0.0.1:{free_port()}"
    r = chronolog("pipeline", "run", "--bootstrap-server", dead, "--out", str(tmp_path / "out"),
                  "--input", str(shared_data / "loghub"))
    assert_one_line_error(r, "cannot connect to " + dead)


def test_chart_series_fills_empty_buckets_with_zeros():
    from datetime import datetime

    from chronolog.spark.pipeline import chart_series

    class Row(dict):  # as a pyspark Row: attributes and ["count"]
        __getattr__ = dict.__getitem__

    def row(f, minute, n):
        return {"file": f, "bucket": datetime(2024, 12, 10, 7, minute), "count": n}

    rows = [Row(row("a", 2, 1)), Row(row("a", 5, 3)), Row(row("b", 0, 7))]
    series = chart_series(rows, "minute")
    assert [x.minute for x in series["a"][0]] == [2, 3, 4, 5] and series["a"][1] == [1, 0, 0, 3]
    assert series["b"][1] == [7]
    months = chart_series([Row(row("a", 2, 1)), Row({"file": "a", "bucket": datetime(2025, 3, 1), "count": 2})],
                          "month")
    assert months["a"][1] == [1, 2]  # months differ in length: no grid, only what Spark returned
