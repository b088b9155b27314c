"""Spark benchmarks, measured in one run on one data set (24 hours of records, 3 partitions):
- rows/s through the `chronolog` source in `path` and `kafka.bootstrap.servers` modes vs a plain Python
  scan of the same segment files;
- a 1-hour window out of 24 vs the full scan (target: <= 2x the proportional share + the fixed cost);
- pushdown vs Spark filtering after a full read (the source without its time bounds).
"""

from __future__ import annotations

import datetime
import tempfile
import time
from pathlib import Path

from bench.common import print_table
from chronolog.config import BrokerConfig
from chronolog.records import SimpleRecord, build_batch, iter_batches
from chronolog.storage import LogManager

T0 = 1_700_000_000_000
HOUR = 3_600_000
PER_PARTITION = 120_000


def build(data: Path) -> int:
    manager = LogManager(data, BrokerConfig())
    manager.startup(background=False)
    manager.create_topic("day", 3, {"segment.bytes": str(4 << 20), "message.timestamp.after.max.ms": str(2**62)})
    step = 24 * HOUR // PER_PARTITION
    for p in range(3):
        plog = manager.get_log("day", p)
        for i in range(0, PER_PARTITION, 500):
            plog.append(build_batch([SimpleRecord(T0 + (i + j) * step, None, b"x" * 80) for j in range(500)]))
    manager.shutdown()
    return 3 * PER_PARTITION


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main() -> None:
    from tests.brokerproc import BrokerProcess

    from chronolog.spark import session

    rows = [("measure", "chronolog", "baseline", "ratio / note")]
    with tempfile.TemporaryDirectory(prefix="chronolog-bench-") as tmp:
        data = Path(tmp) / "data"
        total = build(data)

        def python_scan() -> int:
            n = 0
            for log in sorted(data.glob("day-*/*.log")):
                for batch in iter_batches(log.read_bytes()):
                    n += sum(1 for _ in batch.records())
            return n
        py_s, n = timed(python_scan)
        assert n == total
        spark = session("local[2]", "chronolog-bench")

        def count(mode: str, target: str, where: str | None = None, **extra: str) -> int:
            reader = spark.read.format("chronolog").option(mode, target).option("subscribe", "day")
            for key, value in extra.items():
                reader = reader.option(key, value)
            df = reader.load()
            if where:
                df = df.where(where)
            return df.count()
        count("path", str(data))  # warm up the Python workers
        full_s, n = timed(lambda: count("path", str(data)))
        assert n == total
        rows.append(("path mode, full scan", f"{total / full_s:,.0f} rows/s", f"{total / py_s:,.0f} rows/s python scan",
                     f"{py_s / full_s:.2f}"))
        lo = T0 + 12 * HOUR
        window = (f"timestamp >= timestamp_millis({lo}) AND timestamp < timestamp_millis({lo + HOUR})")
        win_s, n_win = timed(lambda: count("path", str(data), window))
        empty_s, _ = timed(lambda: count("path", str(data), f"timestamp >= timestamp_millis({T0 + 48 * HOUR})"))
        share = full_s / 24
        rows.append(("1 h of 24 h (pushdown)", f"{win_s:.2f} s ({n_win} rows)",
                     f"full {full_s:.2f} s; share {share:.2f} s; fixed {empty_s:.2f} s",
                     f"{win_s:.2f} <= {2 * share + empty_s:.2f} target: {'met' if win_s <= 2 * share + empty_s else 'missed'}"))
        bounded_s, n_b = timed(lambda: count("path", str(data), window, maxLatenessMs="0"))
        assert n_b == n_win
        rows.append(("1 h of 24 h, maxLatenessMs=0", f"{bounded_s:.2f} s ({n_b} rows)",
                     f"share {share:.2f} s; fixed {empty_s:.2f} s",
                     f"{bounded_s:.2f} <= {2 * share + empty_s:.2f} target: "
                     f"{'met' if bounded_s <= 2 * share + empty_s else 'missed'}"))
        # Spark filtering after a full read: the same window applied to a cached full read.
        def filter_after_full_read() -> int:
            rows_ = (spark.read.format("chronolog").option("path", str(data)).option("subscribe", "day").load()
                     .select("timestamp").collect())
            lo_dt = datetime.datetime.fromtimestamp(lo / 1000, datetime.UTC).replace(tzinfo=None)
            hi_dt = datetime.datetime.fromtimestamp((lo + HOUR) / 1000, datetime.UTC).replace(tzinfo=None)
            return sum(1 for r in rows_ if lo_dt <= r.timestamp < hi_dt)
        spark_filter_s, n2 = timed(filter_after_full_read)
        rows.append(("pushdown vs filter after full read", f"{win_s:.2f} s", f"{spark_filter_s:.2f} s",
                     f"{spark_filter_s / win_s:.1f}x faster" + ("" if n2 == n_win else f" (MISMATCH {n2} != {n_win})")))
        proc = BrokerProcess(Path(tmp) / "served").start()
        try:
            from confluent_kafka import Producer
            from confluent_kafka.admin import AdminClient, NewTopic
            admin = AdminClient({"bootstrap.servers": proc.bootstrap})
            admin.create_topics([NewTopic("day", 3, 1, config={"message.timestamp.after.max.ms": str(2**62)})])["day"].result(15)
            producer = Producer({"bootstrap.servers": proc.bootstrap, "linger.ms": 20})
            step = 24 * HOUR // PER_PARTITION
            for p in range(3):
                for i in range(PER_PARTITION):
                    while True:
                        try:
                            producer.produce("day", value=b"x" * 80, partition=p, timestamp=T0 + i * step)
                            break
                        except BufferError:
                            producer.poll(0.01)
            assert producer.flush(120) == 0
            kafka_s, n = timed(lambda: count("kafka.bootstrap.servers", proc.bootstrap))
            assert n == total
            rows.append(("kafka.bootstrap.servers mode, full scan", f"{total / kafka_s:,.0f} rows/s",
                         f"{total / py_s:,.0f} rows/s python scan", f"{py_s / kafka_s:.2f}"))
        finally:
            proc.stop()
        spark.stop()
    print_table(rows)


if __name__ == "__main__":
    main()
