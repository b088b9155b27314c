"""chronolog's Spark source against Spark's own Kafka connector (`format("kafka")`, spark-sql-kafka-0-10)
on the same broker, same session, same query, in interleaved rounds:
- a one-hour window of a 24-hour topic, chosen by `startingTimestamp` / `endingTimestamp` (offsets by
  time on both sides: the same rows); target >= 1.0 (Kafka's time over ours);
- the full scan; target >= 3. Beside it, the same rows from a zero-work Python source (ready Arrow batches,
  no I/O): the ceiling of any Python data source in that run, so the ratio it gives is the most the source
  could reach.
1,000,000 records of 80 bytes over 24 hours in 3 partitions, on a chronolog broker (loopback), `local[2]`.
Each query is a `count()`; the figure is the median of the rounds (the best beside it).

Run alone: `python -m bench.bench_spark_kafka`; `python -m bench spark` runs it after its own tables.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from bench.bench_arrow import zero_work_source
from bench.common import print_table

T0 = 1_700_000_000_000
HOUR = 3_600_000
RECORDS = 1_000_000
PARTITIONS = 3
ROUNDS = 7
SCAN_ROUNDS = 3
JARS = sorted((Path(__file__).resolve().parents[1] / "var" / "jars" / "spark-kafka").glob("*.jar"))


def spark_settings() -> dict[str, str]:
    """The session settings that make `format("kafka")` available (when `make jars` resolved it)."""
    return {"spark.jars": ",".join(str(p) for p in JARS)} if JARS else {}


def load(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1, config={"message.timestamp.after.max.ms": str(2**62),
                                                                   "retention.ms": "-1"})])[topic].result(15)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    per = RECORDS // PARTITIONS
    step = 24 * HOUR // per
    for p in range(PARTITIONS):
        for i in range(per):
            while True:
                try:
                    producer.produce(topic, value=b"x" * 80, partition=p, timestamp=T0 + i * step)
                    break
                except BufferError:
                    producer.poll(0.01)
    assert producer.flush(120) == 0
    del admin, producer


def rounds(queries: dict, n: int) -> dict[str, list[float]]:
    """Seconds of each query, `n` interleaved rounds (a busy neighbour slows both alike)."""
    out: dict[str, list[float]] = {k: [] for k in queries}
    for _ in range(n):
        for name, fn in queries.items():
            start = time.perf_counter()
            fn()
            out[name].append(time.perf_counter() - start)
    return out


def race(spark, bootstrap: str, topic: str) -> list[tuple[str, ...]]:
    """The table rows: the hour and the full scan through both sources."""
    lo = T0 + 12 * HOUR
    hour = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingTimestamp": str(lo),
            "endingTimestamp": str(lo + HOUR)}
    whole = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic}

    def count(fmt: str, options: dict) -> int:
        return spark.read.format(fmt).options(**options).load().count()

    rows = []
    n_ours, n_theirs = count("chronolog", hour), count("kafka", hour)  # also warms both up
    assert n_ours == n_theirs, (n_ours, n_theirs)
    t = rounds({"chronolog": lambda: count("chronolog", hour), "kafka": lambda: count("kafka", hour)}, ROUNDS)
    ours, theirs = statistics.median(t["chronolog"]), statistics.median(t["kafka"])
    ratio = theirs / ours
    rows.append((f"1 h of 24 h ({n_ours:,} rows), median of {ROUNDS}",
                 f"{ours:.3f} s (best {min(t['chronolog']):.3f})", f"{theirs:.3f} s (best {min(t['kafka']):.3f})",
                 f"{ratio:.2f}x; >= 1.0 target: {'met' if ratio >= 1.0 else 'missed'}"))
    import sys

    from pyspark import cloudpickle
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    # bench_arrow's zero-work source in the race's shape: 3 partitions of 333,333 rows of 80-byte values
    spark.dataSource.register(zero_work_source(RECORDS // PARTITIONS, "zerowork_race", partitions=PARTITIONS,
                                               value_bytes=80))
    total = count("chronolog", whole)
    assert total == count("kafka", whole) == count("zerowork_race", {}) == RECORDS // PARTITIONS * PARTITIONS
    t = rounds({"chronolog": lambda: count("chronolog", whole), "kafka": lambda: count("kafka", whole),
                "zero": lambda: count("zerowork_race", {})}, SCAN_ROUNDS)
    ours, theirs, zero = (statistics.median(t[k]) for k in ("chronolog", "kafka", "zero"))
    ratio = theirs / ours
    rows.append((f"full scan ({total:,} rows), median of {SCAN_ROUNDS}",
                 f"{ours:.3f} s ({total / ours:,.0f} rows/s)", f"{theirs:.3f} s ({total / theirs:,.0f} rows/s)",
                 f"{ratio:.2f}x; >= 3 target: {'met' if ratio >= 3 else 'missed'}"))
    rows.append(("  ceiling: a zero-work Python source, same rows", f"{zero:.3f} s (ours / it: {ours / zero:.2f})",
                 f"{theirs:.3f} s", f"{theirs / zero:.2f}x: the most a Python source reaches in this run"))
    return rows


def load_note() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min) / {five:.2f} (5 min) on {os.cpu_count()} cores"


def main(spark=None) -> None:
    """The race on a broker of its own; in `spark` (a session made with `spark_settings()`) or a new one."""
    from tests.brokerproc import BrokerProcess

    if not JARS:
        print("Spark's Kafka connector is not resolved (make jars): the race against format('kafka') is skipped")
        return
    own = spark is None
    if own:
        from chronolog.spark import session
        spark = session("local[2]", "chronolog-bench-kafka", {"spark.ui.showConsoleProgress": "false",
                                                               **spark_settings()})
    print(f"\nchronolog source vs format('kafka'), before: {load_note()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="chronolog-bench-") as tmp:
        proc = BrokerProcess(Path(tmp) / "served").start()
        try:
            load(proc.bootstrap, "day")
            rows = [("measure", "chronolog", "format('kafka')", "ratio (their time / ours)")]
            rows += race(spark, proc.bootstrap, "day")
        finally:
            proc.stop()
    if own:
        spark.stop()
    print_table(rows)
    print(f"after: {load_note()}", flush=True)


if __name__ == "__main__":
    main()
