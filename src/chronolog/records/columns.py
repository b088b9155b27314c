"""The columnar record decoder: bytes of record batches -> columns (offsets, timestamps, keys, values,
headers, timestamp types), with no Python object per record.

`RecordBatch.records()` builds a `Record` per record, which is what a reader of a few records wants and
what a reader of millions cannot afford. `ColumnDecoder` reads a buffer of batches as a log segment, a
Fetch response or a produce payload holds them (v2 batches with any codec, legacy v0/v1 message sets) and
appends the records that pass its bounds to column buffers laid out as Arrow lays them out (int64
offsets and timestamps; binary arrays as an int32 offsets buffer, one data buffer and a validity bitmap;
headers as `list<struct<key: string, value: binary>>`), so `DecodedColumns.to_arrow` hands them to
pyarrow without copying.

What a consumer would not see is not decoded: control batches are skipped, and so are the batches of
aborted transactions given as (producer id, first offset, last offset) ranges, as a read_committed
consumer skips them (`Fetcher`/`CompletedFetch` in Kafka's client, KIP-98). Offset bounds [start, end)
(a read_committed reader passes the last stable offset as its `end`) and inclusive millisecond bounds
on the timestamp are applied per record; a batch wholly outside [start, end) is stepped over on its
header alone. LogAppendTime batches give every record the batch's max timestamp (`DefaultRecordBatch`,
KIP-32), as Kafka's consumers do.

Two builders do the per-record work with identical results: `_columns.c` (C, the buffer protocol) and
`PyBuilder` below, its twin when the extension is not built or CHRONOLOG_PURE_PYTHON is set. Both walk
uncompressed v2 batches themselves and hand compressed and legacy batches back to `ColumnDecoder`,
which decompresses them (with the record reader's size limit) and gives the decompressed records to the
builder. Their rules for bad input are one: a record whose fields do not fill exactly its stated length,
a header count or key length that cannot be, a varint longer than Kafka reads, a timestamp or offset
beyond 64 bits, or bytes left after the last record is an `InvalidRecordError`; a batch size or magic
that cannot be is a `CorruptMessageError`; each names the batch's position in the buffer.
tests/records/test_columns.py checks both builders against the record reader and against each other.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterable

from chronolog.errors import CorruptMessageError, InvalidRecordError
from chronolog.native import load_native

# The batch, legacy and compression modules (the dataclasses and enums they define, `inspect` behind them)
# are imported by the functions that read batches in Python: the C path of `consume --format raw` starts
# without them.

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

# What `batches` answers besides an error: no complete batch left at `pos` (a truncated tail, as
# `iter_batches` stops), the row or byte budget reached after a batch, or a batch the caller decodes
# (compressed or legacy).
DONE, FULL, PYTHON = 0, 1, 2
CORRUPT, INVALID = 3, 4

DEFAULT_MAX_ROWS = 8192
DEFAULT_MAX_BYTES = 64 * 1024 * 1024  # Arrow binary offsets are int32: a batch of columns stays far below

_I64 = struct.Struct(">q")


def skipped_batch(attributes: int, producer_id: int, base_offset: int,
                  aborted: tuple[tuple[int, int, int], ...]) -> bool:
    """Control batches are never records to a consumer; a transactional batch is aborted when one of the
    (producer id, first offset, last offset) ranges of its producer holds its base offset."""
    if attributes & 0x20:
        return True
    if attributes & 0x10 and aborted:
        for pid, first, last in aborted:
            if pid == producer_id and first <= base_offset <= last:
                return True
    return False


class _Fail(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _varint(buf, pos: int, end: int, int32: bool) -> tuple[int, int]:
    """A zigzag varint within [pos, end): an int (at most 5 bytes, bits beyond 32 dropped, as Kafka's
    `ByteUtils.readVarint`) or a long (at most 10 bytes; one whose value needs more than 64 bits is
    refused, which Kafka's `readVarlong` would silently cut)."""
    raw = shift = 0
    while True:
        if pos >= end:
            raise _Fail(INVALID, "varint runs past the record")
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > (28 if int32 else 63):
            raise _Fail(INVALID, f"varint is longer than {5 if int32 else 10} bytes")
    if int32:
        raw &= 0xFFFFFFFF
    elif raw >> 64:
        raise _Fail(INVALID, "timestamp delta beyond 64 bits")
    return (raw >> 1) ^ -(raw & 1), pos


class PyBuilder:
    """The pure-Python twin of `_columns.Builder`: the same column buffers, byte for byte."""

    def __init__(self, keys: bool = True, values: bool = True, headers: bool = False) -> None:
        self.want = (keys, values, headers)
        self._reset()

    def _reset(self) -> None:
        self.rows = 0
        self.data_bytes = 0
        self.offsets, self.stamps, self.kinds = array("q"), array("q"), array("i")
        self.cols = [[bytearray(), array("i", [0]), bytearray(), 0] for _ in range(2)]  # valid, offs, data, nulls
        self.hlist = array("i", [0])
        self.hkoffs, self.hkdata = array("i", [0]), bytearray()
        self.hv = [bytearray(), array("i", [0]), bytearray(), 0]
        self.hcount = 0

    def __len__(self) -> int:
        return self.rows

    @staticmethod
    def _append(col: list, index: int, field) -> None:
        if index & 7 == 0:
            col[0].append(0)
        if field is None:
            col[3] += 1
        else:
            col[0][index >> 3] |= 1 << (index & 7)
            col[2] += field
        col[1].append(len(col[2]))

    def _add(self, offset: int, ts: int, kind: int, key, value, headers) -> None:
        i = self.rows
        self.offsets.append(offset)
        self.stamps.append(ts)
        self.kinds.append(kind)
        if self.want[0]:
            self._append(self.cols[0], i, key)
            self.data_bytes += len(key) if key is not None else 0
        if self.want[1]:
            self._append(self.cols[1], i, value)
            self.data_bytes += len(value) if value is not None else 0
        if self.want[2]:
            for hkey, hval in headers:
                self.hkdata += hkey
                self.hkoffs.append(len(self.hkdata))
                self._append(self.hv, self.hcount, hval)
                self.hcount += 1
                self.data_bytes += len(hkey) + (len(hval) if hval is not None else 0)
            self.hlist.append(self.hcount)
        self.rows = i + 1

    def row(self, offset: int, ts: int, kind: int, key, value) -> None:
        """One record of a legacy message set (no headers)."""
        self._add(offset, ts, kind, None if key is None else bytes(key), None if value is None else bytes(value), ())

    def body(self, body, base_offset: int, base_ts: int, max_ts: int, attributes: int, count: int,
             start: int, end: int, lo: int, hi: int) -> None:
        """The `count` records of one batch's (decompressed) records section."""
        try:
            self._body(memoryview(body), base_offset, base_ts, max_ts, attributes, count, start, end, lo, hi)
        except _Fail as exc:
            raise InvalidRecordError(str(exc)) from None

    def _body(self, body, base_offset, base_ts, max_ts, attributes, count, start, end, lo, hi) -> None:
        n = len(body)
        if count < 0 or count > n:
            raise _Fail(INVALID, f"batch claims {count} records in {n} bytes")
        log_append = bool(attributes & 0x08)
        kind = 1 if log_append else 0
        pos = 0
        for _ in range(count):
            length, pos = _varint(body, pos, n, True)
            if length < 0 or length > n - pos:
                raise _Fail(INVALID, "record length runs past the batch")
            rend = pos + length
            p = pos + 1  # the attributes byte (unused)
            if p > rend:
                raise _Fail(INVALID, "varint runs past the record")
            ts_delta, p = _varint(body, p, rend, False)
            off_delta, p = _varint(body, p, rend, True)
            fields = []
            for _f in (0, 1):
                size, p = _varint(body, p, rend, True)
                if size < 0:
                    fields.append(None)
                else:
                    if size > rend - p:
                        raise _Fail(INVALID, "key or value runs past the record")
                    fields.append(body[p:p + size])
                    p += size
            hcount, p = _varint(body, p, rend, True)
            if hcount < 0 or hcount > rend - p:
                raise _Fail(INVALID, f"invalid header count {hcount}")
            headers = []
            for _h in range(hcount):
                hklen, p = _varint(body, p, rend, True)
                if hklen < 0 or hklen > rend - p:
                    raise _Fail(INVALID, "invalid header key length")
                hkey = body[p:p + hklen]
                p += hklen
                hvlen, p = _varint(body, p, rend, True)
                if hvlen < 0:
                    hval = None
                else:
                    if hvlen > rend - p:
                        raise _Fail(INVALID, "header value runs past the record")
                    hval = body[p:p + hvlen]
                    p += hvlen
                headers.append((hkey, hval))
            if p != rend:
                raise _Fail(INVALID, "record length does not match its fields")
            ts = base_ts + ts_delta
            offset = base_offset + off_delta
            if not INT64_MIN <= ts <= INT64_MAX or not INT64_MIN <= offset <= INT64_MAX:
                raise _Fail(INVALID, "timestamp or offset beyond 64 bits")
            if log_append:
                ts = max_ts
            pos = rend
            if start <= offset < end and lo <= ts <= hi:
                self._add(offset, ts, kind, fields[0], fields[1], headers)
        if pos != n:
            raise _Fail(INVALID, "bytes left after the last record of the batch")

    def batches(self, buf, pos: int, start: int, end: int, lo: int, hi: int, aborted: tuple,
                max_rows: int, max_bytes: int) -> tuple[int, int, object]:
        """Walks whole batches from `pos`: (position, status, next offset or -1) or, on bad input,
        (position of the bad batch, CORRUPT or INVALID, message)."""
        from chronolog.records.batch import HEADER, HEADER_SIZE, LOG_OVERHEAD
        from chronolog.records.legacy import V0_MIN

        buf = memoryview(buf)
        limit = len(buf)
        next_offset = -1
        while True:
            if limit - pos < LOG_OVERHEAD:
                return pos, DONE, next_offset
            (size,) = struct.unpack_from(">i", buf, pos + 8)
            if size < V0_MIN:
                return pos, CORRUPT, f"batch size {size} is below the minimum"
            if limit - pos < LOG_OVERHEAD + size or limit - pos < 17:
                return pos, DONE, next_offset
            magic = buf[pos + 16]
            if magic in (0, 1):
                return pos, PYTHON, next_offset
            if magic != 2:
                return pos, CORRUPT, f"unknown magic {magic}"
            if size < HEADER_SIZE - LOG_OVERHEAD:
                return pos, CORRUPT, f"v2 batch size {size} is below the header size"
            h = HEADER.unpack_from(buf, pos)
            attributes = h[5]
            if attributes & 0x07:
                return pos, PYTHON, next_offset
            base, last = h[0], h[0] + h[6]
            if not INT64_MIN <= last < INT64_MAX:
                return pos, CORRUPT, "last offset beyond 64 bits"
            if not skipped_batch(attributes, h[9], base, aborted) and last >= start and base < end:
                try:
                    self._body(buf[pos + HEADER_SIZE:pos + LOG_OVERHEAD + size], base, h[7], h[8], attributes,
                               h[12], start, end, lo, hi)
                except _Fail as exc:
                    return pos, exc.status, str(exc)
            pos += LOG_OVERHEAD + size
            next_offset = last + 1
            if self.rows >= max_rows or self.data_bytes >= max_bytes:
                return pos, FULL, next_offset

    def take(self) -> tuple:
        """The columns so far, as buffers, and a fresh start: (rows, offsets, timestamps, kinds, key
        column, value column, header column); a binary column is (validity bitmap, offsets, data, null
        count) or None when not asked for; the header column is (list offsets, key offsets, key data,
        value column) or None."""
        c = self.cols
        out = (self.rows, self.offsets.tobytes(), self.stamps.tobytes(), self.kinds.tobytes(),
               (bytes(c[0][0]), c[0][1].tobytes(), bytes(c[0][2]), c[0][3]) if self.want[0] else None,
               (bytes(c[1][0]), c[1][1].tobytes(), bytes(c[1][2]), c[1][3]) if self.want[1] else None,
               (self.hlist.tobytes(), self.hkoffs.tobytes(), bytes(self.hkdata),
                (bytes(self.hv[0]), self.hv[1].tobytes(), bytes(self.hv[2]), self.hv[3])) if self.want[2] else None)
        self._reset()
        return out


_NativeBuilder = load_native("chronolog.records._columns", "Builder")
_native_place_late = load_native("chronolog.records._timeline", "place_late")


def place_late(body, count: int, base_offset: int, base_ts: int, offsets, edges, first: int, log_end: int, counts,
               late) -> int | None:
    """The console timeline's late-record placement over one CreateTime records section, in C (see
    `place_late` in _timeline.c): `offsets`/`edges` int64 arrays of n + 1, `counts`/`late` int64 arrays of n,
    changed in place. None when the extension is not built or the bytes do not walk cleanly; the caller's
    record-by-record twin (`timetravel.timeline._place_batch`) then answers."""
    if _native_place_late is None:
        return None
    return _native_place_late(body, count, base_offset, base_ts, offsets, edges, first, log_end, counts, late)
_native_place_late_batches = load_native("chronolog.records._timeline", "place_late_batches")


def place_late_batches(buf, pos: int, offsets, edges, first: int, log_end: int, counts, late
                       ) -> tuple[int, int, bool] | None:
    """`place_late` over the whole batches of `buf` from `pos` (see `place_late_batches` in _timeline.c):
    (position reached, records moved before the first edge, stopped at a batch C leaves to the caller).
    None when the extension is not built."""
    if _native_place_late_batches is None:
        return None
    return _native_place_late_batches(buf, pos, offsets, edges, first, log_end, counts, late)


NATIVE_COLUMNS = _NativeBuilder is not None


class DecodedColumns:
    """Decoded records as column buffers (native byte order, Arrow's layouts): `bytes` from the Python
    twin, read-only buffer objects from C that own the builder's memory (handed over without a copy).
    A plain class with slots, equal by its fields, not a dataclass: see the imports above."""

    __slots__ = ("rows", "offsets", "timestamps", "timestamp_types", "keys", "values", "headers")

    def __init__(self, rows: int, offsets: bytes, timestamps: bytes, timestamp_types: bytes, keys: tuple | None,
                 values: tuple | None, headers: tuple | None) -> None:
        self.rows = rows
        self.offsets = offsets
        self.timestamps = timestamps            # epoch milliseconds
        self.timestamp_types = timestamp_types  # int32: 0 CreateTime, 1 LogAppendTime
        self.keys = keys
        self.values = values
        self.headers = headers

    def _fields(self) -> tuple:
        return (self.rows, self.offsets, self.timestamps, self.timestamp_types, self.keys, self.values,
                self.headers)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._fields() == other._fields()  # type: ignore[attr-defined]

    __hash__ = None  # type: ignore[assignment]  # C's buffers are not hashable: equal by content, unhashable

    def __repr__(self) -> str:
        pairs = zip(self.__slots__, self._fields(), strict=True)
        return "DecodedColumns(" + ", ".join(f"{k}={v!r}" for k, v in pairs) + ")"

    def __len__(self) -> int:
        return self.rows

    def offset_list(self) -> list[int]:
        return memoryview(self.offsets).cast("q").tolist()

    def timestamp_list(self) -> list[int]:
        return memoryview(self.timestamps).cast("q").tolist()

    def as_bytes(self) -> tuple:
        """Every buffer as `bytes` (C hands over its own buffer objects, the twin `bytes`): for comparing."""
        def norm(x):
            if isinstance(x, tuple):
                return tuple(norm(y) for y in x)
            return x if x is None or isinstance(x, int) else bytes(x)
        return norm((self.rows, self.offsets, self.timestamps, self.timestamp_types, self.keys, self.values,
                     self.headers))

    def records(self) -> list:
        """The rows as `Record`s (for tools that print records one by one; no pyarrow needed)."""
        from chronolog.records.batch import Record

        def column(col):
            if col is None:
                return [None] * self.rows
            valid, offs, data, nulls = col
            ends = memoryview(offs).cast("i")
            valid = memoryview(valid)
            data = bytes(data)
            return [data[ends[i]:ends[i + 1]] if not nulls or valid[i >> 3] >> (i & 7) & 1 else None
                    for i in range(len(ends) - 1)]

        keys, values = column(self.keys), column(self.values)
        heads: list = [()] * self.rows
        if self.headers is not None:
            lists, koffs, kdata, hv = self.headers
            hkeys = column((b"", koffs, kdata, 0))
            hvals = column(hv)
            bounds = memoryview(lists).cast("i")
            heads = [tuple((hkeys[j].decode("utf-8", "replace"), hvals[j]) for j in range(bounds[i], bounds[i + 1]))
                     for i in range(self.rows)]
        return list(map(Record, self.offset_list(), self.timestamp_list(), keys, values, heads))

    def to_arrow(self) -> dict:
        """{"offset", "timestamp" (int64 ms), "timestampType", and "key", "value", "headers" when decoded}
        as pyarrow arrays over these buffers (no copy)."""
        import pyarrow as pa

        n = self.rows
        out = {"offset": pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(self.offsets)]),
               "timestamp": pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(self.timestamps)]),
               "timestampType": pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(self.timestamp_types)])}
        if self.keys is not None:
            out["key"] = _binary(pa, pa.binary(), n, self.keys)
        if self.values is not None:
            out["value"] = _binary(pa, pa.binary(), n, self.values)
        if self.headers is not None:
            out["headers"] = _headers(pa, n, self.headers)
        return out


def _binary(pa, kind, n: int, col: tuple):
    valid, offs, data, nulls = col
    return pa.Array.from_buffers(kind, n, [pa.py_buffer(valid) if nulls else None, pa.py_buffer(offs),
                                           pa.py_buffer(data)], null_count=nulls)


def _headers(pa, n: int, col: tuple):
    lists, koffs, kdata, values = col
    m = memoryview(koffs).nbytes // 4 - 1
    keys = pa.Array.from_buffers(pa.string(), m, [None, pa.py_buffer(koffs), pa.py_buffer(kdata)])
    try:
        keys.validate(full=True)
    except pa.ArrowInvalid:  # not UTF-8: the record reader's decode(errors="replace")
        bk = pa.Array.from_buffers(pa.binary(), m, [None, pa.py_buffer(koffs), pa.py_buffer(kdata)])
        keys = pa.array([k.decode("utf-8", "replace") for k in bk.to_pylist()], pa.string())
    structs = pa.StructArray.from_arrays([keys, _binary(pa, pa.binary(), m, values)], names=["key", "value"])
    return pa.ListArray.from_arrays(pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(lists)]), structs)


class ColumnDecoder:
    """Decodes buffers of batches into columns, keeping what the bounds allow.

    `start`/`end`: offsets kept are start <= offset < end (a read_committed reader passes the last stable
    offset as `end`). `ts_min`/`ts_max`: inclusive millisecond bounds. `aborted`: (producer id, first
    offset, last offset) of aborted transactions, whose batches are skipped. `max_rows`/`max_bytes`:
    `feed` stops after the batch that reaches either, so one call's columns stay a bounded size.
    `native`: None picks C when built; False forces the Python twin (tests)."""

    def __init__(self, *, keys: bool = True, values: bool = True, headers: bool = False, start: int = 0,
                 end: int | None = None, ts_min: int | None = None, ts_max: int | None = None,
                 aborted: Iterable[tuple[int, int, int]] = (), max_rows: int = DEFAULT_MAX_ROWS,
                 max_bytes: int = DEFAULT_MAX_BYTES, max_decompressed: int | None = None,
                 native: bool | None = None) -> None:
        use_c = _NativeBuilder is not None if native is None else native
        if use_c and _NativeBuilder is None:
            raise RuntimeError("the C column decoder is not built")
        self.builder = _NativeBuilder(keys, values, headers) if use_c else PyBuilder(keys, values, headers)
        self.native = use_c
        self.start = max(start, 0) if start is not None else 0
        self.end = INT64_MAX if end is None else end
        self.lo = INT64_MIN if ts_min is None else ts_min
        self.hi = INT64_MAX if ts_max is None else ts_max
        self.aborted = tuple((int(p), int(f), int(last)) for p, f, last in aborted)
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.max_decompressed = max_decompressed  # None: compression.DEFAULT_MAX_DECOMPRESSED
        self._where = ("", 0)
        self.next_offset = -1  # one past the last batch walked (skipped ones included): where a fetch goes on

    def __len__(self) -> int:
        return len(self.builder)

    def feed(self, buffer, pos: int = 0, *, origin: str = "", base: int = 0) -> tuple[int, bool]:
        """Decode whole batches of `buffer` from `pos`: (position reached, full). `full` means the row or
        byte budget was reached: `take()` the columns and feed again from the position. Otherwise every
        complete batch was read and the position is where a truncated tail (if any) starts. Errors name
        the bad batch as "{origin}batch at position {base + its position in buffer}"."""
        self._where = (origin, base)
        b = self.builder
        while True:
            pos, status, extra = b.batches(buffer, pos, self.start, self.end, self.lo, self.hi, self.aborted,
                                           self.max_rows, self.max_bytes)
            if status == DONE or status == FULL:
                if extra >= 0:
                    self.next_offset = extra
                return pos, status == FULL
            if status == CORRUPT:
                raise CorruptMessageError(f"{self._at(buffer, pos)}: {extra}")
            if status == INVALID:
                raise InvalidRecordError(f"{self._at(buffer, pos)}: {extra}")
            if extra >= 0:
                self.next_offset = extra
            pos = self._python_batch(buffer, pos)
            if len(b) >= self.max_rows or b.data_bytes >= self.max_bytes:
                return pos, True

    def _python_batch(self, buffer, pos: int) -> int:
        """A compressed v2 batch or a legacy message: decompressed here, its records to the builder."""
        from chronolog.records.batch import HEADER, HEADER_SIZE, RecordBatch
        from chronolog.records.compression import DEFAULT_MAX_DECOMPRESSED, decompress
        from chronolog.records.legacy import LegacyBatch

        limit = DEFAULT_MAX_DECOMPRESSED if self.max_decompressed is None else self.max_decompressed

        buf = buffer if isinstance(buffer, memoryview) else memoryview(buffer)
        magic = buf[pos + 16]
        try:
            if magic == 2:
                batch = RecordBatch(buf, pos)
                h = HEADER.unpack_from(buf, pos)
                codec = batch.compression  # raises on an unknown codec
                if not skipped_batch(h[5], h[9], h[0], self.aborted) and batch.last_offset >= self.start \
                        and h[0] < self.end:
                    body = decompress(codec, buf[pos + HEADER_SIZE:pos + batch.size_in_bytes], limit)
                    self.builder.body(body, h[0], h[7], h[8], h[5], h[12], self.start, self.end, self.lo, self.hi)
                self.next_offset = batch.last_offset + 1
                return pos + batch.size_in_bytes
            legacy = LegacyBatch(buf, pos, limit)
            if legacy.offset >= self.start:  # a wrapper carries its last inner offset
                kind = 1 if legacy.magic == 1 and legacy.attributes & 0x08 else 0
                for rec in legacy.records():
                    if self.start <= rec.offset < self.end and self.lo <= rec.timestamp <= self.hi:
                        self.builder.row(rec.offset, rec.timestamp, kind, rec.key, rec.value)
            self.next_offset = legacy.offset + 1
            return pos + legacy.size_in_bytes
        except (CorruptMessageError, InvalidRecordError) as exc:
            raise type(exc)(f"{self._at(buffer, pos)}: {exc}") from None

    def _at(self, buffer, pos: int) -> str:
        origin, base = self._where
        return f"{origin}batch at position {base + pos}{_offset_note(buffer, pos)}"

    def take(self) -> DecodedColumns:
        return DecodedColumns(*self.builder.take())


def _offset_note(buffer, pos: int) -> str:
    try:
        return f" (offset {_I64.unpack_from(buffer, pos)[0]})"
    except struct.error:
        return ""


def decode(buffer, **bounds) -> DecodedColumns:
    """Every record of `buffer` that the bounds keep, in one set of columns (tests and small reads)."""
    dec = ColumnDecoder(max_rows=INT64_MAX, max_bytes=INT64_MAX, **bounds)
    dec.feed(buffer)
    return dec.take()


def aborted_ranges(buffer, aborted: Iterable[tuple[int, int]]) -> tuple[tuple[int, int, int], ...]:
    """A Fetch response's aborted transactions, (producer id, first offset) pairs, as the (producer id,
    first offset, last offset) ranges the decoder takes: a transaction ends at its producer's next control
    batch (the ABORT marker) at or after its first offset, as Kafka's consumer stops skipping a producer's
    batches at that marker (`CompletedFetch.nextFetchedRecord`); with no marker in `buffer`, every later
    batch of that producer in it is part of the aborted transaction."""
    pairs = sorted((int(p), int(f)) for p, f in aborted)
    if not pairs:
        return ()
    from chronolog.records.batch import HEADER, HEADER_SIZE, LOG_OVERHEAD
    from chronolog.records.legacy import V0_MIN

    buf = buffer if isinstance(buffer, memoryview) else memoryview(buffer)
    markers: dict[int, list[int]] = {}
    pos, limit = 0, len(buf)
    while limit - pos >= HEADER_SIZE:
        (size,) = struct.unpack_from(">i", buf, pos + 8)
        if size < V0_MIN or limit - pos < LOG_OVERHEAD + size:
            break
        if buf[pos + 16] == 2 and size >= HEADER_SIZE - LOG_OVERHEAD:
            h = HEADER.unpack_from(buf, pos)
            if h[5] & 0x20:
                markers.setdefault(h[9], []).append(h[0])
        pos += LOG_OVERHEAD + size
    out = []
    for pid, first in pairs:
        last = next((m for m in markers.get(pid, ()) if m >= first), INT64_MAX)
        out.append((pid, first, last))
    return tuple(out)
