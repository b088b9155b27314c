"""Spark's `path` mode on the tier (no broker): a window of a tiered topic read by the chronolog source from
the tier's directory equals the records the broker's log holds for it."""

from __future__ import annotations

import datetime
import random

import pytest

from chronolog.storage import LogManager
from tests.spark.conftest import spark  # noqa: F401  (the session fixture)
from tests.storage.test_tiered import BASE, TOPIC_CONFIGS, broker_config, produce, tier_and_expire

pytestmark = [pytest.mark.spark, pytest.mark.slow]
pytest.importorskip("pyspark")


def iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def test_path_mode_reads_a_window_of_the_tier(spark, tmp_path):  # noqa: F811
    manager = LogManager(tmp_path / "data", broker_config(str(tmp_path / "tier")))
    manager.startup(background=False)
    try:
        manager.create_topic("logs", 1, TOPIC_CONFIGS)
        plog = manager.get_log("logs", 0)
        produced = produce(plog, 600, random.Random(21))
        tier_and_expire(manager, BASE + 700_000)
        end = plog.remote.highest_offset + 1
    finally:
        manager.shutdown()
    t1, t2 = BASE + 100_000, BASE + 250_000
    df = (spark.read.format("chronolog").option("path", str(tmp_path / "tier")).option("subscribe", "logs").load()
          .where(f"timestamp >= '{iso(t1)}' AND timestamp < '{iso(t2)}'"))
    got = sorted((r.offset, r.value) for r in df.select("offset", "value").collect())
    want = [(o, v) for o, t, v in produced if t1 <= t < t2 and o < end]
    assert got == want and len(want) > 1000
