"""What the driver plans and the executors read: pushed bounds, offset ranges and groups of them.

A module of its own, below `source`, `planning`, `reading`, `stream` and `sink`, so that each of those
imports it and none imports another to get these types (they used to live in `source`, which `planning`
imported back). The ranges are pickled to executors, so they hold only plain values.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyspark.sql.datasource import InputPartition

from chronolog.timetravel.arrow import ARROW_BATCH_ROWS, arrow_schema

if TYPE_CHECKING:  # pyarrow is imported where batches are made: Spark's create-source worker never needs it
    import pyarrow as pa


@dataclass(frozen=True)
class Bounds:
    """What the reader keeps: timestamps in microseconds (Spark's unit), offsets, partitions."""

    ts_min_us: int | None = None      # inclusive
    ts_max_us: int | None = None      # inclusive
    offset_min: int | None = None
    offset_max: int | None = None
    partitions: frozenset[int] | None = None

    def keep(self, partition: int, offset: int, ts_ms: int) -> bool:
        us = ts_ms * 1000
        return ((self.ts_min_us is None or us >= self.ts_min_us) and (self.ts_max_us is None or us <= self.ts_max_us)
                and (self.offset_min is None or offset >= self.offset_min)
                and (self.offset_max is None or offset <= self.offset_max)
                and (self.partitions is None or partition in self.partitions))


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    topic: str
    partition: int
    start: int
    end: int
    source: str          # data dir or bootstrap servers
    mode: str            # "path" | "kafka"
    bounds: Bounds = field(default_factory=Bounds)
    include_headers: bool = False
    fail_on_data_loss: bool = True  # Spark's default: offsets that cannot be read fail the query
    kafka_conf: tuple[tuple[str, str], ...] = ()   # the query's `kafka.*` options but bootstrap.servers
    raw_fetch: bool = True                         # broker mode: raw Fetch, or librdkafka's consumer


@dataclass(frozen=True)
class RangeGroup(InputPartition):
    """Small offset ranges read one after another by one task (see `planning._pack`)."""

    ranges: tuple[OffsetRange, ...]


def range_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema of the batches a range's read yields (Spark's Kafka source columns)."""
    return arrow_schema(include_headers)


__all__ = ["ARROW_BATCH_ROWS", "Bounds", "OffsetRange", "RangeGroup", "range_schema"]


def with_client_options(part, options):
    """A range with the query's `kafka.*` client options (`isolation.level` matters in both modes) and, in
    broker mode, the reader that honours them: raw Fetch unless an option needs librdkafka (logged once
    per query, on the driver)."""
    from chronolog.timetravel.fetcher import unsupported_options
    conf = tuple(sorted(options.kafka_conf.items()))
    raw = options.bootstrap is None or not unsupported_options(options.kafka_conf)
    if isinstance(part, RangeGroup):
        return RangeGroup(tuple(dataclasses.replace(r, kafka_conf=conf, raw_fetch=raw) for r in part.ranges))
    if isinstance(part, OffsetRange):
        return dataclasses.replace(part, kafka_conf=conf, raw_fetch=raw)
    return part
