"""The Spark sink: rows/s of `df.write.format("chronolog")` and of `writeStream` (keys, values, partitions and CreateTimes, through
a broker on loopback) as a ratio to confluent-kafka producing the same rows from one Python process, in the
same run against the same broker (target >= 0.5). Best of a few rounds each; every round writes a new topic.
The sink's time includes Spark's job (tasks, Arrow hand-over) but not building the DataFrame (cached).
Rows per path: the default (the sink's own Produce requests, "native") and librdkafka's produce()
(`producer=librdkafka`, what the sink uses for settings the native path does not honour and for exactlyOnce).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from bench.common import print_table

ROWS = 200_000
PARTITIONS = 3
ROUNDS = 3
T0 = 1_700_000_000_000


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
            admin = AdminClient({"bootstrap.servers": proc.bootstrap})
            counter = iter(range(1000))

            def topic() -> str:
                name = f"sink-{next(counter)}"
                admin.create_topics([NewTopic(name, PARTITIONS, 1, config={
                    "message.timestamp.after.max.ms": str(2**62)})])[name].result(15)
                return name

            df = (spark.range(0, ROWS, numPartitions=2)
                  .selectExpr(f"cast(id % {PARTITIONS} as int) as partition",
                              "cast(lpad(cast(id as string), 8, '0') as binary) as key",
                              "cast(repeat('x', 80) as binary) as value",
                              f"timestamp_millis({T0} + id) as timestamp").cache())
            assert df.count() == ROWS
            keys = [b"%08d" % i for i in range(ROWS)]
            value = b"x" * 80

            def sink(path: str = "auto") -> float:
                name = topic()
                start = time.perf_counter()
                df.write.mode("append").format("chronolog").option("kafka.bootstrap.servers", proc.bootstrap) \
                    .option("topic", name).option("producer", path).save()
                return time.perf_counter() - start

            # streaming: the same rows as files of a Parquet directory, written by writeStream
            # (Trigger.AvailableNow: every file in one micro-batch, then the query stops)
            parquet = Path(tmp) / "rows"
            df.repartition(2).write.parquet(str(parquet))
            checkpoints = iter(range(1000))

            def stream(fmt: str = "chronolog") -> float:
                name = topic() if fmt == "chronolog" else ""
                rows_in = spark.readStream.schema(df.schema).parquet(str(parquet))
                start = time.perf_counter()
                query = (rows_in.writeStream.format(fmt).option("kafka.bootstrap.servers", proc.bootstrap)
                         .option("topic", name).option("checkpointLocation", f"{tmp}/cp-{next(checkpoints)}")
                         .trigger(availableNow=True).start())
                query.awaitTermination(600)
                elapsed = time.perf_counter() - start
                if query.isActive or query.exception() is not None:
                    query.stop()
                    raise RuntimeError(f"streaming write did not finish: {query.exception()}")
                return elapsed

            def timed_noop() -> float:
                start = time.perf_counter()
                df.write.mode("overwrite").format("noop").save()
                return time.perf_counter() - start

            def python() -> float:
                name = topic()
                producer = Producer({"bootstrap.servers": proc.bootstrap, "linger.ms": 5})
                start = time.perf_counter()
                for i in range(ROWS):
                    while True:
                        try:
                            producer.produce(name, value, keys[i], partition=i % PARTITIONS, timestamp=T0 + i)
                            break
                        except BufferError:
                            producer.poll(0.05)
                assert producer.flush(120) == 0
                return time.perf_counter() - start

            sink()  # warm up the Python workers
            sink("librdkafka")
            stream()
            sink_s, lib_s, stream_s, py_s = [], [], [], []
            for _ in range(ROUNDS):  # interleaved: a busy neighbour slows all alike
                sink_s.append(sink())
                lib_s.append(sink("librdkafka"))
                stream_s.append(stream())
                py_s.append(python())
            # Spark's own part: the same jobs into Spark's `noop` sink (rows handed over, nothing written)
            noop_batch = min(timed_noop() for _ in range(ROUNDS))
            noop_stream = min(stream("noop") for _ in range(ROUNDS))
            p = min(py_s)
            rows = [("measure", "chronolog sink", "confluent-kafka, one process", "ratio")]
            for label, s in (("df.write (native Produce path, the default)", min(sink_s)),
                             ("df.write (producer=librdkafka)", min(lib_s)),
                             ("writeStream (Parquet files in; native path)", min(stream_s))):
                ratio = p / s
                rows.append((f"{label}: {ROWS} rows (8 B key, 80 B value, CreateTime), {PARTITIONS} partitions",
                             f"{ROWS / s:,.0f} rows/s", f"{ROWS / p:,.0f} rows/s",
                             f"{ratio:.2f} (target >= 0.5: {'met' if ratio >= 0.5 else 'missed'})"))
            rows.append(("Spark alone (noop sink): df.write / writeStream", f"{noop_batch:.2f} s / {noop_stream:.2f} s",
                         "", f"of the sink's {min(sink_s):.2f} s / {min(stream_s):.2f} s"))
            print_table(rows)
        finally:
            spark.stop()
            proc.stop()
    one, five, _ = os.getloadavg()
    print(f"after: load average {one:.2f} / {five:.2f}", flush=True)


if __name__ == "__main__":
    main()
