"""A sink task's rows, checked before any is sent: `prepare` turns the Arrow batches Spark hands over into
columns, refusing null topics, timestamps at or before the epoch, negative partitions and null header
keys; `check_rows` holds every row against its topic (it exists, the partition is one of its
partitions, the record fits `max.message.bytes`). A bad row is a one-line error naming it, and nothing of
the task is written. The writer is `spark.sink`."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from chronolog.errors import ChronologError
from chronolog.spark.native_writer import NativeSettings
from chronolog.spark.sink_options import SinkOptions

# RecordBatch v2 overhead over key + value + headers for a batch of one record (DefaultRecordBatch
# RECORD_BATCH_OVERHEAD 61 + the record's varint lengths, at most ~21 bytes): a value that passes this
# check with the largest overhead fits max.message.bytes alone in a batch.
BATCH_OVERHEAD = 61 + 21
KAFKA_DEFAULT_MAX_MESSAGE_BYTES = 1048588  # LogConfig DEFAULT_MAX_MESSAGE_BYTES


@dataclass
class Columns:
    """One task's rows as Arrow columns, checked row by row in Arrow (no Python object per row)."""

    table: pa.Table                 # the task's rows, column names lowercased
    topics: pa.Array | None         # per row; None: every row goes to the `topic` option
    partitions: pa.Array            # int32, null where the row has none
    timestamps: pa.Array | None     # int64 ms, null where the row has none; None: no timestamp column
    sizes: pa.Array                 # int64: key + value + headers + batch overhead, per row

    def __len__(self) -> int:
        return self.table.num_rows

    def column(self, name: str) -> pa.Array | None:
        return _column(self.table, name)


def _column(table: pa.Table, name: str) -> pa.Array | None:
    """One column as a single Arrow array (binary for string columns), None when absent."""
    if name not in table.column_names:
        return None
    col = table.column(name)
    col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type) or pa.types.is_large_binary(col.type):
        col = col.cast(pa.binary())
    return col


@dataclass
class Rows:
    """One task's rows as Python lists, for librdkafka's produce()."""

    topics: list[str]
    keys: list
    values: list
    partitions: list  # -1 where the row has none
    timestamps: list  # ms; 0 where the row has none
    headers: list
    sizes: list | pa.Array  # bytes of key + value + headers + batch overhead, per row

    def __len__(self) -> int:
        return len(self.values)


def _header_sizes(headers: pa.Array, first: int = 0) -> pa.Array:
    """Per row: each header's varint lengths (at most 10 bytes), key and value bytes; a null or
    refused header is a one-line error naming its row (counted from `first`)."""
    flat = headers.flatten()  # the headers of non-null rows, in row order
    if len(flat):
        keys = flat.field("key")
        if flat.null_count or keys.null_count:
            bad = pc.or_(pc.is_null(flat), pc.is_null(keys))
            row = pc.list_parent_indices(headers).take(pc.indices_nonzero(bad))[0].as_py()
            raise ChronologError(f"row {first + row}: a header with a null key (a header needs a string key)")
    entry = pc.add(pc.add(pc.binary_length(flat.field("key")).cast(pa.int64()),
                          pc.fill_null(pc.binary_length(flat.field("value")), 0).cast(pa.int64())), 10) \
        if len(flat) else pa.array([], pa.int64())
    running = pa.concat_arrays([pa.array([0], pa.int64()), pc.cumulative_sum(entry)]) if len(entry) \
        else pa.array([0], pa.int64())
    # flatten() drops null rows; a row's headers are [start, end) of the non-null rows' lengths
    lengths = pc.fill_null(pc.list_value_length(headers), 0).cast(pa.int64())
    ends = pc.cumulative_sum(lengths)
    starts = pc.subtract(ends, lengths)
    return pc.subtract(running.take(ends), running.take(starts))


def prepare(options: SinkOptions, batches: Iterator[pa.RecordBatch], first: int = 0) -> Columns:
    """The rows of `batches` as checked Arrow columns; a bad row is named by its number in the task
    (`first` is the number of the first row here)."""
    batches = list(batches)
    if not batches:
        return Columns(pa.table({"value": pa.array([], pa.binary())}), None, pa.array([], pa.int32()), None,
                       pa.array([], pa.int64()))
    table = pa.Table.from_batches(batches)
    table = table.rename_columns([n.lower() for n in table.column_names])  # Spark's names are case-insensitive
    n = table.num_rows
    topics = None
    if options.topic is None:
        topics = table.column("topic").combine_chunks()
        if topics.null_count:
            raise ChronologError("null topic present in the data: every row needs a topic (or give the option 'topic')")
    timestamps = None
    if "timestamp" in table.column_names:
        timestamps = pc.divide(table.column("timestamp").combine_chunks().cast(pa.int64()), 1000)
        lowest = pc.min(timestamps).as_py()
        if lowest is not None and lowest <= 0:
            raise ChronologError("a timestamp at or before 1970-01-01T00:00:00Z cannot be a record's CreateTime "
                                 "(0 means 'now' to the producer, negative means none)")
    partitions = pa.nulls(n, pa.int32())
    if "partition" in table.column_names:
        partitions = table.column("partition").combine_chunks()
        lowest = pc.min(partitions).as_py()
        if lowest is not None and lowest < 0:
            i = pc.index(partitions, lowest).as_py()
            raise ChronologError(f"row {first + i}: partition {lowest} does not exist (a null partition lets the "
                                 "producer choose)")
    sizes = pa.array([BATCH_OVERHEAD] * n, pa.int64()) if "value" not in table.column_names else None
    for name in ("value", "key"):
        if name in table.column_names:
            length = pc.fill_null(pc.binary_length(table.column(name).combine_chunks()).cast(pa.int64()), 0)
            sizes = pc.add(length, BATCH_OVERHEAD) if sizes is None else pc.add(sizes, length)
    if "headers" in table.column_names:
        sizes = pc.add(sizes, _header_sizes(table.column("headers").combine_chunks(), first))
    return Columns(table, topics, partitions, timestamps, sizes)


def _bytes_column(cols: Columns, name: str) -> list:
    col = cols.column(name)
    return [None] * len(cols) if col is None else col.to_pylist()


def collect(options: SinkOptions, batches: Iterator[pa.RecordBatch]) -> Rows:
    """The rows as Python lists (librdkafka's path)."""
    return rows_of(options, prepare(options, batches))


def rows_of(options: SinkOptions, cols: Columns) -> Rows:
    n = len(cols)
    topics = [options.topic] * n if cols.topics is None else cols.topics.to_pylist()
    timestamps = [0] * n if cols.timestamps is None else pc.fill_null(cols.timestamps, 0).to_pylist()  # 0: now
    partitions = pc.fill_null(cols.partitions, -1).to_pylist()  # -1: librdkafka's partitioner
    headers = [None] * n
    if "headers" in cols.table.column_names:
        headers = [None if h is None else [(x["key"], x["value"]) for x in h]
                   for h in cols.table.column("headers").to_pylist()]
    return Rows(topics, _bytes_column(cols, "key"), _bytes_column(cols, "value"), partitions, timestamps, headers,
                cols.sizes)


@functools.lru_cache(maxsize=64)
def _topic_facts(bootstrap: str, conf_items: tuple, topic: str) -> tuple[int, int]:
    """(partition count, max.message.bytes) of a topic; a missing topic is a clear error (the sink does not
    create topics: a mistyped name would otherwise become a new topic with the broker's defaults)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ConfigResource

    from chronolog.timetravel.client import admin_client, kafka_error_text
    # the tools' admin client: a failed SASL exchange or TLS handshake is one line at once, not a timeout
    admin = admin_client(dict(conf_items))
    try:
        md = admin.list_topics(timeout=15)  # all topics: a request for one may create it (auto.create.topics.enable)
    except KafkaException as exc:
        raise ChronologError(f"cannot reach {bootstrap}: {kafka_error_text(exc)}") from None
    t = md.topics.get(topic)
    if t is None or t.error is not None or not t.partitions:
        raise ChronologError(f"topic {topic!r} does not exist on {bootstrap}: create it first "
                             "(the chronolog sink does not create topics)")
    limit = KAFKA_DEFAULT_MAX_MESSAGE_BYTES
    try:
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        configs = admin.describe_configs([resource])[resource].result(15)
        if "max.message.bytes" in configs:
            limit = int(configs["max.message.bytes"].value)
    except KafkaException as exc:
        raise ChronologError(f"cannot read the configs of topic {topic!r}: {kafka_error_text(exc)}") from None
    return len(t.partitions), limit


def _conf_key(options: SinkOptions) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in options.producer_config().items()))


def check_rows(options: SinkOptions, rows: Rows | Columns, first: int = 0) -> int | None:
    """Every row against its topic: the topic exists, the partition is one of its partitions, the record
    fits max.message.bytes. Checked per topic over whole Arrow columns; a row is named (counted from
    `first`) only when one fails. Returns the smallest max.message.bytes of the topics written (None when
    no rows)."""
    if isinstance(rows, Rows):
        topics = None if len(set(rows.topics)) <= 1 else pa.array(rows.topics, pa.string())
        single = rows.topics[0] if rows.topics else None
        partitions = pa.array(rows.partitions, pa.int32())
        sizes = rows.sizes if isinstance(rows.sizes, pa.Array) else pa.array(rows.sizes, pa.int64())
    else:
        topics, single, partitions, sizes = rows.topics, options.topic, rows.partitions, rows.sizes
        if topics is not None and pc.count_distinct(topics).as_py() == 1:
            single, topics = topics[0].as_py(), None
    if not len(sizes):
        return None
    # librdkafka refuses a record over its message.max.bytes (default 1000000, below a topic's default
    # 1048588) when produce() is called; the native path honours the same setting
    request_limit = NativeSettings.of({k: v for k, v in options.producer.items()
                                       if k == "message.max.bytes"}).max_request
    if pc.max(sizes).as_py() > request_limit:
        i = pc.indices_nonzero(pc.greater(sizes, request_limit))[0].as_py()
        raise ChronologError(f"row {first + i}: a record of {sizes[i].as_py()} bytes (key, value, headers and batch "
                             f"overhead) is over the producer's message.max.bytes={request_limit}: nothing "
                             "of this task was written")
    smallest = None
    for topic, where in by_topic(topics, single):
        count, limit = topic_facts(options, topic)
        smallest = limit if smallest is None else min(smallest, limit)
        parts = partitions if where is None else partitions.take(where)
        size = sizes if where is None else sizes.take(where)
        highest = pc.max(parts).as_py()
        if highest is not None and highest >= count:  # a null (or -1) partition is the partitioner's
            j = pc.indices_nonzero(pc.greater_equal(parts, count))[0].as_py()
            i = j if where is None else where[j].as_py()
            raise ChronologError(f"row {first + i}: partition {parts[j].as_py()} does not exist in topic {topic!r} "
                                 f"({count} partitions)")
        if pc.max(size).as_py() > limit:
            j = pc.indices_nonzero(pc.greater(size, limit))[0].as_py()
            i = j if where is None else where[j].as_py()
            raise ChronologError(f"row {first + i}: a record of {size[j].as_py()} bytes (key, value, headers and batch "
                                 f"overhead) is over max.message.bytes={limit} of topic {topic!r}: nothing of "
                                 "this task was written")
    return smallest


def by_topic(topics: pa.Array | None, single: str | None) -> Iterator[tuple[str, pa.Array | None]]:
    """(topic, indices of its rows) per topic, in name order; None: every row."""
    if topics is None:
        yield single, None
        return
    for topic in sorted(pc.unique(topics).to_pylist()):
        yield topic, pc.indices_nonzero(pc.equal(topics, topic))


def topic_facts(options: SinkOptions, topic: str) -> tuple[int, int]:
    for name, count, limit in options.facts:
        if name == topic:
            return count, limit
    return _topic_facts(options.bootstrap, _conf_key(options), topic)
