"""The `chronolog` Python data source: Spark's Kafka source schema and options over a time range.

Planning (driver): per Kafka partition, the offset range Spark's options select (`startingTimestamp` /
`endingTimestamp` and the per-partition variants are offsets, as in Spark's Kafka source), narrowed by the
pushed `timestamp`/`offset`/`partition` filters (a start offset from the time index, an end offset proven
from segment minima in `path` mode or from `maxLatenessMs`).

Reading (executors): records in [start, end) are read from segment files (`path` mode) or fetched from any
Kafka-protocol broker (`kafka.bootstrap.servers` mode) and every time/partition/offset filter is applied
exactly in the reader, so late CreateTime records are neither lost nor duplicated: the result is exactly
that of the query without pushdown. Rows leave as Arrow record batches.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import StructType

from chronolog.errors import ChronologError
from chronolog.spark.failures import install, one_line, one_line_iter
from chronolog.spark.options import SourceOptions
from chronolog.spark.ranges import Bounds, OffsetRange, RangeGroup, range_schema, with_client_options

if TYPE_CHECKING:  # Spark runs `schema()` and `pushFilters` in fresh interpreters, which need no pyarrow
    import pyarrow as pa

BASE_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
               "timestampType int")
HEADERS_SCHEMA = ", headers array<struct<key: string, value: binary>>"
def _micros(value) -> int | None:
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return int(value.timestamp() * 1_000_000)
    if isinstance(value, int | float):
        return int(value)
    return None


class ChronologDataSource(DataSource):
    # The session's task slots, set on the class `register` makes (see there); None: not known.
    parallelism: int | None = None

    @classmethod
    def name(cls) -> str:
        return "chronolog"

    @one_line
    def schema(self) -> str:
        """Called at `load()` (not for writes, whose schema is the DataFrame's): the options are checked
        here, so a bad one fails `load()` as in Spark's Kafka source (`KafkaSourceProvider`)."""
        SourceOptions.parse(self.options)
        include = self.options.get("includeHeaders", "false").lower() == "true"
        return BASE_SCHEMA + (HEADERS_SCHEMA if include else "")

    @one_line
    def reader(self, schema: StructType) -> ChronologReader:
        options = SourceOptions.parse(self.options)
        _log_reader_choice(options)
        return ChronologReader(options, self.parallelism)

    @one_line
    def streamReader(self, schema: StructType):
        from chronolog.spark.stream import ChronologStreamReader
        return ChronologStreamReader(SourceOptions.parse(self.options))

    @one_line
    def writer(self, schema: StructType, overwrite: bool):
        from chronolog.spark.sink import make_writer
        return make_writer(self.options, schema, overwrite, streaming=False)

    @one_line
    def streamWriter(self, schema: StructType, overwrite: bool):
        from chronolog.spark.sink import make_writer
        return make_writer(self.options, schema, overwrite, streaming=True)


class ChronologReader(DataSourceReader):
    def __init__(self, options: SourceOptions, parallelism: int | None = None) -> None:
        self.options = options
        self.parallelism = parallelism
        # Only pushed filters bound the rows exactly; Spark's timestamp options select offset ranges
        # (planning._plan_partition), as Spark's Kafka source does.
        self.bounds = Bounds()

    def pushFilters(self, filters):
        """Timestamp, partition and offset comparisons narrow the plan and are applied exactly in the
        reader, so Spark need not re-check them; everything else is returned to Spark."""
        for f in filters:
            column = f.attribute[0] if len(f.attribute) == 1 else None
            handled = False
            if column in ("timestamp", "offset", "partition") and isinstance(
                    f, EqualTo | GreaterThan | GreaterThanOrEqual | LessThan | LessThanOrEqual):
                value = _micros(f.value) if column == "timestamp" else f.value
                if isinstance(value, int) and not isinstance(value, bool):
                    self.bounds = _apply_filter(self.bounds, column, f, value)
                    handled = True
            if not handled:
                yield f

    @one_line
    def partitions(self):
        from chronolog.spark.planning import plan
        planned = [with_client_options(p, self.options) for p in plan(self.options, self.bounds, self.parallelism)]
        if self.options.fail_on_data_loss:
            return planned
        return [_lenient(p) for p in planned]

    @one_line_iter
    def read(self, partition: OffsetRange | RangeGroup) -> Iterator[pa.RecordBatch]:
        from chronolog.spark.reading import read_range
        if isinstance(partition, RangeGroup):
            for part in partition.ranges:
                yield from read_range(part, range_schema(part.include_headers))
        elif isinstance(partition, OffsetRange):
            yield from read_range(partition, range_schema(partition.include_headers))
        # else: an empty plan; Spark still runs one task with a bare InputPartition


def _log_reader_choice(options: SourceOptions) -> None:
    from chronolog.timetravel.fetcher import unsupported_options
    if options.bootstrap is None:
        return
    missing = unsupported_options(options.kafka_conf)
    if missing:
        logging.getLogger("chronolog.spark").warning(
            "reading %s with librdkafka's consumer, not raw Fetch: the raw fetcher does not honour %s",
            options.bootstrap, ", ".join(missing))


def _lenient(part):
    """A planned partition whose reader skips unreadable offsets with a warning (`failOnDataLoss=false`)."""
    if isinstance(part, RangeGroup):
        return RangeGroup(tuple(replace(r, fail_on_data_loss=False) for r in part.ranges))
    return replace(part, fail_on_data_loss=False) if isinstance(part, OffsetRange) else part


def _tighten(bounds: Bounds, **changes) -> Bounds:
    """AND a new bound into the existing ones: lower bounds rise, upper bounds fall, partition sets meet."""
    values = dict(bounds.__dict__)
    for key, value in changes.items():
        current = values.get(key)
        if current is None:
            values[key] = value
        elif key == "partitions":
            values[key] = current & value
        elif "_min" in key:
            values[key] = max(current, value)
        else:
            values[key] = min(current, value)
    return Bounds(**values)


def _apply_filter(bounds: Bounds, column: str, f, value: int) -> Bounds:
    if column == "partition":
        if isinstance(f, EqualTo):
            return _tighten(bounds, partitions=frozenset([value]))
        lo = value + 1 if isinstance(f, GreaterThan) else value if isinstance(f, GreaterThanOrEqual) else None
        hi = value - 1 if isinstance(f, LessThan) else value if isinstance(f, LessThanOrEqual) else None
        allowed = frozenset(range(lo if lo is not None else 0, (hi if hi is not None else 1 << 16) + 1))
        return _tighten(bounds, partitions=allowed)
    lo_key, hi_key = ("ts_min_us", "ts_max_us") if column == "timestamp" else ("offset_min", "offset_max")
    if isinstance(f, EqualTo):
        return _tighten(bounds, **{lo_key: value, hi_key: value})
    if isinstance(f, GreaterThan):
        return _tighten(bounds, **{lo_key: value + 1})
    if isinstance(f, GreaterThanOrEqual):
        return _tighten(bounds, **{lo_key: value})
    if isinstance(f, LessThan):
        return _tighten(bounds, **{hi_key: value - 1})
    return _tighten(bounds, **{hi_key: value})


def register(spark) -> None:
    """Register the `chronolog` source on a session (and turn on Python filter pushdown, which Spark
    requires for a source that implements it). On the driver, errors of the source and the sink are then
    raised as their one-line message (`failures.install`)."""
    install()
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(_with_parallelism(spark))


def _with_parallelism(spark) -> type[ChronologDataSource]:
    """The source class carrying the session's task slots (`defaultParallelism`), which Spark's planning
    interpreters cannot ask for: a subclass made here is pickled by value, its attribute with it. The plain
    class where the session does not tell (Spark Connect)."""
    try:
        slots = int(spark.sparkContext.defaultParallelism)
    except Exception:  # noqa: BLE001  (no SparkContext on a Connect session)
        return ChronologDataSource
    return type("ChronologDataSource", (ChronologDataSource,), {"parallelism": slots, "__module__": __name__})


def data_dir_exists(path: str) -> bool:
    return Path(path).exists()


__all__ = ["ChronologDataSource", "OffsetRange", "RangeGroup", "Bounds", "register", "ChronologError"]
