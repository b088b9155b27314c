"""The two primitives every hand-written request reader shares: Kafka's unsigned varint and the error for a
field that runs past the end of its frame. Both `codec` (its array-length walk) and `produce_request` read
with them, so neither imports the other for them."""

from __future__ import annotations

from chronolog.errors import CorruptMessageError


def past_end() -> CorruptMessageError:
    return CorruptMessageError("request runs past the end of its frame")


def read_uvarint(buf, pos: int) -> tuple[int, int]:
    """Kafka's `ByteUtils.readUnsignedVarint`: at most 5 bytes."""
    if pos < len(buf) and buf[pos] < 0x80:  # one byte: almost every length and tag count
        return buf[pos], pos + 1
    value = shift = 0
    for i in range(pos, min(pos + 5, len(buf))):
        b = buf[i]
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i + 1
        shift += 7
    if pos + 5 > len(buf):
        raise past_end()
    raise CorruptMessageError("varint is longer than 5 bytes")
