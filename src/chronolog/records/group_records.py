"""The group coordinator's records in `__consumer_offsets`, in Kafka's schemas (byte for byte).

Keys and values are version-prefixed (`MessageUtil.toVersionPrefixedBytes`); the key's version says what the
record is (`GroupCoordinatorRecordSerde`): 0 or 1 an `OffsetCommitKey` (group, topic, partition), 2 a
`GroupMetadataKey` (group); 3 to 8 the records of a KIP-848 consumer group (below); 9 and up (share groups)
are skipped here. A null value is the tombstone of the key (a deleted offset, member or group).

Kafka's schemas (group-coordinator/src/main/resources/common/message/): `OffsetCommitValue` v0-v4 (v1 has
`expireTimestamp`, v3+ `leaderEpoch`, v4 is flexible) and `GroupMetadataValue` v0-v4 (v1+
`rebalanceTimeout`, v2+ `currentStateTimestamp`, v3+ `groupInstanceId`, v4 flexible). We write what a
current Kafka writes (`MetadataVersion.offsetCommitValueVersion` / `groupMetadataValueVersion`): key
version 1, OffsetCommitValue v3 (v1 when the commit carries an expire timestamp), GroupMetadataValue v3.
Every version is read.

A consumer group (KIP-848) is kept as Kafka's `GroupCoordinatorRecordHelpers` writes it, one record per
piece of state, all values version 0 and flexible: `ConsumerGroupMetadata` (key 3: the group epoch),
`ConsumerGroupPartitionMetadata` (key 4: the subscribed topics' ids, names and partition counts),
`ConsumerGroupMemberMetadata` (key 5: a member's subscription, client and timeouts, and for a classic
member in the group its protocols as the tagged `ClassicMemberMetadata`), `ConsumerGroupTargetAssignmentMetadata`
(key 6: the assignment epoch), `ConsumerGroupTargetAssignmentMember` (key 7: a member's target partitions) and
`ConsumerGroupCurrentMemberAssignment` (key 8: a member's epochs, state, partitions and those pending
revocation). Partitions are named by topic id, as in Kafka.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from chronolog.errors import CorruptMessageError, KafkaError

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3
# KIP-848 record types: the key's version prefix (CoordinatorRecordType); every value is version 0.
CONSUMER_GROUP_METADATA = 3
CONSUMER_GROUP_PARTITION_METADATA = 4
CONSUMER_GROUP_MEMBER_METADATA = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
CONSUMER_GROUP_RECORD_NAMES = {
    CONSUMER_GROUP_METADATA: "ConsumerGroupMetadata",
    CONSUMER_GROUP_PARTITION_METADATA: "ConsumerGroupPartitionMetadata",
    CONSUMER_GROUP_MEMBER_METADATA: "ConsumerGroupMemberMetadata",
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: "ConsumerGroupTargetAssignmentMetadata",
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: "ConsumerGroupTargetAssignmentMember",
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: "ConsumerGroupCurrentMemberAssignment",
}
_GROUP_KEYS = (CONSUMER_GROUP_METADATA, CONSUMER_GROUP_PARTITION_METADATA, CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA)
_MEMBER_KEYS = (CONSUMER_GROUP_MEMBER_METADATA, CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
                CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT)
# MemberState (org.apache.kafka.coordinator.group.modern.MemberState)
MEMBER_STABLE, MEMBER_UNREVOKED_PARTITIONS, MEMBER_UNRELEASED_PARTITIONS, MEMBER_UNKNOWN = 0, 1, 2, 127

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


@dataclass(frozen=True)
class ConsumerGroupKey:
    """Keys 3, 4 and 6: one record per group."""
    kind: int
    group: str


@dataclass(frozen=True)
class ConsumerGroupMemberKey:
    """Keys 5, 7 and 8: one record per member of a group."""
    kind: int
    group: str
    member_id: str


@dataclass(frozen=True)
class TopicMetadata:
    """ConsumerGroupPartitionMetadataValue.TopicMetadata (its rack list, unused since Kafka 4.0, is kept
    as read)."""
    topic_id: uuid.UUID
    name: str
    num_partitions: int
    partition_racks: tuple[tuple[int, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class ClassicMemberMetadata:
    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class ConsumerGroupMemberValue:
    """ConsumerGroupMemberMetadataValue."""
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic: ClassicMemberMetadata | None = None  # tagged field 0


TopicPartitions = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]  # topic id -> partitions


@dataclass(frozen=True)
class CurrentMemberAssignment:
    """ConsumerGroupCurrentMemberAssignmentValue."""
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: TopicPartitions
    pending_revocation: TopicPartitions


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

    def i8(self, v: int) -> None:
        self.out += struct.pack(">b", v)

    def uuid(self, v: uuid.UUID) -> None:
        self.out += v.bytes

    def int32s(self, values: Iterable[int]) -> None:
        values = list(values)
        self.array_len(len(values))
        for v in values:
            self.i32(v)

    def topic_partitions(self, tps: TopicPartitions) -> None:
        """[]TopicPartitions {TopicId uuid, Partitions []int32} of the flexible KIP-848 values."""
        self.array_len(len(tps))
        for topic_id, parts in tps:
            self.uuid(topic_id)
            self.int32s(parts)
            self.tags()


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


def consumer_group_key(kind: int, group: str) -> bytes:
    """ConsumerGroupMetadataKey (3), ConsumerGroupPartitionMetadataKey (4),
    ConsumerGroupTargetAssignmentMetadataKey (6): not flexible, the group id only."""
    if kind not in _GROUP_KEYS:
        raise ValueError(f"key type {kind} is not a consumer group's key")
    w = _Writer(False)
    w.i16(kind)
    w.string(group)
    return bytes(w.out)


def consumer_member_key(kind: int, group: str, member_id: str) -> bytes:
    """ConsumerGroupMemberMetadataKey (5), ConsumerGroupTargetAssignmentMemberKey (7),
    ConsumerGroupCurrentMemberAssignmentKey (8)."""
    if kind not in _MEMBER_KEYS:
        raise ValueError(f"key type {kind} is not a consumer group member's key")
    w = _Writer(False)
    w.i16(kind)
    w.string(group)
    w.string(member_id)
    return bytes(w.out)


# A streams group's state (KIP-1071) in chronolog's own form (server/streams_group_store.py): one record per
# group under this key version, which Kafka's coordinator does not know and skips. Not returned by read_key.
STREAMS_GROUP_STATE = 1071


def streams_group_key(group: str) -> bytes:
    w = _Writer(False)
    w.i16(STREAMS_GROUP_STATE)
    w.string(group)
    return bytes(w.out)


def streams_group_of(key: bytes | memoryview) -> str | None:
    """The group id of a streams group state key, None for any other key."""
    if key_version(key) != STREAMS_GROUP_STATE:
        return None
    r = _Reader(key)
    r.pos = 2
    return r.string()


def _epoch_value(epoch: int) -> bytes:
    w = _Writer(True)
    w.i16(0)
    w.i32(epoch)
    w.tags()
    return bytes(w.out)


def consumer_group_metadata_value(epoch: int) -> bytes:
    """ConsumerGroupMetadataValue v0: the group epoch (`newConsumerGroupEpochRecord`)."""
    return _epoch_value(epoch)


def target_assignment_metadata_value(assignment_epoch: int) -> bytes:
    """ConsumerGroupTargetAssignmentMetadataValue v0 (`newConsumerGroupTargetAssignmentEpochRecord`)."""
    return _epoch_value(assignment_epoch)


def partition_metadata_value(topics: Iterable[TopicMetadata]) -> bytes:
    """ConsumerGroupPartitionMetadataValue v0 (`newConsumerGroupSubscriptionMetadataRecord`)."""
    topics = list(topics)
    w = _Writer(True)
    w.i16(0)
    w.array_len(len(topics))
    for t in topics:
        w.uuid(t.topic_id)
        w.string(t.name)
        w.i32(t.num_partitions)
        w.array_len(len(t.partition_racks))
        for partition, racks in t.partition_racks:
            w.i32(partition)
            w.array_len(len(racks))
            for rack in racks:
                w.string(rack)
            w.tags()
        w.tags()
    w.tags()
    return bytes(w.out)


def member_metadata_value(value: ConsumerGroupMemberValue) -> bytes:
    """ConsumerGroupMemberMetadataValue v0 (`newConsumerGroupMemberSubscriptionRecord`; topic names sorted).
    A classic member's `ClassicMemberMetadata` is tagged field 0, absent (null) for a consumer-protocol member."""
    w = _Writer(True)
    w.i16(0)
    w.string(value.instance_id)
    w.string(value.rack_id)
    w.string(value.client_id)
    w.string(value.client_host)
    names = sorted(value.subscribed_topic_names)
    w.array_len(len(names))
    for n in names:
        w.string(n)
    w.string(value.subscribed_topic_regex)
    w.i32(value.rebalance_timeout_ms)
    w.string(value.server_assignor)
    if value.classic is None:
        w.tags()
    else:
        inner = _Writer(True)
        inner.i32(value.classic.session_timeout_ms)
        inner.array_len(len(value.classic.protocols))
        for name, metadata in value.classic.protocols:
            inner.string(name)
            inner.bytes_(metadata)
            inner.tags()
        inner.tags()
        # one tagged field: tag 0, its size, then (a nullable struct) the presence varint 1 and the struct
        # (MessageDataGenerator's writer of a nullable tagged struct)
        w.uvarint(1)
        w.uvarint(0)
        w.uvarint(len(inner.out) + 1)
        w.uvarint(1)
        w.out += inner.out
    return bytes(w.out)


def target_assignment_member_value(partitions: TopicPartitions) -> bytes:
    """ConsumerGroupTargetAssignmentMemberValue v0 (`newConsumerGroupTargetAssignmentRecord`)."""
    w = _Writer(True)
    w.i16(0)
    w.topic_partitions(partitions)
    w.tags()
    return bytes(w.out)


def current_assignment_value(value: CurrentMemberAssignment) -> bytes:
    """ConsumerGroupCurrentMemberAssignmentValue v0 (`newConsumerGroupCurrentAssignmentRecord`)."""
    w = _Writer(True)
    w.i16(0)
    w.i32(value.member_epoch)
    w.i32(value.previous_member_epoch)
    w.i8(value.state)
    w.topic_partitions(value.assigned)
    w.topic_partitions(value.pending_revocation)
    w.tags()
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

    def tagged(self) -> dict[int, bytes]:
        """The tagged fields section: tag -> its raw bytes."""
        out = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            out[tag] = self._raw(self.uvarint())
        return out

    def i8(self) -> int:
        return struct.unpack(">b", self._raw(1))[0]

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self._raw(16))

    def int32s(self) -> tuple[int, ...]:
        return tuple(self.take(_I32) for _ in range(self.array_len()))

    def topic_partitions(self) -> TopicPartitions:
        out = []
        for _ in range(self.array_len()):
            topic_id = self.uuid()
            parts = self.int32s()
            self.skip_tags()
            out.append((topic_id, parts))
        return tuple(out)

    def end(self) -> None:
        if self.pos != len(self.data):
            raise CorruptMessageError(f"group coordinator record has {len(self.data) - self.pos} bytes past its end")


def key_version(key: bytes | memoryview) -> int:
    if len(key) < 2:
        raise CorruptMessageError("group coordinator record key is too short")
    return _I16.unpack_from(key, 0)[0]


AnyKey = OffsetCommitKey | GroupMetadataKey | ConsumerGroupKey | ConsumerGroupMemberKey


def read_key(key: bytes | memoryview) -> AnyKey | None:
    """The key, or None for a record type this coordinator does not keep (share groups, later types)."""
    version = key_version(key)
    r = _Reader(key)
    r.pos = 2
    if version in (0, 1):
        return OffsetCommitKey(r.string(), r.string(), r.take(_I32))
    if version == 2:
        return GroupMetadataKey(r.string())
    if version in _GROUP_KEYS:
        return ConsumerGroupKey(version, r.string())
    if version in _MEMBER_KEYS:
        return ConsumerGroupMemberKey(version, r.string(), r.string())
    return None


def _v0_reader(value: bytes | memoryview, what: str) -> _Reader:
    version = value_version(value)
    if version != 0:
        raise CorruptMessageError(f"unknown {what} version {version}")
    r = _Reader(value, flexible=True)
    r.pos = 2
    return r


def read_epoch_value(value: bytes | memoryview) -> int:
    """ConsumerGroupMetadataValue's epoch or ConsumerGroupTargetAssignmentMetadataValue's assignment epoch."""
    r = _v0_reader(value, "ConsumerGroupMetadataValue")
    epoch = r.take(_I32)
    r.skip_tags()
    r.end()
    return epoch


def read_partition_metadata_value(value: bytes | memoryview) -> tuple[TopicMetadata, ...]:
    r = _v0_reader(value, "ConsumerGroupPartitionMetadataValue")
    topics = []
    for _ in range(r.array_len()):
        topic_id, name, count = r.uuid(), r.string(), r.take(_I32)
        racks = []
        for _ in range(r.array_len()):
            partition = r.take(_I32)
            racks.append((partition, tuple(r.string() for _ in range(r.array_len()))))
            r.skip_tags()
        r.skip_tags()
        topics.append(TopicMetadata(topic_id, name, count, tuple(racks)))
    r.skip_tags()
    r.end()
    return tuple(topics)


def read_member_metadata_value(value: bytes | memoryview) -> ConsumerGroupMemberValue:
    r = _v0_reader(value, "ConsumerGroupMemberMetadataValue")
    instance_id, rack_id = r.string(nullable=True), r.string(nullable=True)
    client_id, client_host = r.string(), r.string()
    names = tuple(r.string() for _ in range(r.array_len()))
    regex = r.string(nullable=True)
    rebalance_timeout = r.take(_I32)
    assignor = r.string(nullable=True)
    classic = None
    raw = r.tagged().get(0)
    r.end()
    if raw is not None and raw[:1] != b"\x00":  # a presence varint of 0: null
        c = _Reader(raw, flexible=True)
        c.uvarint()
        session = c.take(_I32)
        protocols = []
        for _ in range(c.array_len()):
            name = c.string()
            protocols.append((name, c.bytes_()))
            c.skip_tags()
        c.skip_tags()
        c.end()
        classic = ClassicMemberMetadata(session, tuple(protocols))
    return ConsumerGroupMemberValue(instance_id, rack_id, client_id, client_host, names, regex, rebalance_timeout,
                                    assignor, classic)


def read_target_assignment_member_value(value: bytes | memoryview) -> TopicPartitions:
    r = _v0_reader(value, "ConsumerGroupTargetAssignmentMemberValue")
    out = r.topic_partitions()
    r.skip_tags()
    r.end()
    return out


def read_current_assignment_value(value: bytes | memoryview) -> CurrentMemberAssignment:
    r = _v0_reader(value, "ConsumerGroupCurrentMemberAssignmentValue")
    epoch, previous, state = r.take(_I32), r.take(_I32), r.i8()
    assigned = r.topic_partitions()
    pending = r.topic_partitions()
    r.skip_tags()
    r.end()
    return CurrentMemberAssignment(epoch, previous, state, assigned, pending)


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
