"""The `chronolog` sink: `df.write` / `df.writeStream.format("chronolog")` into any Kafka-protocol broker.

Spark's Kafka sink columns and options (KafkaWriter.validateQuery, KafkaSourceProvider): `value` (binary or
string, required), `key`, `topic`, `partition` (int), `headers` (array<struct<key: string, value: binary>>);
the `topic` option overrides the `topic` column; `kafka.bootstrap.servers` and the other `kafka.*` options are
producer settings (librdkafka's names). Beyond Spark's sink: a `timestamp` column (timestamp) is written as the
record's CreateTime, so a window read from one topic and written to another keeps its event times.

Atomicity: a task checks every row of its Spark partition (types, nulls, topic existence, size against the
topic's `max.message.bytes`) before it sends any, so a bad row fails the query with a one-line message and
nothing of that task is written; rows of tasks that already finished stay written, as in Spark's sink.

Two producers (option `producer`: auto, native, librdkafka): chronolog's own Produce requests with record
batches encoded from the Arrow columns (`native_writer`; the default where it honours every `kafka.*`
setting: several times faster than a Python call per row), else librdkafka's produce() per row (any other
setting, TLS/SASL, and the transactions of exactlyOnce). Both check a task's rows before sending any.

Delivery: at-least-once by default, as Spark's sink. With `exactlyOnce=true` every task writes inside a
Kafka transaction (KIP-98) whose transactional id is fixed per query and Spark partition
(`<prefix>-<partition id>`, prefix `kafka.transactional.id` or `chronolog-sink-<query id>`); the same
transaction commits, as a group offset of the group named by that id, the number of the micro-batch it
wrote. A task of a micro-batch that Spark runs again after a restart first fences the earlier attempt
(InitProducerId aborts its open transaction), then finds the batch already committed and writes nothing.
So a read_committed consumer sees every row once, provided the query is deterministic (the same rows in
the same Spark partition when a micro-batch is run again: true of a source that replays offset ranges,
such as `chronolog` or `kafka`, without a shuffle whose order differs between runs).
"""

from __future__ import annotations

import functools
import random
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructType,
    TimestampType,
)

from chronolog.errors import ChronologError
from chronolog.records import encode
from chronolog.spark.native_writer import NativeSettings, keep_producer, native_producer, unsupported_settings

# Spark's Kafka sink refuses these (KafkaSourceProvider.validateGeneralOptions / kafkaParamsForProducer):
# keys and values are bytes, and the sink owns the serializers.
REFUSED = {"key.serializer": "keys are written as bytes (binary or UTF-8 string column)",
           "value.serializer": "values are written as bytes (binary or UTF-8 string column)"}
# RecordBatch v2 overhead over key + value + headers for a batch of one record (DefaultRecordBatch
# RECORD_BATCH_OVERHEAD 61 + the record's varint lengths, at most ~21 bytes): a value that passes this
# check with the largest overhead fits max.message.bytes alone in a batch.
BATCH_OVERHEAD = 61 + 21
PATHS = ("auto", "native", "librdkafka")
KAFKA_DEFAULT_MAX_MESSAGE_BYTES = 1048588  # LogConfig DEFAULT_MAX_MESSAGE_BYTES
DELIVERY_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class SinkOptions:
    bootstrap: str
    topic: str | None
    producer: dict[str, str] = field(default_factory=dict)
    exactly_once: bool = False
    transactional_prefix: str | None = None
    path: str = "auto"  # the `producer` option: auto, native or librdkafka
    # (topic, partition count, max.message.bytes) looked up once on the driver for the `topic` option, so
    # tasks do not each ask the broker (a Python worker keeps what it looked up for the query's life anyway)
    facts: tuple[tuple[str, int, int], ...] = ()

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> SinkOptions:
        opts = {k.lower(): (k, v) for k, v in raw.items()}
        if "path" in opts:
            raise ChronologError("the chronolog sink writes through a broker: give kafka.bootstrap.servers, not path")
        bootstrap = opts.get("kafka.bootstrap.servers", (None, None))[1]
        if not bootstrap:
            raise ChronologError("option kafka.bootstrap.servers is required to write")
        producer: dict[str, str] = {}
        for low, (_name, value) in opts.items():
            if low.startswith("kafka.") and low != "kafka.bootstrap.servers":
                key = low[len("kafka."):]
                if key in REFUSED:
                    raise ChronologError(f"option kafka.{key} is not supported: {REFUSED[key]}")
                producer[key] = value
        # the Java client's names Spark's Kafka sink users give (a PLAIN/SCRAM `sasl.jaas.config`), in
        # librdkafka's words, as the source translates them
        from chronolog.timetravel.client import from_java
        producer = from_java(producer)
        exactly = opts.get("exactlyonce", (None, "false"))[1].strip().lower()
        if exactly not in ("true", "false"):
            raise ChronologError(f"option exactlyOnce takes true or false, got {exactly!r}")
        prefix = producer.pop("transactional.id", None)
        if prefix is not None and exactly != "true":
            raise ChronologError("option kafka.transactional.id is the prefix of the sink's transactional ids: "
                                 "it needs exactlyOnce=true")
        path = opts.get("producer", (None, "auto"))[1].strip().lower()
        if path not in PATHS:
            raise ChronologError(f"option producer takes {', '.join(PATHS)}, got {path!r}")
        if path == "native":
            refused = unsupported_settings(producer)
            if exactly == "true":
                raise ChronologError("option producer=native: exactlyOnce writes through librdkafka's transactions")
            if refused:
                raise ChronologError(f"option producer=native cannot honour kafka.{', kafka.'.join(refused)}: "
                                     "leave producer unset (librdkafka then writes) or drop them")
        known = {"kafka.bootstrap.servers", "topic", "exactlyonce", "producer", "checkpointlocation"}  # the last is Spark's
        unknown = sorted(name for low, (name, _v) in opts.items() if low not in known and not low.startswith("kafka."))
        if unknown:
            raise ChronologError(f"option {', '.join(unknown)}: not a sink option (topic, kafka.*, exactlyOnce)")
        topic = opts.get("topic", (None, None))[1] or None
        if exactly == "true" and topic is None:
            raise ChronologError("exactlyOnce=true needs the option 'topic' (the batch markers are kept against it)")
        return cls(bootstrap=bootstrap, topic=topic, producer=producer, exactly_once=exactly == "true",
                   transactional_prefix=prefix, path=path)

    def producer_config(self) -> dict:
        return {"bootstrap.servers": self.bootstrap, **self.producer}


def check_schema(schema: StructType, options: SinkOptions) -> None:
    """KafkaWriter.validateQuery's rules (plus `timestamp`), on the driver before any task runs."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in fields:
        raise ChronologError("required attribute 'value' not found: the sink writes the column 'value'")

    def expect(name: str, ok: bool, wanted: str) -> None:
        if name in fields and not ok:
            raise ChronologError(f"{name} attribute type must be {wanted}, got {fields[name].simpleString()}")

    expect("value", isinstance(fields.get("value"), StringType | BinaryType), "a string or binary")
    expect("key", isinstance(fields.get("key"), StringType | BinaryType), "a string or binary")
    expect("topic", isinstance(fields.get("topic"), StringType), "a string")
    expect("partition", isinstance(fields.get("partition"), IntegerType), "an int")
    expect("timestamp", isinstance(fields.get("timestamp"), TimestampType), "a timestamp")
    headers = fields.get("headers")
    ok = (isinstance(headers, ArrayType) and isinstance(headers.elementType, StructType)
          and [(f.name, type(f.dataType)) for f in headers.elementType.fields]
          == [("key", StringType), ("value", BinaryType)])
    expect("headers", ok, "array<struct<key: string, value: binary>>")
    if options.topic is None and "topic" not in fields:
        raise ChronologError("topic option required when no 'topic' attribute is present in the data")


def check_config(options: SinkOptions) -> None:
    """librdkafka refuses an unknown or malformed setting when the producer is made: make one on the
    driver so a bad kafka.* option is one line before any task starts."""
    from confluent_kafka import KafkaException, Producer

    from chronolog.timetravel.client import kafka_error_text
    try:
        Producer(options.producer_config())
    except (KafkaException, ValueError, TypeError) as exc:
        raise ChronologError(f"kafka.* producer option: {kafka_error_text(exc)}") from None


@dataclass
class SinkCommit(WriterCommitMessage):
    rows: int
    skipped: bool = False  # a micro-batch this task had already committed (exactlyOnce)
    path: str = "librdkafka"  # or "native": chronolog's own Produce requests


class ChronologWriter(DataSourceArrowWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        return write_partition(self.options, iterator, batch_id=None)


class ChronologStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        from pyspark import TaskContext
        ctx = TaskContext.get()
        raw = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None  # StreamExecution.BATCH_ID_KEY
        return write_partition(self.options, iterator, batch_id=int(raw) if raw is not None else None)

    def commit(self, messages, batchId: int) -> None:
        """Each task committed its own transaction (or flushed); nothing is left for the driver."""

    def abort(self, messages, batchId: int) -> None:
        """An open transaction of a failed task is aborted when the batch runs again (InitProducerId with
        the same transactional id) or by the coordinator after transaction.timeout.ms."""


def make_writer(raw: Mapping[str, str], schema: StructType, overwrite: bool, streaming: bool):
    if overwrite:
        # KafkaSourceProvider.createRelation: only Append and ErrorIfExists for a topic.
        raise ChronologError("save mode overwrite is not allowed for chronolog: use append")
    options = SinkOptions.parse(raw)
    check_schema(schema, options)
    check_config(options)
    if native_path(options):
        NativeSettings.of(options.producer)  # a bad value is one line here, before any task
    if options.topic is not None:  # a missing topic is then one line before any task starts
        options = replace(options, facts=((options.topic, *_topic_facts(options.bootstrap, _conf_key(options),
                                                                         options.topic)),))
    if options.exactly_once and not streaming and options.transactional_prefix is None:
        # a batch job has no query id: one prefix per job, chosen here on the driver, so two jobs writing
        # at once do not fence each other's tasks
        options = replace(options, transactional_prefix=f"chronolog-sink-{uuid.uuid4()}")
    return ChronologStreamWriter(options) if streaming else ChronologWriter(options)


# -- one task -----------------------------------------------------------------------------------------

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
    for topic, where in _by_topic(topics, single):
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


def _by_topic(topics: pa.Array | None, single: str | None) -> Iterator[tuple[str, pa.Array | None]]:
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


def _send(producer, rows: Rows) -> None:
    """produce(topic, value, key, partition, callback, on_delivery, timestamp, headers) by position (no
    per-row dict): -1 lets the partitioner choose, a timestamp of 0 is the producer's clock; delivery
    errors come to the producer's on_delivery (errors only)."""
    produce, poll = producer.produce, producer.poll
    for topic, value, key, part, ts, hdrs in zip(rows.topics, rows.values, rows.keys, rows.partitions,
                                                 rows.timestamps, rows.headers, strict=True):
        try:
            produce(topic, value, key, part, None, None, ts, hdrs)
        except BufferError:  # the local queue is full: serve delivery reports, then retry once there is room
            while True:
                poll(0.05)
                try:
                    produce(topic, value, key, part, None, None, ts, hdrs)
                    break
                except BufferError:
                    continue


def _producer(options: SinkOptions, failures: list, limit: int | None, **more):
    from confluent_kafka import Producer

    def report(err, _msg):
        if err is not None:
            failures.append(err)

    # delivery.report.only.error: reports cost a Python call per record; only failures need one here.
    # batch.size at most the topics' max.message.bytes: librdkafka does not split a batch the broker
    # refuses as too large (the Java producer does), so small records batched past a small limit would fail.
    defaults = {"linger.ms": 5, "delivery.report.only.error": True, "queue.buffering.max.messages": 1_000_000}
    if limit is not None:
        defaults["batch.size"] = max(1, min(1_000_000, limit - BATCH_OVERHEAD))
    return Producer({**defaults, **options.producer_config(), "on_delivery": report, **more})


def _raise_failures(failures: list) -> None:
    if failures:
        raise ChronologError(f"write failed: {failures[0].str() if hasattr(failures[0], 'str') else failures[0]} "
                             f"({len(failures)} record(s) not delivered)")


def write_partition(options: SinkOptions, batches: Iterator[pa.RecordBatch], batch_id: int | None) -> SinkCommit:
    if not options.exactly_once and native_path(options):
        return _write_native(options, batches)
    cols = prepare(options, batches)
    limit = check_rows(options, cols)
    if options.exactly_once:
        return _write_transactional(options, rows_of(options, cols), batch_id, limit)
    if not len(cols):
        return SinkCommit(0)
    rows = rows_of(options, cols)
    failures: list = []
    producer = _producer(options, failures, limit)
    _send(producer, rows)
    left = producer.flush(DELIVERY_TIMEOUT_S)
    _raise_failures(failures)
    if left:
        raise ChronologError(f"write failed: {left} record(s) not delivered within {DELIVERY_TIMEOUT_S:.0f}s")
    return SinkCommit(len(rows))


def native_path(options: SinkOptions) -> bool:
    """Whether this task writes through chronolog's own Produce requests (see `native_writer`)."""
    if options.exactly_once or options.path == "librdkafka":
        return False
    if not encode.AVAILABLE:
        if options.path == "native":
            raise ChronologError("option producer=native: chronolog was installed without its C extensions")
        return False
    return options.path == "native" or not unsupported_settings(options.producer)


def _encode(columns: tuple, where: pa.Array | None, now_ms: int, max_bytes: int, codec: int) -> list[bytes]:
    """The v2 batches of the rows at `where` (all rows when None), in its order, encoded from the
    columns (key, value, timestamps, headers) where they are: no copy of a partition's rows first."""
    key, value, ts, headers = columns
    return encode.arrow_batches(key, value, ts, headers, now_ms, max_bytes, codec, index=where)


# The native path checks and encodes a task's rows a piece at a time while Spark is still sending the next
# Arrow batches (its JVM side reads and converts them meanwhile); a piece is at least this many bytes of
# Arrow buffers, so record batches stay large. Nothing is sent before the last piece passed its checks.
PIECE_BYTES = 8 << 20


def _pieces(batches: Iterator[pa.RecordBatch], size: int) -> Iterator[list[pa.RecordBatch]]:
    piece: list[pa.RecordBatch] = []
    held = 0
    for batch in batches:
        piece.append(batch)
        held += batch.nbytes
        if held >= size:
            yield piece
            piece, held = [], 0
    if piece:
        yield piece


def _write_native(options: SinkOptions, batches: Iterator[pa.RecordBatch]) -> SinkCommit:
    """Check and encode the rows piece by piece as Spark hands them over (`PIECE_BYTES`), then send every
    batch: a bad row anywhere in the task fails it before anything of it is sent. Each partition's
    batches keep the rows' order."""
    settings = NativeSettings.of(options.producer)
    now_ms = int(time.time() * 1000)
    out: dict[tuple[str, int], list[bytes]] = {}
    keyless: dict[str, int] = {}
    rows = 0
    for piece in _pieces(batches, PIECE_BYTES):
        cols = prepare(options, iter(piece), rows)
        check_rows(options, cols, rows)
        _encode_native(options, cols, settings, now_ms, keyless, out)
        rows += len(cols)
    if not rows:
        return SinkCommit(0)
    producer = native_producer(options.bootstrap, settings)
    try:
        producer.send(out)
    except BaseException:
        producer.close()  # not kept: its connections may be in any state
        raise
    keep_producer(producer)
    return SinkCommit(rows, path="native")


def _encode_native(options: SinkOptions, cols: Columns, settings: NativeSettings, now_ms: int,
                   keyless: dict[str, int], batches: dict[tuple[str, int], list[bytes]]) -> None:
    """Group the rows by (topic, partition), keeping their order, encode each group's batches from the
    Arrow buffers and add them to `batches`. A row without a partition goes where librdkafka's default
    partitioner (consistent_random) puts it: CRC-32 of its key, or for a null or empty key one partition
    chosen at random per task and topic (`keyless`; librdkafka's sticky partitioning for keyless records)."""
    topics, single = cols.topics, options.topic
    if topics is not None and pc.count_distinct(topics).as_py() == 1:
        single, topics = topics[0].as_py(), None
    columns = (cols.column("key"), cols.column("value"), cols.timestamps, cols.column("headers"))
    for topic, where in _by_topic(topics, single):
        count, limit = topic_facts(options, topic)
        parts = cols.partitions if where is None else cols.partitions.take(where)
        if parts.null_count:
            keys = columns[0]
            if keys is not None and where is not None:
                keys = keys.take(where)
            if keys is None:
                keyed = pa.nulls(len(parts), pa.int32())
            else:
                keyed = pa.Array.from_buffers(pa.int32(), len(keys), [None, pa.py_buffer(
                    encode.key_partitions(keys, count))])
                keyed = pc.if_else(pc.equal(keyed, -1), pa.scalar(None, pa.int32()), keyed)
            if topic not in keyless:
                keyless[topic] = random.randrange(count)
            parts = pc.coalesce(parts, keyed, pa.scalar(keyless[topic], pa.int32()))
        max_bytes = min(settings.batch_size, settings.max_request, limit)
        for p in sorted(pc.unique(parts).to_pylist()):
            mine = None if where is None and pc.count_distinct(parts).as_py() == 1 else \
                pc.indices_nonzero(pc.equal(parts, p))
            if where is not None:
                mine = where if mine is None else where.take(mine)
            batches.setdefault((topic, p), []).extend(_encode(columns, mine, now_ms, max_bytes, settings.codec))


def transactional_id(options: SinkOptions, partition_id: int, query_id: str | None) -> str:
    prefix = options.transactional_prefix or f"chronolog-sink-{query_id or 'batch'}"
    return f"{prefix}-{partition_id}"


def _write_transactional(options: SinkOptions, rows: Rows, batch_id: int | None, limit: int | None) -> SinkCommit:
    """One transaction per task: the rows and, for a micro-batch, the marker `batch_id + 1` committed as
    the offset of (topic option, partition 0) for the group named by the transactional id."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    from pyspark import TaskContext

    from chronolog.timetravel.client import kafka_error_text
    ctx = TaskContext.get()
    partition_id = ctx.partitionId() if ctx is not None else 0
    query_id = ctx.getLocalProperty("sql.streaming.queryId") if ctx is not None else None  # StreamExecution.QUERY_ID_KEY
    if batch_id is not None and query_id is None and options.transactional_prefix is None:
        raise ChronologError("exactlyOnce: Spark gave this task no query id; set kafka.transactional.id (a prefix "
                             "unique to this query)")
    txn_id = transactional_id(options, partition_id, query_id)
    failures: list = []
    try:
        producer = _producer(options, failures, limit, **{"transactional.id": txn_id})
        producer.init_transactions(60)  # fences an earlier attempt and aborts its open transaction
        marker = TopicPartition(options.topic, 0)
        group = None
        if batch_id is not None:
            # the producer's settings carry the connection's (security.protocol, sasl.*, ssl.*); librdkafka
            # only warns about the producer-only ones
            group = Consumer({**options.producer_config(), "group.id": txn_id,
                              "isolation.level": "read_committed", "enable.auto.commit": False})
            done = group.committed([marker], timeout=30)[0].offset
            if done > batch_id:  # this task's rows of this micro-batch are already committed
                group.close()
                return SinkCommit(0, skipped=True)
        producer.begin_transaction()
        _send(producer, rows)
        producer.flush(DELIVERY_TIMEOUT_S)
        if failures:
            producer.abort_transaction(60)
            _raise_failures(failures)
        if group is not None:
            producer.send_offsets_to_transaction([TopicPartition(options.topic, 0, batch_id + 1)],
                                                 group.consumer_group_metadata(), 60)
            group.close()
        producer.commit_transaction(60)
    except KafkaException as exc:
        raise ChronologError(f"transactional write ({txn_id}): {kafka_error_text(exc)}") from None
    return SinkCommit(len(rows))
