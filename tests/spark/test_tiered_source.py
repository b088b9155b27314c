"""The Spark source in broker mode over a tiered topic (KIP-405): the issue's acceptance scenario
(tests/storage/test_tiered_broker.py: 1 MB segments, a few seconds of local retention, late CreateTime;
a few MB in `make test`, 100 MB in `make test-long`), read through the broker, whose fetches and lookups by
time reach the tier. Every record is read; a time window is pushed down exactly (the planned range starts
at the first offset at or after the window, and ends, with maxLatenessMs, at the first offset the bound
proves; the broker then reads only the tiered segments of that range); and broker mode agrees with `path`
mode on the tier's directory, which needs no broker."""

from __future__ import annotations

import datetime
import zlib

import pytest

from chronolog.spark.options import SourceOptions
from chronolog.spark.planning import plan
from chronolog.spark.ranges import Bounds
from tests.storage.test_tiered_broker import LATE_MS, tiered_scenario, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.slow]
pytest.importorskip("pyspark")


LOCAL_RECORDS = 500


@pytest.fixture(scope="module")
def tiered(tmp_path_factory):
    """The scenario with every record tiered (its active segment rolled by local.retention.ms and copied),
    then LOCAL_RECORDS more stamped half an hour ahead, which stay in the local active segment (no roll
    for local.retention.ms before their time): the tier's end stays where it is while the tests read."""
    import time

    import confluent_kafka as ck
    with tiered_scenario(tmp_path_factory.mktemp("tiered-spark")) as scenario:
        remote = scenario.b._manager().get_log(scenario.topic, 0).remote
        wait_for(lambda: remote.highest_offset + 1 == len(scenario.produced), "all tiered")
        scenario.tier_end = len(scenario.produced)
        producer = ck.Producer(scenario.b.client_config())
        ahead = int(time.time() * 1000) + 1_800_000
        for i in range(LOCAL_RECORDS):
            producer.produce(scenario.topic, b"local %d" % i, timestamp=ahead + i)
        assert producer.flush(30) == 0
        scenario.produced += [(scenario.tier_end + i, ahead + i, b"local %d" % i) for i in range(LOCAL_RECORDS)]
        scenario.running_max += [ahead + i for i in range(LOCAL_RECORDS)]
        assert remote.highest_offset + 1 == scenario.tier_end
        yield scenario


def iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def load(spark, tiered, mode: str, **options: str):
    reader = spark.read.format("chronolog").option("subscribe", tiered.topic)
    reader = reader.option("path", str(tiered.tier)) if mode == "path" else \
        reader.option("kafka.bootstrap.servers", tiered.b.bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def summary(df) -> tuple[int, int, int, int]:
    """(records, first offset, last offset, sum of the values' CRC-32): every record, without collecting
    100 MB into the driver."""
    row = df.selectExpr("count(*) AS n", "min(offset) AS lo", "max(offset) AS hi",
                        "sum(crc32(value)) AS crc").first()
    return row.n, row.lo, row.hi, row.crc


def expected(rows) -> tuple[int, int, int, int]:
    return len(rows), rows[0][0], rows[-1][0], sum(zlib.crc32(v) for _o, _t, v in rows)


def windows(tiered) -> list[tuple[int, int]]:
    """Two minutes wholly in the tier, one across the tier's end into the local segment, one at the start."""
    produced, end = tiered.produced, tiered.tier_end
    first = produced[0][1]
    inside = produced[end // 2][1]
    boundary = produced[end - 1][1] - 30_000
    return [(first + LATE_MS, first + LATE_MS + 120_000), (inside, inside + 120_000),
            (boundary, tiered.running_max[-1] + 1), (first - 1_000, first + 5_000)]


def test_broker_mode_reads_every_record_of_the_tier_and_the_disk(spark, tiered):
    assert tiered.tier_end > len(tiered.produced) // 2  # most of the topic is tiered
    assert summary(load(spark, tiered, "kafka")) == expected(tiered.produced)
    tier_part = load(spark, tiered, "kafka").where(f"offset < {tiered.tier_end}")
    assert summary(tier_part) == summary(load(spark, tiered, "path")) == \
        expected(tiered.produced[:tiered.tier_end])


def test_a_time_window_is_pushed_down_exactly_in_broker_mode(spark, tiered):
    produced = tiered.produced
    plog = tiered.b._manager().get_log(tiered.topic, 0)
    remote = plog.remote
    for t1, t2 in windows(tiered):
        bounds = Bounds(ts_min_us=t1 * 1000, ts_max_us=t2 * 1000 - 1)
        options = {"kafka.bootstrap.servers": tiered.b.bootstrap, "subscribe": tiered.topic}
        [unbounded] = plan(SourceOptions.parse(options), bounds)
        [bounded] = plan(SourceOptions.parse({**options, "maxLatenessMs": str(LATE_MS)}), bounds)
        start, end = tiered.oracle(t1), tiered.oracle(t2 + LATE_MS)
        assert (unbounded.start, unbounded.end) == (start, len(produced))  # no bound: to the log end
        assert (bounded.start, bounded.end) == (start, len(produced) if end is None else end)
        want = [(o, v) for o, t, v in produced if t1 <= t < t2]
        where = f"timestamp >= '{iso(t1)}' AND timestamp < '{iso(t2)}'"
        for cache in (remote.caches.indexes, remote.caches.ranges):
            cache.forget(remote.tier, "")
        remote._changed()
        remote.tier.reset_counters()
        df = load(spark, tiered, "kafka", maxLatenessMs=str(LATE_MS)).where(where).select("offset", "value")
        assert sorted((r.offset, r.value) for r in df.collect()) == want, (t1, t2)
        # the broker read of the tier stayed within the planned range: no tiered segment before or after it
        touched = {name.split(".")[0] for name in remote.tier.reads if name.endswith(".log")}
        allowed = {f"{m.base_offset:020d}" for m in remote.segments if m.end_offset >= start and m.base_offset < bounded.end}
        assert touched and touched <= allowed, (t1, t2)
        # and that range is a part of the tier, not all of it (a count of segments by bytes would not hold:
        # on a busy machine local.retention.ms rolls the active segment before it is full)
        assert len(allowed) < len(list(remote.segments)), (t1, t2)


def test_broker_mode_agrees_with_path_mode_on_the_tier(spark, tiered):
    for t1, t2 in windows(tiered):
        where = f"timestamp >= '{iso(t1)}' AND timestamp < '{iso(t2)}'"
        cols = ("offset", "timestamp", "value")
        by_broker = load(spark, tiered, "kafka").where(where).where(f"offset < {tiered.tier_end}").select(*cols)
        by_path = load(spark, tiered, "path").where(where).select(*cols)
        assert sorted(by_broker.collect()) == sorted(by_path.collect())
        assert sorted(r.offset for r in by_path.collect()) == \
            [o for o, t, _v in tiered.produced[:tiered.tier_end] if t1 <= t < t2]
    # Spark's own time options (offsets, not a filter) select the same offsets on both
    t1, t2 = windows(tiered)[1]
    ranges = {mode: sorted(r.offset for r in load(spark, tiered, mode, startingTimestamp=str(t1),
                                                  endingTimestamp=str(t2)).select("offset").collect())
              for mode in ("kafka", "path")}
    assert ranges["kafka"] == ranges["path"] == list(range(tiered.oracle(t1), tiered.oracle(t2)))
