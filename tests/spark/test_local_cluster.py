"""Executors as separate processes (`local-cluster[2,1,1024]`): the source and the sink must work when their
readers and writers run in other processes and another working directory. A subprocess, because one process
holds one SparkContext; one job does both so the suite pays one cluster start."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from chronolog.config import BrokerConfig
from chronolog.records import SimpleRecord, build_batch
from chronolog.storage import LogManager
from tests.brokerproc import BrokerProcess
from tests.consuming import read_messages

pytestmark = [pytest.mark.spark, pytest.mark.slow]  # slow: a JVM of its own (CI runs every marker)
BASE = 1_700_000_000_000

JOB = textwrap.dedent("""
    import sys
    from chronolog.spark import session
    bootstrap = sys.argv[1]
    spark = session("local-cluster[2,1,1024]", "chronolog-local-cluster")
    df = (spark.read.format("chronolog").option("path", "data").option("subscribe", "lc")
          .option("minPartitions", "4").option("includeHeaders", "true").load())
    window = df.where("timestamp >= timestamp_millis(1700000000500)")
    rows = window.select("offset").collect()
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    print("RESULT", len(rows), sorted(r.offset for r in rows)[0], executors)
    # the sink: the window's rows, spread over 4 write tasks, into a 3-partition topic on the broker
    (window.select("key", "value", "headers", "timestamp", (window["offset"] % 3).cast("int").alias("partition"))
     .repartition(4).write.mode("append").format("chronolog").option("kafka.bootstrap.servers", bootstrap)
     .option("topic", "lc-out").save())
    back = (spark.read.format("chronolog").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", "lc-out").option("minPartitions", "4").load())
    print("BACK", back.count(), back.where("timestamp < timestamp_millis(1700000000500)").count())
    spark.stop()
""")


def test_local_cluster_reads_and_writes_with_separate_executor_processes(tmp_path):
    manager = LogManager(tmp_path / "data", BrokerConfig())
    manager.startup(background=False)
    manager.create_topic("lc", 1, {"message.timestamp.after.max.ms": str(2**62), "retention.ms": "-1"})
    for i in range(0, 1000, 100):
        manager.get_log("lc", 0).append(build_batch([
            SimpleRecord(BASE + i + j, f"k{i + j}".encode(), f"v{i + j}".encode(),
                         (("n", str(i + j).encode()),)) for j in range(100)]))
    manager.shutdown()
    broker = BrokerProcess(tmp_path / "broker").start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("lc-out", 3, 1, config={"message.timestamp.after.max.ms": str(2**62),
                                                              "retention.ms": "-1"})])["lc-out"].result(15)
        out = subprocess.run([sys.executable, "-c", JOB, broker.bootstrap], cwd=tmp_path, capture_output=True,
                             text=True, timeout=600)
        lines = {line.split()[0]: line.split()[1:] for line in out.stdout.splitlines()
                 if line.startswith(("RESULT", "BACK"))}
        assert "BACK" in lines, out.stderr[-3000:]
        count, first, executors = map(int, lines["RESULT"])
        assert (count, first, executors) == (500, 500, 2)
        # read back by librdkafka: every record of the window once, byte-equal, with its CreateTime and header,
        # in the partition the row named
        got = read_messages(broker.bootstrap, "lc-out", 3, "read_committed", 500, 60)
        seen = sorted((p, m.key(), m.value(), tuple(m.headers() or ()), m.timestamp()[1])
                      for p, ms in got.items() for m in ms)
        want = sorted((n % 3, f"k{n}".encode(), f"v{n}".encode(), (("n", str(n).encode()),), BASE + n)
                      for n in range(500, 1000))
        assert seen == want
        assert list(map(int, lines["BACK"])) == [500, 0]  # and the source in broker mode on the cluster agrees
    finally:
        broker.stop()
