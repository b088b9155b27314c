"""RecordBatch v2 (magic 2): a zero-copy view for reading, a builder, and in-place header patches.

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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import IntEnum

from chronolog.errors import CorruptMessageError, InvalidRecordError
from chronolog.native import load_native
from chronolog.records.compression import DEFAULT_MAX_DECOMPRESSED, CompressionType, compress, decompress
from chronolog.records.varint import read_raw_varint as _raw_varint
from chronolog.records.varint import read_varint, write_varint

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
        count = self.records_count
        # Each record needs at least 7 bytes; a count that cannot fit is a lie, not an allocation.
        if count > len(body):
            raise InvalidRecordError(f"batch claims {count} records in {len(body)} bytes")
        log_append = bool(self._h[5] & TIMESTAMP_TYPE_MASK)
        base_offset, base_ts, max_ts = self._h[0], self._h[7], self._h[8]
        pos = 0
        n = len(body)
        for _ in range(count):
            length, pos = read_varint(body, pos, True)
            end = pos + length
            if length < 0 or end > n:
                raise InvalidRecordError("record length runs past the batch")
            pos += 1  # record attributes (unused)
            ts_delta, pos = read_varint(body, pos)
            off_delta, pos = read_varint(body, pos, True)
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
        if pos != n:
            raise InvalidRecordError("bytes left after the last record of the batch")

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
        offset delta — what append validation needs (`LogValidator` looks at every record), without
        building records. Raises on offset deltas that are not 0..n-1 or lengths that lie.

        The loop is the append path's per-record cost, so varints of one and two bytes (every length
        under 8 KiB, every delta under 8192) are decoded inline; longer ones take `_raw_varint(..., int32=True)` (at most
        5 bytes, as Kafka reads an `int`) or, for the timestamp delta, `_raw_varint` (a `long`: 10)."""
        body = self._body(max_decompressed)
        count = self._h[12]
        if _native_scan is not None:
            found = _native_scan(body, count)
            if found is not None:  # None (rejected, or a delta beyond 64 bits): the Python walk below answers
                base_ts = self._h[7]
                return base_ts + found[0], base_ts + found[1], count
        n = len(body)
        if count > n or count <= 0:
            raise InvalidRecordError(f"batch claims {count} records in {n} bytes")
        pos = 0
        lo = hi = None
        try:
            # `want` is offset delta i zigzag-encoded (2 * i): compared without decoding.
            for want in range(0, 2 * count, 2):
                b = body[pos]
                if b < 0x80:
                    pos += 1
                else:
                    c = body[pos + 1]
                    if c < 0x80:
                        b = (b & 0x7F) | (c << 7)
                        pos += 2
                    else:
                        b, pos = _raw_varint(body, pos, True)
                end = pos + ((b >> 1) ^ -(b & 1))
                t = body[pos + 1]  # after the attributes byte
                if t < 0x80:
                    p = pos + 2
                else:
                    c = body[pos + 2]
                    if c < 0x80:
                        t = (t & 0x7F) | (c << 7)
                        p = pos + 3
                    else:
                        t, p = _raw_varint(body, pos + 1)
                o = body[p]
                if o < 0x80:
                    p += 1
                else:
                    c = body[p + 1]
                    if c < 0x80:
                        o = (o & 0x7F) | (c << 7)
                        p += 2
                    else:
                        o, p = _raw_varint(body, p, True)
                q = p
                if o != want or end > n or end < pos + 3:
                    if o != want:
                        raise InvalidRecordError(f"record {want // 2} has offset delta {(o >> 1) ^ -(o & 1)}")
                    raise InvalidRecordError("record length runs past the batch")
                # Key and value lengths inline (one byte: under 64 bytes or null; two: under 8 KiB), then
                # no headers: the common record; anything else takes `_fields_end`.
                k = body[p]
                if k < 0x80:
                    p += 1 + (k >> 1 if not k & 1 else 0)
                    v = body[p]
                    if v < 0x80:
                        p += 1 + (v >> 1 if not v & 1 else 0)
                    else:
                        c = body[p + 1]
                        p = p + 2 + (((v & 0x7F) | (c << 7)) >> 1) if c < 0x80 and not v & 1 else -1
                    if p == end - 1 and body[p] == 0:
                        p = end
                    elif p >= 0:
                        p = -1
                else:
                    p = -1
                if p != end and _fields_end(body, q, end) != end:
                    raise InvalidRecordError(f"record {want // 2}: key, value and headers do not fill its "
                                             f"{end - pos} bytes")
                t = (t >> 1) ^ -(t & 1)
                if lo is None:
                    lo = hi = t
                elif t < lo:
                    lo = t
                elif t > hi:
                    hi = t
                pos = end
        except IndexError:
            raise InvalidRecordError("record runs past the end of the batch") from None
        if pos != n:
            raise InvalidRecordError("bytes left after the last record of the batch")
        base_ts = self._h[7]
        return base_ts + lo, base_ts + hi, count  # type: ignore[operator]

    def timestamp_table(self, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> TimestampTable:
        """Every record's offset and timestamp plus their running maximum, for answering many lookups by
        time in this batch with a bisection (`TimestampTable.first_at_or_after`)."""
        if self._h[5] & TIMESTAMP_TYPE_MASK:
            raise ValueError("LogAppendTime batches need no table: every record has the max timestamp")
        body = self._body(max_decompressed)
        base_ts, base_off = self._h[7], self._h[0]
        offsets, stamps, running = array("q"), array("q"), array("q")
        top = None
        pos, n = 0, len(body)
        try:
            for _ in range(self._h[12]):
                b = body[pos]
                if b < 0x80:
                    pos += 1
                else:
                    c = body[pos + 1]
                    if c < 0x80:
                        b = (b & 0x7F) | (c << 7)
                        pos += 2
                    else:
                        b, pos = _raw_varint(body, pos, True)
                end = pos + ((b >> 1) ^ -(b & 1))
                t = body[pos + 1]
                if t < 0x80:
                    p = pos + 2
                else:
                    c = body[pos + 2]
                    if c < 0x80:
                        t = (t & 0x7F) | (c << 7)
                        p = pos + 3
                    else:
                        t, p = _raw_varint(body, pos + 1)
                o = body[p]
                if o >= 0x80:
                    c = body[p + 1]
                    o = (o & 0x7F) | (c << 7) if c < 0x80 else _raw_varint(body, p, True)[0]
                if end > n or end < pos + 3:
                    raise InvalidRecordError("record length runs past the batch")
                t = base_ts + ((t >> 1) ^ -(t & 1))
                offsets.append(base_off + ((o >> 1) ^ -(o & 1)))
                stamps.append(t)
                if top is None or t > top:
                    top = t
                running.append(top)
                pos = end
        except IndexError:
            raise InvalidRecordError("record runs past the end of the batch") from None
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
        pos, n = 0, len(body)
        try:
            for _ in range(self._h[12]):
                b = body[pos]
                if b < 0x80:
                    pos += 1
                else:
                    c = body[pos + 1]
                    if c < 0x80:
                        b = (b & 0x7F) | (c << 7)
                        pos += 2
                    else:
                        b, pos = _raw_varint(body, pos, True)
                end = pos + ((b >> 1) ^ -(b & 1))
                t = body[pos + 1]
                if t < 0x80:
                    p = pos + 2
                else:
                    c = body[pos + 2]
                    if c < 0x80:
                        t = (t & 0x7F) | (c << 7)
                        p = pos + 3
                    else:
                        t, p = _raw_varint(body, pos + 1)
                t = base_ts + ((t >> 1) ^ -(t & 1))
                if t >= target:
                    o = body[p]
                    if o >= 0x80:
                        c = body[p + 1]
                        o = (o & 0x7F) | (c << 7) if c < 0x80 else _raw_varint(body, p, True)[0]
                    offset = base_off + ((o >> 1) ^ -(o & 1))
                    if offset >= min_offset:
                        return offset, t
                if end > n or end < pos + 3:
                    raise InvalidRecordError("record length runs past the batch")
                pos = end
        except IndexError:
            raise InvalidRecordError("record runs past the end of the batch") from None
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


def _fields_end(body, p: int, end: int) -> int:
    """Where a record's key, value and headers starting at `p` end; the caller compares it with the
    record's stated end. Kafka's `LogValidator` reads every record (`DefaultRecord.readPartiallyFrom`
    for compressed batches): a CRC computed over lying lengths must not get a batch into the log that
    no consumer can decode."""
    for _ in (0, 1):  # key, then value: a length (negative: null) and the bytes
        b = body[p]
        if b < 0x80:
            p += 1
        else:
            b, p = _raw_varint(body, p, True)
        if not b & 1:
            p += b >> 1
    b = body[p]
    if b < 0x80:
        p += 1
    else:
        b, p = _raw_varint(body, p, True)
    count = (b >> 1) ^ -(b & 1)
    if count < 0 or count > end - p:
        raise InvalidRecordError(f"Found invalid number of record headers {count}")
    for _ in range(count):
        b = body[p]
        if b < 0x80:
            p += 1
        else:
            b, p = _raw_varint(body, p, True)
        if b & 1:
            raise InvalidRecordError(f"Invalid negative header key size {(b >> 1) ^ -1}")
        p += b >> 1
        b = body[p]
        if b < 0x80:
            p += 1
        else:
            b, p = _raw_varint(body, p, True)
        if not b & 1:
            p += b >> 1
        if p > end:
            break
    return p


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


def _encode_record(out: bytearray, offset_delta: int, timestamp_delta: int, key, value, headers) -> None:
    body = bytearray()
    body.append(0)
    write_varint(timestamp_delta, body)
    write_varint(offset_delta, body)
    for field in (key, value):
        if field is None:
            write_varint(-1, body)
        else:
            write_varint(len(field), body)
            body += field
    write_varint(len(headers), body)
    for hkey, hval in headers:
        kb = hkey.encode("utf-8")
        write_varint(len(kb), body)
        body += kb
        if hval is None:
            write_varint(-1, body)
        else:
            write_varint(len(hval), body)
            body += hval
    write_varint(len(body), out)
    out += body


def build_batch(records: Iterable[SimpleRecord | Record], *, base_offset: int = 0,
                compression: int = CompressionType.NONE, timestamp_type: int = TimestampType.CREATE_TIME,
                producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                partition_leader_epoch: int = -1, is_transactional: bool = False,
                is_control: bool = False, max_timestamp: int | None = None,
                last_offset_delta: int | None = None, delete_horizon_ms: int | None = None) -> bytes:
    """Encode one v2 batch. `Record`s keep their offsets (delta = offset - base_offset); `SimpleRecord`s
    get their position. Under LogAppendTime pass the broker time as `max_timestamp`.

    The log cleaner rebuilds a batch from the records it keeps as `MemoryRecordsBuilder` does: the
    original `last_offset_delta` is kept (`overrideLastOffset`, so the producer's last sequence stays
    right), and a `delete_horizon_ms` becomes the base timestamp with the KIP-534 flag set (record
    timestamps stay exact: their deltas are taken from it)."""
    items = list(records)
    if not items:
        raise InvalidRecordError("a record batch needs at least one record")
    first_ts = items[0].timestamp if delete_horizon_ms is None else delete_horizon_ms
    body = bytearray()
    deltas = []
    for i, rec in enumerate(items):
        delta = rec.offset - base_offset if isinstance(rec, Record) else i
        deltas.append(delta)
        _encode_record(body, delta, rec.timestamp - first_ts, rec.key, rec.value, rec.headers)
    payload = compress(compression, bytes(body)) if compression != CompressionType.NONE else bytes(body)
    attributes = int(compression) & COMPRESSION_MASK
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_MASK
    max_ts = max_timestamp if max_timestamp is not None else max(r.timestamp for r in items)
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(payload)
    buf = bytearray(HEADER_SIZE + len(payload))
    HEADER.pack_into(buf, 0, base_offset, batch_length, partition_leader_epoch, 2, 0, attributes,
                     max(deltas) if last_offset_delta is None else last_offset_delta, first_ts, max_ts,
                     producer_id, producer_epoch, base_sequence, len(items))
    buf[HEADER_SIZE:] = payload
    struct.pack_into(">I", buf, CRC_OFFSET, crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
    return bytes(buf)


def build_empty_batch(*, base_offset: int, last_offset_delta: int, max_timestamp: int, timestamp_type: int,
                      producer_id: int, producer_epoch: int, base_sequence: int, partition_leader_epoch: int,
                      is_transactional: bool, is_control: bool) -> bytes:
    """A batch header without records (`DefaultRecordBatch.writeEmptyHeader`): what the log cleaner keeps of
    a producer's last batch, or of the last batch it cleans, once every record in it is gone."""
    attributes = 0
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    buf = bytearray(HEADER_SIZE)
    HEADER.pack_into(buf, 0, base_offset, HEADER_SIZE - LOG_OVERHEAD, partition_leader_epoch, 2, 0, attributes,
                     last_offset_delta, NO_TIMESTAMP, max_timestamp, producer_id, producer_epoch, base_sequence, 0)
    struct.pack_into(">I", buf, CRC_OFFSET, crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
    return bytes(buf)


def _record_spans_py(body, count: int) -> list[tuple[int, int, int, int, int, int, int]]:
    """`record_spans` in Python: the answer for every body, InvalidRecordError for a bad one."""
    n = len(body)
    if count < 0 or count > n:
        raise InvalidRecordError(f"batch claims {count} records in {n} bytes")
    out = []
    pos = 0
    for _ in range(count):
        start = pos  # the record's length varint included: a span is copied whole
        length, pos = read_varint(body, pos, True)
        end = pos + length
        if length < 3 or end > n:
            raise InvalidRecordError("record length runs past the batch")
        p = pos + 1
        ts_delta, p = read_varint(body, p)
        off_delta, p = read_varint(body, p, True)
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
        pos = end
    if pos != n:
        raise InvalidRecordError("bytes left after the last record of the batch")
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


def splice_batch(batch: RecordBatch, body, spans: list[tuple[int, int, int, int, int, int, int]],
                 compress_with: Callable[[int, bytes], bytes] | None = None) -> bytes:
    """A copy of `batch` holding only the records at `spans` of its decompressed `body`, copied byte for byte:
    base offset, last offset delta, base timestamp and producer fields unchanged (the records' deltas stay
    valid), the max timestamp that of the records kept (the broker's under LogAppendTime), recompressed
    with the batch's codec (through `compress_with(codec, data)` when given: the log cleaner's own). The
    log cleaner's fast path; it must keep at least one record."""
    payload = b"".join(bytes(body[s:e]) for _o, _t, s, e, _ks, _kl, _vl in spans)
    codec = batch.compression
    if codec != CompressionType.NONE:
        payload = (compress_with or compress)(codec, payload)
    h = batch._h
    max_ts = h[8] if h[5] & TIMESTAMP_TYPE_MASK else h[7] + max(t for _o, t, *_r in spans)
    buf = bytearray(HEADER_SIZE + len(payload))
    HEADER.pack_into(buf, 0, h[0], HEADER_SIZE - LOG_OVERHEAD + len(payload), h[2], 2, 0, h[5], h[6], h[7], max_ts,
                     h[9], h[10], h[11], len(spans))
    buf[HEADER_SIZE:] = payload
    struct.pack_into(">I", buf, CRC_OFFSET, crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
    return bytes(buf)


def _rewrite_crc(buf, position: int) -> None:
    (batch_length,) = struct.unpack_from(">i", buf, position + 8)
    end = position + LOG_OVERHEAD + batch_length
    struct.pack_into(">I", buf, position + CRC_OFFSET,
                     crc32c(memoryview(buf)[position + ATTRIBUTES_OFFSET:end]))


def set_base_offset(buf, position: int, offset: int) -> None:
    """Outside the CRC: no recomputation (`DefaultRecordBatch.setLastOffset` style)."""
    struct.pack_into(">q", buf, position, offset)


def set_partition_leader_epoch(buf, position: int, epoch: int) -> None:
    struct.pack_into(">i", buf, position + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_max_timestamp(buf, position: int, timestamp_type: int, timestamp: int) -> None:
    """Set max timestamp and the timestamp-type bit and recompute the CRC (`setMaxTimestamp`); records,
    compressed or not, are untouched: consumers derive LogAppendTime timestamps from the header."""
    (attributes,) = struct.unpack_from(">h", buf, position + ATTRIBUTES_OFFSET)
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    else:
        attributes &= ~TIMESTAMP_TYPE_MASK
    struct.pack_into(">h", buf, position + ATTRIBUTES_OFFSET, attributes)
    struct.pack_into(">q", buf, position + MAX_TIMESTAMP_OFFSET, timestamp)
    _rewrite_crc(buf, position)
