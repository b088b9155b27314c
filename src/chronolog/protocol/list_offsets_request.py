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

from chronolog.protocol.wire import past_end as _past_end
from chronolog.protocol.wire import read_count, read_string, skip_tags

MESSAGE = "ListOffsetsRequest"  # in decode errors, as kio names it
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


def read_list_offsets_request(frame: bytes | bytearray | memoryview, version: int
                              ) -> tuple[str | None, ListOffsetsRequest]:
    """(client id, request) of a size-stripped ListOffsets frame of `version` (1-11)."""
    if not 1 <= version <= 11:
        raise ValueError(f"ListOffsets v{version} is not read here")
    end = len(frame)
    flexible = version >= 6
    # api key, version, correlation id (codec.peek_header read them); client_id is a classic string in both
    # header versions, then header v2's tagged fields
    client_id, pos = read_string(frame, 8, end, False, "client_id", True, MESSAGE)
    if flexible:
        pos = skip_tags(frame, pos, end)
    fixed = 5 if version >= 2 else 4  # replica_id, then isolation_level from v2
    if pos + fixed > end:
        raise _past_end()
    replica_id = _I32.unpack_from(frame, pos)[0]
    isolation_level = frame[pos + 4] if version >= 2 else 0
    if isolation_level > 127:
        isolation_level -= 256  # an int8
    topics = []
    n_topics, pos = read_count(frame, pos + fixed, end, flexible, "topics", MESSAGE)
    layout = _PARTITION_EPOCH if version >= 4 else _PARTITION
    for _ in range(n_topics):
        name, pos = read_string(frame, pos, end, flexible, "name", False, MESSAGE)
        partitions = []
        n_partitions, pos = read_count(frame, pos, end, flexible, "partitions", MESSAGE)
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
                pos = skip_tags(frame, pos, end)
        if flexible:
            pos = skip_tags(frame, pos, end)
        topics.append(ListOffsetsTopic(name, tuple(partitions)))
    timeout_ms = 0
    if version >= 10:
        if pos + 4 > end:
            raise _past_end()
        timeout_ms = _I32.unpack_from(frame, pos)[0]
        pos += 4
    if flexible:
        skip_tags(frame, pos, end)
    return client_id, ListOffsetsRequest(replica_id, isolation_level, tuple(topics), timeout_ms)
