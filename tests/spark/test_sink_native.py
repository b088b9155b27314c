"""The sink's own Produce path (spark/native_writer) against a real broker, read back by librdkafka:
it is the default where it honours every setting, writes byte-equal records (keys, values, null ones,
headers, partitions, CreateTimes), puts rows without a partition where librdkafka's partitioner puts
them, honours compression and acks, retries retriable errors (a topic created while the write waits,
a broker restart) and stops on the others with one line; a setting it does not honour sends the
query through librdkafka, which writes it. A task's rows are checked and encoded piece by piece as they
arrive and sent only once all passed; a producer is kept from one task to the next of a process."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from pyspark.errors import PySparkException

from chronolog.errors import ChronologError
from chronolog.records import CompressionType, RecordBatch, encode
from chronolog.spark import native_writer, sink
from chronolog.spark.native_writer import (
    NativeProducer,
    NativeSettings,
    close_idle_producers,
    unsupported_settings,
)
from chronolog.spark.sink import SinkOptions, native_path, write_partition
from chronolog.timetravel.fetcher import RawFetcher
from tests.brokerproc import BrokerProcess
from tests.spark.test_sink import BASE, create, frame, make_rows, per_partition, read_back

pytestmark = [pytest.mark.spark, pytest.mark.skipif(not encode.AVAILABLE, reason="the C extensions are not built")]
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("native-sink") / "data").start()
    yield proc
    proc.stop()


def arrow(rows: list[tuple], partition: bool = True) -> pa.RecordBatch:
    """Rows of make_rows as the Arrow batch Spark hands a task (timestamps in µs)."""
    cols = {"key": pa.array([r[1] for r in rows], pa.binary()), "value": pa.array([r[2] for r in rows], pa.binary()),
            "headers": pa.array([[{"key": k, "value": v} for k, v in r[3]] for r in rows], HEADERS),
            "timestamp": pa.array([r[4] * 1000 for r in rows], pa.timestamp("us", "UTC"))}
    if partition:
        cols["partition"] = pa.array([r[0] for r in rows], pa.int32())
    return pa.RecordBatch.from_pydict(cols)


def options(bootstrap: str, topic: str, **more: str) -> SinkOptions:
    return SinkOptions.parse({"kafka.bootstrap.servers": bootstrap, "topic": topic, **more})


def test_native_is_the_default_and_writes_byte_equal(broker):
    topic = create(broker.bootstrap, "native-eq")
    rows = make_rows(41, 700, 3)
    done = write_partition(options(broker.bootstrap, topic), iter([arrow(rows[:350]), arrow(rows[350:])]), None)
    assert (done.rows, done.path) == (700, "native")
    assert read_back(broker.bootstrap, topic, 3, expected=len(rows)) == per_partition(rows)


def test_spark_batch_and_stream_go_native_and_read_back(spark, broker, tmp_path):
    """df.write (two tasks) and writeStream without exactlyOnce: the default options choose the native
    path, and what they write is byte-equal."""
    src, dst = create(broker.bootstrap, "native-src", 2), create(broker.bootstrap, "native-dst", 2)
    assert native_path(options(broker.bootstrap, src))
    rows = make_rows(43, 400, 2)
    frame(spark, rows).coalesce(1).write.mode("append").format("chronolog") \
        .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", src).save()
    assert read_back(broker.bootstrap, src, 2, expected=len(rows)) == per_partition(rows)
    query = (spark.readStream.format("chronolog").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("subscribe", src).option("includeHeaders", "true").option("maxOffsetsPerTrigger", "150").load()
             .drop("topic").writeStream.format("chronolog").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("topic", dst).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert query.exception() is None
    assert read_back(broker.bootstrap, dst, 2, expected=len(rows)) == per_partition(rows)


def test_rows_without_partition_go_where_librdkafka_puts_them(broker):
    """Keyed rows: librdkafka's default partitioner (consistent_random), checked against confluent-kafka
    producing the same keys; keyless rows of a task: one partition (sticky)."""
    ours, theirs = create(broker.bootstrap, "part-ours", 5), create(broker.bootstrap, "part-theirs", 5)
    rows = [(None, b"key-%d" % i if i % 4 else None, b"v%d" % i, (), BASE + i) for i in range(400)]
    assert write_partition(options(broker.bootstrap, ours), iter([arrow(rows, partition=False)]), None).path == "native"
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for r in rows:
        if r[1] is not None:
            p.produce(theirs, r[2], r[1])
    assert p.flush(30) == 0
    keyed = 300
    got = {m[2]: m[0] for m in read_back(broker.bootstrap, ours, 5, expected=len(rows))}
    want = {m[2]: m[0] for m in read_back(broker.bootstrap, theirs, 5, expected=keyed)}
    assert len(want) == keyed and all(got[v] == part for v, part in want.items())
    assert len({got[r[2]] for r in rows if r[1] is None}) == 1


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compression_type_is_honoured(broker, codec):
    topic = create(broker.bootstrap, f"codec-{codec}", 1)
    rows = [(0, b"k%d" % i, b"a fairly repetitive value " * 4, (("h", b"x"),), BASE + i) for i in range(2000)]
    done = write_partition(options(broker.bootstrap, topic, **{"kafka.compression.type": codec}),
                           iter([arrow(rows)]), None)
    assert done.path == "native"
    assert read_back(broker.bootstrap, topic, 1, expected=len(rows)) == rows
    fetcher = RawFetcher(broker.bootstrap)
    try:
        raw = fetcher.fetch(topic, 0, 0).records
    finally:
        fetcher.close()
    assert RecordBatch(raw).compression == CompressionType.from_name(codec)


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks(broker, acks):
    topic = create(broker.bootstrap, f"acks-{acks}", 2)
    rows = make_rows(47, 300, 2)
    assert write_partition(options(broker.bootstrap, topic, **{"kafka.acks": acks}), iter([arrow(rows)]),
                           None).path == "native"
    assert read_back(broker.bootstrap, topic, 2, expected=len(rows)) == per_partition(rows)


def test_a_setting_the_native_path_does_not_honour_goes_through_librdkafka(spark, broker):
    topic = create(broker.bootstrap, "fallback", 2)
    rows = make_rows(53, 200, 2)
    for setting in ({"kafka.enable.idempotence": "true"}, {"kafka.batch.num.messages": "7"},
                    {"kafka.security.protocol": "PLAINTEXT", "kafka.compression.level": "3"}):
        opts = options(broker.bootstrap, topic, **setting)
        assert unsupported_settings(opts.producer) and not native_path(opts)
        assert write_partition(opts, iter([arrow(rows)]), None).path == "librdkafka"
    assert not native_path(options(broker.bootstrap, topic, producer="librdkafka"))
    assert unsupported_settings({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}) == \
        ["sasl.mechanism", "security.protocol=SASL_SSL"]
    assert unsupported_settings({"acks": "1", "compression.codec": "lz4", "linger.ms": "5", "retries": "3"}) == []
    with pytest.raises(ChronologError, match="producer=native cannot honour kafka.enable.idempotence=true"):
        options(broker.bootstrap, topic, producer="native", **{"kafka.enable.idempotence": "true"})
    with pytest.raises(ChronologError, match="option producer takes auto, native, librdkafka"):
        options(broker.bootstrap, topic, producer="fast")
    # and through Spark: the query writes (librdkafka), every row
    frame(spark, rows).coalesce(1).write.mode("append").format("chronolog") \
        .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", topic) \
        .option("kafka.batch.num.messages", "7").save()
    got = read_back(broker.bootstrap, topic, 2, expected=4 * len(rows))
    assert got == per_partition(rows * 4)


def test_a_topic_created_while_the_write_waits_is_written(broker):
    """UNKNOWN_TOPIC_OR_PARTITION is retriable: the batches wait (with backoff) until the topic exists."""
    topic = "created-late"
    batch = encode.arrow_batches(None, pa.array([b"v%d" % i for i in range(50)], pa.binary()), None, None,
                                 BASE, 1 << 20)
    producer = NativeProducer(broker.bootstrap, NativeSettings(backoff_ms=20, backoff_max_ms=200,
                                                               delivery_timeout_ms=60_000))

    def create_once_refused() -> None:
        deadline = time.monotonic() + 30
        while producer.retried == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        create(broker.bootstrap, topic, 1)

    creator = threading.Thread(target=create_once_refused)
    creator.start()
    try:
        producer.send({(topic, 0): batch})
    finally:
        creator.join(60)
        producer.close()
    assert producer.retried >= 1
    assert [r[2] for r in read_back(broker.bootstrap, topic, 1, expected=50)] == [b"v%d" % i for i in range(50)]


def test_a_broker_restart_is_retried(tmp_path):
    """A lost connection is retriable: the write started while the broker is down goes in once it is back
    (same port), after what was written before."""
    proc = BrokerProcess(tmp_path / "data").start()
    try:
        topic = create(proc.bootstrap, "restarted", 2)
        producer = NativeProducer(proc.bootstrap, NativeSettings(backoff_ms=50, backoff_max_ms=500,
                                                                 delivery_timeout_ms=120_000))
        first = {(topic, p): encode.arrow_batches(None, pa.array([b"a%d-%d" % (p, i) for i in range(30)]), None,
                                                  None, BASE, 1 << 20) for p in range(2)}
        second = {(topic, p): encode.arrow_batches(None, pa.array([b"b%d-%d" % (p, i) for i in range(30)]), None,
                                                   None, BASE, 1 << 20) for p in range(2)}
        producer.send(first)
        proc.stop()

        def restart_once_refused() -> None:
            deadline = time.monotonic() + 30
            while producer.retried == 0 and time.monotonic() < deadline:
                time.sleep(0.02)
            proc.start()

        restarter = threading.Thread(target=restart_once_refused)
        restarter.start()
        try:
            producer.send(second)
        finally:
            restarter.join(60)
            producer.close()
        assert producer.retried >= 1
        got = read_back(proc.bootstrap, topic, 2, expected=120)
        assert [(r[0], r[2]) for r in got] == [(p, b"%s%d-%d" % (x, p, i)) for p in range(2) for x in (b"a", b"b")
                                               for i in range(30)]
    finally:
        proc.stop()


def test_retries_are_bounded_and_other_errors_are_one_line(broker):
    batch = encode.arrow_batches(None, pa.array([b"v"]), None, None, BASE, 1 << 20)
    producer = NativeProducer(broker.bootstrap, NativeSettings(retries=2, backoff_ms=10))
    try:
        with pytest.raises(ChronologError, match=r"after 3 attempt\(s\): topic 'never-made': UNKNOWN_TOPIC_OR_PART"):
            producer.send({("never-made", 0): batch})
    finally:
        producer.close()
    # a batch the broker refuses (its max.message.bytes is smaller than the sink was told): not retried
    topic = create(broker.bootstrap, "refuses", 1, **{"max.message.bytes": "2000"})
    opts = replace(options(broker.bootstrap, topic), facts=((topic, 1, 1_000_000),))
    values = pa.RecordBatch.from_pydict({"value": pa.array([b"x" * 100] * 100, pa.binary())})
    with pytest.raises(ChronologError, match=r"write failed: refuses-0: (MESSAGE_TOO_LARGE|RECORD_LIST_TOO_LARGE)"):
        write_partition(opts, iter([values]), None)
    # a record over the producer's message.max.bytes (librdkafka's default 1000000, below the topic's
    # default 1048588): refused before anything is sent, as librdkafka refuses it
    big = create(broker.bootstrap, "over-request", 1)
    rows = pa.RecordBatch.from_pydict({"value": pa.array([b"x", b"y" * 1_000_000], pa.binary())})
    for path in ("native", "librdkafka"):
        with pytest.raises(ChronologError, match="row 1: a record of 1000082 bytes .* over the producer's "
                                                 "message.max.bytes=1000000"):
            write_partition(options(broker.bootstrap, big, producer=path), iter([rows]), None)
    assert read_back(broker.bootstrap, big, 1) == []


def test_bad_settings_are_one_line(spark, broker):
    topic = create(broker.bootstrap, "bad-settings", 1)
    with pytest.raises(ChronologError, match="kafka.retries: 'many' is not an integer"):
        NativeSettings.of({"retries": "many"})
    with pytest.raises(ChronologError, match="kafka.compression.type: 'brotli'"):
        NativeSettings.of({"compression.type": "brotli"})
    with pytest.raises(PySparkException, match="Invalid value \"brotli\""):
        spark.createDataFrame([(b"v",)], "value binary").write.mode("append").format("chronolog") \
            .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", topic) \
            .option("kafka.compression.type", "brotli").save()


def test_a_header_without_a_key_is_one_line_on_both_paths(broker):
    topic = create(broker.bootstrap, "header-null-key", 1)
    headers = pa.array([[{"key": "a", "value": b"1"}], None, [{"key": "b", "value": None}, {"key": None, "value": b"x"}]],
                       HEADERS)
    batch = pa.RecordBatch.from_pydict({"value": pa.array([b"v0", b"v1", b"v2"]), "headers": headers})
    for path in ("native", "librdkafka"):
        with pytest.raises(ChronologError, match="row 2: a header with a null key"):
            write_partition(options(broker.bootstrap, topic, producer=path), iter([batch]), None)
    assert read_back(broker.bootstrap, topic, 1) == []


def test_without_the_c_extension_librdkafka_writes(broker, monkeypatch):
    """Where chronolog was built without a compiler the encoder is missing: auto falls back to librdkafka,
    producer=native says why it cannot."""
    topic = create(broker.bootstrap, "no-extension", 2)
    rows = make_rows(59, 100, 2)
    monkeypatch.setattr(encode, "AVAILABLE", False)
    assert write_partition(options(broker.bootstrap, topic), iter([arrow(rows)]), None).path == "librdkafka"
    with pytest.raises(ChronologError, match="installed without its C extensions"):
        write_partition(options(broker.bootstrap, topic, producer="native"), iter([arrow(rows)]), None)
    assert read_back(broker.bootstrap, topic, 2, expected=len(rows)) == per_partition(rows)


@pytest.mark.parametrize("error", ["NOT_LEADER_OR_FOLLOWER", "UNKNOWN_TOPIC_OR_PARTITION", "REQUEST_TIMED_OUT"])
def test_a_retriable_error_in_a_produce_answer_is_retried(error):
    """A Produce answered with a retriable error (what a leader change looks like) is sent again after a
    metadata refresh, and every row lands exactly once, in order."""
    from chronolog.testing import broker as test_broker

    with test_broker() as b:
        topic = b.create_topic("retried", partitions=2, configs={"message.timestamp.after.max.ms": str(2**62)})
        rule = b.faults.push_errors("Produce", error, count=2, topic=topic, partition=1)
        rows = make_rows(7, 300, 2)
        done = write_partition(options(b.bootstrap, topic, **{"kafka.retry.backoff.ms": "10"}),
                               iter([arrow(rows)]), None)
        assert (done.rows, done.path) == (300, "native")
        assert rule.hits == 2 and rule.remaining == 0
        assert read_back(b.bootstrap, topic, 2, expected=len(rows)) == per_partition(rows)


def test_rows_are_checked_piece_by_piece_and_sent_only_when_all_passed(broker, monkeypatch):
    """Pieces of one Arrow batch each: what is written is byte-equal to one piece; a bad row in a late
    piece is named by its number in the task and nothing of the task is written."""
    monkeypatch.setattr(sink, "PIECE_BYTES", 1)
    topic = create(broker.bootstrap, "pieces", 3)
    rows = make_rows(61, 700, 3)
    done = write_partition(options(broker.bootstrap, topic), iter([arrow(rows[i:i + 100]) for i in range(0, 700, 100)]),
                           None)
    assert (done.rows, done.path) == (700, "native")
    assert read_back(broker.bootstrap, topic, 3, expected=len(rows)) == per_partition(rows)

    bad = create(broker.bootstrap, "pieces-bad", 3)
    wrong = [r if i != 530 else (9, *r[1:]) for i, r in enumerate(rows)]
    with pytest.raises(ChronologError, match="row 530: partition 9 does not exist in topic 'pieces-bad'"):
        write_partition(options(broker.bootstrap, bad), iter([arrow(wrong[i:i + 100]) for i in range(0, 700, 100)]),
                        None)
    nullkey = [arrow(rows[i:i + 100]) for i in range(0, 700, 100)]
    headers = pa.array([[{"key": "a", "value": b"1"}]] * 99 + [[{"key": None, "value": b"x"}]], HEADERS)
    nullkey[4] = nullkey[4].set_column(nullkey[4].schema.get_field_index("headers"), "headers", headers)
    with pytest.raises(ChronologError, match="row 499: a header with a null key"):
        write_partition(options(broker.bootstrap, bad), iter(nullkey), None)
    assert read_back(broker.bootstrap, bad, 3) == []


def test_keyless_rows_of_a_task_share_one_partition_across_pieces(broker, monkeypatch):
    monkeypatch.setattr(sink, "PIECE_BYTES", 1)
    topic = create(broker.bootstrap, "keyless-pieces", 3)
    rows = [(None, None, b"v%d" % i, (), BASE + i) for i in range(300)]
    write_partition(options(broker.bootstrap, topic), iter([arrow(rows[i:i + 10], partition=False)
                                                            for i in range(0, 300, 10)]), None)
    got = read_back(broker.bootstrap, topic, 3, expected=len(rows))
    assert len({m[0] for m in got}) == 1 and [m[2] for m in got] == [r[2] for r in rows]


def test_a_task_reuses_the_producer_of_the_previous_task(broker):
    """The next task of the process takes the producer (its connection, its leaders) the last one kept;
    a task that failed does not keep its producer."""
    close_idle_producers()
    topic = create(broker.bootstrap, "kept", 2)
    rows = make_rows(67, 200, 2)
    write_partition(options(broker.bootstrap, topic), iter([arrow(rows[:100])]), None)
    ((key, kept),) = native_writer._IDLE.items()
    (producer,) = kept
    conns, asked, requests = dict(producer._conns), dict(producer._asked), producer.requests
    write_partition(options(broker.bootstrap, topic), iter([arrow(rows[100:])]), None)
    assert native_writer._IDLE[key] == [producer]
    assert producer._conns == conns and producer._asked == asked  # same sockets, no Metadata asked again
    assert producer.requests > requests
    assert read_back(broker.bootstrap, topic, 2, expected=len(rows)) == per_partition(rows)
    with pytest.raises(ChronologError, match="after 1 attempt"):
        write_partition(replace(options(broker.bootstrap, "never-there", **{"kafka.retries": "0"}),
                                facts=(("never-there", 1, 1_000_000),)),
                        iter([pa.RecordBatch.from_pydict({"value": pa.array([b"v"])})]), None)
    assert all(p is producer for ps in native_writer._IDLE.values() for p in ps)
    close_idle_producers()
    assert not native_writer._IDLE


def test_a_kept_connection_the_broker_closed_is_replaced_before_use(tmp_path):
    """A broker restarted between two tasks: the kept connection is seen closed and a new one is made,
    without a failed attempt."""
    close_idle_producers()
    proc = BrokerProcess(tmp_path / "data").start()
    try:
        topic = create(proc.bootstrap, "restart-kept", 1)
        rows = make_rows(71, 100, 1)
        write_partition(options(proc.bootstrap, topic), iter([arrow(rows[:50])]), None)
        ((_key, (producer,)),) = native_writer._IDLE.items()
        proc.stop()
        proc.start()
        write_partition(options(proc.bootstrap, topic), iter([arrow(rows[50:])]), None)
        assert producer.retried == 0
        assert read_back(proc.bootstrap, topic, 1, expected=len(rows)) == per_partition(rows)
    finally:
        close_idle_producers()
        proc.stop()
