"""Spark's Kafka source options on the `chronolog` source, each against the records it must select:
subscribePattern, assign, per-partition timestamps and offsets (JSON, with -2/-1), ISO-8601 times, Spark's
precedence (startingTimestamp over startingOffsetsByTimestamp over startingOffsets), and a partition with
nothing after the start time under startingOffsetsByTimestampStrategy."""

from __future__ import annotations

import json

import pytest
from pyspark.errors import PySparkException

from chronolog.config import BrokerConfig
from chronolog.records import SimpleRecord, build_batch
from chronolog.storage import LogManager

pytestmark = pytest.mark.spark
BASE = 1_700_000_000_000  # 2023-11-14T22:13:20Z
COUNTS = {("alpha", 0): 30, ("alpha", 1): 20, ("alpha", 2): 5, ("beta", 0): 10, ("gamma", 0): 7}


def ts(topic: str, p: int, i: int) -> int:
    return BASE + i * 1000 + p  # record i of every partition at second i


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("options") / "data"
    manager = LogManager(path, BrokerConfig())
    manager.startup(background=False)
    for topic in ("alpha", "beta", "gamma"):
        manager.create_topic(topic, 1 + max(p for t, p in COUNTS if t == topic),
                             {"message.timestamp.after.max.ms": str(2**62)})
    for (topic, p), n in COUNTS.items():
        for i in range(n):
            manager.get_log(topic, p).append(build_batch([SimpleRecord(ts(topic, p, i), None, b"%d" % i)]))
    manager.shutdown()
    return path


def select(spark, data_dir, **options) -> set[tuple[str, int, int]]:
    reader = spark.read.format("chronolog").option("path", str(data_dir))
    for key, value in options.items():
        reader = reader.option(key, value if isinstance(value, str) else json.dumps(value))
    return {(r.topic, r.partition, r.offset) for r in reader.load().select("topic", "partition", "offset").collect()}


def want(topics=None, start=None, end=None) -> set[tuple[str, int, int]]:
    """Records of (topic, partition) keys in `topics`; start/end per key as offsets (end exclusive)."""
    out = set()
    for (topic, p), n in COUNTS.items():
        if topics is not None and (topic, p) not in topics:
            continue
        lo = (start or {}).get((topic, p), 0)
        hi = (end or {}).get((topic, p), n)
        out |= {(topic, p, o) for o in range(lo, min(hi, n))}
    return out


ALPHA = {("alpha", 0), ("alpha", 1), ("alpha", 2)}


def test_subscribe_pattern_and_assign(spark, data_dir):
    assert select(spark, data_dir, subscribePattern="al.*|gam+a") == want(ALPHA | {("gamma", 0)})
    assert select(spark, data_dir, subscribe="alpha,beta") == want(ALPHA | {("beta", 0)})
    assert select(spark, data_dir, assign={"alpha": [0, 2], "beta": [0]}) == want({("alpha", 0), ("alpha", 2),
                                                                                   ("beta", 0)})


def test_per_partition_timestamps_and_offsets(spark, data_dir):
    got = select(spark, data_dir, assign={"alpha": [0, 1, 2]},
                 startingOffsetsByTimestamp={"alpha": {"0": ts("alpha", 0, 10), "1": ts("alpha", 1, 3) - 500}},
                 endingOffsetsByTimestamp={"alpha": {"0": ts("alpha", 0, 12)}})
    # Partitions not named start at startingOffsets' default (earliest) and end at the latest offset.
    assert got == want(ALPHA, start={("alpha", 0): 10, ("alpha", 1): 3}, end={("alpha", 0): 12})
    got = select(spark, data_dir, subscribe="alpha",
                 startingOffsets={"alpha": {"0": 25, "1": -2, "2": -1}}, endingOffsets={"alpha": {"0": 28, "1": -1}})
    assert got == want(ALPHA, start={("alpha", 0): 25, ("alpha", 2): 5}, end={("alpha", 0): 28})


def test_iso_times_and_precedence(spark, data_dir):
    by_ms = select(spark, data_dir, subscribe="alpha", startingTimestamp=str(BASE + 4000),
                   endingTimestamp=str(BASE + 8000))
    by_iso = select(spark, data_dir, subscribe="alpha", startingTimestamp="2023-11-14T22:13:24Z",
                    endingTimestamp="2023-11-14T22:13:28Z")
    window = want(ALPHA, start={k: 4 for k in ALPHA}, end={k: 8 for k in ALPHA})
    assert by_ms == by_iso == window
    # startingTimestamp wins over startingOffsetsByTimestamp, which wins over startingOffsets (Spark's order).
    assert select(spark, data_dir, subscribe="alpha", startingTimestamp=str(BASE + 4000), endingTimestamp=str(BASE + 8000),
                  startingOffsetsByTimestamp={"alpha": {"0": BASE + 1000}}, startingOffsets="latest") == window
    got = select(spark, data_dir, assign={"alpha": [0]}, startingOffsetsByTimestamp={"alpha": {"0": BASE + 20_000}},
                 startingOffsets={"alpha": {"0": 2}})
    assert got == want({("alpha", 0)}, start={("alpha", 0): 20})


def test_a_partition_with_nothing_after_the_start_follows_the_strategy(spark, data_dir):
    """From second 15 only alpha-0 and alpha-1 have records (alpha-2, beta-0 and gamma-0 end before): with
    startingOffsetsByTimestampStrategy=latest the others contribute nothing; with Spark's default (error)
    the query fails, as Spark's Kafka source fails it."""
    got = select(spark, data_dir, subscribePattern=".*", startingTimestamp=str(BASE + 15_000),
                 startingOffsetsByTimestampStrategy="latest")
    assert got == want({("alpha", 0), ("alpha", 1)}, start={("alpha", 0): 15, ("alpha", 1): 15})
    assert select(spark, data_dir, subscribe="beta", startingTimestamp=str(BASE + 10**9),
                  startingOffsetsByTimestampStrategy="latest") == set()
    with pytest.raises(PySparkException, match="No offset matched from request of topic-partition beta-0"):
        select(spark, data_dir, subscribe="beta", startingTimestamp=str(BASE + 10**9))
