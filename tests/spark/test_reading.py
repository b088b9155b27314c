"""Executor-side reading without Spark: bounds applied exactly, and files released after each task."""

from __future__ import annotations

from chronolog.config import TopicConfig
from chronolog.records import SimpleRecord, build_batch
from chronolog.spark.ranges import Bounds, OffsetRange, range_schema
from chronolog.spark.reading import read_range
from chronolog.storage import PartitionLog
from tests.fds import open_files_under

BASE = 1_700_000_000_000


def test_bounds_in_microseconds_match_keep_and_no_files_are_left_open(tmp_path):
    cfg = TopicConfig.from_kafka({"message.timestamp.after.max.ms": str(2**62), "segment.bytes": "1500"})
    plog = PartitionLog.open(tmp_path / "t-0", cfg)
    stamps = [BASE + (i * 7) % 50 for i in range(300)]  # out of order, many equal
    for i in range(0, 300, 10):
        plog.append(build_batch([SimpleRecord(t, None, b"v") for t in stamps[i:i + 10]]))
    plog.close()
    assert len(plog.segments) >= 3
    fds = open_files_under(tmp_path)
    # Microsecond bounds that are not whole milliseconds: ceil for the lower one, floor for the upper.
    for lo_us, hi_us, off_min, off_max in ((BASE * 1000 + 10_001, BASE * 1000 + 20_999, None, None),
                                            (BASE * 1000, BASE * 1000 + 49_000, 13, 217),
                                            (BASE * 1000 + 49_001, None, None, None)):
        bounds = Bounds(lo_us, hi_us, off_min, off_max)
        part = OffsetRange("t", 0, 5, 290, str(tmp_path / "t-0"), "path", bounds)
        got = [(o, t) for b in read_range(part, range_schema(False))
               for o, t in zip(b.column("offset").to_pylist(), b.column("timestamp").cast("int64").to_pylist(),
                               strict=True)]
        want = [(o, ts * 1000) for o, ts in enumerate(stamps) if 5 <= o < 290 and bounds.keep(0, o, ts)]
        assert got == want
    assert open_files_under(tmp_path) == fds
