"""The `chronolog` sink against a real broker, read back by librdkafka under read_committed: batch and
streaming writes are byte-equal (keys, values, headers, partitions, CreateTimes); bad rows and options are
one-line errors with nothing of the task written; exactlyOnce survives a micro-batch run twice."""

from __future__ import annotations

import datetime
import random
import time
from dataclasses import replace

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.errors import PySparkException

from chronolog.errors import ChronologError
from chronolog.spark.sink import SinkOptions, write_partition
from tests.brokerproc import BrokerProcess
from tests.consuming import read_messages

pytestmark = pytest.mark.spark
BASE = 1_700_000_000_000
TXN_CONFIGS = {"transaction.state.log.num.partitions": "2",
               "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("sink-broker") / "data", TXN_CONFIGS).start()
    yield proc
    proc.stop()


def create(bootstrap: str, name: str, partitions: int = 3, **configs: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config={"message.timestamp.after.max.ms": str(2**62),
                                                              **configs})])[name].result(15)
    return name


def read_back(bootstrap: str, topic: str, partitions: int, expected: int | None = None,
              timeout: float = 30.0) -> list[tuple]:
    """(partition, key, value, headers, timestamp ms) of every committed record, per partition in order,
    until `expected` arrived or every partition reached its end."""
    got = read_messages(bootstrap, topic, partitions, "read_committed", expected, timeout)
    return [(p, m.key(), m.value(), tuple(m.headers() or ()), m.timestamp()[1])
            for p in sorted(got) for m in got[p]]


def make_rows(seed: int, n: int, partitions: int) -> list[tuple]:
    """Random keys (some null), values (some empty, some null), headers (some repeated keys, null values),
    partitions and CreateTimes out of order (late records)."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        key = None if i % 7 == 0 else bytes(rng.randrange(256) for _ in range(rng.randint(0, 12)))
        value = None if i % 11 == 5 else bytes(rng.randrange(256) for _ in range(rng.randint(0, 300)))
        headers = tuple((rng.choice(["a", "b", "ü"]), None if rng.random() < 0.2 else bytes([rng.randrange(256)]))
                        for _ in range(rng.randint(0, 3)))
        rows.append((i % partitions, key, value, headers, BASE + rng.randint(-86_400_000, 86_400_000)))
    return rows


def frame(spark, rows: list[tuple]):
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )
    schema = StructType([
        StructField("partition", IntegerType()), StructField("key", BinaryType()), StructField("value", BinaryType()),
        StructField("headers", ArrayType(StructType([StructField("key", StringType()),
                                                      StructField("value", BinaryType())]))),
        StructField("timestamp", TimestampType())])
    data = [(p, k, v, [{"key": hk, "value": hv} for hk, hv in h],
             datetime.datetime.fromtimestamp(ts / 1000, datetime.UTC)) for p, k, v, h, ts in rows]
    return spark.createDataFrame(data, schema)


def per_partition(rows: list[tuple]) -> list[tuple]:
    return sorted(rows, key=lambda r: r[0])


def test_batch_write_reads_back_byte_equal(spark, broker):
    topic = create(broker.bootstrap, "batch-eq")
    rows = make_rows(17, 600, 3)
    (frame(spark, rows).repartition(1).write.mode("append").format("chronolog")
     .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", topic).save())
    assert read_back(broker.bootstrap, topic, 3, expected=len(rows)) == per_partition(rows)


def test_batch_write_exactly_once_reads_back_under_read_committed(spark, broker):
    topic = create(broker.bootstrap, "batch-eo")
    rows = make_rows(23, 300, 3)
    (frame(spark, rows).repartition(2).write.mode("append").format("chronolog")
     .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", topic).option("exactlyOnce", "true").save())
    got = read_back(broker.bootstrap, topic, 3, expected=len(rows))
    assert sorted(got, key=repr) == sorted(rows, key=repr)  # two tasks: each partition's order interleaves


def test_topic_column_string_value_and_no_timestamp(spark, broker):
    """Spark's sink columns without ours: the topic per row, a string value; the CreateTime is the
    producer's clock. The `topic` option overrides the column (KafkaWriter)."""
    a, b = create(broker.bootstrap, "col-a", 1), create(broker.bootstrap, "col-b", 1)
    before = int(time.time() * 1000)
    df = spark.createDataFrame([("col-a", "x"), ("col-b", "y"), ("col-a", "z")], "topic string, value string")
    df.coalesce(1).write.mode("append").format("chronolog").option("kafka.bootstrap.servers", broker.bootstrap).save()
    got_a, got_b = read_back(broker.bootstrap, a, 1, 2), read_back(broker.bootstrap, b, 1, 1)
    assert [r[2] for r in got_a] == [b"x", b"z"] and [r[2] for r in got_b] == [b"y"]
    assert all(r[1] is None and r[4] >= before - 1000 for r in got_a + got_b)
    df.coalesce(1).write.mode("append").format("chronolog").option("kafka.bootstrap.servers", broker.bootstrap) \
        .option("topic", b).save()
    assert [r[2] for r in read_back(broker.bootstrap, b, 1, 4)] == [b"y", b"x", b"y", b"z"]


def test_chronolog_to_chronolog_keeps_event_times(spark, broker):
    """A window read through the source and written through the sink: same records, same CreateTimes."""
    src, dst = create(broker.bootstrap, "replay-src", 2), create(broker.bootstrap, "replay-dst", 2)
    rows = make_rows(3, 200, 2)
    frame(spark, rows).coalesce(1).write.mode("append").format("chronolog").option("kafka.bootstrap.servers", broker.bootstrap) \
        .option("topic", src).save()
    lo, hi = BASE - 3_600_000, BASE + 3_600_000
    window = (spark.read.format("chronolog").option("kafka.bootstrap.servers", broker.bootstrap)
              .option("subscribe", src).option("includeHeaders", "true").load()
              .where(f"unix_millis(timestamp) >= {lo} AND unix_millis(timestamp) < {hi}"))
    window.drop("topic").write.mode("append").format("chronolog").option("kafka.bootstrap.servers", broker.bootstrap) \
        .option("topic", dst).save()
    want = per_partition([r for r in rows if lo <= r[4] < hi])
    assert want and read_back(broker.bootstrap, dst, 2, expected=len(want)) == want


def test_streaming_write_reads_back_byte_equal(spark, broker, tmp_path):
    src, dst = create(broker.bootstrap, "stream-src", 2), create(broker.bootstrap, "stream-dst", 2)
    rows = make_rows(5, 300, 2)
    frame(spark, rows).coalesce(1).write.mode("append").format("chronolog").option("kafka.bootstrap.servers", broker.bootstrap) \
        .option("topic", src).save()
    query = (spark.readStream.format("chronolog").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("subscribe", src).option("includeHeaders", "true").option("maxOffsetsPerTrigger", "70").load()
             .drop("topic").writeStream.format("chronolog").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("topic", dst).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(600), "the availableNow stream did not end within 600 s"
    assert query.exception() is None
    assert read_back(broker.bootstrap, dst, 2, expected=len(rows)) == per_partition(rows)


def test_bad_rows_and_options_are_one_line_errors_nothing_written(spark, broker):
    topic = create(broker.bootstrap, "guarded", 2, **{"max.message.bytes": "2000"})
    bs = broker.bootstrap

    def write(df, **options):
        w = df.write.mode("append").format("chronolog").option("kafka.bootstrap.servers", bs)
        for k, v in options.items():
            w = w.option(k, v)
        with pytest.raises(PySparkException) as info:
            w.save()
        return str(info.value)

    ok = [(0, b"k", b"v" * 10, (), BASE + i) for i in range(50)]
    too_big = ok[:30] + [(1, b"k", b"v" * 1990, (), BASE)] + ok[30:]
    assert "over max.message.bytes=2000 of topic 'guarded'" in write(frame(spark, too_big).coalesce(1), topic=topic)
    plain = spark.createDataFrame([(b"v" * 10,)] * 30 + [(b"v" * 1990,)], "value binary").coalesce(1)  # no headers
    assert "row 30: a record of 2072 bytes" in write(plain, topic=topic)
    assert "does not exist" in write(frame(spark, ok).coalesce(1), topic="no-such-topic")
    assert "partition -1 does not exist" in write(frame(spark, [(-1, None, b"v", (), BASE)]).coalesce(1), topic=topic)
    assert "partition 7 does not exist" in write(frame(spark, [(7, None, b"v", (), BASE)]).coalesce(1), topic=topic)
    assert "topic option required" in write(spark.createDataFrame([(b"v",)], "value binary"))
    assert "value attribute type must be a string or binary" in write(spark.createDataFrame([(1,)], "value int"),
                                                                       topic=topic)
    assert "partition attribute type must be an int" in write(
        spark.createDataFrame([(b"v", 1)], "value binary, partition long"), topic=topic)
    assert "required attribute 'value' not found" in write(spark.createDataFrame([(b"v",)], "k binary"), topic=topic)
    assert "null topic" in write(spark.createDataFrame([(b"v", None)], "value binary, topic string"))
    assert "No such configuration property" in write(spark.createDataFrame([(b"v",)], "value binary"),
                                                     topic=topic, **{"kafka.no.such.setting": "1"})
    assert "kafka.value.serializer is not supported" in write(spark.createDataFrame([(b"v",)], "value binary"),
                                                              topic=topic, **{"kafka.value.serializer": "x"})
    overwrite = (spark.createDataFrame([(b"v",)], "value binary").write.format("chronolog").mode("overwrite")
                 .option("kafka.bootstrap.servers", bs).option("topic", topic))
    with pytest.raises(PySparkException, match="overwrite is not allowed"):
        overwrite.save()
    assert read_back(bs, topic, 2) == []


def test_options_parse_errors():
    with pytest.raises(ChronologError, match="not path"):
        SinkOptions.parse({"path": "/x", "topic": "t"})
    with pytest.raises(ChronologError, match="kafka.bootstrap.servers is required"):
        SinkOptions.parse({"topic": "t"})
    with pytest.raises(ChronologError, match="not a sink option"):
        SinkOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribe": "t"})
    with pytest.raises(ChronologError, match="needs exactlyOnce=true"):
        SinkOptions.parse({"kafka.bootstrap.servers": "h:1", "topic": "t", "kafka.transactional.id": "x"})
    opts = SinkOptions.parse({"kafka.bootstrap.servers": "h:1", "topic": "t", "kafka.linger.ms": "7"})
    assert opts.producer_config() == {"bootstrap.servers": "h:1", "linger.ms": "7"}


def _arrow(rows: list[tuple]):
    import pyarrow as pa
    return pa.RecordBatch.from_pydict({"value": [r[2] for r in rows], "partition": [r[0] for r in rows]},
                                      schema=pa.schema([("value", pa.binary()), ("partition", pa.int32())]))


def test_exactly_once_task_run_twice_writes_once(broker):
    """The task of a micro-batch run again (a restart after its transaction committed but before Spark
    recorded the batch) writes nothing; the next batch writes; an attempt fenced mid-transaction is
    aborted and its rows never become visible."""
    topic = create(broker.bootstrap, "eo-task", 2)
    opts = SinkOptions.parse({"kafka.bootstrap.servers": broker.bootstrap, "topic": topic, "exactlyOnce": "true",
                              "kafka.transactional.id": "eo-task-q"})
    first = [(i % 2, None, b"b0-%d" % i, (), 0) for i in range(20)]
    second = [(i % 2, None, b"b1-%d" % i, (), 0) for i in range(20)]
    assert write_partition(opts, iter([_arrow(first)]), batch_id=0).rows == 20
    again = write_partition(opts, iter([_arrow(first)]), batch_id=0)
    assert again.skipped and again.rows == 0
    # an attempt that dies inside its transaction: rows sent, never committed
    from confluent_kafka import Producer
    zombie = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "eo-task-q-0"})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie", partition=0)
    zombie.flush(10)
    assert write_partition(opts, iter([_arrow(second)]), batch_id=1).rows == 20
    got = sorted(r[2] for r in read_back(broker.bootstrap, topic, 2, expected=40))
    assert got == sorted(r[2] for r in first + second)
    assert b"zombie" not in [r[2] for r in read_back(broker.bootstrap, topic, 2)]


def test_streaming_exactly_once_across_a_restart_that_runs_batches_again(spark, broker, tmp_path):
    """A query whose driver died after its tasks committed but before Spark recorded the micro-batches
    (their files removed from the checkpoint's commit log) runs them again on restart: under
    read_committed every input row is in the output once."""
    src, dst = create(broker.bootstrap, "eo-src", 2), create(broker.bootstrap, "eo-dst", 2)
    rows = make_rows(9, 240, 2)
    frame(spark, rows).coalesce(1).write.mode("append").format("chronolog") \
        .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", src).save()
    checkpoint = tmp_path / "ck"

    def run() -> None:
        query = (spark.readStream.format("chronolog").option("kafka.bootstrap.servers", broker.bootstrap)
                 .option("subscribe", src).option("includeHeaders", "true").option("maxOffsetsPerTrigger", "60")
                 .load().drop("topic").writeStream.format("chronolog")
                 .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", dst)
                 .option("exactlyOnce", "true").option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(600), "the availableNow stream did not end within 600 s"
        assert query.exception() is None

    run()
    assert read_back(broker.bootstrap, dst, 2, expected=len(rows)) == per_partition(rows)
    commits = sorted((checkpoint / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    assert len(commits) >= 3
    last = commits[-1]  # Spark runs the last micro-batch of the offset log again when it is not committed
    last.unlink()
    (last.parent / f".{last.name}.crc").unlink(missing_ok=True)
    run()
    assert last.exists()
    assert read_back(broker.bootstrap, dst, 2) == per_partition(rows)


def test_many_small_records_into_a_topic_with_a_small_max_message_bytes(broker):
    """Batches are kept under the topic's max.message.bytes (librdkafka does not split a refused batch)."""
    import pyarrow as pa
    topic = create(broker.bootstrap, "small-limit", 1, **{"max.message.bytes": "2000"})
    opts = SinkOptions.parse({"kafka.bootstrap.servers": broker.bootstrap, "topic": topic,
                              "kafka.linger.ms": "50"})
    values = [b"%04d" % i + b"x" * 96 for i in range(500)]
    assert write_partition(opts, iter([pa.RecordBatch.from_pydict({"value": values})]), None).rows == 500
    assert [r[2] for r in read_back(broker.bootstrap, topic, 1, expected=500)] == values


def test_the_topic_option_is_looked_up_once_on_the_driver(broker):
    """With the `topic` option the driver asks the broker for the topic's partitions and max.message.bytes
    once (a missing topic is an error before any task), and tasks check their rows against that answer."""
    from pyspark.sql.types import BinaryType, StructField, StructType

    from chronolog.spark.sink import make_writer
    from chronolog.spark.sink_rows import Rows, check_rows
    topic = create(broker.bootstrap, "looked-up", 2, **{"max.message.bytes": "3000"})
    schema = StructType([StructField("value", BinaryType())])
    raw = {"kafka.bootstrap.servers": broker.bootstrap, "topic": topic}
    writer = make_writer(raw, schema, overwrite=False, streaming=False)
    assert writer.options.facts == ((topic, 2, 3000),)
    with pytest.raises(ChronologError, match="does not exist"):
        make_writer({**raw, "topic": "never-created"}, schema, overwrite=False, streaming=False)
    # the tasks use the driver's answer: a (made-up) smaller limit refuses what the broker's would take
    narrowed = replace(writer.options, facts=((topic, 2, 1000),))
    rows = Rows([topic], [None], [b"v" * 1500], [-1], [0], [None], [1500 + 82])
    assert check_rows(writer.options, rows) == 3000
    with pytest.raises(ChronologError, match="over max.message.bytes=1000"):
        check_rows(narrowed, rows)
