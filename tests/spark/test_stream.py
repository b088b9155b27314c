"""Streaming with Trigger.AvailableNow over three runs: every record exactly once, resumed from checkpoints."""

from __future__ import annotations

import pytest

from chronolog.config import BrokerConfig
from chronolog.records import SimpleRecord, build_batch
from chronolog.storage import LogManager

pytestmark = pytest.mark.spark
BASE = 1_700_000_000_000


def test_available_now_three_triggers_see_every_record_once(spark, tmp_path):
    data = tmp_path / "data"
    manager = LogManager(data, BrokerConfig())
    manager.startup(background=False)
    manager.create_topic("s", 2, {"message.timestamp.after.max.ms": str(2**62)})
    expected = []

    def add(n: int, first: int) -> None:
        for i in range(first, first + n):
            p = i % 2
            manager.get_log("s", p).append(build_batch([SimpleRecord(BASE + i, None, b"v%d" % i)]))
            expected.append(b"v%d" % i)
        manager.flush_all()

    out = tmp_path / "out"
    checkpoint = tmp_path / "checkpoint"
    seen = 0
    for run, first in enumerate((0, 50, 130)):
        add(40 + run * 10, first)
        query = (spark.readStream.format("chronolog").option("path", str(data)).option("subscribe", "s")
                 .option("startingTimestamp", str(BASE)).option("maxOffsetsPerTrigger", "17").load()
                 .selectExpr("value", "partition", "offset")
                 .writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert query.exception() is None
        values = [r.value for r in spark.read.parquet(str(out)).collect()]
        assert len(values) > seen
        seen = len(values)
    manager.shutdown()
    assert sorted(values) == sorted(expected) and len(values) == len(set(values))
