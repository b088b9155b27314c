"""RecordBatch v2 (magic 2): a zero-copy view for reading and the one cursor over a batch's records.
Building batches is `records.batch_builder`'s; patching headers in place `records.batch_patch`'s.

Layout (`DefaultRecordBatch`): baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 |
magic int8 | crc uint32 | attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 |
maxTimestamp int64 | producerId int64 | producerEpoch int16 | baseSequence int32 | recordsCount int32 |
records. The CRC-32C covers attributes to the end, so base offset and leader epoch can be patched without
touching it, while max timestamp and attributes need it recomputed — never a recompression.
"""

from __future__ import annotations

import bisect
import struct
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum

from chronolog.errors import CorruptMessageError, InvalidRecordError
from chronolog.native import load_native
from chronolog.records.compression import DEFAULT_MAX_DECOMPRESSED, CompressionType, decompress
from chronolog.records.varint import read_raw_varint as _raw_varint
from chronolog.records.varint import read_varint

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35
PARTITION_LEADER_EPOCH_OFFSET = 12
NO_TIMESTAMP = -1

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40  # KIP-534: the base timestamp holds the delete horizon set by the log cleaner


class TimestampType(IntEnum):
    NO_TIMESTAMP = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass(frozen=True, slots=True)
class SimpleRecord:
    """A record to build; its offset is its position in the batch."""

    timestamp: int
    key: bytes | None = None
    value: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()


_crc32c_impl = None


def crc32c(data) -> int:
    # The crc32c package is imported on the first checksum, not at import: its own import reads every
    # installed distribution's metadata (about 15 ms), a tenth of a broker's start (issue "fast start").
    impl = _crc32c_impl
    if impl is None:
        impl = _load_crc32c()
    return impl(data)


def _load_crc32c():
    global _crc32c_impl
    from crc32c import crc32c as impl

    _crc32c_impl = impl
    return impl


class RecordBatch:
    """A view of one v2 batch at `position` in `buffer`; header fields are read without copying."""

    __slots__ = ("_buf", "_pos", "_h")

    magic = 2

    def __init__(self, buffer, position: int = 0) -> None:
        buf = buffer if isinstance(buffer, memoryview) else memoryview(buffer)
        if len(buf) - position < HEADER_SIZE:
            raise CorruptMessageError("record batch shorter than its header")
        self._buf = buf
        self._pos = position
        self._h = HEADER.unpack_from(buf, position)
        if self._h[3] != 2:
            raise CorruptMessageError(f"not a v2 batch (magic {self._h[3]})")
        if self._h[1] < HEADER_SIZE - LOG_OVERHEAD or len(buf) - position < LOG_OVERHEAD + self._h[1]:
            raise CorruptMessageError(f"batch length {self._h[1]} does not fit the buffer")

    # header fields
    base_offset = property(lambda self: self._h[0])
    batch_length = property(lambda self: self._h[1])
    partition_leader_epoch = property(lambda self: self._h[2])
    crc = property(lambda self: self._h[4])
    attributes = property(lambda self: self._h[5])
    last_offset_delta = property(lambda self: self._h[6])
    first_timestamp = property(lambda self: self._h[7])
    base_timestamp = first_timestamp
    max_timestamp = property(lambda self: self._h[8])
    producer_id = property(lambda self: self._h[9])
    producer_epoch = property(lambda self: self._h[10])
    base_sequence = property(lambda self: self._h[11])
    records_count = property(lambda self: self._h[12])

    @property
    def size_in_bytes(self) -> int:
        return LOG_OVERHEAD + self._h[1]

    @property
    def last_offset(self) -> int:
        return self._h[0] + self._h[6]

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> CompressionType:
        try:
            return CompressionType(self._h[5] & COMPRESSION_MASK)
        except ValueError:
            raise CorruptMessageError(f"unknown compression codec {self._h[5] & COMPRESSION_MASK}") from None

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType.LOG_APPEND_TIME if self._h[5] & TIMESTAMP_TYPE_MASK else TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self._h[5] & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self._h[5] & CONTROL_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        """The delete horizon the log cleaner stored in the base timestamp (KIP-534,
        `DefaultRecordBatch.deleteHorizonMs`), or None when the flag is not set."""
        return self._h[7] if self._h[5] & DELETE_HORIZON_MASK else None

    @property
    def raw(self) -> memoryview:
        return self._buf[self._pos:self._pos + self.size_in_bytes]

    @property
    def position(self) -> int:
        return self._pos

    def compute_crc(self) -> int:
        return crc32c(self._buf[self._pos + ATTRIBUTES_OFFSET:self._pos + self.size_in_bytes])

    def verify_crc(self) -> bool:
        return self.compute_crc() == self.crc

    def validate(self) -> None:
        """Kafka's `DefaultRecordBatch.ensureValid`: sane sizes and a matching CRC."""
        if self.size_in_bytes < HEADER_SIZE:
            raise CorruptMessageError(f"batch size {self.size_in_bytes} is smaller than the header")
        if not self.verify_crc():
            raise CorruptMessageError(f"batch at offset {self.base_offset}: CRC mismatch "
                                      f"(stored {self.crc}, computed {self.compute_crc()})")
        if self.records_count < 0 or self.last_offset_delta < 0:
            raise InvalidRecordError(f"batch at offset {self.base_offset}: negative record count or delta")

    def records(self, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> Iterator[Record]:
        """Decode the records, decompressing if needed. Under LogAppendTime every record's timestamp is
        the batch's max timestamp (`DefaultRecordBatch` / KIP-32)."""
        body = self._buf[self._pos + HEADER_SIZE:self._pos + self.size_in_bytes]
        codec = self.compression
        # One copy into `bytes` up front: slicing and indexing bytes is cheaper than going through the
        # memoryview once per field, and every key and value becomes its own bytes object anyway.
        body = decompress(codec, body, max_decompressed) if codec != CompressionType.NONE else bytes(body)
        log_append = bool(self._h[5] & TIMESTAMP_TYPE_MASK)
        base_offset, base_ts, max_ts = self._h[0], self._h[7], self._h[8]
        for spans in record_cursor(body, self.records_count):
            for _start, end, ts_delta, off_delta, pos in spans:
                klen, pos = read_varint(body, pos, True)
                if klen >= 0:
                    key = body[pos:pos + klen]
                    pos += klen
                else:
                    key = None
                vlen, pos = read_varint(body, pos, True)
                if vlen >= 0:
                    value = body[pos:pos + vlen]
                    pos += vlen
                else:
                    value = None
                hcount, pos = read_varint(body, pos, True)
                if hcount < 0 or hcount > end - pos:
                    raise InvalidRecordError("invalid header count")
                headers = []
                for _h in range(hcount):
                    hklen, pos = read_varint(body, pos, True)
                    if hklen < 0 or pos + hklen > end:
                        raise InvalidRecordError("invalid header key length")
                    hkey = body[pos:pos + hklen].decode("utf-8", "replace")
                    pos += hklen
                    hvlen, pos = read_varint(body, pos, True)
                    if hvlen >= 0:
                        hval = body[pos:pos + hvlen]
                        pos += hvlen
                    else:
                        hval = None
                    headers.append((hkey, hval))
                if pos != end:
                    raise InvalidRecordError("record length does not match its fields")
                yield Record(base_offset + off_delta, max_ts if log_append else base_ts + ts_delta, key, value,
                             tuple(headers))

    def records_section(self, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> bytes | memoryview:
        """The records' bytes after the header, decompressed if needed (a view when uncompressed)."""
        return self._body(max_decompressed)

    def _body(self, max_decompressed: int) -> bytes | memoryview:
        """The records section, decompressed if needed; uncompressed it stays a view (no copy: indexing
        it costs the same as indexing bytes)."""
        body = self._buf[self._pos + HEADER_SIZE:self._pos + self._h[1] + LOG_OVERHEAD]
        if self._h[5] & COMPRESSION_MASK:
            return decompress(self.compression, body, max_decompressed)
        return body

    def scan_timestamps(self, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> tuple[int, int, int]:
        """(min timestamp, max timestamp, records) reading only each record's length, timestamp delta and
        offset delta and checking that its key, value and headers fill it — what append validation needs
        (`LogValidator` looks at every record), without building records. Raises on offset deltas that are
        not 0..n-1 or lengths that lie."""
        body = self._body(max_decompressed)
        count = self._h[12]
        if _native_scan is not None:
            found = _native_scan(body, count)
            if found is not None:  # None (rejected, or a delta beyond 64 bits): the Python walk below answers
                base_ts = self._h[7]
                return base_ts + found[0], base_ts + found[1], count
        if count == 0:  # an append needs a record; readers take an empty batch
            raise InvalidRecordError(f"batch claims 0 records in {len(body)} bytes")
        lo, hi = _walk(body, count, 0, 0, True, None)
        base_ts = self._h[7]
        return base_ts + lo, base_ts + hi, count

    def timestamp_table(self, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> TimestampTable:
        """Every record's offset and timestamp plus their running maximum, for answering many lookups by
        time in this batch with a bisection (`TimestampTable.first_at_or_after`)."""
        if self._h[5] & TIMESTAMP_TYPE_MASK:
            raise ValueError("LogAppendTime batches need no table: every record has the max timestamp")
        body = self._body(max_decompressed)
        base_ts, base_off = self._h[7], self._h[0]
        offsets, stamps, running = array("q"), array("q"), array("q")
        top = None
        for spans in record_cursor(body, self._h[12], exact=False):
            for _start, _end, t, o, _p in spans:
                if o is None:
                    raise InvalidRecordError("record runs past the end of the batch")
                t += base_ts
                offsets.append(base_off + o)
                stamps.append(t)
                if top is None or t > top:
                    top = t
                running.append(top)
        return TimestampTable(offsets, stamps, running)

    def first_at_or_after(self, target: int, min_offset: int = 0,
                          max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= target and offset >= min_offset,
        reading only lengths, timestamp deltas and offset deltas (the lookup-by-time inner loop), and
        stopping at the first record that qualifies (the first one, often: a target at or before the
        batch's first timestamp needs no loop at all)."""
        if self._h[8] < target:
            return None
        base_off = self._h[0]
        if self._h[5] & TIMESTAMP_TYPE_MASK:  # LogAppendTime: every record has the max timestamp
            return (max(base_off, min_offset), self._h[8]) if self.last_offset >= min_offset else None
        body = self._body(max_decompressed)
        base_ts = self._h[7]
        if _native_first is not None and -(1 << 63) <= target < 1 << 63 and -(1 << 63) <= min_offset < 1 << 63:
            found = _native_first(body, self._h[12], base_off, base_ts, target, min_offset)
            if found is not None:  # None: bytes C does not walk; the loop below answers (and raises)
                return found or None  # (): no record qualifies
        # Not `exact`: the C walk answers on reaching a qualifying record, before checking its length. A run
        # of the walk ends at the first record at or after the target: only its last record can qualify.
        for spans in record_cursor(body, self._h[12], exact=False, until=target - base_ts):
            if spans and base_ts + spans[-1][2] >= target:
                _start, _end, t, o, _p = spans[-1]
                if o is None:
                    raise InvalidRecordError("record runs past the end of the batch")
                if base_off + o >= min_offset:
                    return base_off + o, base_ts + t
        return None

    def __iter__(self) -> Iterator[Record]:
        return self.records()

    def __repr__(self) -> str:
        return (f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
                f"count={self.records_count}, max_timestamp={self.max_timestamp}, "
                f"compression={self.compression.name}, size={self.size_in_bytes})")


# The C walk (`_walk.c`): the Python walk's (min, max) for every body Python accepts, None for every body it
# rejects (Python then raises the precise error), False for the one valid case C cannot hold (a timestamp
# delta beyond 64 bits).
_native_scan = load_native("chronolog.records._walk", "scan_timestamps")
# The lookup by time's inner loop in C (records/_columns.c), for the time index's many lookups.
_native_first = load_native("chronolog.records._columns", "first_at_or_after")
NATIVE_WALK = _native_scan is not None


def scan_batch_timestamps(buf, header: tuple) -> tuple[int, int, int]:
    """`RecordBatch(buf).scan_timestamps()` for one whole v2 batch `buf` (a memoryview of exactly its
    bytes) whose `header` (`HEADER.unpack_from(buf, 0)`) the caller has checked: the append path's
    shortcut to the C walk, without building the view. Anything but a clean answer from C takes the
    method, which gives the same answer or raises the Python walk's error."""
    if _native_scan is not None and not header[5] & COMPRESSION_MASK:
        found = _native_scan(buf[HEADER_SIZE:], header[12])
        if found is not None:
            base_ts = header[7]
            return base_ts + found[0], base_ts + found[1], header[12]
    return RecordBatch(buf).scan_timestamps()


_NEVER = float("inf")
_CHUNK = 1024  # records a cursor walks ahead of its consumer at most (a bound on the spans it holds)


def record_cursor(body, count: int, exact: bool = True,
                  until: float = _NEVER) -> Iterator[list[tuple[int, int, int, int | None, int]]]:
    """The walk over a records section's varints for readers, a run of records at a time (a list each, so
    that a reader's loop costs no generator switch per record): for each of `count` records, (start, end,
    timestamp delta, offset delta, key position): `start` where its length varint begins, `end` one past its
    last byte, the key's length varint just after the offset delta. Lengths and offset deltas are int
    varints, the timestamp delta a long (`DefaultRecord.readFrom`).

    `exact` (readers): the count must fit the section, a record's length is checked before it is yielded and
    the records must fill the section. Not `exact` (the lookup by time, as its C twin in `_columns.c` walks):
    a length is checked only when stepping over its record, bytes after the last record are not looked at,
    and an offset delta that runs past the section is yielded as None. `until`: a run ends at the first
    record with a timestamp delta >= `until`, so that a reader that stops there gets nothing walked past it.
    Bad bytes raise InvalidRecordError once the records before them are yielded, as a per-record walk would."""
    first = pos = 0
    while True:
        spans: list = []
        try:
            first, pos = _walk(body, count, first, pos, exact, spans, until)
        except InvalidRecordError as exc:
            error = exc
        else:
            error = None
        yield spans
        if error is not None:
            raise error
        if first >= count:
            return


def _walk(body, count: int, first: int, pos: int, exact: bool, spans: list | None,
          until: float = _NEVER) -> tuple[int, int]:
    """The one loop over a records section's varints, from record `first` at byte `pos`. With `spans`
    (`record_cursor`, whose docstring says what `exact` checks), appends each record's span and stops after
    `_CHUNK` records or after the first one whose timestamp delta is >= `until`: returns (next record, its
    position). Without (append validation, `scan_timestamps`), `exact` too, also checks that offset deltas are
    0..n-1 and that each record's key, value and headers fill it exactly, and returns the smallest and
    largest timestamp delta. One loop for both, with no generator and no call per record: it is the append
    path's per-record cost without the C walk (a generator and a call per record cost 9-15% of an append of
    1 MB batches). One- and two-byte varints (lengths under 8 KiB, deltas under 8192) are decoded inline, the
    same few lines for each field: a `_raw_varint` call instead takes 65% more instructions on 1 MB batches."""
    n = len(body)
    if first == 0 and exact and (count < 0 or count > n):  # each record takes at least 7 bytes
        raise InvalidRecordError(f"batch claims {count} records in {n} bytes")
    stop = first + _CHUNK
    if spans is None or stop > count:
        stop = count
    lo = hi = 0
    try:
        for i in range(first, stop):
            b = body[pos]  # the length; `pos` stays where it begins
            if b < 0x80:
                h = pos + 1
            else:
                c = body[pos + 1]
                if c < 0x80:
                    b = (b & 0x7F) | (c << 7)
                    h = pos + 2
                else:
                    b, h = _raw_varint(body, pos, True)
            end = h + ((b >> 1) ^ -(b & 1))
            if end > n or end < h + 3:  # attributes, timestamp delta and offset delta take 3 at least
                if exact:
                    raise InvalidRecordError("record length runs past the batch")
                until = -_NEVER  # not `exact`: its span goes out first, then the walk stops (as the C lookup)
            t = body[h + 1]  # after the attributes byte
            if t < 0x80:
                p = h + 2
            else:
                c = body[h + 2]
                if c < 0x80:
                    t = (t & 0x7F) | (c << 7)
                    p = h + 3
                else:
                    t, p = _raw_varint(body, h + 1)
            t = (t >> 1) ^ -(t & 1)
            try:
                o = body[p]  # zigzag-encoded until the check below
                if o < 0x80:
                    p += 1
                else:
                    c = body[p + 1]
                    if c < 0x80:
                        o = (o & 0x7F) | (c << 7)
                        p += 2
                    else:
                        o, p = _raw_varint(body, p, True)
            except (IndexError, InvalidRecordError):
                if exact:
                    raise
                o = None  # the C lookup reads it only for a record at or after its target
            if spans is not None:
                spans.append((pos, end, t, o if o is None else (o >> 1) ^ -(o & 1), p))
                if t >= until:
                    if end > n or end < h + 3:
                        raise InvalidRecordError("record length runs past the batch")
                    pos, stop = end, i + 1
                    break
            else:
                if o != 2 * i:  # offset delta i, zigzag-encoded
                    raise InvalidRecordError(f"record {i} has offset delta {(o >> 1) ^ -(o & 1)}")
                # The common record inline: key and value lengths of one byte (under 64 bytes, or null) or a
                # two-byte value length (under 8 KiB), then no headers; anything else takes `_fields_end`.
                k = body[p]
                q = -1
                if k < 0x80:
                    q = p + 1 + (k >> 1 if not k & 1 else 0)
                    v = body[q]
                    if v < 0x80:
                        q += 1 + (v >> 1 if not v & 1 else 0)
                    else:
                        c = body[q + 1]
                        q = q + 2 + (((v & 0x7F) | (c << 7)) >> 1) if c < 0x80 and not v & 1 else -1
                if (q != end - 1 or body[q] != 0) and _fields_end(body, p, end) != end:
                    raise InvalidRecordError(f"record {i}: key, value and headers do not fill its {end - h} bytes")
                if i == 0:
                    lo = hi = t
                elif t < lo:
                    lo = t
                elif t > hi:
                    hi = t
            pos = end
    except IndexError:
        raise InvalidRecordError("record runs past the end of the batch") from None
    if exact and stop == count and pos != n:
        raise InvalidRecordError("bytes left after the last record of the batch")
    return (stop, pos) if spans is not None else (lo, hi)


def _fields_end(body, p: int, end: int) -> int:
    """Where a record's key, value and headers starting at `p` end; the caller compares it with the
    record's stated end. Kafka's `LogValidator` reads every record (`DefaultRecord.readPartiallyFrom`
    for compressed batches): a CRC computed over lying lengths must not get a batch into the log that
    no consumer can decode."""
    i, todo = 0, 2  # fields to step over: the key and the value (0, 1); after the header count, each
    # header's key and value (3 and 4, 5 and 6, ...)
    while True:
        while i < todo:  # a length (negative: null, refused for a header key) and the bytes
            b = body[p]
            if b < 0x80:
                p += 1
            else:
                b, p = _raw_varint(body, p, True)
            if not b & 1:
                p += b >> 1
            elif i > 2 and i & 1:
                raise InvalidRecordError(f"Invalid negative header key size {(b >> 1) ^ -1}")
            i += 1
            if p > end and i > 4 and i & 1:  # a whole header past the record: no need to read on
                return p
        if i > 2:
            return p
        b = body[p]
        if b < 0x80:
            p += 1
        else:
            b, p = _raw_varint(body, p, True)
        count = (b >> 1) ^ -(b & 1)
        if count < 0 or count > end - p:
            raise InvalidRecordError(f"Found invalid number of record headers {count}")
        i, todo = 3, 3 + 2 * count


class TimestampTable:
    """One batch's records as parallel arrays: offsets, timestamps, and the running maximum of the
    timestamps. The first record with timestamp >= T is where the running maximum first reaches T, so
    a bisection answers what a scan would, out-of-order and duplicate timestamps included."""

    __slots__ = ("offsets", "timestamps", "running_max")

    def __init__(self, offsets: array, timestamps: array, running_max: array) -> None:
        self.offsets = offsets
        self.timestamps = timestamps
        self.running_max = running_max

    def __len__(self) -> int:
        return len(self.offsets)

    def first_at_or_after(self, target: int, min_offset: int = 0) -> tuple[int, int] | None:
        """Same answer as `RecordBatch.first_at_or_after`, in O(log n) unless `min_offset` falls inside
        the batch (a log start offset moved by DeleteRecords), where the records from it are scanned."""
        i = bisect.bisect_left(self.running_max, target)
        if i == len(self.offsets):
            return None
        if self.offsets[i] >= min_offset:
            return self.offsets[i], self.timestamps[i]
        j = bisect.bisect_left(self.offsets, min_offset)
        stamps = self.timestamps
        for k in range(max(i, j), len(stamps)):
            if stamps[k] >= target:
                return self.offsets[k], stamps[k]
        return None


def _record_spans_py(body, count: int) -> list[tuple[int, int, int, int, int, int, int]]:
    """`record_spans` in Python: the answer for every body, InvalidRecordError for a bad one."""
    out = []
    for spans in record_cursor(body, count):
        for start, end, ts_delta, off_delta, p in spans:
            klen, p = read_varint(body, p, True)
            kstart = p
            if klen >= 0:
                p += klen
            else:
                klen = -1
            vlen, p = read_varint(body, p, True)
            if vlen < 0:
                vlen = -1
            if p > end or (vlen > 0 and p + vlen > end):
                raise InvalidRecordError("record fields run past the record")
            out.append((off_delta, ts_delta, start, end, kstart, klen, vlen))
    return out


_native_spans = load_native("chronolog.records._walk", "record_spans")


def record_spans(body, count: int) -> list[tuple[int, int, int, int, int, int, int]]:
    """(offset delta, timestamp delta, start, end, key start, key length, value length) of each record of an
    uncompressed records section (lengths -1 for null; `start` is where its length varint begins): what the log cleaner needs to judge and copy records
    without decoding them (C where the extension is built, the same answers)."""
    if _native_spans is not None:
        found = _native_spans(body, count)
        if found is not None:
            return found
    return _record_spans_py(body, count)
