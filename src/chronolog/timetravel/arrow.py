"""Arrow out: the records of a time window (or of offset ranges) as Arrow record batches, from a data dir
or any Kafka-protocol broker, decoded by the columnar decoder (`records.columns`) without a Python
object per record.

`read_window(source, topic, start=T1, end=T2)` gives a `pyarrow.RecordBatchReader` in the Spark source's
schema (key, value, topic, partition, offset, timestamp, timestampType[, headers]) holding exactly the
records with T1 <= timestamp < T2, late ones included, in offset order per partition, so DuckDB, Polars
and pandas read a window without a JVM. Spark's source (`spark.reading`), `chronolog sql` and the tools
use the same pieces: `data_dir_columns` (segment bytes in large reads), `broker_columns` (raw Fetch,
`timetravel.fetcher`), `to_record_batch`.

Per partition, the window's records lie at or after the first offset with timestamp >= T1 (the time
index's answer, which no late record can precede); the end is the log end unless something proves an
earlier one: in a data dir, per-segment and per-batch minimum timestamps (`proven_end`, exact for any
lateness), or a lateness bound the caller asserts (`max_lateness_ms`, as the Spark source's
`maxLatenessMs`). The decoder keeps exactly the timestamps in the window.
"""

from __future__ import annotations

import datetime
import struct
from collections import namedtuple
from collections.abc import Iterable, Iterator

from chronolog.errors import ChronologError, CorruptMessageError, InvalidRecordError
from chronolog.records.columns import ColumnDecoder, DecodedColumns, aborted_ranges

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (a raw consume does not)
if TYPE_CHECKING:
    import pyarrow as pa

ARROW_BATCH_ROWS = 8192
READ_BYTES = 4 << 20   # one pread of whole batches per step through a segment
COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers")


def arrow_schema(include_headers: bool) -> pa.Schema:
    """Spark's Kafka source schema, in Arrow types."""
    import pyarrow as pa
    fields = [pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("topic", pa.string()),
              pa.field("partition", pa.int32()), pa.field("offset", pa.int64()),
              pa.field("timestamp", pa.timestamp("us", tz="UTC")), pa.field("timestampType", pa.int32())]
    if include_headers:
        fields.append(pa.field("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))))
    return pa.schema(fields)


def to_record_batch(cols: DecodedColumns, topic: str, partition: int, schema: pa.Schema) -> pa.RecordBatch:
    """One Arrow batch in `schema` (any subset of `COLUMNS`, in any order) over the decoder's buffers;
    topic and partition are constants, timestamps become Spark's microseconds."""
    import pyarrow as pa
    import pyarrow.compute as pc
    got = cols.to_arrow()
    n = cols.rows
    arrays = []
    for f in schema:
        name = f.name
        if name == "topic":
            arrays.append(pa.repeat(pa.scalar(topic, f.type), n))
        elif name == "partition":
            arrays.append(pa.repeat(pa.scalar(partition, f.type), n))
        elif name == "timestamp":
            arrays.append(pc.multiply_checked(got["timestamp"], 1000).cast(f.type))
        elif name in got:
            arrays.append(got[name])
        else:
            raise ChronologError(f"column {name!r} was not decoded")
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _decoder(schema_names: Iterable[str], start: int, end: int, lo: int | None, hi: int | None,
             aborted=()) -> ColumnDecoder:
    names = set(schema_names)
    return ColumnDecoder(keys="key" in names, values="value" in names, headers="headers" in names, start=start,
                         end=end, ts_min=lo, ts_max=hi, aborted=aborted, max_rows=ARROW_BATCH_ROWS)


def data_dir_columns(plog, start: int, end: int, *, lo: int | None = None, hi: int | None = None,
                     names: Iterable[str] = COLUMNS, isolation: str = "read_uncommitted"
                     ) -> Iterator[DecodedColumns]:
    """Columns of the records of one partition log with start <= offset < end and lo <= timestamp <= hi
    (inclusive milliseconds), read from the segment files in large slices of whole batches
    (`PartitionLog.read`, which steps over corrupt ranges as a fetch does: `lost_offsets` says which).
    Under read_committed the read stops at the last stable offset and skips the aborted transactions of
    the `.txnindex` files, as a read_committed fetch would. A batch the decoder refuses stops the read with
    one line naming the segment file and the byte position."""
    aborted: tuple = ()
    if isolation == "read_committed":
        end = min(end, plog.last_stable_offset)
        aborted = tuple(plog.aborted_ranges(start, end)) if start < end else ()
    elif isolation != "read_uncommitted":
        raise ChronologError(f"isolation level {isolation!r}: use read_uncommitted or read_committed")
    dec = _decoder(names, start, end, lo, hi, aborted)
    offset = max(start, plog.log_start_offset)
    seen_bad: set[tuple[str, int]] = set()
    while offset < end:
        found = plog.read(offset, READ_BYTES, max_offset=end)
        if found is None:
            break
        data = found.read_bytes()
        bad = first_bad_crc(data)
        if bad is not None:
            # Offline, a batch is read only after its CRC (as a consumer's check.crcs): the storage layer's
            # own walk then records the corrupt range (or judges a torn tail) and later reads step over it.
            bad_pos, bad_base, bad_next = bad
            for _batch in plog.read_batches(bad_base, bad_next):
                pass
            data = data[:bad_pos]
        pos = 0
        dec.next_offset = -1
        while True:
            try:
                pos, full = dec.feed(data, pos, origin=f"corrupt record batch in {found.file_path}: ",
                                     base=found.position)
            except (CorruptMessageError, InvalidRecordError) as exc:
                raise CorruptMessageError(str(exc).replace("batch at position", "at byte", 1) +
                                          " (`chronolog check --data-dir` lists every damaged range)") from None
            if not full:
                break
            yield dec.take()
        if bad is not None:
            # Go on just past the bad batch's base offset: the storage layer's read steps over the range it
            # recorded. A bad batch met twice (a torn tail is not recorded) is passed by its own header.
            where = (str(found.file_path), found.position + bad_pos)
            offset = max(offset, bad_next if where in seen_bad else bad_base + 1)
            seen_bad.add(where)
            continue
        if dec.next_offset <= offset:
            break  # nothing whole in the slice (the segment shrank under us): what was read is all
        offset = dec.next_offset
    if len(dec):
        yield dec.take()


def first_bad_crc(data) -> tuple[int, int, int] | None:
    """(position, base offset, next offset) of the first whole batch in `data` whose CRC fails (CRC-32C of
    a v2 batch from its attributes, CRC-32 of a legacy message from its magic), None when all pass."""
    import zlib

    from chronolog.records.batch import crc32c
    view = memoryview(data)
    pos, n = 0, len(view)
    while n - pos >= 17:
        base, size = struct.unpack_from(">qi", view, pos)
        if size < 14 or n - pos < 12 + size:
            return None
        end = pos + 12 + size
        if view[pos + 16] == 2:
            if size < 49:
                return None
            stored, = struct.unpack_from(">I", view, pos + 17)
            ok = crc32c(view[pos + 21:end]) == stored
            nxt = base + struct.unpack_from(">i", view, pos + 23)[0] + 1
        else:
            stored, = struct.unpack_from(">I", view, pos + 12)
            ok = zlib.crc32(view[pos + 16:end]) & 0xFFFFFFFF == stored
            nxt = base + 1
        if not ok:
            return pos, base, max(nxt, base + 1)
        pos = end
    return None


def lost_offsets(plog, start: int, end: int) -> list[str]:
    """What of [start, end) a data-dir read could not return, in words: offsets below the log start
    (deleted by retention since the range was planned) and the corrupt ranges the storage layer stepped
    over (a batch failing its CRC, a segment cut short; `storage.corruption`)."""
    lost = []
    if start < plog.log_start_offset:
        lost.append(f"offsets {start}-{min(end, plog.log_start_offset) - 1} are below the log start offset "
                    f"{plog.log_start_offset} (deleted by retention)")
    for r in plog.corrupt_ranges():
        if r.first_offset <= r.last_offset and r.first_offset < end and r.last_offset >= start:
            lost.append(r.describe())
    return lost


def check_data_loss(where: str, lost: list[str], fail: bool) -> None:
    """Spark's Kafka source (`KafkaDataConsumer.get`) fails the query on a gap when `failOnDataLoss` is true
    and skips it with a warning when false; every reader of a data dir does the same."""
    if not lost:
        return
    if fail:
        raise ChronologError(f"{where}: data lost: {'; '.join(lost)}. The query fails because failOnDataLoss "
                             "is true (Spark's default); set the option failOnDataLoss=false to skip them with a "
                             "warning. `chronolog check --data-dir` lists every damaged range.")
    import logging  # not at import: `consume --format raw` starts without it

    logging.getLogger("chronolog.spark.reading").warning(
        "%s: skipping offsets that cannot be read (failOnDataLoss=false): %s", where, "; ".join(lost))


def broker_columns(fetcher, topic: str, partition: int, start: int, end: int, *, lo: int | None = None,
                   hi: int | None = None, names: Iterable[str] = COLUMNS) -> Iterator[DecodedColumns]:
    """The same columns from a broker, by raw Fetch (`timetravel.fetcher.RawFetcher`). Under
    read_committed the fetcher stops at the last stable offset and each answer's aborted transactions
    are skipped."""
    dec = _decoder(names, start, end, lo, hi)
    for answer in fetcher.batches(topic, partition, start, end, lambda: dec.next_offset):
        dec.aborted = aborted_ranges(answer.records, answer.aborted) if answer.aborted else ()
        if fetcher.isolation_level == 1 and answer.last_stable_offset >= 0:
            dec.end = min(end, answer.last_stable_offset)
        pos = 0
        dec.next_offset = -1
        while True:
            try:
                pos, full = dec.feed(answer.records, pos, origin=f"{topic}-{partition} from {fetcher.bootstrap}: ")
            except (CorruptMessageError, InvalidRecordError) as exc:
                raise CorruptMessageError(str(exc)) from None
            if not full:
                break
            yield dec.take()
        if len(dec) >= ARROW_BATCH_ROWS // 2:
            yield dec.take()
    if len(dec):
        yield dec.take()


def proven_end(plog, start: int, window_end_ms: int) -> int:
    """The smallest offset after `start` from which every record has timestamp >= window_end_ms, from
    per-segment and per-chunk minimum timestamps (the segment minima sidecars) and, inside the one chunk
    where the minimum drops, per-batch minima: the Spark planner's proof (`spark.planning`), exact for
    any lateness. The log end when nothing can be proven."""
    end = plog.log_end_offset
    suffix: int | None = None
    boundary = None
    for seg in reversed(plog.segments):
        entries = seg.time_minima()
        low = min((e.min_timestamp for e in entries), default=None)
        with_seg = suffix if low is None else (low if suffix is None else min(suffix, low))
        if seg.base_offset <= start or (with_seg is not None and with_seg < window_end_ms):
            boundary = (seg, entries)
            break
        suffix = with_seg
        end = seg.base_offset
    if boundary is None:
        return end
    seg, entries = boundary
    for entry in reversed(entries):
        with_entry = entry.min_timestamp if suffix is None else min(suffix, entry.min_timestamp)
        if entry.first_offset > start and with_entry >= window_end_ms:
            suffix, end = with_entry, entry.first_offset
            continue
        if entry.batches != 1:
            for base, low in seg.batch_minima(entry.position, entry.end):
                if base <= start:
                    break
                suffix = low if suffix is None else min(suffix, low)
                if suffix < window_end_ms:
                    break
                end = base
        break
    return end


def _millis(value) -> int | None:
    if value is None:
        return None
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return int(value.timestamp() * 1000)
    if isinstance(value, int):
        return value
    from chronolog.timetravel.timefmt import parse_time
    return parse_time(str(value))


class PartitionRange(namedtuple("PartitionRange", "partition start end")):
    """Offsets start <= offset < end of a partition. A namedtuple, not a dataclass: `consume --format raw`
    starts without dataclasses or typing."""

    __slots__ = ()


def _is_data_dir(source) -> bool:
    from pathlib import Path  # here, not at import: `consume --format raw` starts without pathlib
    return isinstance(source, Path) or (isinstance(source, str) and ("://" in source or Path(source).is_dir()))


def read_window(source, topic: str, start=None, end=None, *, partitions: Iterable[int] | None = None,
                include_headers: bool = False, columns: Iterable[str] | None = None,
                max_lateness_ms: int | None = None, isolation_level: str = "read_uncommitted",
                fail_on_data_loss: bool = True, timeout: float = 30.0,
                client_conf: dict | None = None) -> pa.RecordBatchReader:
    """The records of `topic` with start <= timestamp < end (epoch ms, a datetime, or text such as
    '2024-06-14T15:00:00Z' or '2h ago'; None: unbounded) as Arrow batches in the Spark source's schema,
    from a data dir (a path or URI) or a broker ('host:port,...'). `columns` picks a subset (a
    `count(*)` need not copy values); `isolation_level` 'read_committed' skips aborted transactions and
    stops at the last stable offset. In a data dir, offsets that cannot be read (corrupt, or deleted since
    the window was planned) fail the read, or are skipped with a warning with `fail_on_data_loss=False`,
    as Spark's source does with `failOnDataLoss`. `client_conf`: librdkafka client configs for a broker
    (TLS, SASL ... as the tools' -X takes them); when the raw fetcher cannot honour one, the window is
    read by a librdkafka consumer instead, with one log line saying why. Errors (no such topic,
    unreachable broker) are raised here, before the reader is returned."""
    import pyarrow as pa
    lo, hi_excl = _millis(start), _millis(end)
    if lo is not None and hi_excl is not None and hi_excl <= lo:
        raise ChronologError("the window's end must be after its start")
    hi = None if hi_excl is None else hi_excl - 1
    if isolation_level not in ("read_uncommitted", "read_committed"):
        raise ChronologError("isolation_level is 'read_uncommitted' or 'read_committed'")
    full = arrow_schema(include_headers)
    names = list(columns) if columns is not None else full.names
    unknown = [c for c in names if c not in full.names]
    if unknown:
        raise ChronologError(f"unknown column(s) {', '.join(unknown)}; the columns are {', '.join(full.names)}")
    schema = pa.schema([full.field(c) for c in names])
    if _is_data_dir(source):
        if client_conf:
            raise ChronologError("client configs go with a broker, not a data dir")
        return _data_dir_reader(source, topic, lo, hi, partitions, schema, max_lateness_ms, isolation_level,
                                fail_on_data_loss)
    from chronolog.timetravel.fetcher import unsupported_options
    conf = {k: str(v) for k, v in (client_conf or {}).items() if k not in _HARMLESS}
    if unsupported_options(conf):
        return _consumer_reader(str(source), client_conf, topic, lo, hi, partitions, schema, max_lateness_ms,
                                isolation_level, timeout)
    return _broker_reader(str(source), topic, lo, hi, partitions, schema, max_lateness_ms, isolation_level, timeout)


def _data_dir_reader(path, topic, lo, hi, partitions, schema, max_lateness_ms, isolation,
                     fail_on_data_loss) -> pa.RecordBatchReader:
    import pyarrow as pa

    from chronolog.timetravel.opener import open_data_dir
    src = open_data_dir(path if isinstance(path, str) else str(path))
    try:
        parts = list(partitions) if partitions is not None else src.partitions(topic)
        ranges = []
        for p in parts:
            plog = src.log(topic, p)
            first, last = plog.log_start_offset, plog.log_end_offset
            if lo is not None:
                found = plog.offset_for_timestamp(lo)
                if found is None:
                    continue
                first = max(first, found.offset)
            if hi is not None:
                if max_lateness_ms is not None:
                    found = plog.offset_for_timestamp(hi + 1 + max_lateness_ms)
                    if found is not None:
                        last = min(last, found.offset)
                last = min(last, proven_end(plog, first, hi + 1))
            if first < last:
                ranges.append(PartitionRange(p, first, last))
    except BaseException:
        src.close()
        raise

    def batches() -> Iterator[pa.RecordBatch]:
        try:
            for r in ranges:
                plog = src.log(topic, r.partition)
                for cols in data_dir_columns(plog, r.start, r.end, lo=lo, hi=hi, names=schema.names,
                                             isolation=isolation):
                    yield to_record_batch(cols, topic, r.partition, schema)
                check_data_loss(f"{topic}-{r.partition} in {src.where}", lost_offsets(plog, r.start, r.end),
                                fail_on_data_loss)
        finally:
            src.close()

    return pa.RecordBatchReader.from_batches(schema, batches())


def _broker_reader(bootstrap, topic, lo, hi, partitions, schema, max_lateness_ms, isolation_level,
                   timeout) -> pa.RecordBatchReader:
    import pyarrow as pa

    from chronolog.timetravel.fetcher import RawFetcher
    from chronolog.timetravel.sources import BrokerSource

    fetcher = RawFetcher(bootstrap, timeout=timeout, isolation_level=1 if isolation_level == "read_committed" else 0)
    try:
        known = fetcher.partitions(topic)  # first, and without creating the topic on brokers that would
    except BaseException:
        fetcher.close()
        raise
    parts = list(partitions) if partitions is not None else known
    src = BrokerSource(bootstrap, timeout=min(timeout, 15.0))
    try:
        ranges = _broker_ranges(src, topic, lo, hi, parts, max_lateness_ms)
    except BaseException:
        fetcher.close()
        raise
    finally:
        src.close()

    def batches() -> Iterator[pa.RecordBatch]:
        try:
            for r in ranges:
                for cols in broker_columns(fetcher, topic, r.partition, r.start, r.end, lo=lo, hi=hi,
                                           names=schema.names):
                    yield to_record_batch(cols, topic, r.partition, schema)
        finally:
            fetcher.close()

    return pa.RecordBatchReader.from_batches(schema, batches())


def _broker_ranges(src, topic: str, lo: int | None, hi: int | None, parts: list[int],
                   max_lateness_ms: int | None) -> list[PartitionRange]:
    """Per partition, from the first offset at or after the window's start (ListOffsets by time) to the
    log end, or to the first offset at or after end + the asserted lateness."""
    ranges = []
    starts = src.offsets_for_time(topic, lo, parts) if lo is not None else {}
    ends = src.offsets_for_time(topic, hi + 1 + max_lateness_ms, parts) \
        if hi is not None and max_lateness_ms is not None else {}
    for p in parts:
        low, high = src.watermarks(topic, p)
        first, last = low, high
        if lo is not None:
            if not starts[p].found:
                continue
            first = max(first, starts[p].offset)
        if p in ends and ends[p].found:
            last = min(last, ends[p].offset)
        if first < last:
            ranges.append(PartitionRange(p, first, last))
    return ranges


def _consumer_reader(bootstrap, client_conf, topic, lo, hi, partitions, schema, max_lateness_ms, isolation_level,
                     timeout) -> pa.RecordBatchReader:
    """`read_window` through librdkafka, for client configs the raw fetcher cannot honour (TLS, SASL ...):
    planned with the tools' client (`timetravel.client.ClientSource`), read by a consumer per partition,
    Arrow columns filled per record (the fallback's cost)."""
    import pyarrow as pa

    from chronolog.timetravel.client import ClientSource
    from chronolog.timetravel.fetcher import unsupported_options
    conf = {k: str(v) for k, v in client_conf.items() if k not in _HARMLESS}
    import logging

    logging.getLogger("chronolog.timetravel.arrow").info(
        "reading %s through librdkafka: raw Fetch cannot honour %s", topic, ", ".join(unsupported_options(conf)))
    src = ClientSource(bootstrap, client_conf, timeout=min(timeout, 15.0))
    try:
        parts = list(partitions) if partitions is not None else src.partitions(topic)
        ranges = _broker_ranges(src, topic, lo, hi, parts, max_lateness_ms)
    finally:
        src.close()
    consumer_conf = {k: v for k, v in client_conf.items() if k != "logger"}

    def batches() -> Iterator[pa.RecordBatch]:
        for r in ranges:
            rows = consumer_records(bootstrap, consumer_conf, topic, r.partition, r.start, r.end,
                                    isolation_level, timeout)
            yield from record_batches(rows, topic, r.partition, schema, lo, hi)

    return pa.RecordBatchReader.from_batches(schema, batches())


def consumer_records(bootstrap: str, conf: dict, topic: str, partition: int, start: int, end: int,
                     isolation_level: str = "read_uncommitted", timeout: float = 30.0
                     ) -> Iterator[tuple[int, int, bytes | None, bytes | None, int, tuple]]:
    """(offset, timestamp ms, key, value, timestamp type 0/1, headers) for offsets in [start, end), by a
    librdkafka consumer given `conf` (TLS, SASL ...): the reader for what raw Fetch cannot do."""
    from confluent_kafka import Consumer, TopicPartition

    from chronolog.timetravel.sources import poll_range

    consumer = Consumer({**conf, "bootstrap.servers": bootstrap, "group.id": conf.get("group.id", "chronolog-reader"),
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": isolation_level})
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        for msg in poll_range(consumer, topic, partition, end, timeout,
                              f"no data from {bootstrap} for {topic}-{partition} in {timeout:g} s"):
            kind, ts = msg.timestamp()
            yield msg.offset(), ts, msg.key(), msg.value(), int(kind == 2), tuple(msg.headers() or ())
    finally:
        consumer.close()


def record_batches(rows: Iterable[tuple], topic: str, partition: int, schema: pa.Schema, lo: int | None,
                   hi: int | None) -> Iterator[pa.RecordBatch]:
    """Arrow batches in `schema` from `consumer_records` rows with lo <= timestamp <= hi (inclusive ms),
    columns filled per record."""
    import pyarrow as pa
    names = set(schema.names)
    cols: dict[str, list] = {n: [] for n in ("offset", "timestamp", "key", "value", "timestampType", "headers")}

    def flush() -> pa.RecordBatch:
        n = len(cols["offset"])
        arrays = []
        for f in schema:
            if f.name == "topic":
                arrays.append(pa.repeat(pa.scalar(topic, f.type), n))
            elif f.name == "partition":
                arrays.append(pa.repeat(pa.scalar(partition, f.type), n))
            elif f.name == "timestamp":
                arrays.append(pa.array([t * 1000 for t in cols["timestamp"]], pa.int64()).cast(f.type))
            else:
                arrays.append(pa.array(cols[f.name], f.type))
        for column in cols.values():
            column.clear()
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    for offset, ts, key, value, kind, hdrs in rows:
        if (lo is not None and ts < lo) or (hi is not None and ts > hi):
            continue
        cols["offset"].append(offset)
        cols["timestamp"].append(ts)
        cols["key"].append(key)
        cols["value"].append(value)
        cols["timestampType"].append(kind)
        if "headers" in names:
            cols["headers"].append([{"key": k, "value": v} for k, v in hdrs])
        if len(cols["offset"]) >= ARROW_BATCH_ROWS:
            yield flush()
    if cols["offset"]:
        yield flush()


_HARMLESS = frozenset({"logger", "socket.connection.setup.timeout.ms", "bootstrap.servers"})  # the tools' defaults


def _raw_fetchable(source) -> str | None:
    """The bootstrap servers of a broker source the raw fetcher can read as configured, else None."""
    from chronolog.timetravel.fetcher import unsupported_options
    bootstrap = getattr(source, "bootstrap", None)
    if not isinstance(bootstrap, str):
        return None
    conf = {k: str(v) for k, v in (getattr(source, "conf", None) or {}).items() if k not in _HARMLESS}
    return None if unsupported_options(conf) else bootstrap


def _is_log_source(source) -> bool:
    return hasattr(source, "log") and hasattr(source, "partitions")


def raw_fetcher_for(source, isolation: str = "read_uncommitted"):
    """A `RawFetcher` for a broker source that the raw fetcher can read as configured, else None (a data
    dir; TLS or SASL configs, which only librdkafka honours)."""
    from chronolog.protocol import fetch_client as fc
    bootstrap = None if _is_log_source(source) else _raw_fetchable(source)
    if bootstrap is None:
        return None
    from chronolog.timetravel.fetcher import RawFetcher
    # answers of 1 MiB, decoded while still in the CPU's cache (a third less CPU than 8 MiB), with the next
    # one under way meanwhile (a third less wall time on a busy machine: bench/bench_consume.py)
    fetcher = RawFetcher(bootstrap, max_bytes=1 << 20, isolation_level=fc.READ_COMMITTED
                         if isolation == "read_committed" else fc.READ_UNCOMMITTED)
    fetcher.prefetch = True
    return fetcher


def window_columns(source, topic: str, partition: int, start: int, end: int, lo: int | None = None,
                   hi_excl: int | None = None, *, isolation: str = "read_uncommitted",
                   names: Iterable[str] = ("key", "value", "headers"), fetcher=None) -> Iterator[DecodedColumns] | None:
    """The records of one partition with start <= offset < end and lo <= timestamp < hi_excl as columns
    (`DecodedColumns`, in offset order), from a data dir or a broker the raw fetcher can reach as
    configured; None for a source that only hands out records (TLS or SASL: librdkafka reads it).
    `fetcher`: the caller's `raw_fetcher_for(source, isolation)`, reused across partitions; else one is
    made for this partition and closed after it. Needs no pyarrow."""
    hi = None if hi_excl is None else hi_excl - 1
    if _is_log_source(source):
        return data_dir_columns(source.log(topic, partition), start, end, lo=lo, hi=hi, names=names,
                                isolation=isolation)
    if fetcher is not None:
        return broker_columns(fetcher, topic, partition, start, end, lo=lo, hi=hi, names=names)
    made = raw_fetcher_for(source, isolation)
    if made is None:
        return None
    return _closing(broker_columns(made, topic, partition, start, end, lo=lo, hi=hi, names=names), made)


def window_records(source, topic: str, partition: int, start: int, end: int, lo: int | None = None,
                   hi_excl: int | None = None, *, isolation: str = "read_uncommitted") -> Iterator:
    """`source.read(topic, partition, start, end, isolation=...)` restricted to lo <= timestamp < hi_excl,
    decoded by the columnar decoder where `window_columns` can (a data dir, or a broker the raw fetcher can
    reach as configured): what the tools that print records one by one walk. Other sources read as before,
    filtered here. Needs no pyarrow."""
    columns = window_columns(source, topic, partition, start, end, lo, hi_excl, isolation=isolation)
    if columns is None:
        hi = None if hi_excl is None else hi_excl - 1
        for rec in source.read(topic, partition, start, end, isolation=isolation):
            if (lo is None or rec.timestamp >= lo) and (hi is None or rec.timestamp <= hi):
                yield rec
        return
    for cols in columns:
        yield from cols.records()


def _closing(items: Iterator, resource) -> Iterator:
    try:
        yield from items
    finally:
        resource.close()
