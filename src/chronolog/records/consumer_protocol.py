"""The consumer protocol's embedded formats (Kafka's `ConsumerProtocol`): the subscription a member sends in
JoinGroup's protocol metadata and the assignment the leader hands out through SyncGroup, both stored in
`__consumer_offsets` group metadata. One reader and writer for the coordinator, the KIP-848 group's classic
members and `dump-log --offsets-decoder`.

`ConsumerProtocolSubscription` v0-v3: topics, userData; v1 ownedPartitions; v2 generationId; v3 rackId. A
version above 3 is read as v3 (Kafka reads a newer version by the fields it knows). The fields a version
added may be missing at the end of the bytes (clients before them wrote none): they then read as their
defaults. `ConsumerProtocolAssignment` v0-v3: assignedPartitions, userData. Anything else malformed (a
length past the end, bytes that are not UTF-8) raises `ValueError`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

SUBSCRIPTION_VERSION = 3  # the highest ConsumerProtocolSubscription version there is
ASSIGNMENT_VERSION = 0  # what we write: every version of ConsumerProtocolAssignment has the same fields

TopicPartitions = tuple[tuple[str | None, tuple[int, ...]], ...]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


@dataclass(frozen=True)
class Subscription:
    version: int
    topics: tuple[str | None, ...]
    user_data: bytes | None = None
    owned_partitions: TopicPartitions = ()  # v1+
    generation_id: int = -1  # v2+
    rack_id: str | None = None  # v3+


@dataclass(frozen=True)
class Assignment:
    version: int
    partitions: TopicPartitions
    user_data: bytes | None = None


class _Reader:
    def __init__(self, data: bytes | memoryview, errors: str = "strict") -> None:
        self.data, self.pos, self.errors = bytes(data), 0, errors

    def more(self) -> bool:
        return self.pos < len(self.data)

    def int(self, fmt: struct.Struct) -> int:
        (v,) = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return v

    def _span(self, n: int, what: str) -> bytes:
        if self.pos + n > len(self.data):
            raise ValueError(f"{what} past the end")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def string(self) -> str | None:
        n = self.int(_I16)
        return None if n < 0 else self._span(n, "string").decode(errors=self.errors)

    def bytes_(self) -> bytes | None:
        n = self.int(_I32)
        return None if n < 0 else self._span(n, "bytes")

    def topic_partitions(self) -> TopicPartitions:
        out = []
        for _ in range(self.int(_I32)):
            topic = self.string()
            out.append((topic, tuple(self.int(_I32) for _ in range(self.int(_I32)))))
        return tuple(out)


def read_subscription(data: bytes | memoryview, max_version: int | None = None, errors: str = "strict"
                      ) -> Subscription:
    """A ConsumerProtocolSubscription (ConsumerProtocol.deserializeSubscription); `max_version` reads only
    that version's prefix of a newer one (ClassicGroup.computeSubscribedTopics reads version 0's). `errors`:
    how names that are not UTF-8 decode ("replace": as Java's String does, U+FFFD). A negative count of
    topics (null, which the schema does not allow) is malformed, as Kafka's generated reader finds it."""
    r = _Reader(data, errors)
    try:
        version = r.int(_I16)
        if max_version is not None:
            version = min(version, max_version)
        count = r.int(_I32)
        if count < 0:
            raise ValueError("null topics")
        topics = tuple(r.string() for _ in range(count))
        user_data = r.bytes_()
        owned = r.topic_partitions() if version >= 1 and r.more() else ()
        generation = r.int(_I32) if version >= 2 and r.more() else -1
        rack = r.string() if version >= 3 and r.more() else None
    except (struct.error, ValueError) as exc:  # (UnicodeDecodeError is a ValueError)
        raise ValueError(f"malformed consumer protocol subscription: {exc}") from None
    return Subscription(version, topics, user_data, owned, generation, rack)


def read_assignment(data: bytes | memoryview) -> Assignment:
    """A ConsumerProtocolAssignment (ConsumerProtocol.deserializeAssignment)."""
    r = _Reader(data)
    try:
        version = r.int(_I16)
        partitions = r.topic_partitions()
        user_data = r.bytes_()
    except (struct.error, ValueError) as exc:
        raise ValueError(f"malformed consumer protocol assignment: {exc}") from None
    return Assignment(version, partitions, user_data)


def _string(s: str | None) -> bytes:
    if s is None:
        return _I16.pack(-1)
    b = s.encode()
    return _I16.pack(len(b)) + b


def _bytes(b: bytes | None) -> bytes:
    return _I32.pack(-1) if b is None else _I32.pack(len(b)) + b


def _topic_partitions(assigned: Mapping[str, Iterable[int]]) -> list[bytes]:
    out = [_I32.pack(len(assigned))]
    for topic in sorted(assigned):
        parts = sorted(assigned[topic])
        out.append(_string(topic) + struct.pack(f">i{len(parts)}i", len(parts), *parts))
    return out


def write_assignment(assigned: Mapping[str, Iterable[int]], user_data: bytes | None = None) -> bytes:
    """ConsumerProtocolAssignment v0 (topics and partitions sorted): what SyncGroup hands a member."""
    return b"".join([_I16.pack(ASSIGNMENT_VERSION), *_topic_partitions(assigned), _bytes(user_data)])


def write_subscription(topics: Iterable[str], user_data: bytes | None = None, *,
                       owned: Mapping[str, Iterable[int]] | None = None, generation_id: int = -1,
                       rack_id: str | None = None, version: int = SUBSCRIPTION_VERSION) -> bytes:
    """ConsumerProtocolSubscription at `version` (the fields that version has), as a client sends it."""
    topics = list(topics)
    out = [_I16.pack(version), _I32.pack(len(topics)), *(_string(t) for t in topics), _bytes(user_data)]
    if version >= 1:
        out += _topic_partitions(owned or {})
    if version >= 2:
        out.append(_I32.pack(generation_id))
    if version >= 3:
        out.append(_string(rack_id))
    return b"".join(out)
