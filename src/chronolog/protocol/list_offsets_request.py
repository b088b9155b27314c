"""ListOffsets requests (v1-v11, ListOffsetsRequest.json) read by hand.

A lookup by time is one small request, and kio's path for it (the length walk, the header and body readers,
an entity per topic and partition) was a tenth of its broker CPU; this reader walks the same layout into
named tuples the handler reads as it read kio's entities. It refuses what kio's path refuses: a field
running past the frame, a null array or topic name, a negative length other than null, a varint longer than
5 bytes, a name that is not UTF-8. Trailing bytes are tolerated, as in `codec.parse_request`.
`tests/protocol/test_list_offsets_request.py` compares it with kio on every version, and on truncated and
corrupted frames.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from chronolog.errors import CorruptMessageError
from chronolog.protocol.wire import past_end as _past_end
from chronolog.protocol.wire import read_uvarint as _uvarint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION = struct.Struct(">iq")  # partition_index, timestamp (v1-v3)
_PARTITION_EPOCH = struct.Struct(">iiq")  # partition_index, current_leader_epoch, timestamp (v4+)


class ListOffsetsPartition(NamedTuple):
    partition_index: int
    timestamp: int
    current_leader_epoch: int = -1  # v4+ (KIP-320); -1: none given


class ListOffsetsTopic(NamedTuple):
    name: str
    partitions: tuple[ListOffsetsPartition, ...]


class ListOffsetsRequest(NamedTuple):
    replica_id: int
    isolation_level: int  # v2+ (KIP-98); 0 before
    topics: tuple[ListOffsetsTopic, ...]
    timeout_ms: int = 0  # v10+ (KIP-1075)


def _corrupt(what: str) -> CorruptMessageError:
    return CorruptMessageError(f"cannot decode ListOffsetsRequest: {what}")


def _length(buf, pos: int, end: int, flexible: bool, wide: bool) -> tuple[int, int]:
    """A length (-1: null): compact in flexible versions, else int32 (`wide`) or int16."""
    if flexible:
        if pos < end and buf[pos] < 0x80:  # one byte: every length a lookup carries
            return buf[pos] - 1, pos + 1
        n, pos = _uvarint(buf, pos)
        return n - 1, pos
    st = _I32 if wide else _I16
    if pos + st.size > end:
        raise _past_end()
    (n,) = st.unpack_from(buf, pos)
    if n < -1:
        raise _corrupt(f"negative length {n}")
    return n, pos + st.size


def _string(buf, pos: int, end: int, flexible: bool, what: str, nullable: bool) -> tuple[str | None, int]:
    n, pos = _length(buf, pos, end, flexible, False)
    if n < 0:
        if nullable:
            return None, pos
        raise _corrupt(f"non-nullable field {what} was serialized as null")
    if pos + n > end:
        raise _past_end()
    try:
        return str(buf[pos:pos + n], "utf-8"), pos + n
    except UnicodeDecodeError as exc:
        raise _corrupt(f"{what} is not UTF-8: {exc}") from None


def _count(buf, pos: int, end: int, flexible: bool, what: str) -> tuple[int, int]:
    n, pos = _length(buf, pos, end, flexible, True)
    if n < 0:
        raise _corrupt(f"non-nullable field {what} was serialized as null")
    if n > end - pos:  # Kafka's readers: no collection longer than the bytes left
        raise _past_end()
    return n, pos


def _skip_tags(buf, pos: int, end: int) -> int:
    if pos < end and buf[pos] == 0:  # none: what every client sends
        return pos + 1
    count, pos = _uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        pos += size
        if pos > end:
            raise _past_end()
    return pos


def read_list_offsets_request(frame: bytes | bytearray | memoryview, version: int
                              ) -> tuple[str | None, ListOffsetsRequest]:
    """(client id, request) of a size-stripped ListOffsets frame of `version` (1-11)."""
    if not 1 <= version <= 11:
        raise ValueError(f"ListOffsets v{version} is not read here")
    end = len(frame)
    flexible = version >= 6
    # api key, version, correlation id (codec.peek_header read them); client_id is a classic string in both
    # header versions, then header v2's tagged fields
    client_id, pos = _string(frame, 8, end, False, "client_id", True)
    if flexible:
        pos = _skip_tags(frame, pos, end)
    fixed = 5 if version >= 2 else 4  # replica_id, then isolation_level from v2
    if pos + fixed > end:
        raise _past_end()
    replica_id = _I32.unpack_from(frame, pos)[0]
    isolation_level = frame[pos + 4] if version >= 2 else 0
    if isolation_level > 127:
        isolation_level -= 256  # an int8
    topics = []
    n_topics, pos = _count(frame, pos + fixed, end, flexible, "topics")
    layout = _PARTITION_EPOCH if version >= 4 else _PARTITION
    for _ in range(n_topics):
        name, pos = _string(frame, pos, end, flexible, "name", False)
        partitions = []
        n_partitions, pos = _count(frame, pos, end, flexible, "partitions")
        for _ in range(n_partitions):
            if pos + layout.size > end:
                raise _past_end()
            fields = layout.unpack_from(frame, pos)
            pos += layout.size
            if version >= 4:
                partitions.append(ListOffsetsPartition(fields[0], fields[2], fields[1]))
            else:
                partitions.append(ListOffsetsPartition(fields[0], fields[1]))
            if flexible:
                pos = _skip_tags(frame, pos, end)
        if flexible:
            pos = _skip_tags(frame, pos, end)
        topics.append(ListOffsetsTopic(name, tuple(partitions)))
    timeout_ms = 0
    if version >= 10:
        if pos + 4 > end:
            raise _past_end()
        timeout_ms = _I32.unpack_from(frame, pos)[0]
        pos += 4
    if flexible:
        _skip_tags(frame, pos, end)
    return client_id, ListOffsetsRequest(replica_id, isolation_level, tuple(topics), timeout_ms)
