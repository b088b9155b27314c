"""What a user sees when a query through the chronolog source or sink fails for an expected reason: the
chronolog message as the first line (here the whole text) of the exception PySpark raises, no Python
traceback of the worker, and no librdkafka log lines; what spark-submit prints ends in that line."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from pyspark.errors import AnalysisException, PySparkException, PythonException

from chronolog.errors import ChronologError
from chronolog.spark.failures import chronolog_message

pytestmark = [pytest.mark.spark]
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def failure(run) -> tuple[PySparkException, float]:
    start = time.monotonic()
    with pytest.raises(PySparkException) as info:
        run()
    return info.value, time.monotonic() - start


def reader(spark, **options):
    r = spark.read.format("chronolog")
    for k, v in options.items():
        r = r.option(k, v)
    return r


def test_a_stopped_broker_is_one_line_naming_it(spark):
    port = free_port()
    broker = f"127.0.0.1:{port}"
    # warm the planning workers first: the time below is the query's, not the first Python worker's start
    failure(lambda: reader(spark, path="/no/such/dir", subscribe="t").load().count())
    exc, took = failure(lambda: reader(spark, **{"kafka.bootstrap.servers": broker}, subscribe="t").load().count())
    assert isinstance(exc, AnalysisException) and isinstance(exc, ChronologError)
    assert str(exc) == f"cannot connect to {broker} ({broker}: Connection refused); is the broker running?"
    print(f"failed in {took:.2f} s")
    assert took < 60  # a hang guard only: the refused connection is not retried (test_broker_plan.py)


def test_a_mistyped_topic_and_a_bad_option_are_first_lines(spark, chronolog_broker):
    bs = chronolog_broker.bootstrap
    exc, _ = failure(lambda: reader(spark, **{"kafka.bootstrap.servers": bs}, subscribe="no-such-topic").load().count())
    assert str(exc).splitlines()[0] == f"topic 'no-such-topic' not found on {bs}"
    exc, _ = failure(lambda: reader(spark, **{"kafka.bootstrap.servers": bs}, subscribe="t",
                                    failOnDataLoss="maybe").load())  # at load(), as Spark's Kafka source
    assert str(exc).splitlines()[0] == "option failOnDataLoss takes true or false, got 'maybe'"
    exc, _ = failure(lambda: reader(spark, subscribe="t").load())
    assert str(exc).splitlines()[0] == \
        "give exactly one of the options 'path' (a data dir) and 'kafka.bootstrap.servers'"


@pytest.mark.parametrize("producer", ["native", "librdkafka"])
def test_a_too_large_row_is_the_first_line(spark, chronolog_broker, producer):
    topic = chronolog_broker.create_topic(partitions=1, prefix="small", configs={"max.message.bytes": "2000"})
    df = spark.createDataFrame([(b"v" * 10,), (b"v" * 5000,)], "value binary").coalesce(1)
    exc, _ = failure(lambda: df.write.mode("append").format("chronolog").option("producer", producer)
                     .option("kafka.bootstrap.servers", chronolog_broker.bootstrap).option("topic", topic).save())
    assert isinstance(exc, PythonException) and isinstance(exc, ChronologError)
    assert str(exc).splitlines()[0] == (
        "row 1: a record of 5082 bytes (key, value, headers and batch overhead) is over max.message.bytes=2000 "
        f"of topic '{topic}': nothing of this task was written")
    assert "Traceback" not in str(exc)
    # and the sink's mistyped topic, from the driver-side check before any task
    exc, _ = failure(lambda: df.write.mode("append").format("chronolog")
                     .option("kafka.bootstrap.servers", chronolog_broker.bootstrap).option("topic", "no-such").save())
    assert str(exc).splitlines()[0].startswith(f"topic 'no-such' does not exist on {chronolog_broker.bootstrap}")


def test_the_message_is_found_in_what_the_worker_wrote():
    """Both shapes a worker writes: the whole traceback (an error outside the methods that hide it), and
    the one line after Spark's prefix."""
    traceback_text = textwrap.dedent("""\
        [PYTHON_DATA_SOURCE_ERROR] Failed to plan Python data source read: Traceback (most recent call last):
          File "/x/chronolog/spark/source.py", line 102, in partitions
            planned = plan(self.options, self.bounds)
        chronolog.errors.UnknownTopicOrPartitionError: topic 'x' not found on h:1
         SQLSTATE: 38000""")
    assert chronolog_message(traceback_text) == "topic 'x' not found on h:1"
    hidden = ("An exception was thrown from the Python worker: chronolog.timetravel.connection.ConnectionLost: "
              "h:1: timed out\n")
    assert chronolog_message(hidden) == "h:1: timed out"
    assert chronolog_message("[PYTHON_EXCEPTION] ValueError: not ours") is None


SUBMITTED = """\
import sys
from chronolog.spark import session
spark = session("local[1]", "errors", {"spark.ui.showConsoleProgress": "false"})
spark.read.format("chronolog").option("kafka.bootstrap.servers", sys.argv[1]).option("subscribe", "t").load().count()
"""


@pytest.mark.slow
def test_spark_submit_prints_the_line_and_no_librdkafka_lines(tmp_path):
    """A job given to spark-submit against a stopped broker: its output ends with the exception's line, the
    chronolog message, with no worker traceback and no librdkafka log line before it (above it: Python's
    traceback of the job's own lines, and Spark's start-up log)."""
    job = tmp_path / "job.py"
    job.write_text(SUBMITTED)
    broker = f"127.0.0.1:{free_port()}"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    submit = Path(sys.executable).parent / "spark-submit"
    done = subprocess.run([str(submit), "--master", "local[1]", str(job), broker], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300)
    assert done.returncode != 0
    printed = done.stdout + done.stderr  # spark-submit hands the driver's stderr to its own stdout
    assert "rdkafka" not in printed and "%3|" not in printed
    assert "chronolog/spark/" not in printed  # no frame of the source's worker
    last = done.stdout.strip().splitlines()[-1]
    assert last == (f"pyspark.errors.exceptions.captured.AnalysisException: cannot connect to {broker} "
                    f"({broker}: Connection refused); is the broker running?")
