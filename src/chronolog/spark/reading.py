"""Executor-side reading of one offset range into Arrow record batches, with every bound applied exactly."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from chronolog.spark.source import ARROW_BATCH_ROWS, OffsetRange


def _records(part: OffsetRange, start: int, end: int
             ) -> Iterator[tuple[int, int, bytes | None, bytes | None, int, tuple]]:
    """(offset, timestamp ms, key, value, timestamp type 0/1, headers) for offsets in [start, end)."""
    if start >= end:
        return
    if part.mode == "path":
        from chronolog.timetravel.sources import open_data_dir
        source = open_data_dir(part.source)
        try:
            for batch in source.log(part.topic, part.partition).read_batches(start, end):
                kind = int(batch.timestamp_type == 1)
                whole = start <= batch.base_offset and batch.last_offset < end
                for rec in batch.records():
                    if whole or start <= rec.offset < end:
                        yield rec.offset, rec.timestamp, rec.key, rec.value, kind, rec.headers
        finally:
            source.close()
    else:
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        consumer = Consumer({"bootstrap.servers": part.source, "group.id": "chronolog-spark",
                             "enable.auto.commit": False, "enable.partition.eof": True})
        try:
            consumer.assign([TopicPartition(part.topic, part.partition, start)])
            while True:
                msg = consumer.poll(30)
                if msg is None:
                    raise TimeoutError(f"no data from {part.source} for {part.topic}-{part.partition}")
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        return
                    raise RuntimeError(msg.error().str())
                if msg.offset() >= end:
                    return
                kind, ts = msg.timestamp()
                yield msg.offset(), ts, msg.key(), msg.value(), int(kind == 2), tuple(msg.headers() or ())
                if msg.offset() >= end - 1:
                    return
        finally:
            consumer.close()


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
    """Arrow batches of the records of `part` that its bounds keep. Columns are filled per record and
    built once per Arrow batch; topic and partition are constants (`pa.repeat`)."""
    window = _window(part)
    if window is None:
        return
    start, end, lo, hi = window
    headers_wanted = "headers" in schema.names
    offsets: list[int] = []
    stamps: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    kinds: list[int] = []
    headers: list[list[dict]] = []

    def flush() -> pa.RecordBatch:
        n = len(offsets)
        arrays = [pa.array(keys, pa.binary()), pa.array(values, pa.binary()), pa.repeat(part.topic, n),
                  pa.repeat(pa.scalar(part.partition, pa.int32()), n), pa.array(offsets, pa.int64()),
                  pa.array(stamps, pa.int64()).cast(schema.field("timestamp").type),
                  pa.array(kinds, pa.int32())]
        if headers_wanted:
            arrays.append(pa.array(headers, schema.field("headers").type))
        out = pa.RecordBatch.from_arrays(arrays, schema=schema)
        for column in (offsets, stamps, keys, values, kinds, headers):
            column.clear()
        return out

    for offset, ts, key, value, kind, hdrs in _records(part, start, end):
        if (lo is not None and ts < lo) or (hi is not None and ts > hi):
            continue
        offsets.append(offset)
        stamps.append(ts * 1000)
        keys.append(key)
        values.append(value)
        kinds.append(kind)
        if headers_wanted:
            headers.append([{"key": k, "value": v} for k, v in hdrs])
        if len(offsets) >= ARROW_BATCH_ROWS:
            yield flush()
    if offsets:
        yield flush()
