"""Produce requests (v3-v13) read by hand, with each partition's records a slice of the frame.

kio reads a Produce request into new objects, and its records field into a new `bytes`: for the 1 MB
batches librdkafka sends (`batch.size`), a copy of the megabyte per request, and the frame itself had to
be `bytes` first. This reader walks the same layout (ProduceRequest.json, request header v1 or v2) and
hands storage `memoryview`s of the frame, so the records go from the socket buffer to the segment file
without another copy. It refuses what kio's path refuses: a field running past the frame, a null where the
schema has none (topic_data, partition_data, a topic name), a varint longer than 5 bytes, a name that is
not UTF-8. Trailing bytes are tolerated, as in `codec.parse_request`. `tests/protocol/test_produce_request.py`
compares it with kio on every version, and on truncated and corrupted frames.
"""

from __future__ import annotations

import struct
import uuid
from typing import NamedTuple

from chronolog.protocol.wire import past_end as _past_end
from chronolog.protocol.wire import read_count, read_length, read_string, skip_tags

MESSAGE = "ProduceRequest"  # in decode errors, as kio names it
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")


class PartitionProduceData(NamedTuple):
    index: int
    records: memoryview | None


class TopicProduceData(NamedTuple):
    name: str | None  # None from v13, which names topics by id
    partition_data: tuple[PartitionProduceData, ...]
    topic_id: uuid.UUID | None = None  # v13+ (KIP-516)


class ProduceRequest(NamedTuple):
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: tuple[TopicProduceData, ...]


def read_produce_request(frame: bytes | bytearray | memoryview, version: int) -> tuple[str | None, ProduceRequest]:
    """(client id, request) of a size-stripped Produce frame of `version` (3-13)."""
    if not 3 <= version <= 13:
        raise ValueError(f"Produce v{version} is not read here")
    view = frame if isinstance(frame, memoryview) else memoryview(frame)
    end = len(view)
    flexible = version >= 9
    # api key, version, correlation id (codec.peek_header read them); client_id is a classic string in both
    # header versions, then header v2's tagged fields
    client_id, pos = read_string(view, 8, end, False, "client_id", True, MESSAGE)
    if flexible:
        pos = skip_tags(view, pos, end)
    transactional_id, pos = read_string(view, pos, end, flexible, "transactional_id", True, MESSAGE)
    if pos + 6 > end:
        raise _past_end()
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(view, pos)
    topics = []
    n_topics, pos = read_count(view, pos + 6, end, flexible, "topic_data", MESSAGE)
    for _ in range(n_topics):
        name = topic_id = None
        if version >= 13:  # the topic's id in place of its name (KIP-516)
            if pos + 16 > end:
                raise _past_end()
            topic_id = uuid.UUID(bytes=bytes(view[pos:pos + 16]))
            topic_id = topic_id if topic_id.int else None  # the null id, read as kio reads it
            pos += 16
        else:
            name, pos = read_string(view, pos, end, flexible, "name", False, MESSAGE)
        partitions = []
        n_partitions, pos = read_count(view, pos, end, flexible, "partition_data", MESSAGE)
        for _ in range(n_partitions):
            if pos + 4 > end:
                raise _past_end()
            (index,) = _I32.unpack_from(view, pos)
            n, pos = read_length(view, pos + 4, end, flexible, True, MESSAGE)
            if n < 0:
                records = None
            elif pos + n > end:
                raise _past_end()
            else:
                records = view[pos:pos + n]
                pos += n
            if flexible:
                pos = skip_tags(view, pos, end)
            partitions.append(PartitionProduceData(index, records))
        if flexible:
            pos = skip_tags(view, pos, end)
        topics.append(TopicProduceData(name, tuple(partitions), topic_id))
    if flexible:
        skip_tags(view, pos, end)
    return client_id, ProduceRequest(transactional_id, acks, timeout_ms, tuple(topics))
