"""Zigzag varints as Kafka's `ByteUtils` writes them (protobuf encoding)."""

from __future__ import annotations

from chronolog.errors import InvalidRecordError


def read_varint(buf, pos: int, int32: bool = False) -> tuple[int, int]:
    """Decode a zigzag varint at `pos`; returns (value, new position). A long (`ByteUtils.readVarlong`: up
    to 10 bytes) by default; with `int32` an int as Kafka reads one (`ByteUtils.readVarint`: at most 5
    bytes, bits beyond 32 dropped), which is what record lengths, offset deltas, key, value and header
    sizes and header counts are, so a reader refuses what Kafka's consumers refuse."""
    if pos < len(buf) and buf[pos] < 0x80:  # the common one-byte case
        b = buf[pos]
        return (b >> 1) ^ -(b & 1), pos + 1
    limit = 28 if int32 else 63
    shift = 0
    raw = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise InvalidRecordError("varint runs past the end of the buffer")
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > limit:
            raise InvalidRecordError(f"varint is longer than {5 if int32 else 10} bytes")
    if int32:
        raw &= 0xFFFFFFFF
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
