"""The syslog pipeline: syslog files -> a Kafka-protocol broker (each line's syslog time as CreateTime)
-> Spark through the `chronolog` source -> parsed lines for a time window as Parquet, a report and a chart.

Works against any broker: the embedded one by default, Apache Kafka via its bootstrap servers.
"""

from __future__ import annotations

import csv
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from chronolog.errors import ChronologError
from chronolog.timetravel.syslog import parse_syslog_line

TOPIC = "syslog"
# The same grammar as chronolog.timetravel.syslog, run inside the JVM by regexp_extract.
LINE_RE = (r"^([A-Z][a-z]{2})\s+(\d{1,2})\s+(\d{2}:\d{2}:\d{2})\s+(\S+)\s+([^\[:]+?)(?:\[(\d+)\])?:\s?(.*)$")


@dataclass
class IngestResult:
    files: list[str]
    lines: int
    skipped: bool


def read_syslog_files(files: list[Path], year: int) -> list[list[str]]:
    """The lines of each file; a file in which no line has a syslog time is refused (the job would parse
    nothing and every record would carry the time of sending)."""
    contents = []
    for path in files:
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError as exc:
            raise ChronologError(f"cannot read {path}: {exc.strerror or exc}") from None
        if not any(parse_syslog_line(line, year) for line in lines):
            raise ChronologError(f"no line of {path.name} has a syslog time (RFC 3164: 'Jun 14 15:16:01 host "
                                 "prog[pid]: msg'); the pipeline parses syslog only. Load other lines with their "
                                 f"own time: chronolog produce TOPIC {path.name} --time-regex ... --time-format ...")
        contents.append(lines)
    return contents


def ingest(bootstrap: str, files: list[Path], year: int, log: Callable[[str], None]) -> IngestResult:
    """One partition per file, key = file name, timestamp = the line's syslog time (the previous line's
    when unreadable). Idempotent: a topic already holding exactly these lines is left alone; otherwise
    it is recreated."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import NewTopic

    from chronolog.timetravel.client import admin_client, client_config, consumer_client, producer_client

    contents = read_syslog_files(files, year)
    conf = client_config(bootstrap)  # librdkafka's log lines to Python logging
    # The tools' clients: a broker that refuses connections, fails authentication or never answers is one
    # line at once, not librdkafka's retries until a timeout.
    admin = admin_client(conf)
    existing = admin.list_topics(timeout=15).topics
    if TOPIC in existing and len(existing[TOPIC].partitions) == len(files):
        watermarks = consumer_client(conf, **{"group.id": "chronolog-pipeline"})
        ends = [watermarks.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=15) for p in range(len(files))]
        watermarks.close()
        if all(lo == 0 and hi == len(lines) for (lo, hi), lines in zip(ends, contents, strict=True)):
            log(f"topic {TOPIC} already holds these {sum(map(len, contents))} lines: ingest skipped")
            return IngestResult([p.name for p in files], sum(map(len, contents)), True)
    if TOPIC in existing:
        admin.delete_topics([TOPIC])[TOPIC].result(15)
    admin.create_topics([NewTopic(TOPIC, len(files), 1, config={"segment.bytes": "131072", "retention.ms": "-1"})])[TOPIC].result(15)
    producer = producer_client(conf, **{"linger.ms": 20, "compression.type": "lz4", "enable.idempotence": True})
    failures: list[str] = []
    total = 0
    for partition, (path, lines) in enumerate(zip(files, contents, strict=True)):
        # lines before the first readable time take that time (0 would mean "now" to librdkafka)
        last = next(p.timestamp for line in lines if (p := parse_syslog_line(line, year)))
        for line in lines:
            parsed = parse_syslog_line(line, year)
            ts = parsed.timestamp if parsed else last
            last = ts
            producer.produce(TOPIC, key=path.name.encode(), value=line.encode(), partition=partition, timestamp=ts,
                             on_delivery=lambda err, _m: failures.append(str(err)) if err else None)
            producer.poll(0)
            total += 1
        log(f"{path.name}: {len(lines)} lines -> {TOPIC}[{partition}]")
    if producer.flush(60) or failures:
        raise ChronologError(f"ingest failed: {failures[:3] or 'timed out'}")
    return IngestResult([p.name for p in files], total, False)


def ground_truth(files: list[Path]) -> dict[str, list[tuple[str, str]]]:
    """(pid, message) per line from loghub's `_structured.csv` beside each file."""
    out = {}
    for path in files:
        csv_path = path.with_name(path.name + "_structured.csv")
        if csv_path.exists():
            with open(csv_path, encoding="utf-8") as f:
                out[path.name] = [(row.get("PID") or row.get("Pid") or "", row["Content"]) for row in csv.DictReader(f)]
    return out


def run_job(spark, bootstrap: str, files: list[Path], t1: int | None, t2: int | None, out: Path,
            log: Callable[[str], None]) -> dict:
    from pyspark.sql import functions as F

    reader = spark.read.format("chronolog").option("kafka.bootstrap.servers", bootstrap).option("subscribe", TOPIC)
    df = reader.load()
    line = F.col("value").cast("string")
    parsed = df.select(
        F.col("key").cast("string").alias("file"), "partition", "offset", "timestamp", line.alias("line"),
        F.regexp_extract(line, LINE_RE, 4).alias("host"),
        F.trim(F.regexp_extract(line, LINE_RE, 5)).alias("program"),
        F.regexp_extract(line, LINE_RE, 6).alias("pid"),
        F.regexp_extract(line, LINE_RE, 7).alias("message"))
    # Agreement with the ground truth, over every line (ground truth is per line, in file order).
    truth = ground_truth(files)
    agree = total = 0
    for row in parsed.select("file", "offset", "pid", "message").collect():
        expected = truth.get(row.file)
        if expected and row.offset < len(expected):
            total += 1
            pid, content = expected[row.offset]
            agree += (row.pid or "") == pid and row.message.strip() == content.strip()
    if total:
        log(f"parsed {total} lines; pid and message agree with loghub's ground truth for {agree} "
            f"({100.0 * agree / total:.1f}%)")
    else:
        log("no loghub ground truth (<file>_structured.csv) beside the input: agreement not checked")

    window = parsed
    if t1 is not None:
        window = window.where(F.col("timestamp") >= F.timestamp_millis(F.lit(t1)))
    if t2 is not None:
        window = window.where(F.col("timestamp") < F.timestamp_millis(F.lit(t2)))
    window = window.withColumn("hour", F.date_trunc("hour", "timestamp")).cache()
    count = window.count()
    parquet = out / "lines.parquet"
    window.drop("hour").orderBy("partition", "offset").write.mode("overwrite").parquet(str(parquet))
    per_hour = (window.groupBy("hour", "host", "program").count().orderBy("hour", F.desc("count"), "host",
                                                                            "program").collect())
    top = window.groupBy("message").count().orderBy(F.desc("count"), "message").limit(10).collect()
    lo, hi = window.agg(F.min("timestamp"), F.max("timestamp")).first()
    start = t1 if t1 is not None else (int(lo.timestamp() * 1000) if lo is not None else 0)
    end = t2 if t2 is not None else (int(hi.timestamp() * 1000) + 1 if hi is not None else start + 1)
    bucket = chart_bucket(end - start)
    buckets = (window.withColumn("bucket", F.date_trunc(bucket, "timestamp")).groupBy("bucket", "file").count()
               .orderBy("bucket", "file").collect())
    window.unpersist()
    chart = out / chart_name(bucket)
    _chart(buckets, bucket, start, end, chart)
    report = {"lines_in_window": count, "parquet": str(parquet), "chart": str(chart), "chart_bucket": bucket,
              "agreement": {"lines": total, "agree": agree},
              "per_hour": [{"hour": str(r.hour), "host": r.host, "program": r.program, "count": r["count"]}
                           for r in per_hour],
              "top_messages": [{"message": r.message, "count": r["count"]} for r in top]}
    (out / "report.json").write_text(json.dumps(report, indent=1))
    return report


def replay_window(spark, bootstrap: str, t1: int | None, t2: int | None, target: str,
                  log: Callable[[str], None], source: str = TOPIC, target_bootstrap: str | None = None) -> int:
    """Re-ingest the records of `source` with t1 <= timestamp < t2 into `target` through the chronolog sink,
    each with its key, value, headers and original timestamp (as CreateTime), and in the same partition
    when `target` has as many partitions. `target` is created like the ingest topic (same partition count,
    time retention off: the replayed times are old) when it does not exist; otherwise the window is
    appended to it. `target` lives on `target_bootstrap` when given (e.g. moving to a Kafka cluster),
    else on the broker read from."""
    from confluent_kafka.admin import NewTopic
    from pyspark.sql import functions as F

    from chronolog.timetravel.client import admin_client, client_config, kafka_error_text

    out = target_bootstrap or bootstrap
    if target == source and out == bootstrap:
        raise ChronologError(f"--replay-to {target}: the window would be appended to the topic it is read from")
    admin = admin_client(client_config(bootstrap))
    topics = admin.list_topics(timeout=15).topics
    if source not in topics:
        raise ChronologError(f"topic {source!r} does not exist on {bootstrap}")
    count = len(topics[source].partitions)
    if out != bootstrap:
        admin = admin_client(client_config(out))
        topics = admin.list_topics(timeout=15).topics
    if target not in topics:
        try:
            admin.create_topics([NewTopic(target, count, 1, config={"retention.ms": "-1"})])[target].result(15)
        except Exception as exc:  # KafkaException: one line with the broker's reason
            raise ChronologError(f"cannot create topic {target}: {kafka_error_text(exc)}") from None
        log(f"created topic {target} ({count} partitions, retention.ms=-1)")
    same = target not in topics or len(topics[target].partitions) == count
    df = (spark.read.format("chronolog").option("kafka.bootstrap.servers", bootstrap).option("subscribe", source)
          .option("includeHeaders", "true").load())
    if t1 is not None:
        df = df.where(F.col("timestamp") >= F.timestamp_millis(F.lit(t1)))
    if t2 is not None:
        df = df.where(F.col("timestamp") < F.timestamp_millis(F.lit(t2)))
    columns = ["key", "value", "headers", "timestamp"] + (["partition"] if same else [])
    window = df.select(*columns).cache()
    n = window.count()
    window.write.mode("append").format("chronolog").option("kafka.bootstrap.servers", out) \
        .option("topic", target).save()
    window.unpersist()
    log(f"replayed {n} records of {source} into {target} with their original timestamps"
        + ("" if same else " (partitions differ: the producer's partitioner chose by key)"))
    return n


# Spark's date_trunc units and their lengths, finest first.
BUCKETS = (("minute", 60_000), ("hour", 3_600_000), ("day", 86_400_000), ("week", 7 * 86_400_000),
           ("month", 31 * 86_400_000), ("year", 366 * 86_400_000))
MAX_POINTS = 400
FIXED_BUCKETS = ("minute", "hour", "day", "week")  # months and years differ in length


def chart_bucket(span_ms: int) -> str:
    """The finest bucket that draws the window in at most MAX_POINTS points: a one-hour window by minute,
    a day by hour, years by week or month (an hourly series of four years is a smear, one hour a dot)."""
    return next((name for name, length in BUCKETS if span_ms / length <= MAX_POINTS), BUCKETS[-1][0])


def chart_series(rows, bucket: str) -> dict[str, tuple[list, list]]:
    """Per file, (bucket starts, counts). For buckets of a fixed length an empty bucket between the first
    and the last is a zero, not a line held from the previous bucket (the grid is stepped from the first
    bucket and merged with the ones Spark returned, so a DST shift in local time cannot lose one)."""
    from datetime import timedelta

    counts: dict[str, dict] = {}
    for r in rows:
        counts.setdefault(r.file, {})[r.bucket] = r["count"]
    out = {}
    for name, by_bucket in sorted(counts.items()):
        xs = set(by_bucket)
        if bucket in FIXED_BUCKETS:
            last, t = max(xs), min(xs)
            while t < last:
                xs.add(t)
                t += timedelta(milliseconds=dict(BUCKETS)[bucket])
        ordered = sorted(xs)
        out[name] = (ordered, [by_bucket.get(x, 0) for x in ordered])
    return out


def chart_name(bucket: str) -> str:
    """The chart's file name says what its title says: events per minute, hour, day..."""
    return f"events_per_{bucket}.png"


def _chart(rows, bucket: str, start: int, end: int, path: Path) -> dict:
    """Events per bucket and file over the window's own time range (UTC dates with the year). The x range
    holds the window and every bucket drawn (a bucket's start may precede the window's), with a margin, so
    no point sits half outside the frame. Returns what was drawn."""
    import matplotlib
    matplotlib.use("Agg")
    from datetime import datetime, timedelta

    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    series = chart_series(rows, bucket)
    fig, ax = plt.subplots(figsize=(11, 4))
    for name, (xs, ys) in series.items():
        ax.plot(xs, ys, marker=".", linewidth=1, label=name,
                drawstyle="steps-post" if bucket in FIXED_BUCKETS else "default")
    # PySpark turns TIMESTAMP into naive datetimes in the Python process's local zone: the axis and its
    # label use that zone too (UTC on a server set to UTC).
    xs = [x for xs, _ys in series.values() for x in xs]
    lo = min([datetime.fromtimestamp(start / 1000), *xs])
    hi = max([datetime.fromtimestamp(end / 1000), *xs])
    pad = max((hi - lo) * 0.02, timedelta(milliseconds=dict(BUCKETS)[bucket]) / 2)
    ax.set_xlim(lo - pad, hi + pad)
    ys = [y for _xs, ys in series.values() for y in ys]
    top = max(ys, default=1)
    ax.set_ylim(-0.04 * top, 1.06 * top)  # a point at 0 or at the top is drawn whole
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%Y-%m-%d %H:%M"))
    ax.set_xlabel(f"record time ({datetime.fromtimestamp(start / 1000).astimezone().tzname()})")
    ax.set_ylabel(f"events per {bucket}")
    ax.set_title(f"syslog events per {bucket} (record CreateTime = syslog time)")
    if series:
        ax.legend()
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path)
    drawn = {"title": ax.get_title(), "ylabel": ax.get_ylabel(), "xlim": ax.get_xlim(), "ylim": ax.get_ylim(),
             "points": {name: [(mdates.date2num(x), y) for x, y in zip(*xy, strict=True)]
                        for name, xy in series.items()}}
    plt.close(fig)
    return drawn


def prepare_out(out: Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
