"""The Spark sink: rows/s of `df.write.format("chronolog")` and of `writeStream` (keys, values, partitions and
CreateTimes, through a broker on loopback) as a ratio to confluent-kafka producing the same rows from one
Python process, in the same run against the same broker (target >= 0.5). Best of a few interleaved rounds
each; every round writes a new topic (deleted after its round).

- `df.write`: ROWS rows of a cached DataFrame (not building it), on each producer path: the default (the
  sink's own Produce requests, "native") and librdkafka's produce() (`producer=librdkafka`).
- `writeStream`, a running stream (STREAMS): rows in Parquet files read a few files per micro-batch
  (`maxFilesPerTrigger`, Trigger.AvailableNow: the query stops when all are written), once with micro-batches
  of 1,000,000 rows and once of 200,000. Its rows/s is that of the micro-batches after the first, from
  Spark's query progress: their rows over the time from the end of the first micro-batch to the end of the
  last (the gaps between micro-batches included). The first micro-batch carries the query's start (the
  Python workers' data source setup, the first plans); the whole query's rows/s, start included, is
  printed beside it. confluent-kafka produces the stream's number of rows in the same round.
- `writeStream`, one-shot: ROWS rows in one micro-batch (the figure this bench printed first): one query's
  start, planning and commit around one micro-batch; most of its time is Spark's fixed cost of a query.
Spark's own part of each: the same jobs into Spark's `noop` sink (rows read, nothing written), and for the
running streams into a Python data source whose writer only reads the Arrow batches Spark hands it
(`pynoop`): what any Python sink pays for Spark's Python data source machinery (the write planned in a
Python worker each micro-batch, the rows converted to Arrow and sent to the Python workers, the commit
called in a Python worker), so the chronolog sink's own part is the difference between it and `pynoop`.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from datetime import datetime
from pathlib import Path

from bench.common import print_table

ROWS = 200_000
# running streams: (rows, Parquet files, files per micro-batch); each micro-batch is 2 tasks (local[2])
STREAMS = ((4_000_000, 8, 2),    # 4 micro-batches of 1,000,000 rows
           (1_000_000, 10, 2))   # 5 micro-batches of 200,000 rows
PARTITIONS = 3
ROUNDS = 3
T0 = 1_700_000_000_000
# The baseline's local queue holds every row of a run (4,000,000 records, about 0.4 GB: under librdkafka's
# default queue.buffering.max.kbytes of 1 GiB): with librdkafka's default of 100,000, or 1,000,000, the loop
# waits on BufferError once the queue is full and 4,000,000 rows went 0.65-0.75x as fast; a slower baseline.
BASELINE_CONFIG = {"linger.ms": 5, "queue.buffering.max.messages": max(n for n, _f, _t in STREAMS)}


def _end(progress: dict) -> float:
    """Seconds since the epoch when a micro-batch ended: its trigger's start plus its duration."""
    start = datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()
    return start + progress["durationMs"]["triggerExecution"] / 1000


def steady_rate(progresses: list[dict]) -> tuple[float, int]:
    """(rows/s of the micro-batches after the first, number of micro-batches with rows)."""
    batches = [p for p in progresses if p["numInputRows"]]
    if len(batches) < 2:
        raise RuntimeError(f"the stream ran {len(batches)} micro-batch(es) with rows: no rate after the first")
    rows = sum(p["numInputRows"] for p in batches[1:])
    return rows / (_end(batches[-1]) - _end(batches[0])), len(batches)


def register_pynoop(spark) -> None:
    """`format("pynoop")`: a Python streaming sink that reads every Arrow batch and writes nothing. Its
    classes are made here so they are pickled by value (the Python workers need not import the bench)."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage

    class Done(WriterCommitMessage):
        pass

    class Writer(DataSourceStreamArrowWriter):
        def write(self, iterator):
            for _batch in iterator:
                pass
            return Done()

        def commit(self, messages, batchId):
            pass

        def abort(self, messages, batchId):
            pass

    class PyNoop(DataSource):
        @classmethod
        def name(cls):
            return "pynoop"

        def streamWriter(self, schema, overwrite):
            return Writer()

    spark.dataSource.register(PyNoop)


def main() -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from tests.brokerproc import BrokerProcess

    from chronolog.spark import session

    one, five, _ = os.getloadavg()
    print(f"before: load average {one:.2f} / {five:.2f} on {os.cpu_count()} cores", flush=True)
    with tempfile.TemporaryDirectory(prefix="chronolog-bench-sink-") as tmp:
        proc = BrokerProcess(Path(tmp) / "data").start()
        spark = session("local[2]", "chronolog-bench-sink", {"spark.ui.showConsoleProgress": "false"})
        try:
            register_pynoop(spark)
            admin = AdminClient({"bootstrap.servers": proc.bootstrap})
            counter = iter(range(1000))

            def topic() -> str:
                name = f"sink-{next(counter)}"
                admin.create_topics([NewTopic(name, PARTITIONS, 1, config={
                    "message.timestamp.after.max.ms": str(2**62)})])[name].result(15)
                return name

            def drop(name: str) -> None:  # the rounds' gigabytes do not pile up in the data dir
                admin.delete_topics([name])[name].result(15)

            columns = (f"cast(id % {PARTITIONS} as int) as partition",
                       "cast(lpad(cast(id as string), 8, '0') as binary) as key",
                       "cast(repeat('x', 80) as binary) as value",
                       f"timestamp_millis({T0} + id) as timestamp")
            df = spark.range(0, ROWS, numPartitions=2).selectExpr(*columns).cache()
            assert df.count() == ROWS
            keys = [b"%08d" % i for i in range(max(n for n, _f, _t in STREAMS))]
            value = b"x" * 80

            def sink(path: str = "auto") -> float:
                name = topic()
                start = time.perf_counter()
                df.write.mode("append").format("chronolog").option("kafka.bootstrap.servers", proc.bootstrap) \
                    .option("topic", name).option("producer", path).save()
                elapsed = time.perf_counter() - start
                drop(name)
                return elapsed

            # streaming: the same rows as Parquet files, written by writeStream
            one_shot = Path(tmp) / "rows"
            df.repartition(2).write.parquet(str(one_shot))
            running = []
            for n, files, per_trigger in STREAMS:
                running.append((Path(tmp) / f"stream-{n}-{files}", n, per_trigger))
                spark.range(0, n, numPartitions=files).selectExpr(*columns).write.parquet(str(running[-1][0]))
            checkpoints = iter(range(1000))

            def stream(files: Path, fmt: str = "chronolog", per_trigger: int | None = None) -> tuple[float, list]:
                """(seconds from start() to the query's end, its progress per micro-batch)"""
                name = topic() if fmt == "chronolog" else ""
                rows_in = spark.readStream.schema(df.schema)
                if per_trigger is not None:
                    rows_in = rows_in.option("maxFilesPerTrigger", per_trigger)
                start = time.perf_counter()
                query = (rows_in.parquet(str(files)).writeStream.format(fmt)
                         .option("kafka.bootstrap.servers", proc.bootstrap).option("topic", name)
                         .option("checkpointLocation", f"{tmp}/cp-{next(checkpoints)}")
                         .trigger(availableNow=True).start())
                query.awaitTermination(900)
                elapsed = time.perf_counter() - start
                if query.isActive or query.exception() is not None:
                    query.stop()
                    raise RuntimeError(f"streaming write did not finish: {query.exception()}")
                if name:
                    drop(name)
                return elapsed, query.recentProgress

            def timed_noop() -> float:
                start = time.perf_counter()
                df.write.mode("overwrite").format("noop").save()
                return time.perf_counter() - start

            def python(rows: int) -> float:
                name = topic()
                producer = Producer({"bootstrap.servers": proc.bootstrap, **BASELINE_CONFIG})
                start = time.perf_counter()
                for i in range(rows):
                    while True:
                        try:
                            producer.produce(name, value, keys[i], partition=i % PARTITIONS, timestamp=T0 + i)
                            break
                        except BufferError:
                            producer.poll(0.05)
                assert producer.flush(300) == 0
                elapsed = time.perf_counter() - start
                drop(name)
                return elapsed

            sink()  # warm up the Python workers and the JVM's code for each job
            sink("librdkafka")
            stream(one_shot)
            stream(running[0][0], per_trigger=running[0][2])
            sink_s, lib_s, shot_s, py_s = [], [], [], []
            steady, whole, py_n = ([[] for _ in STREAMS] for _ in range(3))
            for _ in range(ROUNDS):  # interleaved: a busy neighbour slows all alike
                sink_s.append(sink())
                lib_s.append(sink("librdkafka"))
                shot_s.append(stream(one_shot)[0])
                py_s.append(python(ROWS))
                for i, (files, n, per_trigger) in enumerate(running):
                    elapsed, progress = stream(files, per_trigger=per_trigger)
                    steady[i].append(steady_rate(progress)[0])
                    whole[i].append(n / elapsed)
                    py_n[i].append(n / python(n))
            # Spark's own part: the same jobs into Spark's `noop` sink (rows handed over, nothing written)
            noop_batch = min(timed_noop() for _ in range(ROUNDS))
            noop_shot = min(stream(one_shot, "noop")[0] for _ in range(ROUNDS))
            noop_steady, noop_whole, py_steady = [], [], []
            for files, n, per_trigger in running:
                runs, py_runs = [], []
                for _ in range(ROUNDS):
                    runs.append(stream(files, "noop", per_trigger))
                    py_runs.append(stream(files, "pynoop", per_trigger))
                noop_steady.append(max(steady_rate(progress)[0] for _e, progress in runs))
                noop_whole.append(max(n / e for e, _p in runs))
                py_steady.append(max(steady_rate(progress)[0] for _e, progress in py_runs))
            p = ROWS / min(py_s)
            fastest = max(p, *(max(r) for r in py_n))  # the strictest baseline of the run, whatever its rows

            def verdict(ratio: float) -> str:  # rounded down: 0.497 shows as 0.49, not as a missed 0.50
                return f"{math.floor(ratio * 100) / 100:.2f} (target >= 0.5: {'met' if ratio >= 0.5 else 'missed'})"

            shape = f"(8 B key, 80 B value, CreateTime), {PARTITIONS} partitions"
            rows = [("measure", "chronolog sink", "confluent-kafka, one process", "ratio")]
            for label, s in (("df.write (native Produce path, the default)", min(sink_s)),
                             ("df.write (producer=librdkafka)", min(lib_s))):
                rows.append((f"{label}: {ROWS} rows {shape}", f"{ROWS / s:,.0f} rows/s", f"{p:,.0f} rows/s",
                             verdict(ROWS / s / p)))
            for i, (n, files, per_trigger) in enumerate(STREAMS):
                batch = n // files * per_trigger
                rows.append((f"writeStream, running: {n} rows from Parquet files in {n // batch} micro-batches of "
                             f"{batch}; rows/s after the first micro-batch",
                             f"{max(steady[i]):,.0f} rows/s", f"{max(py_n[i]):,.0f} rows/s ({n} rows)",
                             f"{verdict(max(steady[i]) / max(py_n[i]))}; {math.floor(max(steady[i]) / fastest * 100) / 100:.2f} of the "
                             f"run's fastest baseline, {fastest:,.0f} rows/s"))
                rows.append((f"writeStream, running, micro-batches of {batch}: the whole query (its start included)",
                             f"{max(whole[i]):,.0f} rows/s", f"{max(py_n[i]):,.0f} rows/s ({n} rows)",
                             f"{max(whole[i]) / max(py_n[i]):.2f} (query start included)"))
            rows.append((f"writeStream, one-shot: {ROWS} rows in one micro-batch (a query's start + 1 batch)",
                         f"{ROWS / min(shot_s):,.0f} rows/s", f"{p:,.0f} rows/s",
                         f"{ROWS / min(shot_s) / p:.2f} (query start included)"))
            rows.append(("Spark alone (noop sink): df.write / writeStream one-shot",
                         f"{noop_batch:.2f} s / {noop_shot:.2f} s", "",
                         f"of the sink's {min(sink_s):.2f} s / {min(shot_s):.2f} s"))
            for i, (n, files, per_trigger) in enumerate(STREAMS):
                rows.append((f"Spark alone (noop sink): writeStream running, micro-batches of {n // files * per_trigger}: "
                             "after the first / with it", f"{noop_steady[i]:,.0f} / {noop_whole[i]:,.0f} rows/s", "",
                             f"the sink's {max(steady[i]):,.0f} / {max(whole[i]):,.0f} rows/s"))
                rows.append((f"Spark + Python data source machinery (pynoop sink): micro-batches of "
                             f"{n // files * per_trigger}, after the first", f"{py_steady[i]:,.0f} rows/s", "",
                             f"the sink's {max(steady[i]):,.0f} rows/s"))
            print_table(rows)
        finally:
            spark.stop()
            proc.stop()
    one, five, _ = os.getloadavg()
    print(f"after: load average {one:.2f} / {five:.2f}", flush=True)


if __name__ == "__main__":
    main()
