"""Append validation's walk (`RecordBatch.scan_timestamps` without the C walk) against the readers' walk
of the same loop (`record_cursor`) plus the checks validation adds, made here record by record: the same
(min, max) timestamp deltas on valid bodies, the same error message on lying ones (a flipped, cut, inserted
or dropped byte, a wrong count) where the walk or an offset delta gives it, and a rejection wherever a
record's key, value and headers do not fill it (read as Kafka's `DefaultRecord.readPartiallyFrom` does)."""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chronolog.errors import InvalidRecordError
from chronolog.records import RecordBatch, SimpleRecord, build_batch
from chronolog.records import batch as batch_module
from chronolog.records.batch import HEADER_SIZE, record_cursor
from chronolog.records.varint import read_varint

SETTINGS = settings(max_examples=400, derandomize=True, database=None, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

records = st.lists(st.builds(
    SimpleRecord,
    timestamp=st.integers(0, 2**42),
    key=st.one_of(st.none(), st.binary(max_size=200)),
    value=st.one_of(st.none(), st.binary(max_size=9000)),
    headers=st.lists(st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=20))), max_size=2),
), min_size=1, max_size=12)


class FieldsLie(Exception):
    """A record whose key, value and headers do not fill it (validation's message is its own)."""


def verdict(fn, body: bytes, count: int):
    try:
        return fn(body, count)
    except InvalidRecordError as exc:
        return str(exc)
    except FieldsLie:
        return FieldsLie


def scan(body: bytes, count: int) -> tuple[int, int]:
    """The pure-Python append walk, through the method append validation calls."""
    buf = bytearray(HEADER_SIZE) + body
    struct.pack_into(">qiib", buf, 0, 0, len(buf) - 12, 0, 2)  # base offset, length, epoch, magic
    struct.pack_into(">i", buf, 57, count)  # base timestamp stays 0: results are deltas
    saved, batch_module._native_scan = batch_module._native_scan, None
    try:
        lo, hi, _n = RecordBatch(buf).scan_timestamps()
    finally:
        batch_module._native_scan = saved
    return lo, hi


def fields_fill(body: bytes, p: int, end: int) -> bool:
    try:
        for _ in (0, 1):  # key, value: negative lengths are null
            size, p = read_varint(body, p, True)
            p += max(size, 0)
        count, p = read_varint(body, p, True)
        if count < 0 or count > end - p:
            return False
        for _ in range(count):
            size, p = read_varint(body, p, True)
            if size < 0:
                return False
            size, p = read_varint(body, p + size, True)
            p += max(size, 0)
    except (IndexError, InvalidRecordError):
        return False
    return p == end


def cursor(body: bytes, count: int) -> tuple[int, int]:
    if count <= 0:
        raise InvalidRecordError(f"batch claims {count} records in {len(body)} bytes")
    stamps = []
    for spans in record_cursor(body, count):
        for _s, end, t, o, p in spans:
            i = len(stamps)
            if o != i:
                raise InvalidRecordError(f"record {i} has offset delta {o}")
            if not fields_fill(body, p, end):
                raise FieldsLie
            stamps.append(t)
    return min(stamps), max(stamps)


@SETTINGS
@given(recs=records, data=st.data())
def test_the_inlined_walk_gives_the_cursors_verdict(recs, data):
    body = bytearray(build_batch(recs)[HEADER_SIZE:])
    count = len(recs)
    kind = data.draw(st.sampled_from(["none", "flip", "cut", "insert", "drop", "count"]))
    if kind != "none" and body:
        at = data.draw(st.integers(0, len(body) - 1))
        if kind == "flip":
            body[at] ^= data.draw(st.integers(1, 255))
        elif kind == "cut":
            del body[at:]
        elif kind == "insert":
            body[at:at] = bytes([data.draw(st.integers(0, 255))])
        elif kind == "drop":
            del body[at]
        else:
            count = data.draw(st.integers(-2, count + 3))
    want, got = verdict(cursor, bytes(body), count), verdict(scan, bytes(body), count)
    if want is FieldsLie:
        assert isinstance(got, str), got
    else:
        assert got == want
