"""How many records a topic holds over time, per time bucket and partition, from time-index lookups.

The count of records between two times in a partition is the difference of two offsets found by time
(`ListOffsets` by timestamp, `UnifiedLog.fetchOffsetByTimestamp`): the first offset with a timestamp at
or after each bucket edge. A timeline of N buckets costs N + 1 lookups per partition, not a scan.

That difference counts each record by the *running maximum* of the timestamps up to it, which is its own
timestamp when timestamps are in order. A record stored after a record of a later bucket (a late record:
a replayed or delayed line) is counted in the later bucket. From a data dir the late records are found
exactly: each segment's minimum timestamps (`LogSegment.time_minima`, chunks from the `.chronolog-minima`
sidecar) prove most of the log free of them, and only the batches whose minimum lies below the edge of
their bucket are decoded; each late record is then moved to the bucket its own timestamp names. Over the
Kafka protocol nothing cheaper than reading the records can find them, so a broker's timeline is the
time index's count and says so (`Timeline.exact` is False).
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field

from chronolog.errors import ChronologError, KafkaError
from chronolog.records import Record, RecordBatch
from chronolog.records.columns import place_late, place_late_batches
from chronolog.records.legacy import LegacyBatch
from chronolog.timetravel.arrow import first_bad_crc, proven_end

# Bucket widths a timeline picks from, so edges fall on round UTC times (multiples of the width since the
# epoch: whole seconds, minutes, hours, midnights), from a second up to a hundred 365-day years.
DAY_MS = 86_400_000
STEPS_MS = (1_000, 2_000, 5_000, 10_000, 15_000, 30_000, 60_000, 120_000, 300_000, 600_000, 900_000,
            1_800_000, 3_600_000, 7_200_000, 10_800_000, 21_600_000, 43_200_000, DAY_MS,
            2 * DAY_MS, 7 * DAY_MS, 14 * DAY_MS, 30 * DAY_MS, 365 * DAY_MS, 2 * 365 * DAY_MS, 5 * 365 * DAY_MS,
            10 * 365 * DAY_MS, 50 * 365 * DAY_MS, 100 * 365 * DAY_MS)
MAX_BUCKETS = 2_000


class TimelineRangeError(ChronologError):
    """A span or bucket width no timeline can be drawn for (the caller's input, not the log's state)."""


@dataclass
class PartitionLine:
    partition: int
    offsets: list[int]              # first offset at or after each edge (the end offset when none)
    counts: list[int]               # records per bucket: exact when `late_checked`, else by the time index
    late: list[int] = field(default_factory=list)  # per bucket: records of it stored after a later bucket's
    late_before: int = 0            # late records older than the timeline's start, stored inside it
    late_checked: bool = False      # late records were looked for (a data dir), so `counts` are exact
    start_offset: int = 0
    end_offset: int = 0


@dataclass
class Timeline:
    topic: str
    edges: list[int]                # len(buckets) + 1 epoch-ms edges; bucket i is [edges[i], edges[i+1])
    step: int
    partitions: list[PartitionLine]

    @property
    def totals(self) -> list[int]:
        return [sum(line.counts[i] for line in self.partitions) for i in range(len(self.edges) - 1)]

    @property
    def late_totals(self) -> list[int]:
        if not self.exact:
            return [0] * (len(self.edges) - 1)
        return [sum(line.late[i] for line in self.partitions) for i in range(len(self.edges) - 1)]

    @property
    def exact(self) -> bool:
        return all(line.late_checked for line in self.partitions)


def choose_step(start: int, end: int, max_buckets: int = 120) -> int:
    """The smallest round bucket width (`STEPS_MS`) that covers [start, end) in at most `max_buckets`
    buckets; the widest one when none does (never a width off the list: edges stay on round times)."""
    span = max(1, end - start)
    for step in STEPS_MS:
        if -(-span // step) <= max_buckets:
            return step
    return STEPS_MS[-1]


def bucket_edges(start: int, end: int, step: int) -> list[int]:
    """Edges on multiples of `step` (UTC) covering [start, end)."""
    if end <= start:
        raise TimelineRangeError("the timeline's end must be after its start")
    if step <= 0:
        raise TimelineRangeError("the bucket width must be positive")
    first = start - start % step
    n = -(-(end - first) // step)
    if n > MAX_BUCKETS:
        raise TimelineRangeError(f"{n} buckets of {step} ms: at most {MAX_BUCKETS}; choose a wider bucket or a "
                             "shorter span")
    return [first + i * step for i in range(n + 1)]


def build_timeline(source, topic: str, start: int, end: int, step: int | None = None, max_buckets: int = 120,
                   partitions: list[int] | None = None, check_late: bool = True) -> Timeline:
    """Records per bucket per partition of `topic` over [start, end). `source` is a `DataDirSource` (late
    records found and placed exactly unless `check_late` is False) or a `BrokerSource`."""
    step = step or choose_step(start, end, max_buckets)
    edges = bucket_edges(start, end, step)
    parts = partitions if partitions is not None else source.partitions(topic)
    lines = []
    offsets = _edge_offsets(source, topic, parts, edges)
    for p in parts:
        low, high = source.watermarks(topic, p)
        offs = offsets[p]
        line = PartitionLine(p, offs, [offs[i + 1] - offs[i] for i in range(len(edges) - 1)],
                             [0] * (len(edges) - 1), start_offset=low, end_offset=high)
        if check_late and hasattr(source, "log"):
            _place_late_records(source.log(topic, p), line, edges)
        lines.append(line)
    return Timeline(topic, edges, step, lines)


def _edge_offsets(source, topic: str, parts: list[int], edges: list[int]) -> dict[int, list[int]]:
    """Per partition, the first offset at or after each edge (the end offset where nothing is)."""
    if hasattr(source, "log"):
        out = {}
        for p in parts:
            plog = source.log(topic, p)
            end = plog.log_end_offset
            row = []
            for e in edges:
                found = plog.offset_for_timestamp(e)
                row.append(found.offset if found is not None else end)
            out[p] = row
        return out
    return _broker_edge_offsets(source, topic, parts, edges)


def _broker_edge_offsets(source, topic: str, parts: list[int], edges: list[int]) -> dict[int, list[int]]:
    """All the edges' ListOffsets requests at once (the admin client is asynchronous), then their answers;
    all asked again while a leader moves (a node died): a dead leader's non-answer is never an end offset."""
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    from chronolog.timetravel.sources import OFFSET_INVALID, NoAnswer, kafka_words

    ends = {p: source.watermarks(topic, p)[1] for p in parts}

    def ask() -> dict[int, list[int]]:
        pending = [source.admin.list_offsets({TopicPartition(topic, p): OffsetSpec.for_timestamp(e) for p in parts},
                                             request_timeout=source.timeout) for e in edges]
        out: dict[int, list[int]] = {p: [] for p in parts}
        for futures in pending:
            for tp, fut in futures.items():
                info = fut.result()
                if info.offset == OFFSET_INVALID:  # librdkafka's answer when the leader it asked never answered
                    raise NoAnswer(f"no answer for {topic}-{tp.partition} from its leader")
                out[tp.partition].append(info.offset if info.offset >= 0 else ends[tp.partition])
        return out

    try:
        out = source.retrying(ask) if hasattr(source, "retrying") else ask()
    except KafkaException as exc:
        raise ChronologError(f"offsets for time in {topic}: {kafka_words(exc)}") from None
    # A record produced between the lookups must not make a later edge's offset smaller than an earlier one.
    for p in parts:
        row = out[p]
        for i in range(1, len(row)):
            row[i] = max(row[i], row[i - 1])
    return out


def batch_low(batch) -> int | None:
    """The smallest timestamp a reader sees in `batch` (None when it holds no records)."""
    if getattr(batch, "is_control", False):
        return None
    if int(batch.timestamp_type) == 1:  # LogAppendTime: every record reads as the batch's max timestamp
        return batch.max_timestamp if batch.records_count > 0 else None
    scan = getattr(batch, "scan_timestamps", None)
    if scan is not None:
        if batch.records_count <= 0:
            return None
        return scan()[0]
    return min((r.timestamp for r in batch.records()), default=None)


def _offsets_and_stamps(batch):
    """(offset, timestamp) of each record, reading only what the time lookups read (the batch's
    `timestamp_table` walk) where it applies; other batches are decoded."""
    if _create_time_v2(batch):
        table = batch.timestamp_table()
        return zip(table.offsets, table.timestamps, strict=True)
    return ((r.offset, r.timestamp) for r in batch.records())


def _create_time_v2(batch) -> bool:
    return hasattr(batch, "timestamp_table") and int(batch.timestamp_type) == 0 and not batch.is_control


def _place_late_records(plog, line: PartitionLine, edges: list[int]) -> None:
    """Move every late record of the partition from the bucket its position gave it to the bucket of its
    own timestamp. A record at an offset in [offsets[k], offsets[k+1]) is late across a bucket edge exactly
    when its timestamp is below edges[k]; records at or after offsets[-1] are late into the timeline when
    below edges[-1]. Runs whose minimum timestamp reaches the edge of the last bucket they touch are
    skipped whole; only batches that may hold a late record are decoded, and a v2 CreateTime batch's
    records are walked in C (`records.columns.place_late`: no Python object per record), the others by
    `_place_batch`, its twin."""
    offsets = line.offsets
    first, log_end = offsets[0], plog.log_end_offset
    if first >= log_end:
        line.late_checked = True
        return
    offs, edge_arr = array("q", offsets), array("q", edges)
    counts, late = array("q", line.counts), array("q", line.late)

    def threshold(offset: int) -> int:
        return edges[bisect.bisect_right(offsets, offset) - 1]

    # Runs are read whole and placed in C when the log knows no corrupt range (else the segments' own
    # batch walk steps over them, as every reader does).
    whole_runs = not plog.corrupt_ranges()
    segments = list(plog.segments)
    for i, seg in enumerate(segments):
        seg_last = (segments[i + 1].base_offset if i + 1 < len(segments) else log_end) - 1
        if seg_last < first:
            continue
        entries = seg.time_minima()
        for j, entry in enumerate(entries):
            last = entries[j + 1].first_offset - 1 if j + 1 < len(entries) else seg_last
            if last < first or entry.min_timestamp >= threshold(min(last, log_end - 1)):
                continue
            batches = None
            if whole_runs:
                data = seg.pread(entry.position, entry.end - entry.position)
                if first_bad_crc(data) is None:
                    def rest(at: int, seg=seg, entry=entry) -> Iterator:
                        return (b for _pos, b in seg.batches_from(entry.position + at, entry.end))
                    batches = _run_batches(data, offs, edge_arr, first, log_end, counts, late, line, rest)
            for batch in batches if batches is not None else (b for _pos, b in seg.batches_from(entry.position,
                                                                                                  entry.end)):
                if batch.last_offset < first:
                    continue
                low = batch_low(batch)
                if low is None or low >= threshold(min(batch.last_offset, log_end - 1)):
                    continue
                moved = None
                if _create_time_v2(batch):
                    moved = place_late(batch.records_section(), batch.records_count, batch.base_offset,
                                       batch.base_timestamp, offs, edge_arr, first, log_end, counts, late)
                if moved is None:
                    moved = _place_batch(batch, offsets, edges, first, log_end, counts, late)
                line.late_before += moved
    line.counts, line.late = counts.tolist(), late.tolist()
    line.late_checked = True


def _run_batches(data, offs, edges, first: int, log_end: int, counts, late, line: PartitionLine,
                 rest) -> Iterator:
    """The batches of one run of a segment (bytes whose CRCs all hold): uncompressed CreateTime batches
    are placed by `place_late_batches` in C without a Python object per batch; the others (compressed,
    LogAppendTime, legacy, bytes C refuses) are yielded for the batch-by-batch path. Bytes that are not
    whole batches hand the rest of the run to the segment's own walk (`rest(position)`), which steps over
    them as every reader does."""
    view = memoryview(data)
    pos = 0
    while True:
        found = place_late_batches(view, pos, offs, edges, first, log_end, counts, late)
        if found is None:  # the extension is not built: every batch takes the batch-by-batch path
            yield from rest(pos)
            return
        pos, before, stopped = found
        line.late_before += before
        if not stopped:
            if pos < len(view):
                yield from rest(pos)
            return
        try:
            batch = RecordBatch(view, pos) if view[pos + 16] == 2 else LegacyBatch(view, pos)
        except KafkaError:
            yield from rest(pos)
            return
        yield batch
        pos += batch.size_in_bytes


def _place_batch(batch, offsets: list[int], edges: list[int], first: int, log_end: int, counts, late) -> int:
    """`place_late` record by record: the path for batches C does not walk (legacy, LogAppendTime, or
    bytes it refuses, which the record walk then reports as it always has). Returns the records moved
    to before the timeline's start."""
    n = len(edges) - 1
    before = 0
    k = bisect.bisect_right(offsets, max(batch.base_offset, first)) - 1
    for off, ts in _offsets_and_stamps(batch):
        if off < first or off >= log_end:
            continue
        while k < n and offsets[k + 1] <= off:
            k += 1
        if ts >= edges[k]:
            continue
        if k < n:
            counts[k] -= 1
        own = bisect.bisect_right(edges, ts) - 1
        if own < 0:
            before += 1
        elif own < n:
            counts[own] += 1
            late[own] += 1
    return before


# -- a window's records -----------------------------------------------------------------------------------

@dataclass
class WindowPage:
    records: list[tuple[int, Record, str]]   # (partition, record, timestamp type) in partition, offset order
    next_cursor: tuple[int, int] | None      # where the next page starts, None at the window's end
    ranges: dict[int, tuple[int, int]]       # per partition, the offsets read for the window
    scanned: int


def window_ranges(source, topic: str, t1: int, t2: int, partitions: list[int] | None = None,
                  to_log_end: bool = False) -> tuple[dict[int, tuple[int, int]], bool]:
    """Per partition, offsets [a, b) that hold every record with t1 <= timestamp < t2, and whether b is
    proven. a is the first offset at or after t1 (no record before it reaches t1). From a data dir b is
    exact: after it every record is at or after t2 (segment minima, then batches). Over a broker b is the
    first offset at or after t2, which misses late records stored after it, or the log end with
    `to_log_end`."""
    parts = partitions if partitions is not None else source.partitions(topic)
    starts = source.offsets_for_time(topic, t1, parts)
    out = {}
    if hasattr(source, "log"):
        for p in parts:
            a = starts[p]
            begin = a.offset if a.found else a.end_offset
            out[p] = (begin, max(begin, proven_end(source.log(topic, p), begin, t2)))
        return out, True
    ends = None if to_log_end else source.offsets_for_time(topic, t2, parts)
    for p in parts:
        a = starts[p]
        begin = a.offset if a.found else a.end_offset
        stop = a.end_offset if ends is None else ends[p].offset
        out[p] = (begin, max(begin, stop))
    return out, to_log_end


def window_page(source, topic: str, t1: int, t2: int, ranges: dict[int, tuple[int, int]],
                cursor: tuple[int, int] | None = None, limit: int = 100, scan_budget: int = 20_000) -> WindowPage:
    """Up to `limit` records with t1 <= timestamp < t2 from `ranges`, starting at `cursor` (partition,
    offset); reads at most `scan_budget` records, so a page never loads a whole topic."""
    out: list[tuple[int, Record]] = []
    scanned = 0
    parts = sorted(ranges)
    if cursor is not None and cursor[0] not in ranges:
        raise ChronologError(f"partition {cursor[0]} is not part of this window")
    for p in parts:
        begin, stop = ranges[p]
        if cursor is not None:
            if p < cursor[0]:
                continue
            if p == cursor[0]:
                begin = max(begin, cursor[1])
        position = begin
        if begin < stop:
            for rec, kind in _read(source, topic, p, begin, stop):
                scanned += 1
                position = rec.offset + 1
                if t1 <= rec.timestamp < t2:
                    out.append((p, rec, kind))
                if len(out) >= limit or scanned >= scan_budget:
                    more = position < stop or p != parts[-1]
                    nxt = (p, position) if position < stop else _next_part(parts, p, ranges)
                    return WindowPage(out, nxt if more else None, ranges, scanned)
    return WindowPage(out, None, ranges, scanned)


def _next_part(parts: list[int], p: int, ranges: dict[int, tuple[int, int]]) -> tuple[int, int] | None:
    later = [q for q in parts if q > p]
    return (later[0], ranges[later[0]][0]) if later else None


CREATE_TIME, LOG_APPEND_TIME = "CreateTime", "LogAppendTime"  # Kafka's TimestampType names


def _read(source, topic: str, p: int, begin: int, stop: int) -> Iterator[tuple[Record, str]]:
    """Records with begin <= offset < stop and their timestamp type (a batch attribute in the log, the
    message's timestamp type over the protocol), read lazily."""
    if hasattr(source, "log"):
        for batch in source.log(topic, p).read_batches(begin, stop):
            kind = LOG_APPEND_TIME if int(batch.timestamp_type) == 1 else CREATE_TIME
            for rec in batch.records():
                if begin <= rec.offset < stop:
                    yield rec, kind
        return
    yield from _broker_read(source, topic, p, begin, stop)


def _broker_read(source, topic: str, p: int, begin: int, stop: int) -> Iterator[tuple[Record, str]]:
    """`BrokerSource.read` keeping each message's timestamp type."""
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, KafkaError, TopicPartition

    consumer = source.consumer
    consumer.assign([TopicPartition(topic, p, begin)])
    try:
        while True:
            msg = consumer.poll(source.timeout)
            if msg is None:
                raise ChronologError(f"timed out reading {topic}-{p} at offsets [{begin}, {stop})")
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    if 0 <= msg.offset() < stop:  # a new leader's high watermark not caught up yet: poll on
                        continue
                    return
                raise ChronologError(f"reading {topic}-{p}: {msg.error().str()}")
            if msg.offset() >= stop:
                return
            kind, ts = msg.timestamp()
            headers = tuple((k, v) for k, v in (msg.headers() or []))
            yield (Record(msg.offset(), ts, msg.key(), msg.value(), headers),
                   LOG_APPEND_TIME if kind == TIMESTAMP_LOG_APPEND_TIME else CREATE_TIME)
            if msg.offset() >= stop - 1:
                return
    finally:
        consumer.unassign()
