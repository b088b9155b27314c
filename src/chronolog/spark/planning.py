"""Driver-side planning: options and pushed bounds -> one or more offset ranges per Kafka partition."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, TypeVar

from chronolog.errors import ChronologError, UnknownTopicOrPartitionError
from chronolog.spark.broker_plan import DEFAULT_CONNECT_TIMEOUT_S, Fallback, SocketPlanSource
from chronolog.spark.options import SourceOptions
from chronolog.spark.ranges import Bounds, OffsetRange, RangeGroup
from chronolog.timetravel.arrow import proven_end as _proven_end  # the window end's proof, shared
from chronolog.timetravel.opener import open_data_dir
from chronolog.timetravel.sources import BrokerSource

T = TypeVar("T")


def _spec(table, topic: str, partition: int):
    if not isinstance(table, dict):
        return None
    value = table.get(topic, {})
    return value.get(str(partition), value.get(partition)) if isinstance(value, dict) else None


def _tls_or_sasl(options: SourceOptions) -> bool:
    conf = options.kafka_conf
    return any(k.startswith(("sasl.", "ssl.")) for k in conf) or \
        conf.get("security.protocol", "plaintext").lower() != "plaintext"


def broker_source(options: SourceOptions):
    """The planner's client: plaintext librdkafka admin and consumer, or, when the query's `kafka.*`
    options say how to connect (`security.protocol`, `sasl.*`, `ssl.*`), the tools' client with them."""
    if _tls_or_sasl(options):
        from chronolog.timetravel.client import ClientSource
        return ClientSource(options.bootstrap, options.kafka_conf)
    return BrokerSource(options.bootstrap)


def with_source(options: SourceOptions, work: Callable[[Any], T]) -> T:
    """`work(source)` with the planner's view of the data (a data dir, or a broker), then the source closed.
    Plaintext brokers are asked on plain sockets (`broker_plan`: a few requests, a refused connection said
    at once); what those leave (a leader moving, TLS, SASL) goes through librdkafka, which retries."""
    if options.path:
        sources = [lambda: open_data_dir(options.path)]
    elif _tls_or_sasl(options):
        sources = [lambda: broker_source(options)]
    else:
        timeout = int(options.kafka_conf.get("socket.connection.setup.timeout.ms", 0)) / 1000
        sources = [lambda: SocketPlanSource(options.bootstrap, timeout or DEFAULT_CONNECT_TIMEOUT_S),
                   lambda: broker_source(options)]
    for i, make in enumerate(sources):
        source = make()
        try:
            return work(source)
        except Fallback:
            if i == len(sources) - 1:
                raise
        finally:
            source.close()
    raise AssertionError("unreachable")


def plan(options: SourceOptions, bounds: Bounds, parallelism: int | None = None) -> list[OffsetRange]:
    """The ranges to read; `parallelism` is the session's task slots (`SparkContext.defaultParallelism`)
    when known: the read is then cut into that many tasks of equal size (see `_pack`)."""
    mode = "path" if options.path else "kafka"
    return with_source(options, lambda source: _plan(source, mode, options, bounds, parallelism))


def _plan(source, mode: str, options: SourceOptions, bounds: Bounds,
          parallelism: int | None = None) -> list[OffsetRange]:
    available = list(source.topics())
    ranges: list[OffsetRange] = []
    for topic, wanted in options.topics(available):
        if topic not in available:
            if options.subscribe_pattern is None:
                where = f"in {options.path}" if options.path else f"on {options.bootstrap}"
                raise UnknownTopicOrPartitionError(f"topic {topic!r} not found {where}")
            continue
        for p in wanted if wanted is not None else source.partitions(topic):
            if bounds.partitions is not None and p not in bounds.partitions:
                continue
            r = _plan_partition(source, mode, options, bounds, topic, p)
            if r is not None:
                ranges.append(r)
    return _pack(_split(ranges, options), options, parallelism)


def _plan_partition(source, mode: str, options: SourceOptions, bounds: Bounds, topic: str,
                    p: int) -> OffsetRange | None:
    low, high = source.watermarks(topic, p)
    start, end = low, high
    b = bounds
    # Spark's timestamp options select offsets, not a time filter (KafkaOffsetReaderAdmin
    # .fetchSpecificTimestampBasedOffsets): from the first offset whose timestamp is >= the start to the
    # first offset whose timestamp is >= the end, exclusive. Precedence as Spark's: startingTimestamp over
    # startingOffsetsByTimestamp over startingOffsets (the same for the ending options).
    start_ts = options.starting_timestamp
    if start_ts is None:
        start_ts = _spec(options.starting_by_timestamp, topic, p)
    end_ts = options.ending_timestamp
    if end_ts is None:
        end_ts = _spec(options.ending_by_timestamp, topic, p)
    if start_ts is not None:
        start = max(low, starting_offset_for_time(source, topic, p, int(start_ts), options.strategy, high))
    else:
        so = options.starting_offsets
        explicit = _spec(so, topic, p)
        if so == "latest" or explicit == -1:
            start = high
        elif explicit is not None and explicit >= 0:
            start = max(low, int(explicit))
    if end_ts is not None:
        found = source.offsets_for_time(topic, int(end_ts), [p])[p]
        end = found.offset if found.found else high  # no record at or after the end: the latest offset
    else:
        eo = options.ending_offsets
        explicit_end = _spec(eo, topic, p)
        if explicit_end is not None and explicit_end >= 0:
            end = min(high, int(explicit_end))
    if b.offset_min is not None:
        start = max(start, b.offset_min)
    if b.offset_max is not None:
        end = min(end, b.offset_max + 1)
    if b.ts_min_us is not None:
        # Records carry milliseconds: ts*1000 >= min_us  <=>  ts >= ceil(min_us / 1000).
        found = source.offsets_for_time(topic, math.ceil(b.ts_min_us / 1000), [p])[p]
        if not found.found:
            return None  # nothing at or after the start time: this partition contributes nothing
        start = max(start, found.offset)
    if b.ts_max_us is not None and options.max_lateness_ms is not None:
        # A user-asserted lateness bound: no record below the window end appears after the first record
        # at or after window end + lateness.
        limit_ms = b.ts_max_us // 1000 + 1 + options.max_lateness_ms
        found = source.offsets_for_time(topic, limit_ms, [p])[p]
        if found.found:
            end = min(end, found.offset)
    if b.ts_max_us is not None and mode == "path":
        end = min(end, _proven_end(source.log(topic, p), start, b.ts_max_us // 1000 + 1))
    if start >= end:
        return None
    target = options.path or options.bootstrap or ""
    return OffsetRange(topic, p, start, end, target, mode, b, options.include_headers)


def starting_offset_for_time(source, topic: str, p: int, ts: int, strategy: str, high: int) -> int:
    """The first offset whose timestamp is >= ts; when there is none, Spark's
    startingOffsetsByTimestampStrategy: `error` (its default, and ours) fails the query, `latest` starts
    at the latest offset (the partition then contributes nothing to a batch query)."""
    found = source.offsets_for_time(topic, ts, [p])[p]
    if found.found:
        return found.offset
    if strategy == "latest":
        return high
    raise ChronologError(f"No offset matched from request of topic-partition {topic}-{p} and timestamp {ts} "
                         "(startingTimestamp / startingOffsetsByTimestamp); set "
                         "startingOffsetsByTimestampStrategy=latest to start at the latest offset instead")


def _split(ranges: list[OffsetRange], options: SourceOptions) -> list[OffsetRange]:
    """Split large ranges for `minPartitions` / `maxRecordsPerPartition` (Spark's Kafka source does the same
    with its offset ranges)."""
    out = ranges
    if options.max_records_per_partition:
        step = options.max_records_per_partition
        out = [dataclasses.replace(r, start=s, end=min(s + step, r.end)) for r in out for s in range(r.start, r.end, step)]
    if options.min_partitions and len(out) < options.min_partitions and out:
        total = sum(r.end - r.start for r in out)
        per = max(1, math.ceil(total / options.min_partitions))
        out = [dataclasses.replace(r, start=s, end=min(s + per, r.end)) for r in out for s in range(r.start, r.end, per)]
    return out


# A Spark task costs 0.05-0.1 s to start for a Python source (with `local[2]`, three ranges of 14,000
# records of a one-hour window took 0.2-0.4 s longer as three tasks than as one), while a task reads about
# 1.4 million records a second over raw Fetch (41,700 in 30 ms): a task should read ~100,000 records.
PACK_RECORDS = 131_072


def _pack(ranges: list[OffsetRange], options: SourceOptions,
          parallelism: int | None = None) -> list[OffsetRange | RangeGroup]:
    """Consecutive small ranges share a task until it holds `PACK_RECORDS` records, like Spark packs small
    files into one partition (`FilePartition.getFilePartitions`); ranges already that big keep one task
    each, as in Spark's Kafka source. With the session's `parallelism` known, a read of more than
    `PACK_RECORDS` records is cut into tasks of equal size, one per slot (as Spark sizes file splits by the
    default parallelism, `FilePartition.maxSplitBytes`): three partitions on two cores are then two tasks
    of 1.5 partitions, not two waves. Not done when the user asked for a partitioning (`minPartitions`,
    `maxRecordsPerPartition`)."""
    if options.min_partitions or options.max_records_per_partition or len(ranges) < (2 if not parallelism else 1):
        return list(ranges)
    if parallelism:
        return _balance(ranges, parallelism)
    out: list[OffsetRange | RangeGroup] = []
    group: list[OffsetRange] = []
    held = 0
    for r in ranges:
        size = r.end - r.start
        if group and held + size > PACK_RECORDS:
            out.append(group[0] if len(group) == 1 else RangeGroup(tuple(group)))
            group, held = [], 0
        group.append(r)
        held += size
    if group:
        out.append(group[0] if len(group) == 1 else RangeGroup(tuple(group)))
    return out


def _balance(ranges: list[OffsetRange], parallelism: int) -> list[OffsetRange | RangeGroup]:
    """The ranges, in order, cut into `tasks` consecutive shares of equal record counts: as many tasks as
    slots, but none under `PACK_RECORDS` records (a task's start costs more than reading that many)."""
    total = sum(r.end - r.start for r in ranges)
    tasks = max(1, min(parallelism, total // PACK_RECORDS))
    out: list[OffsetRange | RangeGroup] = []
    group: list[OffsetRange] = []
    held = 0
    share = math.ceil(total / tasks)
    for r in ranges:
        start = r.start
        while start < r.end:
            take = min(r.end - start, share - held)
            group.append(r if take == r.end - r.start else dataclasses.replace(r, start=start, end=start + take))
            held += take
            start += take
            if held == share:
                out.append(group[0] if len(group) == 1 else RangeGroup(tuple(group)))
                group, held = [], 0
    if group:
        out.append(group[0] if len(group) == 1 else RangeGroup(tuple(group)))
    return out
