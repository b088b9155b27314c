"""Executor-side reading of one offset range into Arrow record batches, with every bound applied exactly."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from chronolog.spark.source import ARROW_BATCH_ROWS, OffsetRange


def _records(part: OffsetRange) -> Iterator[tuple[int, int, bytes | None, bytes | None, int, tuple]]:
    """(offset, timestamp ms, key, value, timestamp type 0/1, headers)."""
    if part.mode == "path":
        from chronolog.timetravel.sources import DataDirSource
        plog = DataDirSource(part.source).log(part.topic, part.partition)
        for batch in plog.read_batches(part.start, part.end):
            kind = int(batch.timestamp_type == 1)
            for rec in batch.records():
                if part.start <= rec.offset < part.end:
                    yield rec.offset, rec.timestamp, rec.key, rec.value, kind, rec.headers
    else:
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        consumer = Consumer({"bootstrap.servers": part.source, "group.id": "chronolog-spark",
                             "enable.auto.commit": False, "enable.partition.eof": True})
        try:
            consumer.assign([TopicPartition(part.topic, part.partition, part.start)])
            while True:
                msg = consumer.poll(30)
                if msg is None:
                    raise TimeoutError(f"no data from {part.source} for {part.topic}-{part.partition}")
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        return
                    raise RuntimeError(msg.error().str())
                if msg.offset() >= part.end:
                    return
                kind, ts = msg.timestamp()
                yield msg.offset(), ts, msg.key(), msg.value(), int(kind == 2), tuple(msg.headers() or ())
                if msg.offset() >= part.end - 1:
                    return
        finally:
            consumer.close()


def read_range(part: OffsetRange, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    cols: dict[str, list] = {name: [] for name in schema.names}
    keep = part.bounds.keep
    for offset, ts, key, value, kind, headers in _records(part):
        if not keep(part.partition, offset, ts):
            continue
        cols["key"].append(key)
        cols["value"].append(value)
        cols["topic"].append(part.topic)
        cols["partition"].append(part.partition)
        cols["offset"].append(offset)
        cols["timestamp"].append(ts * 1000)
        cols["timestampType"].append(kind)
        if "headers" in cols:
            cols["headers"].append([{"key": k, "value": v} for k, v in headers])
        if len(cols["offset"]) >= ARROW_BATCH_ROWS:
            yield pa.RecordBatch.from_pydict(cols, schema=schema)
            cols = {name: [] for name in schema.names}
    if cols["offset"]:
        yield pa.RecordBatch.from_pydict(cols, schema=schema)
