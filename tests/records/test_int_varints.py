"""Every reader of a v2 batch reads record lengths, offset deltas, key, value and header sizes and header
counts as Kafka reads an int varint (`ByteUtils.readVarint`: at most 5 bytes, bits beyond 32 dropped), as
append validation does: `records()`, `timestamp_table()` and `first_at_or_after()` refuse a 6-byte one
(Kafka's consumers refuse it too) and read a padded 5-byte one as its value. The timestamp delta is a long
(10 bytes)."""

from __future__ import annotations

import struct

import pytest

from chronolog.errors import InvalidRecordError
from chronolog.records import RecordBatch
from chronolog.records.batch import HEADER_SIZE


def _varint(value: int, pad: int = 0, wide_bits: int = 0) -> bytes:
    """A zigzag varint written with `pad` extra continuation bytes, or with `wide_bits` set beyond bit 32
    in a 5-byte encoding."""
    raw = (value << 1) if value >= 0 else ((-value << 1) - 1)
    raw |= wide_bits << 32
    out = bytearray()
    while raw > 0x7F or pad > 0:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
        if raw <= 0x7F and pad > 0 and raw == 0:
            pad -= 1
            if pad == 0:
                break
    out.append(raw)
    return bytes(out)


def _record(ts=None, off=None, key=None, value=None, length_pad=0) -> bytes:
    rec = (b"\0" + (ts or _varint(5)) + (off or _varint(0)) + (key or _varint(-1)) + (value or _varint(2))
           + b"vv" + _varint(0))
    return _varint(len(rec), pad=length_pad) + rec


def _batch(body: bytes, count: int = 1) -> RecordBatch:
    buf = bytearray(HEADER_SIZE) + body
    struct.pack_into(">qiib", buf, 0, 100, len(buf) - 12, 0, 2)  # base offset, length, epoch, magic
    struct.pack_into(">qq", buf, 27, 1000, 1005)  # base and max timestamps
    struct.pack_into(">i", buf, 57, count)
    return RecordBatch(bytes(buf))


def _read_all(batch: RecordBatch):
    recs = [(r.offset, r.timestamp, r.key, r.value) for r in batch.records()]
    table = batch.timestamp_table()
    return recs, list(table.offsets), list(table.timestamps), batch.first_at_or_after(1005)


def test_padded_five_byte_ints_and_a_ten_byte_timestamp_read_as_their_values():
    plain = _read_all(_batch(_record()))
    assert plain[0] == [(100, 1005, None, b"vv")]
    for fine in (_record(length_pad=4), _record(off=_varint(0, pad=4)), _record(ts=_varint(5, pad=9)),
                 _record(value=_varint(2, pad=4)), _record(key=_varint(-1, pad=4)),
                 _record(off=_varint(0, wide_bits=7))):
        assert _read_all(_batch(fine)) == plain


@pytest.mark.parametrize("lie", ["length", "offset delta", "key size", "value size"])
def test_six_byte_ints_are_refused_by_every_reader(lie):
    body = {"length": _record(length_pad=5), "offset delta": _record(off=_varint(0, pad=5)),
            "key size": _record(key=_varint(-1, pad=5)), "value size": _record(value=_varint(2, pad=5))}[lie]
    batch = _batch(body)
    with pytest.raises(InvalidRecordError):
        list(batch.records())
    with pytest.raises(InvalidRecordError):
        batch.scan_timestamps()
    if lie in ("length", "offset delta"):  # what the lookup readers read of a record
        with pytest.raises(InvalidRecordError):
            batch.timestamp_table()
        with pytest.raises(InvalidRecordError):
            batch.first_at_or_after(1005)
