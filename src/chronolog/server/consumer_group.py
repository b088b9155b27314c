"""Consumer groups of the KIP-848 protocol (ConsumerGroupHeartbeat): the broker assigns partitions.

Kafka's `GroupMetadataManager.consumerGroupHeartbeat` with its `CurrentAssignmentBuilder`, for one broker:
every change of the group (a member joining, leaving or changing its subscription, a subscribed topic
gaining partitions) bumps the group epoch and computes a new target assignment with the group's assignor
(`uniform` or `range`, the `group.consumer.assignors` of Kafka). Each member then reconciles towards its
target on its own heartbeats: partitions it must give up are revoked first (it keeps its epoch until it
reports them released), partitions still owned by another member are handed over only once that member
released them, and the member's epoch becomes the target's epoch. A member silent for
`group.consumer.session.timeout.ms`, or not revoking within its rebalance timeout, is fenced.

A group id names one group: classic (server/coordinator.py) or consumer (here). The `GroupCoordinator`
owns both; an empty group of one type becomes the other type on a join (Kafka's
`maybeDeleteEmptyClassicGroup`); a non-empty classic group refuses consumer-protocol members (Kafka with
`group.consumer.migration.policy=disabled`), while a non-empty consumer group takes classic members, as
Kafka does under any policy (`classicGroupJoinToConsumerGroup`). Committed offsets are shared: one store
keyed by group id.

Every change is durable in `__consumer_offsets` before it is answered, and the groups come back after a
restart with their members, epochs and partitions: server/consumer_group_store.py writes and replays the
records (Kafka's group records, as `GroupMetadataManager` and its coordinator runtime keep them).
"""

from __future__ import annotations

import logging
import struct
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from chronolog.errors import ErrorCode, KafkaError
from chronolog.server.assignment import ASSIGNORS, Assignment, regex_matches, topic_regex
from chronolog.server.assignment import inter as _inter
from chronolog.server.assignment import minus as _minus
from chronolog.server.assignment import union as _union

if TYPE_CHECKING:  # the store imports this module's groups; the coordinator hands one to ConsumerGroups
    from chronolog.server.consumer_group_store import ConsumerGroupStore

log = logging.getLogger(__name__)

LEAVE_EPOCH, STATIC_LEAVE_EPOCH = -1, -2  # ConsumerGroupHeartbeatRequest.LEAVE_GROUP_(STATIC_)MEMBER_EPOCH
EMPTY, ASSIGNING, RECONCILING, STABLE = "Empty", "Assigning", "Reconciling", "Stable"



def fenced_members(members: dict, now: float, session_of: Callable) -> Iterator[tuple[str, str]]:
    """(member id, why) of each member to fence at `now` (GroupMetadataManager's session and rebalance timers):
    silent for longer than `session_of(member)` seconds, or past its revoke deadline. Lazy, over a copy: each
    member is judged after the caller has removed the ones before it (a removal moves the others' deadlines).
    Streams groups use it too (server/streams_group.py)."""
    for mid, m in list(members.items()):
        if now - m.last_heartbeat > session_of(m):
            yield mid, "expired (session timeout)"
        elif m.revoke_deadline is not None and now > m.revoke_deadline:
            yield mid, "fenced (did not revoke within its rebalance timeout)"


def offset_fetch_error(groups: dict, group_id: str, member_id: str | None, epoch: int,
                       stale: Callable[[object], int] = lambda m: ErrorCode.STALE_MEMBER_EPOCH) -> int:
    """validateOffsetFetch (OffsetFetch v9+) of a consumer or streams group of `groups`: without a member id
    and epoch (an admin client) any fetch goes; a member must be known (UNKNOWN_MEMBER_ID) and at its epoch
    (`stale(member)` names the error otherwise). 0 or the error code."""
    group = groups.get(group_id)
    if group is None or (member_id is None and epoch < 0):
        return 0
    member = group.members.get(member_id or "")
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    return stale(member) if epoch != member.epoch else 0


def delete_empty_group(groups: dict, group_id: str, store) -> int | None:
    """DeleteGroups of one group of `groups` (ConsumerGroup/StreamsGroup.createGroupTombstoneRecords): None when
    it is not one of them, NON_EMPTY_GROUP while it has members; else it goes and its tombstones are written
    through `store`, and when they cannot be it comes back and the write's error code is the answer. Streams
    groups use it too (server/streams_group.py)."""
    group = groups.get(group_id)
    if group is None:
        return None
    if group.members:
        return ErrorCode.NON_EMPTY_GROUP
    del groups[group_id]
    failed = store.durable(group_id, None)
    if failed:
        groups[group_id] = group
        return failed["error_code"]
    return 0


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed: tuple[str, ...]  # what the member reads: its topic names and the topics its regex matches
    assignor: str | None
    rebalance_timeout_ms: int
    names: tuple[str, ...] = ()  # SubscribedTopicNames as sent
    regex: str | None = None     # SubscribedTopicRegex (v1), resolved against the topics at every heartbeat
    epoch: int = 0
    previous_epoch: int = -1
    assigned: Assignment = field(default_factory=dict)   # what the member was told it owns
    revoking: Assignment = field(default_factory=dict)   # what it must release before its next epoch
    revoke_deadline: float | None = None
    static_left: bool = False  # left with epoch -2: its instance may come back under a new member id
    last_heartbeat: float = field(default_factory=time.monotonic)
    # A classic member (JoinGroup/SyncGroup/Heartbeat) in this consumer group: its protocols and session
    # timeout (Kafka's ClassicMemberMetadata); None for a consumer-protocol member.
    classic_protocols: list[tuple[str, bytes]] | None = None
    session_timeout_ms: int | None = None
    # The member epoch each partition it owns or is revoking was assigned at (KIP-1251's assignment epochs,
    # ConsumerGroupMember.assignmentEpoch): a commit with an older member epoch is valid for a partition
    # assigned at or before that epoch.
    partition_epochs: dict[tuple[str, int], int] = field(default_factory=dict)

    def stamp(self) -> None:
        """Partitions new to the member take its current epoch; those it no longer holds are forgotten."""
        held = {(t, p) for a in (self.assigned, self.revoking) for t, ps in a.items() for p in ps}
        epochs = self.partition_epochs
        for tp in held - epochs.keys():
            epochs[tp] = self.epoch
        for tp in epochs.keys() - held:
            del epochs[tp]


@dataclass
class ConsumerGroup:
    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = "uniform"
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    topic_sizes: dict[str, int] = field(default_factory=dict)  # subscribed topics' partition counts

    @property
    def state(self) -> str:
        if not self.members:
            return EMPTY
        if self.assignment_epoch != self.epoch:
            return ASSIGNING
        if any(m.epoch != self.assignment_epoch or m.revoking or m.assigned != self.target.get(m.member_id, {})
               for m in self.members.values()):
            return RECONCILING
        return STABLE


class HeartbeatError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def parse_subscription(metadata: bytes) -> tuple[tuple[str, ...], Assignment]:
    """ConsumerProtocolSubscription: (topics, owned partitions of v1+). Raises ValueError if malformed."""
    try:
        pos = 0
        (version, count) = struct.unpack_from(">hi", metadata, pos)
        pos += 6
        topics = []
        for _ in range(max(count, 0)):
            (n,) = struct.unpack_from(">h", metadata, pos)
            topics.append(metadata[pos + 2:pos + 2 + n].decode())
            pos += 2 + n
        (n,) = struct.unpack_from(">i", metadata, pos)  # user data
        pos += 4 + max(n, 0)
        owned: dict[str, frozenset[int]] = {}
        if version >= 1 and pos < len(metadata):
            (count,) = struct.unpack_from(">i", metadata, pos)
            pos += 4
            for _ in range(max(count, 0)):
                (n,) = struct.unpack_from(">h", metadata, pos)
                topic = metadata[pos + 2:pos + 2 + n].decode()
                pos += 2 + n
                (k,) = struct.unpack_from(">i", metadata, pos)
                parts = struct.unpack_from(f">{max(k, 0)}i", metadata, pos + 4)
                pos += 4 + 4 * max(k, 0)
                if parts:
                    owned[topic] = frozenset(parts)
        return tuple(topics), owned
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"malformed consumer protocol subscription: {exc}") from None


def encode_assignment(assigned: Assignment) -> bytes:
    """ConsumerProtocolAssignment v0: what SyncGroup hands a classic member."""
    out = [struct.pack(">hi", 0, len(assigned))]
    for topic in sorted(assigned):
        name = topic.encode()
        parts = sorted(assigned[topic])
        out.append(struct.pack(">h", len(name)) + name + struct.pack(f">i{len(parts)}i", len(parts), *parts))
    out.append(struct.pack(">i", -1))
    return b"".join(out)


class ConsumerGroups:
    """The consumer-protocol half of the group coordinator (its `consumer` attribute)."""

    def __init__(self, owner, group_store: ConsumerGroupStore) -> None:
        self.owner = owner  # the GroupCoordinator: config, classic groups, the offset store
        self.groups: dict[str, ConsumerGroup] = {}
        # The groups' records in __consumer_offsets (server/consumer_group_store.py), given by the coordinator:
        # the store reads these groups, so it sits above this module.
        self.group_store = group_store
        # Group configs set with IncrementalAlterConfigs on the GROUP resource (KIP-848's
        # consumer.session.timeout.ms and consumer.heartbeat.interval.ms), given by the broker: group id -> configs
        self.group_configs: dict[str, dict[str, str]] = {}

    def _setting(self, group_id: str, name: str, broker_name: str) -> int:
        """GroupConfigManager: the group's config, else the broker's."""
        value = self.group_configs.get(group_id, {}).get(name)
        return int(value if value is not None else self.config[broker_name])

    # -- durability: every change is written by the group store before it is answered -----------------
    def persist(self, group_id: str) -> None:
        """The group's changes durable before it returns; raises KafkaError when they could not be written."""
        self.group_store.persist(group_id, self.groups.get(group_id))

    def _durable(self, group_id: str) -> dict | None:
        """persist(); on a failure the error answer (NOT_COORDINATOR), else None."""
        return self.group_store.durable(group_id, self.groups.get(group_id))

    async def durable_async(self, group_id: str) -> dict | None:
        """`_durable` with the event loop free while the writer thread appends and fsyncs."""
        return await self.group_store.durable_async(group_id, self.groups.get(group_id))

    def restore(self, records: dict[str, dict[bytes, bytes]]) -> None:
        """The groups replayed from the records read at start (their members' timers start now)."""
        self.groups.update(self.group_store.replay(records, self.assignors()[0]))

    def close(self) -> None:
        """Waits for the group-state writes still queued."""
        self.group_store.close()

    @property
    def config(self):
        return self.owner.config

    def assignors(self) -> list[str]:
        return [a.strip() for a in str(self.config["group.consumer.assignors"]).split(",") if a.strip()]

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, *, instance_id: str | None,
                  rack_id: str | None, rebalance_timeout_ms: int, subscribed: list[str] | None,
                  regex: str | None, assignor: str | None, owned: Assignment | None, client_id: str,
                  client_host: str, topics: dict[str, int], api_version: int = 0) -> dict:
        """One ConsumerGroupHeartbeat, written on the caller's thread; the response values (assignment None
        when unchanged). The broker calls `heartbeat_async`."""
        result = self._heartbeat_state(group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms,
                                       subscribed, regex, assignor, owned, client_id, client_host, topics,
                                       api_version)
        if result["error_code"]:
            return result
        failed = self._durable(group_id)  # the group's new state is durable before the member hears of it
        return {**result, **failed, "member_epoch": -1, "heartbeat_interval_ms": 0, "assignment": None} \
            if failed else result

    async def heartbeat_async(self, group_id: str, member_id: str, member_epoch: int, *, instance_id: str | None,
                              rack_id: str | None, rebalance_timeout_ms: int, subscribed: list[str] | None,
                              regex: str | None, assignor: str | None, owned: Assignment | None, client_id: str,
                              client_host: str, topics: dict[str, int], api_version: int = 0) -> dict:
        """`heartbeat` with the write in the group-state writer thread: answered once durable, the event loop
        free meanwhile."""
        result = self._heartbeat_state(group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms,
                                       subscribed, regex, assignor, owned, client_id, client_host, topics,
                                       api_version)
        if result["error_code"]:
            return result
        failed = await self.durable_async(group_id)
        return {**result, **failed, "member_epoch": -1, "heartbeat_interval_ms": 0, "assignment": None} \
            if failed else result

    def _heartbeat_state(self, group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms,
                         subscribed, regex, assignor, owned, client_id, client_host, topics, api_version) -> dict:
        try:
            self._validate(group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms,
                           subscribed, regex, assignor, owned, api_version)
            return self._heartbeat(group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms,
                                   subscribed, regex, assignor, owned, client_id, client_host, topics)
        except HeartbeatError as exc:
            log.debug("consumer group %s: heartbeat of %s refused: %s", group_id, member_id, exc.message)
            return {"error_code": exc.code, "error_message": exc.message, "member_id": member_id or None,
                    "member_epoch": -1, "heartbeat_interval_ms": 0, "assignment": None}

    def _validate(self, group_id, member_id, epoch, instance_id, rack_id, rebalance_timeout_ms, subscribed,
                  regex, assignor, owned, api_version: int = 0) -> None:
        """GroupCoordinatorService.throwIfConsumerGroupHeartbeatRequestIsInvalid (Kafka 4.4): the member id
        first (always from v1, KIP-1082: members make their ids), then the group, instance and rack ids, the
        epoch's fields and the assignor; the regex is checked after them (GroupMetadataManager)."""
        bad = ErrorCode.INVALID_REQUEST
        if (api_version >= 1 or epoch > 0 or epoch == LEAVE_EPOCH) and not member_id:
            raise HeartbeatError(bad, "MemberId can't be empty.")
        if not group_id:
            raise HeartbeatError(bad, "GroupId can't be empty.")
        if instance_id == "":
            raise HeartbeatError(bad, "InstanceId can't be empty.")
        if rack_id == "":
            raise HeartbeatError(bad, "RackId can't be empty.")
        if epoch == 0:
            if rebalance_timeout_ms == -1:
                raise HeartbeatError(bad, "RebalanceTimeoutMs must be provided in first request.")
            if owned is None or owned:
                raise HeartbeatError(bad, "TopicPartitions must be empty when (re-)joining.")
            if subscribed is None and regex is None:
                raise HeartbeatError(bad, "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null "
                                     "when (re-)joining.")
        elif epoch == STATIC_LEAVE_EPOCH:
            if instance_id is None:
                raise HeartbeatError(bad, "InstanceId can't be null.")
        elif epoch < STATIC_LEAVE_EPOCH:
            raise HeartbeatError(bad, "MemberEpoch is invalid.")
        if assignor is not None and assignor not in self.assignors():
            raise HeartbeatError(ErrorCode.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {assignor} is not supported. "
                                 f"Supported assignors: {', '.join(self.assignors())}.")
        if regex:  # librdkafka sends "" when it subscribes by names
            try:
                topic_regex(regex)
            except ValueError as exc:
                raise HeartbeatError(ErrorCode.INVALID_REGULAR_EXPRESSION, f"SubscribedTopicRegex `{regex}` "
                                     f"is not a valid regular expression: {exc}.") from None

    def _group(self, group_id: str, create: bool) -> ConsumerGroup:
        """getOrMaybeCreateConsumerGroup: an empty classic group gives way; a non-empty one refuses."""
        group = self.groups.get(group_id)
        if group is not None:
            return group
        classic = self.owner.groups.get(group_id)
        streams = getattr(self.owner, "streams", None)  # a streams group (KIP-1071) of that id refuses too
        if (classic is not None and classic.members) or (streams is not None and group_id in streams.groups):
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group")
        if not create:  # getOrMaybeCreateConsumerGroup (the group's records survive restarts)
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
        if classic is not None:  # maybeDeleteEmptyClassicGroup: its GroupMetadata tombstone first
            try:
                self.owner.store.drop_group_metadata(group_id)
            except KafkaError as exc:
                raise HeartbeatError(ErrorCode.NOT_COORDINATOR, f"The coordinator could not write: {exc}") from None
            if classic.rebalance_task is not None:
                classic.rebalance_task.cancel()
            del self.owner.groups[group_id]
        group = self.groups[group_id] = ConsumerGroup(group_id, assignor=self.assignors()[0])
        return group

    def _heartbeat(self, group_id, member_id, epoch, instance_id, rack_id, rebalance_timeout_ms, subscribed,
                   regex, assignor, owned, client_id, client_host, topics) -> dict:
        group = self._group(group_id, create=epoch == 0)
        interval = self._setting(group_id, "consumer.heartbeat.interval.ms", "group.consumer.heartbeat.interval.ms")
        if epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            if member_id not in group.members:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of "
                                     f"group {group_id}.")
            if epoch == STATIC_LEAVE_EPOCH and group.members[member_id].instance_id is not None:
                # A static member's temporary leave: it keeps its partitions until its session times out or
                # its instance rejoins (consumerGroupStaticMemberGroupLeave); no rebalance.
                group.members[member_id].static_left = True
            else:
                self._remove(group, member_id, "left")
            return {"error_code": 0, "error_message": None, "member_id": member_id, "member_epoch": epoch,
                    "heartbeat_interval_ms": 0, "assignment": None}
        changed = False
        member = group.members.get(member_id) if member_id else None
        if epoch == 0:
            if not member_id:  # version 0: the coordinator names the member
                member_id = str(uuid.uuid4())
            static = next((m for m in group.members.values() if instance_id is not None
                           and m.instance_id == instance_id and m.member_id != member_id), None)
            if static is not None:
                if not static.static_left:
                    raise HeartbeatError(ErrorCode.UNRELEASED_INSTANCE_ID, f"Static member {member_id} with "
                                         f"instance id {instance_id} cannot join the group because the instance "
                                         f"id is owned by {static.member_id} member.")
                member = self._replace_static(group, static, member_id, rack_id, client_id, client_host)
            elif member is None:
                member = ConsumerMember(member_id, instance_id, rack_id, client_id, client_host, (), assignor,
                                        rebalance_timeout_ms)
                group.members[member_id] = member
                changed = True
            else:  # a rejoin (after a fencing the client lost): starts from nothing
                member.assigned, member.revoking, member.epoch, member.previous_epoch = {}, {}, 0, -1
                member.partition_epochs = {}
        else:
            if member is None:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of "
                                     f"group {group_id}.")
            self._check_epoch(member, epoch, owned)
        member.last_heartbeat = time.monotonic()
        member.client_id, member.client_host = client_id, client_host
        if rebalance_timeout_ms > 0:
            member.rebalance_timeout_ms = rebalance_timeout_ms
        if subscribed is not None:
            member.names = tuple(subscribed)
        if regex is not None:
            member.regex = regex or None
        for m in group.members.values():  # regexes see topics created since (GroupMetadataManager's refresh)
            effective = tuple(sorted(set(m.names) | regex_matches(m.regex, topics)))
            if effective != m.subscribed:
                m.subscribed, changed = effective, True
        if assignor is not None and assignor != member.assignor:
            member.assignor, changed = assignor, True
        sizes = {t: topics[t] for m in group.members.values() for t in m.subscribed if t in topics}
        if sizes != group.topic_sizes:
            group.topic_sizes, changed = sizes, True
        if changed:
            self._new_target(group)
        before = member.assigned
        self._reconcile(group, member, owned)
        send = epoch == 0 or member.assigned != before or (owned is not None and owned != member.assigned)
        return {"error_code": 0, "error_message": None, "member_id": member_id, "member_epoch": member.epoch,
                "heartbeat_interval_ms": interval, "assignment": member.assigned if send else None}

    @staticmethod
    def _replace_static(group: ConsumerGroup, old: ConsumerMember, member_id: str, rack_id: str | None,
                        client_id: str, client_host: str) -> ConsumerMember:
        """A static member's instance back under a new member id takes over its predecessor: assignment,
        epochs, subscription and target; no new group epoch (GroupMetadataManager's static rejoin)."""
        new = ConsumerMember(member_id, old.instance_id, rack_id, client_id, client_host, old.subscribed,
                             old.assignor, old.rebalance_timeout_ms, epoch=old.epoch,
                             previous_epoch=old.previous_epoch, names=old.names, regex=old.regex)
        new.assigned, new.revoking, new.revoke_deadline = old.assigned, old.revoking, old.revoke_deadline
        new.partition_epochs = old.partition_epochs
        del group.members[old.member_id]
        group.members[member_id] = new
        if old.member_id in group.target:
            group.target[member_id] = group.target.pop(old.member_id)
        log.info("consumer group %s: static member %s (instance %s) replaced by %s", group.group_id,
                 old.member_id, old.instance_id, member_id)
        return new

    @staticmethod
    def _check_epoch(member: ConsumerMember, epoch: int, owned: Assignment | None) -> None:
        """throwIfMemberEpochIsInvalid: the current epoch, or the previous one when the member did not get
        the last response (its owned partitions are then a subset of what it was given)."""
        if epoch == member.epoch:
            return
        if epoch == member.previous_epoch and owned is not None and not _minus(owned, member.assigned):
            return
        raise HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH, f"The consumer group member has a smaller member "
                             f"epoch ({epoch}) than the one known by the group coordinator ({member.epoch}). "
                             f"The member must abandon all its partitions and rejoin."
                             if epoch < member.epoch else f"The consumer group member has a greater member "
                             f"epoch ({epoch}) than the one known by the group coordinator ({member.epoch}). "
                             f"The member must abandon all its partitions and rejoin.")

    def _new_target(self, group: ConsumerGroup) -> None:
        """A new group epoch and its target assignment (the group's assignor: the members' most common
        choice, else the first configured)."""
        group.epoch += 1
        chosen = [m.assignor for m in group.members.values() if m.assignor]
        group.assignor = max(sorted(set(chosen)), key=chosen.count) if chosen else self.assignors()[0]
        group.target = ASSIGNORS[group.assignor](group.members, group.topic_sizes) if group.members else {}
        group.assignment_epoch = group.epoch

    def _reconcile(self, group: ConsumerGroup, member: ConsumerMember, owned: Assignment | None) -> None:
        """CurrentAssignmentBuilder: revoke first, then take the target's partitions as others free them;
        partitions taken are stamped with the epoch they were assigned at."""
        self._reconcile_assignment(group, member, owned)
        member.stamp()

    def _reconcile_assignment(self, group: ConsumerGroup, member: ConsumerMember, owned: Assignment | None) -> None:
        if member.revoking and owned is not None and not _inter(owned, member.revoking):
            member.revoking, member.revoke_deadline = {}, None  # released: the next epoch may start
        if member.revoking:
            return  # UNREVOKED_PARTITIONS: wait for the member to release them
        target = group.target.get(member.member_id, {})
        if member.epoch != group.assignment_epoch:
            revoke = _minus(member.assigned, target)
            if revoke:
                member.assigned, member.revoking = _inter(member.assigned, target), revoke
                member.revoke_deadline = time.monotonic() + member.rebalance_timeout_ms / 1000.0
                return
            member.previous_epoch, member.epoch = member.epoch, group.assignment_epoch
        held_by_others: Assignment = {}
        for other in group.members.values():
            if other is not member:
                held_by_others = _union(held_by_others, _union(other.assigned, other.revoking))
        member.assigned = _union(member.assigned, _minus(target, held_by_others))

    def _remove(self, group: ConsumerGroup, member_id: str, why: str) -> None:
        log.info("consumer group %s: member %s %s", group.group_id, member_id, why)
        group.members.pop(member_id, None)
        self._new_target(group)

    def expire(self, now: float, write: bool = True) -> list[str]:
        """Members silent past the session timeout, or not revoking within the rebalance timeout, are
        fenced (GroupMetadataManager's session and rebalance timers). The ids of the groups changed; with
        `write` False their records are the caller's to write (the coordinator's timer awaits them)."""
        changed_groups = []
        for group in list(self.groups.values()):
            changed = False
            session = self._setting(group.group_id, "consumer.session.timeout.ms",
                                    "group.consumer.session.timeout.ms") / 1000.0
            for mid, why in fenced_members(group.members, now, lambda m, s=session: s if m.session_timeout_ms is None
                                           else m.session_timeout_ms / 1000.0):
                self._remove(group, mid, why)
                changed = True
            if changed:
                changed_groups.append(group.group_id)
                if write:
                    self._durable(group.group_id)
        return changed_groups

    # -- classic members in a consumer group (GroupMetadataManager.classicGroup*ToConsumerGroup) ----------
    def has_members(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and bool(group.members)

    def classic_join(self, group_id: str, member_id: str, instance_id: str | None, client_id: str,
                     client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                     protocols: list[tuple[str, bytes]], require_known_member: bool,
                     topics: dict[str, int] | None, write: bool = True) -> dict:
        """A classic JoinGroup to a non-empty consumer group (`classicGroupJoinToConsumerGroup`, whatever
        `group.consumer.migration.policy` says): the member joins with the subscription of its consumer
        protocol metadata and is assigned by the group's server-side assignor. Its JoinGroup answer names
        no leader and no members (the member is a follower); its generation is its member epoch, and its
        SyncGroup returns its assignment."""
        group = self.groups[group_id]
        if protocol_type != "consumer" or not protocols:
            return {"error_code": ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "member_id": member_id}
        try:
            subscribed, owned = parse_subscription(protocols[0][1])
        except ValueError:
            return {"error_code": ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "member_id": member_id}
        if instance_id is not None:  # static classic members in a consumer group: not done
            return {"error_code": ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "member_id": member_id}
        member = group.members.get(member_id) if member_id else None
        if member is not None and member.classic_protocols is None:
            return {"error_code": ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "member_id": member_id}
        if not member_id:
            member_id = str(uuid.uuid4())
            if require_known_member:  # KIP-394: the id first; the member joins again with it
                return {"error_code": ErrorCode.MEMBER_ID_REQUIRED, "member_id": member_id}
        changed = False
        if member is None:
            member = ConsumerMember(member_id, None, None, client_id, client_host, (), None, rebalance_timeout_ms)
            group.members[member_id] = member
            changed = True
        member.classic_protocols, member.session_timeout_ms = list(protocols), session_timeout_ms
        member.client_id, member.client_host = client_id, client_host
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.last_heartbeat = time.monotonic()
        if tuple(subscribed) != member.names:
            member.names = tuple(subscribed)
        effective = tuple(sorted(set(member.names)))
        if effective != member.subscribed:
            member.subscribed, changed = effective, True
        sizes = topics if topics is not None else group.topic_sizes
        sizes = {t: sizes[t] for m in group.members.values() for t in m.subscribed if t in sizes}
        if sizes != group.topic_sizes:
            group.topic_sizes, changed = sizes, True
        if changed:
            self._new_target(group)
        self._reconcile(group, member, owned)
        if member.revoking and not _inter(owned, member.revoking):
            self._reconcile(group, member, owned)  # an eager member rejoins having revoked everything
        failed = self._durable(group_id) if write else None  # (else the caller awaits the write)
        if failed:
            return {"error_code": failed["error_code"], "member_id": member_id}
        return {"error_code": 0, "generation_id": member.epoch, "protocol_type": "consumer",
                "protocol_name": protocols[0][0], "leader": "", "member_id": member_id, "members": [],
                "skip_assignment": False}

    def _classic_member(self, group_id: str, member_id: str, generation: int) -> tuple[ConsumerMember | None, int]:
        group = self.groups[group_id]
        member = group.members.get(member_id)
        if member is None or member.classic_protocols is None:
            return None, ErrorCode.UNKNOWN_MEMBER_ID
        if generation != member.epoch:
            return None, ErrorCode.ILLEGAL_GENERATION
        member.last_heartbeat = time.monotonic()
        return member, 0

    def classic_sync(self, group_id: str, generation: int, member_id: str) -> dict:
        """`classicGroupSyncToConsumerGroup`: the member's current assignment."""
        member, error = self._classic_member(group_id, member_id, generation)
        if member is None:
            return {"error_code": error}
        return {"error_code": 0, "assignment": encode_assignment(member.assigned), "protocol_type": "consumer",
                "protocol_name": member.classic_protocols[0][0]}

    def classic_heartbeat(self, group_id: str, generation: int, member_id: str) -> int:
        """`classicGroupHeartbeatToConsumerGroup`: REBALANCE_IN_PROGRESS while the member is not
        reconciled to the group's target (it learns revocations and new partitions by rejoining)."""
        member, error = self._classic_member(group_id, member_id, generation)
        if member is None:
            return error
        group = self.groups[group_id]
        if (member.epoch != group.assignment_epoch or member.revoking
                or member.assigned != group.target.get(member_id, {})):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return 0

    def classic_leave(self, group_id: str, member_id: str, instance_id: str | None = None) -> tuple[str, int]:
        """LeaveGroup to a consumer group (Kafka 4.4's `classicGroupLeaveToConsumerGroup`): a member by its id,
        or a static one by its instance id (the member id empty or its own, else FENCED_INSTANCE_ID), of
        either protocol, fenced at once. (The member id as asked, error)."""
        group = self.groups[group_id]
        if instance_id is None:
            member = group.members.get(member_id)
        else:
            member = next((m for m in group.members.values() if m.instance_id == instance_id), None)
            if member is not None and member_id and member.member_id != member_id:
                return member_id, ErrorCode.FENCED_INSTANCE_ID
        if member is None:
            return member_id, ErrorCode.UNKNOWN_MEMBER_ID
        self._remove(group, member.member_id, "left (LeaveGroup)")
        failed = self._durable(group_id)
        return member_id, failed["error_code"] if failed else 0

    # -- the rest of the coordinator asks these ------------------------------------------------------
    def validate_commit(self, group_id: str, member_id: str, epoch: int, api_version: int,
                        partitions: list[tuple[str, int]] = (), *, transactional: bool = False,
                        instance_id: str | None = None) -> int:
        """ConsumerGroup.validateOffsetCommit (Kafka 4.4): 0 or the error code. A commit without a member
        goes to an empty group, and a transactional one without a member (generation -1, no member or
        instance id: a producer of older versions) to any group. A member commits with its epoch, or an older
        one for partitions it was assigned at or before that epoch (KIP-1251); otherwise STALE_MEMBER_EPOCH,
        or ILLEGAL_GENERATION for a classic member (its generation is its epoch). A static member's instance
        id is not checked (ConsumerGroup ignores it)."""
        group = self.groups[group_id]
        if epoch < 0 and not group.members:
            return 0  # an admin client's or a manually assigned consumer's commit to an empty group
        if transactional and epoch == -1 and member_id == "" and instance_id is None:
            return 0
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if not transactional and member.classic_protocols is None and api_version < 9:
            return ErrorCode.UNSUPPORTED_VERSION  # "OffsetCommit version 9 or above must be used by members ..."
        if epoch == member.epoch:
            return 0
        stale = ErrorCode.ILLEGAL_GENERATION if member.classic_protocols is not None else ErrorCode.STALE_MEMBER_EPOCH
        if epoch > member.epoch:
            return stale
        for tp in partitions:  # createAssignmentEpochValidator: each partition assigned at or before `epoch`
            assigned_at = member.partition_epochs.get(tp)
            if assigned_at is None or epoch < assigned_at:
                return stale
        return 0

    def validate_fetch(self, group_id: str, member_id: str | None, epoch: int) -> int:
        """ConsumerGroup.validateOffsetFetch (OffsetFetch v9): without a member id and epoch (an admin
        client) any fetch goes; a member must be known and at its epoch (STALE_MEMBER_EPOCH, or
        ILLEGAL_GENERATION for a classic member). 0 or the error code."""
        return offset_fetch_error(self.groups, group_id, member_id, epoch, lambda m: (
            ErrorCode.ILLEGAL_GENERATION if m.classic_protocols is not None else ErrorCode.STALE_MEMBER_EPOCH))

    def subscribed_topics(self, group_id: str) -> set[str]:
        group = self.groups.get(group_id)
        return {t for m in group.members.values() for t in m.subscribed} if group else set()

    def delete(self, group_id: str) -> int | None:
        """DeleteGroups of a consumer group: None when it is not one."""
        return delete_empty_group(self.groups, group_id, self.group_store)

    def give_way(self, group_id: str) -> bool:
        """A classic JoinGroup for this id: an empty consumer group is dropped (maybeDeleteEmptyConsumerGroup)
        and True returned; False when its tombstones could not be written (or it has members: the coordinator
        sends such a join to `classic_join` first)."""
        group = self.groups.get(group_id)
        if group is None:
            return True
        if group.members:
            return False
        del self.groups[group_id]
        failed = self._durable(group_id)  # maybeDeleteEmptyConsumerGroup: the group's tombstones
        if failed:
            self.groups[group_id] = group
            return False
        return True

    def describe(self, group_id: str) -> ConsumerGroup | None:
        return self.groups.get(group_id)

    def list_groups(self) -> list[dict]:
        return [{"group_id": g.group_id, "protocol_type": "consumer", "group_state": g.state,
                 "group_type": "consumer"} for g in self.groups.values()]
