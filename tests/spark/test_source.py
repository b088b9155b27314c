"""The `chronolog` source against a brute-force filter over every record, with and without pushdown,
from a data dir and from the real broker."""

from __future__ import annotations

import datetime
import random

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from chronolog.config import BrokerConfig
from chronolog.records import SimpleRecord, build_batch
from chronolog.storage import LogManager
from tests.brokerproc import BrokerProcess
from tests.scale import scaled
from tests.storage.helpers import write_data_dir

pytestmark = pytest.mark.spark
BASE = 1_700_000_000_000
SPAN = 100_000


def make_records(seed: int) -> dict[int, list[tuple[int, bytes]]]:
    """Partition 0: mostly rising with late records; 1: rising; 2: empty."""
    rng = random.Random(seed)
    p0 = [(BASE + i * 100 + (rng.randint(-5000, 0) if rng.random() < 0.1 else 0), b"a%d" % i) for i in range(1000)]
    p1 = [(BASE + i * 300, b"b%d" % i) for i in range(300)]
    return {0: p0, 1: p1, 2: []}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    batches = {p: [build_batch([SimpleRecord(ts, None, v) for ts, v in recs[i:i + 37]]) for i in range(0, len(recs), 37)]
               for p, recs in make_records(1).items()}
    return write_data_dir(tmp_path_factory.mktemp("spark") / "data", "ev", batches, {"segment.bytes": "20000"})


def truth(t1: int, t2: int) -> list[tuple[int, int, int]]:
    out = []
    for p, recs in make_records(1).items():
        out += [(p, off, ts) for off, (ts, _v) in enumerate(recs) if t1 <= ts < t2]
    return sorted(out)


def offset_ranges(t1: int, t2: int) -> list[tuple[int, int, int]]:
    """What Spark's startingTimestamp=t1 / endingTimestamp=t2 select: per partition, from the first offset
    with timestamp >= t1 to the first with timestamp >= t2 (exclusive; the end when there is none)."""
    out = []
    for p, recs in make_records(1).items():
        start = next((o for o, (ts, _v) in enumerate(recs) if ts >= t1), len(recs))
        end = next((o for o, (ts, _v) in enumerate(recs) if ts >= t2), len(recs))
        out += [(p, o, recs[o][0]) for o in range(start, end)]
    return sorted(out)


def rows(df) -> list[tuple[int, int, int]]:
    return sorted((r.partition, r.offset, int(r.timestamp.replace(tzinfo=datetime.UTC).timestamp() * 1000))
                  for r in df.select("partition", "offset", "timestamp").collect())


def iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


WINDOWS = [(BASE + a, BASE + a + w) for a, w in ((0, 1000), (5_000, 20_000), (40_000, 3_000), (95_000, 10_000),
                                                 (-10_000, 5_000), (200_000, 1_000), (33_333, 44_444))]


@pytest.mark.parametrize("t1,t2", WINDOWS)
def test_path_mode_equals_brute_force_with_and_without_pushdown(spark, data_dir, t1, t2):
    def load():
        return spark.read.format("chronolog").option("path", str(data_dir)).option("subscribe", "ev").load()

    want = truth(t1, t2)
    pushed = load().where(f"timestamp >= '{iso(t1)}' AND timestamp < '{iso(t2)}'")
    assert rows(pushed) == want
    reader = spark.read.format("chronolog").option("path", str(data_dir)).option("subscribe", "ev")
    by_option = (reader.option("startingTimestamp", str(t1)).option("endingTimestamp", str(t2))
                 .option("startingOffsetsByTimestampStrategy", "latest").load())
    assert rows(by_option) == offset_ranges(t1, t2)  # Spark's semantics: offsets, not a time filter
    # Without pushdown: filter in Python after a full read of the same source.
    everything = rows(load())
    assert [r for r in everything if t1 <= r[2] < t2] == want


def test_partition_and_offset_predicates_and_splitting(spark, data_dir):
    df = (spark.read.format("chronolog").option("path", str(data_dir)).option("subscribe", "ev")
          .option("maxRecordsPerPartition", "100").load())
    got = rows(df.where("partition = 0 AND offset >= 10 AND offset < 20"))
    assert got == [(0, o, make_records(1)[0][o][0]) for o in range(10, 20)]
    fresh = spark.read.format("chronolog").option("path", str(data_dir)).option("subscribe", "ev").load()
    assert fresh.count() == 1300


def test_real_kafka_segments(spark, kafka_segments_dir):
    def load():
        return (spark.read.format("chronolog").option("path", str(kafka_segments_dir))
                .option("subscribe", "timeindex_test").load())
    assert load().count() == 30565
    t = 1753819246011  # a lookup documented with the fixture: the window starts in the last segment
    first = load().where(f"timestamp >= '{iso(t)}'").orderBy("offset").first()
    assert first.offset >= 22964


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """The same records as `data_dir`, produced through a real broker by librdkafka."""
    proc = BrokerProcess(tmp_path_factory.mktemp("spark-broker") / "data").start()
    try:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        admin.create_topics([NewTopic("ev", 3, 1)])["ev"].result(15)
        producer = Producer({"bootstrap.servers": proc.bootstrap, "linger.ms": 5})
        for p, recs in make_records(1).items():
            for ts, v in recs:
                producer.produce("ev", value=v, partition=p, timestamp=ts)
        assert producer.flush(30) == 0
        yield proc
    finally:
        proc.stop()


def test_broker_mode_equals_path_mode(spark, broker):
    for t1, t2 in WINDOWS[:4]:
        df = (spark.read.format("chronolog").option("kafka.bootstrap.servers", broker.bootstrap)
              .option("subscribe", "ev").load().where(f"timestamp >= '{iso(t1)}' AND timestamp < '{iso(t2)}'"))
        assert rows(df) == truth(t1, t2)


def _random_windows(seed: int, count: int) -> list[tuple[int, int]]:
    """Windows anywhere from before the first record to past the last, some empty, some wide."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        start = BASE + rng.randint(-20_000, SPAN + 20_000)
        out.append((start, start + rng.choice([1, 50, 999, 7_000, 60_000, 300_000])))
    return out


@pytest.mark.parametrize("mode", ["path", "kafka.bootstrap.servers"])
def test_random_windows_equal_brute_force_pushed_and_not_pushed_in_both_modes(spark, data_dir, broker, mode):
    """`timestamp >= a AND timestamp < b` is pushed down; `unix_millis(timestamp)` is an expression Spark
    cannot push, so the same window is then filtered by Spark after a full read."""
    where = str(data_dir) if mode == "path" else broker.bootstrap

    def load():
        return spark.read.format("chronolog").option(mode, where).option("subscribe", "ev").load()

    # 4 windows of each mode (3 queries each) in make test, 8 in the long run (tests/scale.py)
    for t1, t2 in _random_windows(20261123 if mode == "path" else 7, scaled(4, 8)):
        want = truth(t1, t2)
        assert rows(load().where(f"timestamp >= '{iso(t1)}' AND timestamp < '{iso(t2)}'")) == want, (t1, t2)
        assert rows(load().where(f"unix_millis(timestamp) >= {t1} AND unix_millis(timestamp) < {t2}")) == want
        between = load().where(f"timestamp BETWEEN '{iso(t1)}' AND '{iso(t2 - 1)}'")
        assert rows(between) == want


def test_bad_options_are_clear_errors(spark, data_dir):
    with pytest.raises(Exception, match="exactly one of"):
        spark.read.format("chronolog").option("path", str(data_dir)).load().count()


def test_headers_keys_and_packed_ranges(spark, tmp_path):
    """Keys, null values, headers and the timestamp type survive the Arrow columns, in a plan whose
    small ranges share one task (`planning._pack`) and in one with a task per range."""
    path = tmp_path / "data"
    manager = LogManager(path, BrokerConfig())
    manager.startup(background=False)
    manager.create_topic("h", 2, {"message.timestamp.after.max.ms": str(2**62)})
    want = []
    for p in range(2):
        recs = [SimpleRecord(BASE + i, b"k%d" % i if i % 3 else None, None if i % 5 == 0 else b"v%d" % i,
                             (("a", b"1"), ("b", None)) if i % 2 else ()) for i in range(50)]
        manager.get_log("h", p).append(build_batch(recs))
        want += [(p, i, r.key, r.value, [(k, v) for k, v in r.headers]) for i, r in enumerate(recs)
                 if BASE + 10 <= r.timestamp < BASE + 40]
    manager.shutdown()

    def got(**extra):
        reader = spark.read.format("chronolog").option("path", str(path)).option("subscribe", "h")
        for k, v in extra.items():
            reader = reader.option(k, v)
        df = reader.option("includeHeaders", "true").load().where(
            f"timestamp >= '{iso(BASE + 10)}' AND timestamp < '{iso(BASE + 40)}'")
        out = sorted((r.partition, r.offset, r.key, r.value, [(h.key, h.value) for h in r.headers])
                     for r in df.collect())
        assert {r.timestampType for r in df.select("timestampType").collect()} == {0}
        return out, df.rdd.getNumPartitions()

    packed, n_packed = got()
    assert packed == sorted(want) and n_packed == 1
    split, n_split = got(minPartitions="2")
    assert split == sorted(want) and n_split == 2


def test_a_big_read_is_one_task_per_slot(spark, tmp_path):
    """Three partitions on `local[2]` are read as two tasks of equal size (`planning._balance`), each
    offset exactly once: the session's slots reach the planner on the class `register` made."""
    from chronolog.spark.planning import PACK_RECORDS
    path = tmp_path / "data"
    manager = LogManager(path, BrokerConfig())
    manager.startup(background=False)
    manager.create_topic("big", 3, {"message.timestamp.after.max.ms": str(2**62)})
    per = PACK_RECORDS * 2 // 3 + 1000  # the three together hold more than two tasks' minimum
    for p in range(3):
        for i in range(0, per, 2000):
            manager.get_log("big", p).append(build_batch([SimpleRecord(BASE + i + j, None, b"v")
                                                           for j in range(min(2000, per - i))]))
    manager.shutdown()
    df = spark.read.format("chronolog").option("path", str(path)).option("subscribe", "big").load()
    assert df.rdd.getNumPartitions() == 2
    got = sorted(tuple(r) for r in df.groupBy("partition").agg(
        {"offset": "count", "timestamp": "max"}).selectExpr("partition", "`count(offset)`").collect())
    assert got == [(p, per) for p in range(3)]
    assert df.select("partition", "offset").distinct().count() == 3 * per
