"""Lookups by time (Kafka's `UnifiedLog.fetchOffsetByTimestamp` and `LogSegment.findOffsetByTimestamp`'s
log scan): the first segment whose largest timestamp reaches a target, then, inside it, a walk over v2
batch headers (`HeaderReader`, which fetch's header walk shares) that reads only the batch that can hold
the answer, through a cache of per-batch timestamp tables (`TimeTableCache`). The caches belong to the
owner of the logs (`LogCaches`): one per log manager, one for logs opened on their own."""

from __future__ import annotations

import bisect
import itertools
import struct
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from chronolog.records import HEADER_SIZE, LOG_OVERHEAD, LegacyBatch, RecordBatch
from chronolog.records.batch import HEADER as BATCH_HEADER
from chronolog.records.batch import TIMESTAMP_TYPE_MASK, TimestampTable
from chronolog.storage.basics import LEADER_EPOCH, FoundTimestamp
from chronolog.storage.minima import STANDALONE_READER_MINIMA, ReaderMinimaCache

if TYPE_CHECKING:
    from chronolog.storage.log import PartitionLog
    from chronolog.storage.segment import LogSegment

_LOG_TOKENS = itertools.count()


# -- in the log -----------------------------------------------------------------------------------------
def _tables_key(plog: PartitionLog) -> tuple[int, int]:
    """This log's bytes as its caches' per-batch timestamp tables know them: a token of this object
    and the segment version, which every truncation, deletion and roll bumps."""
    token = getattr(plog, "_time_tables_token", None)
    if token is None:
        token = plog._time_tables_token = next(_LOG_TOKENS)
    return token, plog._segments_version


def first_segment_reaching(plog: PartitionLog, timestamp: int) -> LogSegment | None:
    """First segment whose largest timestamp is >= target (Kafka's linear `find`), found by bisecting
    the running maximum of the inactive segments' largest timestamps, cached until they change."""
    segments = plog.segments  # all but the last are inactive (not copied: this runs for every lookup)
    key = plog._segments_version
    if getattr(plog, "_prefix_key", None) != key:
        prefix, running = [], -1
        for seg in segments[:-1]:
            if seg.max_timestamp_so_far >= 0:
                running = max(running, seg.largest_timestamp)
            prefix.append(running)
        plog._prefix, plog._prefix_key = prefix, key
    i = bisect.bisect_left(plog._prefix, timestamp)
    if i < len(segments) - 1:
        return segments[i]
    active = segments[-1]
    if active.max_timestamp_so_far >= 0 and active.largest_timestamp >= timestamp:
        return active
    return None


def max_timestamp_entry(plog: PartitionLog) -> FoundTimestamp | None:
    """ListOffsets -3 (KIP-734): the first record carrying the largest timestamp (`UnifiedLog`)."""
    best = None
    for seg in plog.segments:
        if seg.max_timestamp_so_far >= 0 and (best is None or seg.max_timestamp_so_far > best.max_timestamp_so_far):
            best = seg
    if best is None:
        # No record has a timestamp: UnifiedLog's maxBy(maxTimestampSoFar) takes the first segment (its
        # max is -1), whose first batch of max timestamp -1 answers its first record, timestamp -1; an
        # empty log has no batch, so no answer (-1/-1).
        for seg in plog.segments:
            found = seg.find_offset_by_timestamp(-1)
            if found is not None:
                return found
        return None
    target = best.max_timestamp_so_far
    # from the segment's start, not the log start offset: Kafka answers the record holding the max timestamp
    # even when DeleteRecords has moved the log start past it
    found = best.find_offset_by_timestamp(target, tables=plog.caches.time_tables, key=_tables_key(plog))
    return found if found is not None else FoundTimestamp(target, best.offset_of_max_timestamp_so_far,
                                                          LEADER_EPOCH)


def find_offset(plog: PartitionLog, timestamp: int) -> FoundTimestamp | None:
    """The first record with timestamp >= target (not a special), in the first segment whose largest
    timestamp reaches it; None when none does."""
    seg = first_segment_reaching(plog, timestamp)
    if seg is None:
        return None
    tables = plog.caches.time_tables
    found = seg.find_offset_by_timestamp(timestamp, plog.log_start_offset, tables=tables, key=_tables_key(plog))
    if found is None:
        # A read-only copy's time index may name a batch that fails its CRC (recovery would have
        # dropped it from the index), and on a compacted topic the segment's largest timestamp may
        # be an empty batch's, whose records the cleaner removed: the answer is then in a later
        # segment (Kafka answers none there).
        for later in plog.segments[plog.segments.index(seg) + 1:]:
            if later.max_timestamp_so_far >= timestamp:
                found = later.find_offset_by_timestamp(timestamp, plog.log_start_offset, tables=tables,
                                                       key=_tables_key(plog))
                if found is not None:
                    break
    return found


# -- in a segment ---------------------------------------------------------------------------------------
def find_in_segment(seg: LogSegment, timestamp: int, starting_offset: int = 0, *,
                    tables: TimeTableCache | None = None, key: tuple = ()) -> FoundTimestamp | None:
    """First record with timestamp >= target and offset >= starting_offset
    (`LogSegment.findOffsetByTimestamp`: time index floor, offset index position, then a log scan).
    With `tables`, batches are walked by their headers and only the one that can hold the answer is
    read, through the cache of per-batch timestamp tables; `key` names this log version there."""
    floor = seg.time_index.lookup(timestamp)
    position = seg.offset_index.lookup(max(floor.offset, starting_offset)).position
    if tables is not None and not seg.corrupt_ranges:
        found = _find_by_headers(seg, timestamp, starting_offset, position, tables, key)
        if found is not False:
            return found
    for _pos, batch in seg.batches_from(position):
        if batch.max_timestamp >= timestamp and batch.last_offset >= starting_offset:
            if isinstance(batch, LegacyBatch):
                for rec in batch.records():
                    if rec.timestamp >= timestamp and rec.offset >= starting_offset:
                        return FoundTimestamp(rec.timestamp, rec.offset, batch.partition_leader_epoch)
                continue
            found = batch.first_at_or_after(timestamp, starting_offset)
            if found is not None:
                return FoundTimestamp(found[1], found[0], batch.partition_leader_epoch)
    return None


def _find_by_headers(seg: LogSegment, timestamp: int, starting_offset: int, position: int, tables: TimeTableCache,
                     key: tuple) -> FoundTimestamp | None | bool:
    """`find_offset_by_timestamp` over v2 headers; False sends the caller to the batch-parsing loop."""
    headers = HeaderReader(seg)
    pos = position  # (nothing is read yet: the first header is read here, later ones skipped over in the buffer)
    while True:
        h = headers.header(pos)
        if not h:
            return h
        # (the header's fields by position: this runs for every batch a lookup meets)
        size = LOG_OVERHEAD + h[1]  # batchLength
        if h[8] >= timestamp and h[0] + h[6] >= starting_offset:  # maxTimestamp; baseOffset + lastOffsetDelta
            if not seg.writable and not seg._crc_ok(pos, headers.batch(pos, size)):
                return False  # the parsing loop records the corrupt range and steps over it
            found = tables.first_at_or_after((*key, seg.base_offset, pos), h,
                                             lambda p=pos, n=size: headers.batch(p, n), timestamp,
                                             starting_offset)
            if found is not None:
                return FoundTimestamp(found[1], found[0], h[2])  # partitionLeaderEpoch
        pos = headers.skip_below(pos + size, timestamp, starting_offset)


# baseOffset, batchLength, magic, lastOffsetDelta, maxTimestamp of a v2 batch header.
_WALK_FIELDS = struct.Struct(">qi4xb6xi8xq")


_HEADER_FIRST_READ = 4096  # one header of a big batch costs a small read


class HeaderReader:
    """The 61-byte header of the v2 batch at a position, from chunked reads of the headers only. None at
    the end of the data (or a torn tail of the last segment); False for anything a batch-parsing reader
    must look at (legacy messages, bad sizes or magic, truncation mid-file)."""

    __slots__ = ("_seg", "_end", "_buf", "_buf_pos", "_chunk")

    def __init__(self, seg: LogSegment) -> None:
        self._seg = seg
        self._end = seg.size
        self._buf = b""
        self._buf_pos = 0
        self._chunk = _HEADER_FIRST_READ  # many small batches: reads grow

    @property
    def end(self) -> int:
        """The segment's size when this reader began: nothing past it is read."""
        return self._end

    def header(self, pos: int) -> tuple | None | bool:
        """`RecordBatch` header fields (baseOffset, batchLength, leaderEpoch, magic, crc, attributes,
        lastOffsetDelta, baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, count)."""
        if pos >= self._end:
            return None
        rel = pos - self._buf_pos
        if rel < 0 or rel + HEADER_SIZE > len(self._buf):
            # Reads grow while the walk goes on within reach of the next, larger read (a walk over many
            # batches); a jump further than that (to an index entry, as a fetch inside a checked span makes)
            # starts again with one small read instead of a 64 KiB one.
            if rel < 0 or rel > len(self._buf) + self._chunk:
                self._chunk = _HEADER_FIRST_READ
            self._buf = self._seg.pread(pos, min(self._chunk, self._end - pos))
            self._chunk = min(self._chunk * 4, 64 << 10)
            self._buf_pos, rel = pos, 0
            if len(self._buf) < HEADER_SIZE:
                return None if self._seg.is_last else False
        h = BATCH_HEADER.unpack_from(self._buf, rel)
        if h[3] != 2 or h[1] < HEADER_SIZE - 12 or h[6] < 0:
            return False
        if pos + 12 + h[1] > self._end:
            return None if self._seg.is_last else False
        return h

    def skip_below(self, pos: int, timestamp: int, min_offset: int) -> int:
        """The first position from `pos` whose batch may hold a record at or after both bounds, walking
        only the headers already read (five fields each, the checks of `header`); where the buffer ends
        or a header looks wrong it stops, and `header` there gives the verdict."""
        buf, end = self._buf, self._end
        rel = pos - self._buf_pos
        limit = len(buf) - HEADER_SIZE
        while pos < end and 0 <= rel <= limit:
            base, length, magic, delta, max_ts = _WALK_FIELDS.unpack_from(buf, rel)
            if (magic != 2 or length < HEADER_SIZE - 12 or delta < 0 or pos + 12 + length > end
                    or (max_ts >= timestamp and base + delta >= min_offset)):
                break
            pos += 12 + length
            rel += 12 + length
        return pos

    def batch(self, pos: int, size: int) -> RecordBatch:
        """The batch at `pos`, from the headers' buffer when it holds all of it, else read."""
        rel = pos - self._buf_pos
        if 0 <= rel and rel + size <= len(self._buf):
            return RecordBatch(self._buf, rel)
        return RecordBatch(self._seg.pread(pos, size))

    def at(self, pos: int) -> tuple[int, int, int] | None | bool:
        """(size, base offset, last offset), or None / False as `header`."""
        h = self.header(pos)
        if not h:
            return h
        return 12 + h[1], h[0], h[0] + h[6]


class TimeTableCache:
    """Lookups by time inside big batches (a librdkafka batch holds thousands of records): the first
    lookup in a batch scans it, stopping at the answer; a second builds the batch's `TimestampTable`
    and keeps it here, so later lookups bisect instead of scanning. Bounded by records held (about 24
    bytes each), least recently used first out. Keys name a batch position in one version of one
    log; entries also check base offset, CRC and length, so a table never answers for other bytes."""

    MIN_RECORDS = 64  # smaller batches scan faster than they bisect

    def __init__(self, max_records: int = 1_000_000, max_seen: int = 4096) -> None:
        self.max_records = max_records
        self.max_seen = max_seen
        self._tables: OrderedDict[tuple, tuple[tuple[int, int, int], TimestampTable]] = OrderedDict()
        self._seen: OrderedDict[tuple, None] = OrderedDict()
        self._records = 0
        self._lock = threading.Lock()

    def first_at_or_after(self, key: tuple, header: tuple, load, target: int,
                          min_offset: int) -> tuple[int, int] | None:
        """`RecordBatch.first_at_or_after` for the batch with this header; `load()` reads the batch."""
        if header[12] < self.MIN_RECORDS or header[5] & TIMESTAMP_TYPE_MASK:  # recordsCount, attributes
            return load().first_at_or_after(target, min_offset)
        ident = (header[0], header[4], header[1])  # baseOffset, crc, batchLength
        with self._lock:
            entry = self._tables.get(key)
            if entry is not None and entry[0] == ident:
                self._tables.move_to_end(key)
                return entry[1].first_at_or_after(target, min_offset)
            seen = key in self._seen
            if not seen:
                self._seen[key] = None
                if len(self._seen) > self.max_seen:
                    self._seen.popitem(last=False)
        batch = load()
        if not seen:
            return batch.first_at_or_after(target, min_offset)
        table = batch.timestamp_table()
        with self._lock:
            old = self._tables.pop(key, None)
            if old is not None:
                self._records -= len(old[1])
            self._tables[key] = (ident, table)
            self._records += len(table)
            while self._records > self.max_records and len(self._tables) > 1:
                _key, (_ident, dropped) = self._tables.popitem(last=False)
                self._records -= len(dropped)
        return table.first_at_or_after(target, min_offset)

    def clear(self) -> None:
        with self._lock:
            self._tables.clear()
            self._seen.clear()
            self._records = 0



@dataclass(frozen=True)
class LogCaches:
    """The caches the logs of one owner share: a log manager's (one broker's) logs, or the logs opened on
    their own in a process (`STANDALONE`: tools and time-travel readers)."""

    time_tables: TimeTableCache
    reader_minima: ReaderMinimaCache

    @classmethod
    def new(cls) -> LogCaches:
        return cls(TimeTableCache(), ReaderMinimaCache())


STANDALONE = LogCaches(TimeTableCache(), STANDALONE_READER_MINIMA)
