"""Spark's timestamp options select offset ranges, as Spark's Kafka source computes them
(KafkaOffsetReaderAdmin.fetchSpecificTimestampBasedOffsets): per partition from the first offset whose
timestamp is >= the start to the first offset whose timestamp is >= the end (exclusive; the latest offset
when there is none). On a topic with late CreateTime records this is not the time window: tested against a
brute force over every record's offset and timestamp, for random windows, in both modes, alone, with a
`timestamp` filter (the intersection), and the filter alone (the exact window)."""

from __future__ import annotations

import datetime
import random

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.errors import PySparkException

from chronolog.records import SimpleRecord, build_batch
from tests.brokerproc import BrokerProcess
from tests.scale import scaled
from tests.storage.helpers import write_data_dir

pytestmark = pytest.mark.spark
BASE = 1_700_000_000_000
N = 400


def make_records() -> dict[int, list[int]]:
    """Timestamps per partition, by offset: rising by 100 ms with one record in eight up to 5 s late."""
    rng = random.Random(1117)
    return {p: [BASE + i * 100 - (rng.randint(1, 5000) if rng.random() < 0.125 else 0) for i in range(N)]
            for p in range(2)}


RECORDS = make_records()


def first_at_or_after(stamps: list[int], t: int) -> int | None:
    return next((o for o, ts in enumerate(stamps) if ts >= t), None)


def spark_rows(t1: int | None, t2: int | None) -> set[tuple[int, int]]:
    """Spark's rows for startingTimestamp=t1 / endingTimestamp=t2, by brute force (strategy 'latest')."""
    out = set()
    for p, stamps in RECORDS.items():
        start = 0 if t1 is None else first_at_or_after(stamps, t1)
        start = len(stamps) if start is None else start
        end = None if t2 is None else first_at_or_after(stamps, t2)
        end = len(stamps) if end is None else end
        out |= {(p, o) for o in range(start, end)}
    return out


def window_rows(t1: int, t2: int) -> set[tuple[int, int]]:
    return {(p, o) for p, stamps in RECORDS.items() for o, ts in enumerate(stamps) if t1 <= ts < t2}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    batches = {p: [build_batch([SimpleRecord(ts, None, b"%d" % o) for o, ts in enumerate(stamps)][i:i + 13])
                   for i in range(0, N, 13)] for p, stamps in RECORDS.items()}
    return write_data_dir(tmp_path_factory.mktemp("optsem") / "data", "late", batches, {"segment.bytes": "4000"})


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("optsem-broker") / "data").start()
    try:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        admin.create_topics([NewTopic("late", 2, 1, config={"message.timestamp.after.max.ms": str(2**62)})])[
            "late"].result(15)
        producer = Producer({"bootstrap.servers": proc.bootstrap, "linger.ms": 5})
        for p, stamps in RECORDS.items():
            for o, ts in enumerate(stamps):
                producer.produce("late", value=b"%d" % o, partition=p, timestamp=ts)
        assert producer.flush(30) == 0
        yield proc
    finally:
        proc.stop()


def iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def got(df) -> set[tuple[int, int]]:
    return {(r.partition, r.offset) for r in df.select("partition", "offset").collect()}


@pytest.mark.parametrize("mode", ["path", "kafka.bootstrap.servers"])
def test_options_are_offset_ranges_filters_are_exact(spark, data_dir, broker, mode):
    where = str(data_dir) if mode == "path" else broker.bootstrap
    rng = random.Random(27 if mode == "path" else 28)

    def load(**options):
        reader = spark.read.format("chronolog").option(mode, where).option("subscribe", "late")
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load()

    checked_late = 0
    for _ in range(scaled(3, 6)):  # every one of the first three windows meets late records already
        t1 = BASE + rng.randint(0, N * 100 - 200)
        t2 = t1 + rng.choice([300, 2_000, 9_000])
        ranges, window = spark_rows(t1, t2), window_rows(t1, t2)
        checked_late += ranges != window
        by_options = load(startingTimestamp=str(t1), endingTimestamp=str(t2))
        assert got(by_options) == ranges, (t1, t2)
        both = by_options.where(f"timestamp >= '{iso(t1)}' AND timestamp < '{iso(t2)}'")
        assert got(both) == ranges & window
        assert got(load().where(f"timestamp >= '{iso(t1)}' AND timestamp < '{iso(t2)}'")) == window
        per = load(startingOffsetsByTimestamp=f'{{"late": {{"0": {t1}, "1": {t1}}}}}',
                   endingOffsetsByTimestamp=f'{{"late": {{"0": {t2}, "1": {t2}}}}}')
        assert got(per) == ranges
    assert checked_late  # the windows did meet late records (options and filter disagree)


@pytest.mark.parametrize("mode", ["path", "kafka.bootstrap.servers"])
def test_starting_strategy(spark, data_dir, broker, mode):
    where = str(data_dir) if mode == "path" else broker.bootstrap
    after = str(BASE + N * 100 + 60_000)

    def load(**options):
        reader = spark.read.format("chronolog").option(mode, where).option("subscribe", "late")
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load()

    with pytest.raises(PySparkException, match="No offset matched"):
        load(startingTimestamp=after).collect()
    assert got(load(startingTimestamp=after, startingOffsetsByTimestampStrategy="latest")) == set()


def test_streaming_start_is_an_offset_and_follows_the_strategy(spark, data_dir, tmp_path):
    t1 = BASE + 20_000

    def run(name: str, **options):
        reader = spark.readStream.format("chronolog").option("path", str(data_dir)).option("subscribe", "late")
        for k, v in options.items():
            reader = reader.option(k, v)
        query = (reader.load().select("partition", "offset").writeStream.format("memory").queryName(name)
                 .option("checkpointLocation", str(tmp_path / name)).trigger(availableNow=True).start())
        query.awaitTermination(120)
        return query

    query = run("from_t1", startingTimestamp=str(t1))
    assert query.exception() is None
    assert {(r.partition, r.offset) for r in spark.sql("SELECT * FROM from_t1").collect()} == spark_rows(t1, None)
    after = str(BASE + N * 100 + 60_000)
    with pytest.raises(PySparkException, match="No offset matched"):
        run("after_error", startingTimestamp=after)
    assert run("after_latest", startingTimestamp=after, startingOffsetsByTimestampStrategy="latest").exception() is None
    assert spark.sql("SELECT * FROM after_latest").count() == 0
