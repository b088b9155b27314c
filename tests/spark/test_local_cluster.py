"""Executors as separate processes (`local-cluster[2,1,1024]`): the source must work when its readers run
in other processes and another working directory. A subprocess, because one process holds one SparkContext."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from chronolog.config import BrokerConfig
from chronolog.records import SimpleRecord, build_batch
from chronolog.storage import LogManager

pytestmark = pytest.mark.spark

JOB = textwrap.dedent("""
    from chronolog.spark import session
    spark = session("local-cluster[2,1,1024]", "chronolog-local-cluster")
    df = (spark.read.format("chronolog").option("path", "data").option("subscribe", "lc")
          .option("minPartitions", "4").load())
    rows = df.where("timestamp >= timestamp_millis(1700000000500)").select("offset").collect()
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    print("RESULT", len(rows), sorted(r.offset for r in rows)[0], executors)
    spark.stop()
""")


def test_local_cluster_reads_with_separate_executor_processes(tmp_path):
    manager = LogManager(tmp_path / "data", BrokerConfig())
    manager.startup(background=False)
    manager.create_topic("lc", 1, {"message.timestamp.after.max.ms": str(2**62)})
    for i in range(0, 1000, 100):
        manager.get_log("lc", 0).append(build_batch([SimpleRecord(1_700_000_000_000 + i + j, None, b"v")
                                                     for j in range(100)]))
    manager.shutdown()
    out = subprocess.run([sys.executable, "-c", JOB], cwd=tmp_path, capture_output=True, text=True, timeout=240)
    result = [line for line in out.stdout.splitlines() if line.startswith("RESULT")]
    assert result, out.stderr[-3000:]
    _, count, first, executors = result[0].split()
    assert (int(count), int(first), int(executors)) == (500, 500, 2)
