"""The C record walk (`chronolog.records._walk`) against the Python walk it replaces on the append path:
on valid batches and on every kind of lie the two give the same verdict. C answers Python's (min, max) for
every body Python accepts, None ("fall back") for every body Python rejects (Python then raises its precise
error) and for a valid body with a timestamp delta beyond 64 bits (which Python holds as a big integer)."""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chronolog.errors import InvalidRecordError
from chronolog.native import load_native
from chronolog.records import RecordBatch, SimpleRecord, build_batch, crc32c
from chronolog.records import batch as batch_module
from chronolog.records.batch import HEADER_SIZE
from chronolog.records.varint import read_varint, write_varint
from tests.scale import scaled

native = pytest.importorskip("chronolog.records._walk", reason="the C extension was not built here")

BASE_TS = 1_700_000_000_000
INT64 = range(-2**63, 2**63)
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


def agree(body: bytes, count: int):
    """C's answer is Python's; returns Python's (the error class, or (min, max))."""
    want = python_walk(body, count)
    got = native.scan_timestamps(body, count)
    if want is InvalidRecordError:
        assert got is None, f"C accepted what Python rejects: {got}"
    elif got is None:
        assert want[0] not in INT64 or want[1] not in INT64, f"C gave up on a batch it can hold: {want}"
    else:
        assert got == want, (got, want)
    return want


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
def test_lying_bytes_get_the_same_verdict(recs, data):
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
    else:  # a length written with needless continuation bytes (valid up to 5 bytes, as Kafka reads it)
        body[0:1] = bytes([body[0] | 0x80]) + b"\x80" * data.draw(st.integers(0, 8)) + b"\x00"
    agree(bytes(body), count)


def raw_varint(raw: int, extra: int = 0) -> bytes:
    """`raw` (already zigzagged, any size) as a varint, with `extra` needless continuation bytes."""
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    if extra:
        out += bytes([raw | 0x80]) + b"\x80" * (extra - 1) + b"\x00"
    else:
        out.append(raw)
    return bytes(out)


def zigzag(v: int) -> int:
    return v << 1 if v >= 0 else (-v << 1) - 1


# How one integer field is written: shortest, padded with continuation bytes (valid up to 5 bytes for an
# int varint, 10 for the timestamp's long), 5 bytes carrying bits beyond 32 (Kafka drops them from an int),
# or 10 bytes carrying bits beyond 64 (a long Python reads as a bigger integer; too long for an int).
styles = st.integers(0, 31).flatmap(
    lambda r: st.just(("min", 0)) if r < 26 else st.tuples(st.just("pad"), st.integers(1, 10)) if r < 29
    else st.tuples(st.just("wide32"), st.integers(1, 7)) if r < 30 else st.tuples(st.just("wide"), st.integers(1, 63)))


def field(v: int, style) -> bytes:
    kind, k = style
    raw = zigzag(v)
    if kind == "wide":
        return raw_varint((raw & (2**64 - 1)) | (k << 64))
    if kind == "wide32":
        return raw_varint((raw & (2**32 - 1)) | (k << 32)) if raw < 2**32 else raw_varint(raw)
    return raw_varint(raw, k if kind == "pad" else 0)


@st.composite
def encoded_bodies(draw):
    """Record bodies written field by field, each integer in a drawn encoding, with timestamp deltas and
    key/value/header lengths that are sometimes wide; valid or not, C and Python must agree."""
    out = bytearray()
    count = draw(st.integers(1, 5))
    for i in range(count):
        rec = bytearray(b"\0")  # attributes
        rec += field(draw(st.one_of(st.integers(-2**63, 2**63 - 1), st.integers(-1000, 1000))), draw(styles))
        rec += field(i + draw(st.sampled_from([0] * 15 + [-1, 1, 2**31])), draw(styles))  # offset delta
        for _ in (0, 1):  # key, value
            data = draw(st.one_of(st.none(), st.binary(max_size=20)))
            rec += field(-1 if data is None else len(data), draw(styles)) + (data or b"")
        nullable = st.one_of(st.none(), st.binary(max_size=5))
        headers = draw(st.lists(st.tuples(st.one_of(st.binary(max_size=5), st.binary(max_size=5), nullable),
                                          nullable), max_size=3))
        rec += field(len(headers), draw(styles))
        for hk, hv in headers:  # a null header key is a lie (Kafka: "Invalid negative header key size")
            rec += field(-1 if hk is None else len(hk), draw(styles)) + (hk or b"")
            rec += field(-1 if hv is None else len(hv), draw(styles)) + (hv or b"")
        out += field(len(rec), draw(styles)) + rec
    return bytes(out), count


# The over-wide varints this walk once answered differently are pinned in test_long_and_wide_varints; the
# long run (tests/scale.py) draws 1,000 bodies.
@settings(max_examples=scaled(300, 1000), derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(encoded=encoded_bodies())
def test_every_varint_encoding_gets_the_same_verdict(encoded):
    agree(*encoded)


def test_long_and_wide_varints():
    """Kafka reads lengths, offset deltas, sizes and counts as int varints (`ByteUtils.readVarint`): more
    than 5 bytes is an error, bits beyond 32 in the 5th are dropped. The timestamp delta is a long: 10
    bytes, and bits beyond 64 give Python a bigger integer (C falls back: None)."""
    def body(ts=field(5, ("min", 0)), off=field(0, ("min", 0)), key=field(-1, ("min", 0)),
             value=field(2, ("min", 0)) + b"vv"):
        rec = b"\0" + ts + off + key + value + b"\0"
        return field(len(rec), ("min", 0)) + rec
    assert agree(body(), 1) == (5, 5) == native.scan_timestamps(body(), 1)
    for fine in (body(ts=field(5, ("pad", 9))), body(off=field(0, ("pad", 4))), body(off=field(0, ("wide32", 7))),
                 body(key=field(-1, ("pad", 4))), body(value=field(2, ("wide32", 3)) + b"vv")):
        assert agree(fine, 1) == (5, 5) == native.scan_timestamps(fine, 1)
    huge_ts = body(ts=field(5, ("wide", 3)))
    assert agree(huge_ts, 1) == (5 + (3 << 63), 5 + (3 << 63))
    assert native.scan_timestamps(huge_ts, 1) is None
    for lie in (body(ts=field(5, ("pad", 10))), body(off=field(0, ("pad", 5))), body(key=field(-1, ("wide", 1))),
                body(value=field(2, ("pad", 5)) + b"vv"), body(value=field(2, ("wide", 1)) + b"vv"),
                field(len(body()) - 1, ("pad", 5)) + body()[1:]):
        assert agree(lie, 1) is InvalidRecordError and native.scan_timestamps(lie, 1) is None


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
    assert load_native("chronolog.records._walk", "scan_timestamps") is None
    monkeypatch.setenv("CHRONOLOG_PURE_PYTHON", "")
    assert load_native("chronolog.records._walk", "scan_timestamps") is native.scan_timestamps
    assert crc32c(buf[21:]) == struct.unpack_from(">I", buf, 17)[0]


@pytest.mark.parametrize("walk", ["c", "python"])
def test_appended_bytes_are_the_producers_batch_with_its_offset(tmp_path, monkeypatch, walk):
    """The append path's writes on both sides of its copy threshold (a small batch is copied and patched,
    a large one written behind a patched header) and with a max timestamp to fix: the log holds the
    producer's bytes with the base offset set, and the max timestamp and CRC rewritten only when wrong."""
    from chronolog.config import TopicConfig
    from chronolog.records.batch import CRC_OFFSET, MAX_TIMESTAMP_OFFSET, PARTITION_LEADER_EPOCH_OFFSET
    from chronolog.storage import PartitionLog
    from chronolog.storage.basics import LEADER_EPOCH

    if walk == "python":
        monkeypatch.setattr(batch_module, "_native_scan", None)
    cfg = TopicConfig.from_kafka({"message.timestamp.before.max.ms": str(2**62),
                                  "message.timestamp.after.max.ms": str(2**62)})
    plog = PartitionLog.open(tmp_path / "t-0", cfg)
    sent, offset = [], 0
    for size, n, lie in ((10, 3, False), (10, 3, True), (1500, 1, False), (2100, 1, False), (700, 8, False),
                         (700, 8, True), (70_000, 2, False)):
        raw = bytearray(build_batch([SimpleRecord(BASE_TS + 7 - i, b"k", bytes([i]) * size) for i in range(n)]))
        if lie:  # a wrong max timestamp: the log must rewrite it and the CRC
            struct.pack_into(">q", raw, MAX_TIMESTAMP_OFFSET, BASE_TS + 999)
            struct.pack_into(">I", raw, CRC_OFFSET, crc32c(raw[21:]))
        info = plog.append(bytes(raw), now=BASE_TS)
        assert (info.first_offset, info.max_timestamp) == (offset, BASE_TS + 7)
        want = bytearray(raw)
        struct.pack_into(">q", want, 0, offset)
        struct.pack_into(">i", want, PARTITION_LEADER_EPOCH_OFFSET, LEADER_EPOCH)
        if lie:
            struct.pack_into(">q", want, MAX_TIMESTAMP_OFFSET, BASE_TS + 7)
            struct.pack_into(">I", want, CRC_OFFSET, crc32c(want[21:]))
        sent.append(bytes(want))
        offset += n
    plog.flush()
    assert plog.active.log_path.read_bytes() == b"".join(sent)
    plog.close()
