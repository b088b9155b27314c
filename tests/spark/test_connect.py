"""The source and the sink through Spark Connect: a Spark Connect server (spark-submit's
SparkConnectServer, this test's own child, on loopback) and a client process that has only pyspark's
Connect client and chronolog (`SparkSession.builder.remote`, no JVM of its own). The client registers the
`chronolog` data source, reads a window (Spark's timestamp options: offset ranges; a `timestamp` filter:
the exact window) and writes it through the sink; the rows are checked against brute force over the
records' offsets and timestamps, and read back by librdkafka."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyspark
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.brokerproc import BrokerProcess, free_port
from tests.consuming import read_messages

pytestmark = [pytest.mark.spark, pytest.mark.slow]  # slow: a JVM of its own (CI runs every marker)
BASE = 1_700_000_000_000
PARTITIONS = 3
START_WAIT_S = 400.0  # a JVM start on a loaded two-core machine

CLIENT = textwrap.dedent("""
    import json, sys
    from pyspark.sql import SparkSession
    from chronolog.spark.source import register
    url, bootstrap, start, end = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    spark = SparkSession.builder.remote(url).getOrCreate()
    from pyspark import SparkContext
    from pyspark.sql.connect.session import SparkSession as ConnectSession
    assert isinstance(spark, ConnectSession) and SparkContext._active_spark_context is None  # no local JVM
    register(spark)
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    def base():  # a new reader each time: option() changes the reader it is called on
        return spark.read.format("chronolog").option("kafka.bootstrap.servers", bootstrap).option("subscribe", "cx")
    cols = "partition, offset, unix_millis(timestamp) AS ts"
    by_options = (base().option("startingTimestamp", str(start)).option("endingTimestamp", str(end)).load()
                  .selectExpr(*cols.split(", ")).collect())
    window = base().load().where(f"timestamp >= timestamp_millis({start}) AND timestamp < timestamp_millis({end})")
    exact = window.selectExpr(*cols.split(", ")).collect()
    (window.select("key", "value", "timestamp", "partition").write.mode("append").format("chronolog")
     .option("kafka.bootstrap.servers", bootstrap).option("topic", "cx-out").save())
    print("RESULT " + json.dumps({"options": sorted([r.partition, r.offset, r.ts] for r in by_options),
                                  "exact": sorted([r.partition, r.offset, r.ts] for r in exact)}))
    spark.stop()
""")


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _start_server(workdir: Path, port: int) -> tuple[subprocess.Popen, Path]:
    """SparkConnectServer in the foreground as this test's child (sbin/start-connect-server.sh daemonizes),
    its Python workers on this interpreter with this checkout's chronolog on their path."""
    home = Path(pyspark.__file__).parent
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_CONNECT_MODE": "0", "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           "PYTHONPATH": os.pathsep.join(p for p in [str(Path(__file__).resolve().parents[2] / "src"),
                                                      os.environ.get("PYTHONPATH", "")] if p)}
    log = workdir / "connect-server.log"
    conf = {"spark.connect.grpc.binding.address": "127.0.0.1", "spark.connect.grpc.binding.port": str(port),
            "spark.ui.enabled": "false", "spark.sql.session.timeZone": "UTC", "spark.sql.shuffle.partitions": "2",
            "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
    args = [str(home / "bin" / "spark-submit"), "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
            "--master", "local[2]", "--name", "chronolog-connect-test"]
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    return proc, log


def _stop_server(proc: subprocess.Popen) -> None:
    """spark-submit execs java, so the child's PID is the server's; its process group holds the Python
    workers it started."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


def _produce(bootstrap: str) -> list[tuple[int, int, int, bytes, bytes]]:
    """Records with late CreateTimes in every partition; returns (partition, offset, ts, key, value) as
    the broker stored them (read back by librdkafka)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic(name, PARTITIONS, 1, config={"message.timestamp.after.max.ms": str(2**62), "retention.ms": "-1"})
              for name in ("cx", "cx-out")]
    for future in admin.create_topics(topics).values():
        future.result(15)
    rng = random.Random(17)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(600):
        ts = BASE + i * 10 - (rng.randint(0, 2000) if rng.random() < 0.2 else 0)  # one in five is late
        producer.produce("cx", f"v{i}".encode(), f"k{i}".encode(), i % PARTITIONS, timestamp=ts)
    assert producer.flush(30) == 0
    got = read_messages(bootstrap, "cx", PARTITIONS, "read_committed", 600, 120)
    records = [(p, m.offset(), m.timestamp()[1], m.key(), m.value()) for p, ms in got.items() for m in ms]
    assert len(records) == 600, f"{len(records)} of 600 records read back in 120 s"  # not a wrong window later
    return records


def _spark_ranges(records, start: int, end: int) -> list[list[int]]:
    """Spark's Kafka source for startingTimestamp/endingTimestamp: per partition, from the first offset whose
    timestamp is >= start to the first offset whose timestamp is >= end (exclusive; the end offset when none)."""
    out = []
    for p in range(PARTITIONS):
        mine = sorted((o, ts) for q, o, ts, _k, _v in records if q == p)
        first = next((o for o, ts in mine if ts >= start), None)
        if first is None:
            continue  # startingOffsetsByTimestampStrategy=error would fail: the windows below avoid it
        stop = next((o for o, ts in mine if ts >= end), mine[-1][0] + 1)
        out += [[p, o, ts] for o, ts in mine if first <= o < stop]
    return sorted(out)


def test_connect_client_reads_and_writes(tmp_path):
    broker = BrokerProcess(tmp_path / "broker").start()
    server = None
    try:
        records = _produce(broker.bootstrap)
        port = free_port()
        server, log = _start_server(tmp_path, port)
        deadline = time.monotonic() + START_WAIT_S
        while not _accepts(port):
            assert server.poll() is None, f"the Connect server exited: {log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no Connect server on {port}: {log.read_text()[-3000:]}"
            time.sleep(0.5)  # polling the port: the server says nowhere else that it is up
        start, end = BASE + 1500, BASE + 4000
        client_env = {**os.environ, "SPARK_CONNECT_MODE": "1"}
        client_env.pop("PYSPARK_PYTHON", None)
        try:
            done = subprocess.run([sys.executable, "-c", CLIENT, f"sc://127.0.0.1:{port}", broker.bootstrap,
                                   str(start), str(end)], cwd=tmp_path, env=client_env, capture_output=True,
                                  text=True, timeout=900)  # a bound for a hung client only
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"the Connect client hung: {str(exc.stderr or '')[-3000:]} {log.read_text()[-3000:]}")
        result = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        assert result, (done.stderr[-3000:], log.read_text()[-3000:])
        got = json.loads(result[0][len("RESULT "):])
        ranges = _spark_ranges(records, start, end)
        exact = sorted([p, o, ts] for p, o, ts, _k, _v in records if start <= ts < end)
        assert got["options"] == ranges
        assert got["exact"] == exact
        assert ranges != exact  # late records make the two forms differ, so both are checked
        written = read_messages(broker.bootstrap, "cx-out", PARTITIONS, "read_committed", len(exact), 120)
        back = sorted((p, m.key(), m.value(), m.timestamp()[1]) for p, ms in written.items() for m in ms)
        assert back == sorted((p, k, v, ts) for p, _o, ts, k, v in records if start <= ts < end)
    finally:
        if server is not None:
            _stop_server(server)
        broker.stop()
