"""The `path` mode on a damaged copy of a data dir (flipped bytes, a segment cut short): the reader skips the
bad range as the broker does and honours `failOnDataLoss` as Spark's Kafka source does: true (the
default) fails the query with a message naming the range, false returns every readable record and logs a
warning. Before, a flipped copy failed the query with a decoding error and a truncated one returned rows
without a word."""

from __future__ import annotations

import logging

import pytest

from chronolog.errors import ChronologError
from chronolog.spark.options import SourceOptions
from chronolog.spark.ranges import OffsetRange, range_schema
from chronolog.spark.reading import read_range
from chronolog.timetravel.sources import DataDirSource
from tests.reliability.test_damaged_copy import TOTAL, _flipped, _truncated


def _offsets(part) -> list[int]:
    return [o for b in read_range(part, range_schema(False)) for o in b.column("offset").to_pylist()]


@pytest.mark.parametrize("damage", [_flipped, _truncated], ids=["flipped-bytes", "truncated"])
def test_reader_fails_on_data_loss_or_skips_with_a_warning(tmp_path, caplog, damage):
    copy, lost = damage(tmp_path)
    with pytest.raises(ChronologError, match=r"d-0 in .*: data lost: segment .* are corrupt.*failOnDataLoss=false"):
        _offsets(OffsetRange("d", 0, 0, TOTAL, str(copy), "path"))
    caplog.set_level(logging.WARNING, logger="chronolog")
    got = _offsets(OffsetRange("d", 0, 0, TOTAL, str(copy), "path", fail_on_data_loss=False))
    assert got == sorted(set(range(TOTAL)) - lost)
    assert any("failOnDataLoss=false" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    # A range that does not reach the damage reads without a word.
    first_lost = min(lost)
    assert _offsets(OffsetRange("d", 0, 0, first_lost, str(copy), "path")) == list(range(first_lost))


def test_failondataloss_takes_true_or_false_only():
    base = {"path": "/nowhere", "subscribe": "d"}
    assert SourceOptions.parse(base).fail_on_data_loss is True
    assert SourceOptions.parse({**base, "failOnDataLoss": "FALSE"}).fail_on_data_loss is False
    with pytest.raises(ChronologError, match="failOnDataLoss takes true or false"):
        SourceOptions.parse({**base, "failOnDataLoss": "no"})


def test_spark_query_on_a_damaged_copy(spark, tmp_path):
    copy, lost = _flipped(tmp_path)
    reader = spark.read.format("chronolog").option("path", str(copy)).option("subscribe", "d")
    with pytest.raises(Exception, match="failOnDataLoss"):
        reader.load().collect()
    rows = reader.option("failOnDataLoss", "false").load().select("offset", "value").collect()
    source = DataDirSource(copy)
    try:
        offline = [(r.offset, r.value) for r in source.read("d", 0, 0, TOTAL)]
    finally:
        source.close()
    assert sorted((r.offset, bytes(r.value)) for r in rows) == offline
    assert {r.offset for r in rows} == set(range(TOTAL)) - lost


def test_offsets_deleted_by_retention_after_planning_are_data_loss(tmp_path, caplog):
    from chronolog.config import BrokerConfig
    from chronolog.records import SimpleRecord, build_batch
    from chronolog.storage import LogManager

    now = 1_800_000_000_000
    with LogManager(tmp_path / "data", BrokerConfig()) as manager:
        manager.create_topic("r", 1, {"segment.bytes": "300", "file.delete.delay.ms": "0",
                                      "message.timestamp.after.max.ms": str(2**62)})
        for i in range(10):
            manager.get_log("r", 0).append(build_batch([SimpleRecord(now - 30 * 86_400_000 + i, None, b"old%d" % i)]),
                                           now=now)
        manager.get_log("r", 0).append(build_batch([SimpleRecord(now, None, b"new")]), now=now)
        assert manager.run_retention_once(now) > 0
        start = manager.get_log("r", 0).log_start_offset
    assert 0 < start <= 10
    part = OffsetRange("r", 0, 0, 11, str(tmp_path / "data"), "path")  # planned before retention ran
    with pytest.raises(ChronologError, match=f"offsets 0-{start - 1} are below the log start offset {start} "
                                             r"\(deleted by retention\)"):
        _offsets(part)
    caplog.set_level(logging.WARNING, logger="chronolog")
    assert _offsets(OffsetRange("r", 0, 0, 11, str(tmp_path / "data"), "path", fail_on_data_loss=False)) == \
        list(range(start, 11))
    assert any("deleted by retention" in r.getMessage() for r in caplog.records)
