"""`describe-segments --plot`: out-of-order data gives segments whose time ranges overlap; each is drawn in
its own lane (8 segments look like 8), partitions are integer ticks, dates carry the year and the zone."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from chronolog.cli.main import app
from chronolog.cli.topics import _plot, segment_lanes
from chronolog.config import BrokerConfig
from chronolog.records import SimpleRecord, build_batch
from chronolog.storage import LogManager

BASE = 1_718_377_200_000  # 2024-06-14T15:00:00Z
HOUR = 3_600_000


def _out_of_order_dir(path):
    """Two partitions; in partition 0 every batch of 20 records spans the whole day back and forth, so each
    segment (rolled every ~2 KB) covers most of the day and overlaps all the others."""
    manager = LogManager(path, BrokerConfig())
    manager.startup(background=False)
    try:
        manager.create_topic("ooo", 2, {"segment.bytes": "2048", "retention.ms": "-1"})
        for p in (0, 1):
            plog = manager.get_log("ooo", p)
            for b in range(8 if p == 0 else 2):
                stamps = [BASE + ((b * 7 + i * 5) % 24) * HOUR for i in range(20)]
                plog.append(build_batch([SimpleRecord(ts, None, b"x" * 60) for ts in stamps]))
    finally:
        manager.shutdown()


def _overlap(a, b) -> bool:
    return a["first_timestamp"] <= b["largest_timestamp"] and b["first_timestamp"] <= a["largest_timestamp"]


def test_overlapping_segments_get_their_own_lanes(tmp_path):
    _out_of_order_dir(tmp_path / "d")
    result = CliRunner().invoke(app, ["describe-segments", "ooo", "--data-dir", str(tmp_path / "d"), "--json",
                                      "--plot", str(tmp_path / "s.png")])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert (tmp_path / "s.png").stat().st_size > 5000
    p0 = [r for r in rows if r["partition"] == 0]
    assert len(p0) >= 6
    lanes = segment_lanes(rows)
    for i, a in enumerate(rows):
        for b in rows[i + 1:]:
            if a["partition"] == b["partition"] and _overlap(a, b):
                assert lanes[(a["partition"], a["base_offset"])] != lanes[(b["partition"], b["base_offset"])]
    assert len({lanes[(0, r["base_offset"])] for r in p0}) == len(p0)  # every segment of p0 overlaps the others

    drawn = _plot("ooo", rows, tmp_path / "again.png")
    ys = [(d["partition"], d["y"]) for d in drawn["segments"]]
    assert len(ys) == len(rows) and len({y for _p, y in ys}) == len(rows)  # no two bars on one row
    assert drawn["ylabels"] == ["partition 0", "partition 1"]  # not a bare "0" beside the base offsets
    assert drawn["xlabel"] == "record time (UTC)"
    assert any(label.startswith("2024-06-1") for label in drawn["xlabels"])


def test_lanes_reuse_free_rows():
    rows = [{"partition": 0, "base_offset": i * 10, "first_timestamp": a, "largest_timestamp": b}
            for i, (a, b) in enumerate([(0, 10), (5, 15), (11, 20), (16, 30)])]
    assert segment_lanes(rows) == {(0, 0): 0, (0, 10): 1, (0, 20): 0, (0, 30): 1}


def _in_order_dir(path):
    """One partition of in-order syslog-like data, one record per second, each batch starting at the second
    the previous one ended on (log lines of the same second): rolled segments share a boundary second."""
    manager = LogManager(path, BrokerConfig())
    manager.startup(background=False)
    try:
        manager.create_topic("inorder", 1, {"segment.bytes": "2048", "retention.ms": "-1"})
        plog = manager.get_log("inorder", 0)
        t = BASE
        for _b in range(12):
            stamps = [t + i * 1000 for i in range(20)]
            plog.append(build_batch([SimpleRecord(ts, None, b"y" * 60) for ts in stamps]))
            t = stamps[-1]  # the next batch starts in the second this one ended in
    finally:
        manager.shutdown()


def test_segments_sharing_a_boundary_second_share_a_lane(tmp_path):
    _in_order_dir(tmp_path / "d")
    result = CliRunner().invoke(app, ["describe-segments", "inorder", "--data-dir", str(tmp_path / "d"), "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert len(rows) >= 4
    touching = [(a, b) for a, b in zip(rows, rows[1:], strict=False)
                if a["largest_timestamp"] == b["first_timestamp"]]
    assert touching  # the case: one segment ends in the second the next begins
    assert set(segment_lanes(rows).values()) == {0}  # in-order data: one lane, no "overlap"
    drawn = _plot("inorder", rows, tmp_path / "p.png")
    assert {d["lane"] for d in drawn["segments"]} == {0} and drawn["ylabels"] == ["partition 0"]
    assert not any(label == "0" for label in drawn["ylabels"])
    lo, hi = drawn["xlim"]
    first = min(d["start"] for d in drawn["segments"])
    last = max(d["end"] for d in drawn["segments"])
    assert lo < first and last < hi  # the first and last bars are not cut by the frame


def test_lanes_only_for_real_overlap():
    touch = [{"partition": 0, "base_offset": i * 10, "first_timestamp": a, "largest_timestamp": b}
             for i, (a, b) in enumerate([(0, 10), (10, 20), (20, 20), (20, 30)])]
    assert set(segment_lanes(touch).values()) == {0}
    overlap = [{"partition": 0, "base_offset": i * 10, "first_timestamp": a, "largest_timestamp": b}
               for i, (a, b) in enumerate([(0, 10), (9, 20)])]
    assert segment_lanes(overlap) == {(0, 0): 0, (0, 10): 1}
