"""Executor-side reading of one offset range into Arrow record batches, with every bound applied exactly.

Both modes build their Arrow batches from the columnar decoder (`records.columns`, through
`timetravel.arrow`): `path` mode from segment bytes read in large slices, broker mode from raw Fetch
answers (`timetravel.fetcher`). No Python object is made per record. Broker mode keeps librdkafka's
consumer for queries whose `kafka.*` options the raw fetcher cannot honour (TLS, SASL ...): the driver
logs once why (`source.ChronologReader.partitions`) and marks the ranges.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from chronolog.spark.ranges import OffsetRange


def _report_data_loss(part: OffsetRange, plog, start: int, end: int) -> None:
    """Offsets of [start, end) that the read could not return: below the log start (deleted by retention
    since planning) or in a corrupt range (a batch failing its CRC, a segment cut short; the reader skipped
    it as the broker does, see `storage.corruption`). Spark's Kafka source (`KafkaDataConsumer.get`) fails
    the query on such a gap when `failOnDataLoss` is true and skips it with a warning when false."""
    from chronolog.timetravel.arrow import check_data_loss, lost_offsets
    check_data_loss(f"{part.topic}-{part.partition} in {part.source}", lost_offsets(plog, start, end),
                    part.fail_on_data_loss)


def _window(part: OffsetRange) -> tuple[int, int, int | None, int | None] | None:
    """[start, end) offsets and inclusive millisecond bounds equivalent to `part.bounds.keep` (records
    carry milliseconds: ts * 1000 >= min_us <=> ts >= ceil(min_us / 1000)); None when nothing can match."""
    b = part.bounds
    if b.partitions is not None and part.partition not in b.partitions:
        return None
    start = part.start if b.offset_min is None else max(part.start, b.offset_min)
    end = part.end if b.offset_max is None else min(part.end, b.offset_max + 1)
    lo = None if b.ts_min_us is None else -(-b.ts_min_us // 1000)
    hi = None if b.ts_max_us is None else b.ts_max_us // 1000
    return start, end, lo, hi


def read_range(part: OffsetRange, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the records of `part` that its bounds keep."""
    from chronolog.timetravel.arrow import broker_columns, data_dir_columns, to_record_batch

    window = _window(part)
    if window is None:
        return
    start, end, lo, hi = window
    if start >= end:
        return
    if part.mode == "path":
        from chronolog.timetravel.opener import open_data_dir
        source = open_data_dir(part.source)
        try:
            plog = source.log(part.topic, part.partition)
            isolation = dict(part.kafka_conf).get("isolation.level", "read_uncommitted")
            for cols in data_dir_columns(plog, start, end, lo=lo, hi=hi, names=schema.names, isolation=isolation):
                yield to_record_batch(cols, part.topic, part.partition, schema)
            _report_data_loss(part, plog, start, end)
        finally:
            source.close()
        return
    conf = dict(part.kafka_conf)
    if not part.raw_fetch:
        yield from _consumer_batches(part, schema, start, end, lo, hi, conf)
        return
    from chronolog.timetravel.fetcher import RawFetcher
    fetcher = RawFetcher(part.source, client_id=conf.get("client.id", "chronolog-spark"),
                         timeout=int(conf.get("socket.timeout.ms", 60000)) / 1000,
                         max_bytes=int(conf.get("max.partition.fetch.bytes", conf.get("fetch.max.bytes", 8 << 20))),
                         isolation_level=1 if conf.get("isolation.level") == "read_committed" else 0)
    fetcher.prefetch = True  # the next Fetch under way while this answer is decoded (as `read_window` does)
    try:
        for cols in broker_columns(fetcher, part.topic, part.partition, start, end, lo=lo, hi=hi,
                                   names=schema.names):
            yield to_record_batch(cols, part.topic, part.partition, schema)
    finally:
        fetcher.close()


def _consumer_batches(part: OffsetRange, schema: pa.Schema, start: int, end: int, lo: int | None, hi: int | None,
                      conf: dict) -> Iterator[pa.RecordBatch]:
    """Arrow batches by a librdkafka consumer given the query's `kafka.*` options, columns filled per
    record (`timetravel.arrow.consumer_records`, the fallback's cost)."""
    from chronolog.timetravel.arrow import consumer_records, record_batches
    rows = consumer_records(part.source, {**conf, "group.id": "chronolog-spark"}, part.topic, part.partition, start,
                            end, conf.get("isolation.level", "read_uncommitted"), 30)
    yield from record_batches(rows, part.topic, part.partition, schema, lo, hi)
