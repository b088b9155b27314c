"""Streaming reads: offsets are `{"topic:partition": next offset}` JSON dicts, so Spark's checkpoint
holds exactly what was read and a restarted query resumes without loss or duplicates. `startingTimestamp`
picks the first offsets; `maxOffsetsPerTrigger` caps each micro-batch; Trigger.AvailableNow reads up to
the end offsets seen when the query started."""

from __future__ import annotations

import math

from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow

from chronolog.spark.failures import one_line, one_line_iter
from chronolog.spark.options import SourceOptions
from chronolog.spark.planning import _spec, starting_offset_for_time, with_source
from chronolog.spark.ranges import Bounds, OffsetRange, range_schema, with_client_options


class ChronologStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._target: dict[str, int] | None = None

    def _ends(self) -> dict[str, int]:
        return with_source(self.options, self._ends_of)

    def _ends_of(self, source) -> dict[str, int]:
        out = {}
        for topic, wanted in self.options.topics(list(source.topics())):
            for p in wanted if wanted is not None else source.partitions(topic):
                out[f"{topic}:{p}"] = source.watermarks(topic, p)[1]
        return out

    @one_line
    def initialOffset(self) -> dict:
        return with_source(self.options, self._initial_of)

    def _initial_of(self, source) -> dict:
        out = {}
        for topic, wanted in self.options.topics(list(source.topics())):
            for p in wanted if wanted is not None else source.partitions(topic):
                low, high = source.watermarks(topic, p)
                start_ts = self.options.starting_timestamp
                if start_ts is None:
                    start_ts = _spec(self.options.starting_by_timestamp, topic, p)
                if start_ts is not None:
                    out[f"{topic}:{p}"] = max(low, starting_offset_for_time(source, topic, p, int(start_ts),
                                                                            self.options.strategy, high))
                else:
                    out[f"{topic}:{p}"] = high if self.options.starting_offsets == "latest" else low
        return out

    def getDefaultReadLimit(self):
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    @one_line
    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._ends()

    @one_line
    def latestOffset(self, start: dict, limit) -> dict:
        ends = self._target if self._target is not None else self._ends()
        out = {k: max(start.get(k, 0), v) for k, v in ends.items()}
        for k in start:
            out.setdefault(k, start[k])
        if isinstance(limit, ReadMaxRows):
            # Share the cap across partitions in proportion to their backlog (Spark's Kafka source does so).
            backlog = {k: out[k] - start.get(k, 0) for k in out}
            total = sum(backlog.values())
            if total > limit.max_rows:
                out = {k: start.get(k, 0) + math.floor(backlog[k] * limit.max_rows / total) for k in out}
        return out

    @one_line
    def partitions(self, start: dict, end: dict):
        ranges = []
        target = self.options.path or self.options.bootstrap or ""
        mode = "path" if self.options.path else "kafka"
        for key, stop in end.items():
            topic, _, p = key.rpartition(":")
            begin = start.get(key, 0)
            if stop > begin:
                # the query's kafka.* options and the reader that honours them (TLS/SASL: librdkafka)
                ranges.append(with_client_options(OffsetRange(topic, int(p), begin, stop, target, mode, Bounds(),
                                                               self.options.include_headers), self.options))
        return ranges

    @one_line_iter
    def read(self, partition):
        if not isinstance(partition, OffsetRange):
            return
        from chronolog.spark.reading import read_range
        yield from read_range(partition, range_schema(partition.include_headers))

    def commit(self, end: dict) -> None:
        pass
