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

Options and the driver's checks are `sink_options`; the checks of a task's rows `sink_rows`; this module
writes.

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

import random
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from chronolog.errors import ChronologError
from chronolog.records import encode
from chronolog.spark.failures import one_line
from chronolog.spark.native_writer import NativeSettings, keep_producer, native_producer, unsupported_settings
from chronolog.spark.sink_options import SinkOptions, check_config, check_schema
from chronolog.spark.sink_rows import (
    BATCH_OVERHEAD,
    Columns,
    Rows,
    by_topic,
    check_rows,
    prepare,
    rows_of,
    topic_facts,
)

DELIVERY_TIMEOUT_S = 120.0


@dataclass
class SinkCommit(WriterCommitMessage):
    rows: int
    skipped: bool = False  # a micro-batch this task had already committed (exactlyOnce)
    path: str = "librdkafka"  # or "native": chronolog's own Produce requests


class ChronologWriter(DataSourceArrowWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    @one_line
    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        return write_partition(self.options, iterator, batch_id=None)


class ChronologStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    @one_line
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
        options = replace(options, facts=((options.topic, *topic_facts(options, options.topic)),))
    if options.exactly_once and not streaming and options.transactional_prefix is None:
        # a batch job has no query id: one prefix per job, chosen here on the driver, so two jobs writing
        # at once do not fence each other's tasks
        options = replace(options, transactional_prefix=f"chronolog-sink-{uuid.uuid4()}")
    return ChronologStreamWriter(options) if streaming else ChronologWriter(options)


# -- one task -----------------------------------------------------------------------------------------

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
    for topic, where in by_topic(topics, single):
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
