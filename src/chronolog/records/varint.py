"""Zigzag varints as Kafka's `ByteUtils` writes them (protobuf encoding)."""

from __future__ import annotations

from chronolog.errors import InvalidRecordError


def read_raw_varint(buf, pos: int, int32: bool = False) -> tuple[int, int]:
    """An unsigned varint (zigzag not undone) at `pos`: a long of up to 10 bytes (`ByteUtils.readVarlong`),
    or with `int32` an int as Kafka reads one (`ByteUtils.readVarint`: at most 5 bytes, bits beyond 32
    dropped). Record lengths, offset deltas, key, value and header sizes and header counts are int
    varints: Kafka's consumers refuse a longer one, so every reader and append validation do too. The one
    slow path of every varint decoder in this package."""
    limit = 28 if int32 else 63
    raw = shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise InvalidRecordError("varint runs past the end of the buffer")
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            return (raw & 0xFFFFFFFF if int32 else raw), pos
        shift += 7
        if shift > limit:
            raise InvalidRecordError(f"varint is longer than {5 if int32 else 10} bytes")


def read_varint(buf, pos: int, int32: bool = False) -> tuple[int, int]:
    """Decode a zigzag varint at `pos`, a long or (`int32`) an int as `read_raw_varint` reads them;
    returns (value, new position)."""
    if pos < len(buf) and buf[pos] < 0x80:  # the common one-byte case
        b = buf[pos]
        return (b >> 1) ^ -(b & 1), pos + 1
    raw, pos = read_raw_varint(buf, pos, int32)
    return (raw >> 1) ^ -(raw & 1), pos


def write_varint(value: int, out: bytearray) -> None:
    raw = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def size_of_varint(value: int) -> int:
    raw = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    size = 1
    while raw >= 0x80:
        raw >>= 7
        size += 1
    return size
