"""The primitives every hand-written request reader shares (`codec`'s array-length walk, `produce_request`,
`list_offsets_request`): Kafka's unsigned varint, lengths, strings, array counts and tagged fields, and the
errors kio's path gives for them. `message` names the request in an error ("ProduceRequest")."""

from __future__ import annotations

import struct

from chronolog.errors import CorruptMessageError

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


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


def read_length(buf, pos: int, end: int, flexible: bool, wide: bool, message: str) -> tuple[int, int]:
    """A length (-1: null): compact in flexible versions, else int32 (`wide`) or int16. Other negative
    lengths are refused, as kio refuses them (Kafka's generated readers would read them as null)."""
    if flexible:
        if pos < end and buf[pos] < 0x80:  # one byte: every length but a large batch's
            return buf[pos] - 1, pos + 1
        n, pos = read_uvarint(buf, pos)
        return n - 1, pos
    st = _I32 if wide else _I16
    if pos + st.size > end:
        raise past_end()
    (n,) = st.unpack_from(buf, pos)
    if n < -1:
        raise CorruptMessageError(f"cannot decode {message}: negative length {n}")
    return n, pos + st.size


def null_field(message: str, what: str) -> CorruptMessageError:
    return CorruptMessageError(f"cannot decode {message}: non-nullable field {what} was serialized as null")


def read_string(buf, pos: int, end: int, flexible: bool, what: str, nullable: bool, message: str
                ) -> tuple[str | None, int]:
    n, pos = read_length(buf, pos, end, flexible, False, message)
    if n < 0:
        if nullable:
            return None, pos
        raise null_field(message, what)
    if pos + n > end:
        raise past_end()
    try:
        return str(buf[pos:pos + n], "utf-8"), pos + n
    except UnicodeDecodeError as exc:
        raise CorruptMessageError(f"cannot decode {message}: {what} is not UTF-8: {exc}") from None


def read_count(buf, pos: int, end: int, flexible: bool, what: str, message: str) -> tuple[int, int]:
    """An array's length, never null here; no collection longer than the bytes left (Kafka's readers)."""
    n, pos = read_length(buf, pos, end, flexible, True, message)
    if n < 0:
        raise null_field(message, what)
    if n > end - pos:
        raise past_end()
    return n, pos


def skip_tags(buf, pos: int, end: int) -> int:
    """Tagged fields, none of which a reader here keeps."""
    if pos < end and buf[pos] == 0:  # none: what every client sends
        return pos + 1
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > end:
            raise past_end()
    return pos
