"""The C record walk (`chronolog.records._walk`) against the Python walk it replaces on the append path:
on valid batches and on every kind of lie, whenever C answers it answers what Python answers, and it
answers None (so Python gives the verdict) whenever Python rejects the batch."""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chronolog.errors import InvalidRecordError
from chronolog.records import RecordBatch, SimpleRecord, build_batch, crc32c
from chronolog.records import batch as batch_module
from chronolog.records.batch import HEADER_SIZE
from chronolog.records.varint import read_varint, write_varint

native = pytest.importorskip("chronolog.records._walk", reason="the C extension was not built here")

BASE_TS = 1_700_000_000_000
DEFAULT = settings(max_examples=300, derandomize=True, database=None, deadline=None,
                   suppress_health_check=[HealthCheck.too_slow])

records = st.lists(st.builds(
    SimpleRecord,
    timestamp=st.one_of(st.integers(BASE_TS - 2**40, BASE_TS + 2**40), st.just(BASE_TS)),
    key=st.one_of(st.none(), st.binary(max_size=300)),
    value=st.one_of(st.none(), st.binary(max_size=20_000)),
    headers=st.lists(st.tuples(st.text(max_size=20), st.one_of(st.none(), st.binary(max_size=40))), max_size=3),
), min_size=1, max_size=30)


def python_walk(body, count: int):
    """The pure-Python walk's verdict on a batch body: (min delta, max delta) or the error class."""
    saved = batch_module._native_scan
    batch_module._native_scan = None
    try:
        buf = bytearray(HEADER_SIZE) + bytes(body)
        struct.pack_into(">qiib", buf, 0, 0, len(buf) - 12, 0, 2)  # base offset, length, epoch, magic
        struct.pack_into(">i", buf, 57, count)  # base timestamp (27) stays 0: results are deltas
        try:
            lo, hi, _n = RecordBatch(buf).scan_timestamps()
        except InvalidRecordError:
            return InvalidRecordError
        return lo, hi
    finally:
        batch_module._native_scan = saved


def agree(body: bytes, count: int) -> None:
    want = python_walk(body, count)
    got = native.scan_timestamps(body, count)
    if want is InvalidRecordError:
        assert got is None, "C accepted what Python rejects"
    else:
        assert got is None or got == want, (got, want)


def split_records(body: bytes) -> list[bytes]:
    """A valid body cut into its records (each with its length prefix)."""
    out, pos = [], 0
    while pos < len(body):
        length, start = read_varint(body, pos)
        out.append(body[pos:start + length])
        pos = start + length
    return out


def relength(record: bytes, extra: bytes, delta: int) -> bytes:
    """The record with `extra` bytes appended and its length prefix changed by `delta` (a lie when
    delta != len(extra), or when the fields no longer fill the record)."""
    length, start = read_varint(record, 0)
    out = bytearray()
    write_varint(length + delta, out)
    return bytes(out) + record[start:] + extra


def body_and_count(recs) -> tuple[bytes, int]:
    raw = build_batch(recs)
    return raw[HEADER_SIZE:], len(recs)


@DEFAULT
@given(recs=records)
def test_valid_batches_give_the_same_minimum_and_maximum(recs):
    body, count = body_and_count(recs)
    got = native.scan_timestamps(body, count)
    assert got is not None and got == python_walk(body, count)
    first = recs[0].timestamp
    assert (first + got[0], first + got[1]) == (min(r.timestamp for r in recs), max(r.timestamp for r in recs))


@DEFAULT
@given(recs=records, data=st.data())
def test_lying_bytes_are_never_accepted_by_c_alone(recs, data):
    body, count = body_and_count(recs)
    body = bytearray(body)
    kind = data.draw(st.sampled_from(["flip", "cut", "insert", "count", "varint", "overlong", "pad", "shrink"]))
    if kind in ("pad", "shrink"):  # one record's length lies while the batch stays walkable
        parts = split_records(bytes(body))
        i = data.draw(st.integers(0, len(parts) - 1))
        extra = data.draw(st.binary(min_size=1, max_size=4)) if kind == "pad" else b""
        delta = len(extra) if kind == "pad" else -data.draw(st.integers(1, 3))
        parts[i] = relength(parts[i], extra, delta)
        body = bytearray(b"".join(parts))
    elif kind == "flip":
        for _ in range(data.draw(st.integers(1, 4))):
            i = data.draw(st.integers(0, len(body) - 1))
            body[i] ^= data.draw(st.integers(1, 255))
    elif kind == "cut":
        body = body[:data.draw(st.integers(0, len(body) - 1))]
    elif kind == "insert":
        i = data.draw(st.integers(0, len(body)))
        body[i:i] = data.draw(st.binary(min_size=1, max_size=8))
    elif kind == "count":
        count = data.draw(st.integers(-3, count + 3).filter(lambda c: c != count))
    elif kind == "varint":  # a run of continuation bytes: longer than 10 bytes, or cut by the end
        i = data.draw(st.integers(0, len(body) - 1))
        body[i:i + 1] = b"\xff" * data.draw(st.integers(2, 14))
    else:  # a length written with needless continuation bytes (still a valid varint to Python)
        body[0:1] = bytes([body[0] | 0x80]) + b"\x80" * data.draw(st.integers(0, 8)) + b"\x00"
    agree(bytes(body), count)


def test_odd_corners():
    body, count = body_and_count([SimpleRecord(BASE_TS, b"k", b"v", [("h", b"x")])])
    agree(body, count)
    agree(b"", 1)
    agree(body, 0)
    agree(body + b"\0", count)
    # The record's length claims a byte its fields do not fill (it holds a zero, as a header count would).
    agree(relength(body, b"\0", 1), count)
    # A negative header key size and a header count larger than the record: Python's exact errors.
    for lie in (b"\x01", b"\x7f"):
        agree(body[:-5] + lie + body[-4:], count)
    # Varints of 10 bytes with bits beyond 64: C leaves them to Python.
    agree(b"\xff" * 9 + b"\x7f" + body, count)


def test_the_append_path_uses_it_and_the_switch_turns_it_off(monkeypatch):
    pure = os.environ.get("CHRONOLOG_PURE_PYTHON", "") not in ("", "0")
    assert batch_module.NATIVE_WALK is not pure  # built here: used unless switched off
    buf = bytearray(build_batch([SimpleRecord(BASE_TS + i, None, b"v") for i in range(5)]))
    calls = []
    real = native.scan_timestamps
    monkeypatch.setattr(batch_module, "_native_scan", lambda body, count: calls.append(count) or real(body, count))
    assert RecordBatch(buf).scan_timestamps() == (BASE_TS, BASE_TS + 4, 5)
    assert calls == [5]
    monkeypatch.setenv("CHRONOLOG_PURE_PYTHON", "1")
    assert batch_module._load_native_scan() is None
    monkeypatch.setenv("CHRONOLOG_PURE_PYTHON", "")
    assert batch_module._load_native_scan() is native.scan_timestamps
    assert crc32c(buf[21:]) == struct.unpack_from(">I", buf, 17)[0]
