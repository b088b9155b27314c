"""The pipeline's chart: its file name and title name the bucket it counts by, and no point is drawn on or
outside the frame (a file with one line at the window's start, as OpenSSH in the loghub sample)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

pytest.importorskip("matplotlib")

from chronolog.spark.pipeline import _chart, chart_bucket, chart_name  # noqa: E402

DAY = 86_400_000


class Row(dict):
    """What Spark's collect() gives: attributes and items."""

    __getattr__ = dict.__getitem__


def _rows(start: datetime, bucket: timedelta, counts: dict[str, list[tuple[int, int]]]) -> list[Row]:
    return [Row(file=name, bucket=start + i * bucket, count=c) for name, pts in counts.items() for i, c in pts]


@pytest.mark.parametrize("span,bucket", [(2 * 3_600_000, "minute"), (3 * DAY, "hour"), (200 * DAY, "day")])
def test_title_and_file_name_follow_the_bucket_and_nothing_is_clipped(tmp_path, span, bucket):
    import matplotlib.dates as mdates
    assert chart_bucket(span) == bucket
    length = {"minute": timedelta(minutes=1), "hour": timedelta(hours=1), "day": timedelta(days=1)}[bucket]
    start_dt = datetime(2005, 6, 14, 0, 0, 0)
    start = int(start_dt.timestamp() * 1000)
    n = int(span / (length.total_seconds() * 1000))
    rows = _rows(start_dt, length, {"Linux_2k.log": [(i, 5 + i % 7) for i in range(n)],
                                    "OpenSSH_2k.log": [(0, 40)],           # one point, at the window's start
                                    "Mac_2k.log": [(n - 1, 0), (n - 2, 3)]})  # the last bucket, empty
    path = tmp_path / chart_name(bucket)
    drawn = _chart(rows, bucket, start, start + span, path)
    assert path.name == f"events_per_{bucket}.png" and path.stat().st_size > 5000
    assert drawn["title"].startswith(f"syslog events per {bucket} ") and drawn["ylabel"] == f"events per {bucket}"
    (x0, x1), (y0, y1) = drawn["xlim"], drawn["ylim"]
    margin_x, margin_y = (x1 - x0) * 0.01, (y1 - y0) * 0.01
    for name, points in drawn["points"].items():
        for x, y in points:
            assert x0 + margin_x < x < x1 - margin_x and y0 + margin_y < y < y1 - margin_y, (name, x, y)
    assert drawn["points"]["OpenSSH_2k.log"] == [(mdates.date2num(start_dt), 40)]
