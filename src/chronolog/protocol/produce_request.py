"""Produce requests (v3-v11) read by hand, with each partition's records a slice of the frame.

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
from dataclasses import dataclass

from chronolog.errors import CorruptMessageError

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")


@dataclass(frozen=True, slots=True)
class PartitionProduceData:
    index: int
    records: memoryview | None


@dataclass(frozen=True, slots=True)
class TopicProduceData:
    name: str
    partition_data: tuple[PartitionProduceData, ...]


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: tuple[TopicProduceData, ...]


def _past_end() -> CorruptMessageError:
    return CorruptMessageError("cannot decode ProduceRequest: a field runs past the end of the frame")


class _Reader:
    """A cursor over one frame; every read checks the frame's end."""

    __slots__ = ("buf", "view", "pos", "end", "flexible")

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int, flexible: bool) -> None:
        self.view = buf if isinstance(buf, memoryview) else memoryview(buf)
        self.buf = buf
        self.pos = pos
        self.end = len(buf)
        self.flexible = flexible

    def fixed(self, st: struct.Struct) -> tuple:
        pos = self.pos
        if pos + st.size > self.end:
            raise _past_end()
        self.pos = pos + st.size
        return st.unpack_from(self.buf, pos)

    def uvarint(self) -> int:
        """Kafka's `ByteUtils.readUnsignedVarint`: at most 5 bytes."""
        value = shift = 0
        for i in range(self.pos, min(self.pos + 5, self.end)):
            b = self.buf[i]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                self.pos = i + 1
                return value
            shift += 7
        if self.pos + 5 > self.end:
            raise _past_end()
        raise CorruptMessageError("cannot decode ProduceRequest: a varint is longer than 5 bytes")

    def length(self, wide: bool) -> int:
        """A length (-1: null): compact in flexible versions, else int32 (`wide`) or int16. Other negative
        lengths are refused, as kio refuses them (Kafka's generated readers would read them as null)."""
        if self.flexible:
            return self.uvarint() - 1
        n = self.fixed(_I32 if wide else _I16)[0]
        if n < -1:
            raise CorruptMessageError(f"cannot decode ProduceRequest: negative length {n}")
        return n

    def take(self, n: int) -> memoryview:
        pos = self.pos
        if n < 0 or pos + n > self.end:
            raise _past_end()
        self.pos = pos + n
        return self.view[pos:pos + n]

    def string(self, what: str, nullable: bool) -> str | None:
        n = self.length(False)
        if n < 0:
            if nullable:
                return None
            raise CorruptMessageError(f"cannot decode ProduceRequest: non-nullable field {what} was serialized as null")
        try:
            return str(self.take(n), "utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptMessageError(f"cannot decode ProduceRequest: {what} is not UTF-8: {exc}") from None

    def count(self, what: str) -> int:
        n = self.length(True)
        if n < 0:
            raise CorruptMessageError(f"cannot decode ProduceRequest: non-nullable field {what} was serialized as null")
        if n > self.end - self.pos:  # Kafka's readers: no collection longer than the bytes left
            raise _past_end()
        return n

    def skip_tags(self) -> None:
        if not self.flexible:
            return
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self.take(self.uvarint())


def read_produce_request(frame: bytes | bytearray | memoryview, version: int) -> tuple[str | None, ProduceRequest]:
    """(client id, request) of a size-stripped Produce frame of `version` (3-11)."""
    if not 3 <= version <= 11:
        raise ValueError(f"Produce v{version} is not read here")
    r = _Reader(frame, 8, False)  # api key, version, correlation id: codec.peek_header read them
    client_id = r.string("client_id", True)  # a classic string in both header versions
    r.flexible = version >= 9
    r.skip_tags()  # header v2
    transactional_id = r.string("transactional_id", True)
    acks, timeout_ms = r.fixed(_ACKS_TIMEOUT)
    topics = []
    for _ in range(r.count("topic_data")):
        name = r.string("name", False)
        partitions = []
        for _ in range(r.count("partition_data")):
            (index,) = r.fixed(_I32)
            n = r.length(True)
            records = None if n < 0 else r.take(n)
            r.skip_tags()
            partitions.append(PartitionProduceData(index, records))
        r.skip_tags()
        topics.append(TopicProduceData(name, tuple(partitions)))
    r.skip_tags()
    return client_id, ProduceRequest(transactional_id, acks, timeout_ms, tuple(topics))
