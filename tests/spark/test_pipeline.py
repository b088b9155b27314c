"""The pipeline job on the real loghub samples through the embedded broker."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from chronolog.server.embedded import EmbeddedBroker
from chronolog.spark.pipeline import ingest, prepare_out, run_job
from chronolog.timetravel.syslog import parse_syslog_line
from chronolog.timetravel.timefmt import parse_time

pytestmark = pytest.mark.spark


def test_pipeline_window_report_and_rerun(spark, shared_data, tmp_path):
    files = sorted((shared_data / "loghub").glob("*.log"))
    t1, t2 = parse_time("2024-12-10T07:00:00Z"), parse_time("2024-12-10T09:00:00Z")
    want = sum(1 for f in files for line in f.read_text().splitlines()
               if (p := parse_syslog_line(line, 2024)) and t1 <= p.timestamp < t2)
    with EmbeddedBroker(tmp_path / "data") as broker:
        first = ingest(broker.bootstrap, files, 2024, print)
        again = ingest(broker.bootstrap, files, 2024, print)
        assert not first.skipped and again.skipped and first.lines == 4000
        out = tmp_path / "out"
        prepare_out(out)
        report = run_job(spark, broker.bootstrap, files, t1, t2, out, print)
    assert report["lines_in_window"] == want > 0
    assert report["agreement"]["agree"] == report["agreement"]["lines"] == 4000
    table = pq.read_table(out / "lines.parquet")
    assert table.num_rows == want and set(table.column("host").to_pylist()) == {"LabSZ"}
    assert sum(r["count"] for r in report["per_hour"]) == want
    assert (out / "events_per_minute.png").stat().st_size > 5000 and report["chart"].endswith("events_per_minute.png")
    assert report["chart_bucket"] == "minute"  # a two-hour window is drawn by minute, not as two dots
    assert json.loads((out / "report.json").read_text())["top_messages"]
