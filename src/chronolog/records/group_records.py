"""The group coordinator's records in `__consumer_offsets`, in Kafka's schemas (byte for byte).

Keys and values are version-prefixed (`MessageUtil.toVersionPrefixedBytes`); the key's version says what the
record is (`GroupCoordinatorRecordSerde`): 0 or 1 an `OffsetCommitKey` (group, topic, partition), 2 a
`GroupMetadataKey` (group); 3 and up are KIP-848/share-group records, which are skipped here. A null value is
the tombstone of the key (a deleted offset or group).

Kafka's schemas (group-coordinator/src/main/resources/common/message/): `OffsetCommitValue` v0-v4 (v1 has
`expireTimestamp`, v3+ `leaderEpoch`, v4 is flexible) and `GroupMetadataValue` v0-v4 (v1+
`rebalanceTimeout`, v2+ `currentStateTimestamp`, v3+ `groupInstanceId`, v4 flexible). We write what a
current Kafka writes (`MetadataVersion.offsetCommitValueVersion` / `groupMetadataValueVersion`): key
version 1, OffsetCommitValue v3 (v1 when the commit carries an expire timestamp), GroupMetadataValue v3.
Every version is read.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from chronolog.errors import CorruptMessageError, KafkaError

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


@dataclass(frozen=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True)
class OffsetCommitValue:
    offset: int
    metadata: str = ""
    commit_timestamp: int = -1
    leader_epoch: int = -1      # v3+
    expire_timestamp: int = -1  # v1 only


@dataclass(frozen=True)
class MemberMetadata:
    member_id: str
    client_id: str
    client_host: str
    session_timeout: int
    subscription: bytes
    assignment: bytes
    rebalance_timeout: int = -1         # v1+
    group_instance_id: str | None = None  # v3+


@dataclass(frozen=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1  # v2+
    members: tuple[MemberMetadata, ...] = field(default_factory=tuple)


# -- writing ----------------------------------------------------------------------------------------------
class _Writer:
    def __init__(self, flexible: bool) -> None:
        self.out = bytearray()
        self.flexible = flexible

    def i16(self, v: int) -> None:
        self.out += _I16.pack(v)

    def i32(self, v: int) -> None:
        self.out += _I32.pack(v)

    def i64(self, v: int) -> None:
        self.out += _I64.pack(v)

    def uvarint(self, v: int) -> None:
        while v >= 0x80:
            self.out.append((v & 0x7F) | 0x80)
            v >>= 7
        self.out.append(v)

    def _length(self, n: int, wide: bool) -> None:
        """A length, -1 for null: int16/int32 in the classic versions, unsigned varint of n+1 when flexible."""
        if self.flexible:
            self.uvarint(n + 1)
        elif wide:
            self.i32(n)
        else:
            self.i16(n)

    def string(self, s: str | None) -> None:
        if s is None:
            self._length(-1, False)
            return
        raw = s.encode()
        self._length(len(raw), False)
        self.out += raw

    def bytes_(self, b: bytes | None) -> None:
        if b is None:
            self._length(-1, True)
            return
        self._length(len(b), True)
        self.out += b

    def array_len(self, n: int) -> None:
        self._length(n, True)

    def tags(self) -> None:
        if self.flexible:
            self.uvarint(0)  # no tagged fields


def offset_commit_key(group: str, topic: str, partition: int, version: int = OFFSET_COMMIT_KEY_VERSION) -> bytes:
    if version not in (0, 1):
        raise ValueError(f"OffsetCommitKey has versions 0-1, not {version}")
    w = _Writer(False)
    w.i16(version)
    w.string(group)
    w.string(topic)
    w.i32(partition)
    return bytes(w.out)


def group_metadata_key(group: str) -> bytes:
    w = _Writer(False)
    w.i16(GROUP_METADATA_KEY_VERSION)
    w.string(group)
    return bytes(w.out)


def offset_commit_value(value: OffsetCommitValue, version: int | None = None) -> bytes:
    """`GroupCoordinatorRecordHelpers.newOffsetCommitRecord`: v1 when an expire timestamp is set, else v3."""
    if version is None:
        version = 1 if value.expire_timestamp >= 0 else OFFSET_COMMIT_VALUE_VERSION
    if not 0 <= version <= 4:
        raise ValueError(f"OffsetCommitValue has versions 0-4, not {version}")
    w = _Writer(version >= 4)
    w.i16(version)
    w.i64(value.offset)
    if version >= 3:
        w.i32(value.leader_epoch)
    w.string(value.metadata)
    w.i64(value.commit_timestamp)
    if version == 1:
        w.i64(value.expire_timestamp)
    w.tags()
    return bytes(w.out)


def group_metadata_value(value: GroupMetadataValue, version: int = GROUP_METADATA_VALUE_VERSION) -> bytes:
    if not 0 <= version <= 4:
        raise ValueError(f"GroupMetadataValue has versions 0-4, not {version}")
    w = _Writer(version >= 4)
    w.i16(version)
    w.string(value.protocol_type)
    w.i32(value.generation)
    w.string(value.protocol)
    w.string(value.leader)
    if version >= 2:
        w.i64(value.current_state_timestamp)
    w.array_len(len(value.members))
    for m in value.members:
        w.string(m.member_id)
        if version >= 3:
            w.string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        if version >= 1:
            w.i32(m.rebalance_timeout)
        w.i32(m.session_timeout)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
        w.tags()
    w.tags()
    return bytes(w.out)


# -- reading ----------------------------------------------------------------------------------------------
class _Reader:
    def __init__(self, data: bytes | memoryview, flexible: bool = False) -> None:
        self.data, self.pos, self.flexible = memoryview(data).cast("B"), 0, flexible

    def take(self, st: struct.Struct) -> int:
        if self.pos + st.size > len(self.data):
            raise CorruptMessageError("group coordinator record is too short")
        (v,) = st.unpack_from(self.data, self.pos)
        self.pos += st.size
        return v

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            if self.pos >= len(self.data) or shift > 28:
                raise CorruptMessageError("group coordinator record has a bad varint")
            b = self.data[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    def _length(self, wide: bool) -> int:
        if self.flexible:
            return self.uvarint() - 1
        return self.take(_I32 if wide else _I16)

    def _raw(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise CorruptMessageError("group coordinator record is too short")
        out = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        return out

    def string(self, nullable: bool = False) -> str | None:
        n = self._length(False)
        if n < 0:
            if nullable:
                return None
            raise CorruptMessageError("group coordinator record has a null non-nullable string")
        try:
            return self._raw(n).decode()
        except UnicodeDecodeError:
            raise CorruptMessageError("group coordinator record has a string that is not UTF-8") from None

    def bytes_(self) -> bytes:
        n = self._length(True)
        return b"" if n < 0 else self._raw(n)

    def array_len(self) -> int:
        return max(self._length(True), 0)

    def skip_tags(self) -> None:
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()
                self._raw(self.uvarint())


def key_version(key: bytes | memoryview) -> int:
    if len(key) < 2:
        raise CorruptMessageError("group coordinator record key is too short")
    return _I16.unpack_from(key, 0)[0]


def read_key(key: bytes | memoryview) -> OffsetCommitKey | GroupMetadataKey | None:
    """The key, or None for a record type this coordinator does not keep (KIP-848, share groups)."""
    version = key_version(key)
    r = _Reader(key)
    r.pos = 2
    if version in (0, 1):
        return OffsetCommitKey(r.string(), r.string(), r.take(_I32))
    if version == 2:
        return GroupMetadataKey(r.string())
    return None


def value_version(value: bytes | memoryview) -> int:
    if len(value) < 2:
        raise CorruptMessageError("group coordinator record value is too short")
    return _I16.unpack_from(value, 0)[0]


def read_offset_commit_value(value: bytes | memoryview) -> OffsetCommitValue:
    version = value_version(value)
    if not 0 <= version <= 4:
        raise CorruptMessageError(f"unknown OffsetCommitValue version {version}")
    r = _Reader(value, flexible=version >= 4)
    r.pos = 2
    offset = r.take(_I64)
    epoch = r.take(_I32) if version >= 3 else -1
    metadata = r.string()
    commit_ts = r.take(_I64)
    expire_ts = r.take(_I64) if version == 1 else -1
    r.skip_tags()
    return OffsetCommitValue(offset, metadata, commit_ts, epoch, expire_ts)


def read_group_metadata_value(value: bytes | memoryview) -> GroupMetadataValue:
    version = value_version(value)
    if not 0 <= version <= 4:
        raise CorruptMessageError(f"unknown GroupMetadataValue version {version}")
    r = _Reader(value, flexible=version >= 4)
    r.pos = 2
    protocol_type = r.string()
    generation = r.take(_I32)
    protocol = r.string(nullable=True)
    leader = r.string(nullable=True)
    state_ts = r.take(_I64) if version >= 2 else -1
    members = []
    for _ in range(r.array_len()):
        member_id = r.string()
        instance = r.string(nullable=True) if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance = r.take(_I32) if version >= 1 else -1
        session = r.take(_I32)
        subscription = r.bytes_()
        assignment = r.bytes_()
        r.skip_tags()
        members.append(MemberMetadata(member_id, client_id, client_host, session, subscription, assignment,
                                      rebalance, instance))
    r.skip_tags()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, state_ts, tuple(members))


# -- where a group's records go, and reading commits back (the offsets topic's layout, used by the
# coordinator in `server` and by the time-travel tools, which read the topic without a broker's objects) --
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"


def java_string_hash(s: str) -> int:
    """java.lang.String.hashCode over UTF-16 code units, as a signed 32-bit int."""
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str, partitions: int) -> int:
    """TransactionStateManager.partitionFor / GroupMetadataManager.partitionFor:
    `Utils.abs(key.hashCode) % partitions` (Utils.abs maps Integer.MIN_VALUE to 0)."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


@dataclass(frozen=True)
class CommitEvent:
    """One committed position as read back from the topic (group-history)."""

    timestamp: int       # the record's timestamp: when the coordinator wrote it
    group: str
    topic: str
    partition: int
    offset: int | None   # None: a tombstone (the offset was deleted)
    commit_timestamp: int


def commit_events(records: Iterable[Any], group: str | None = None) -> Iterator[CommitEvent]:
    """Commit records (and their tombstones) of `__consumer_offsets` as events; other records skipped."""
    for rec in records:
        if rec.key is None:
            continue
        try:
            key = read_key(rec.key)
            if not isinstance(key, OffsetCommitKey) or (group is not None and key.group != group):
                continue
            if rec.value is None:
                yield CommitEvent(rec.timestamp, key.group, key.topic, key.partition, None, -1)
            else:
                v = read_offset_commit_value(rec.value)
                yield CommitEvent(rec.timestamp, key.group, key.topic, key.partition, v.offset, v.commit_timestamp)
        except (KafkaError, struct.error):
            continue
