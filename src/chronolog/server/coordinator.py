"""The classic consumer-group coordinator (Kafka's `GroupCoordinator`), for one broker; a group's state and its
members are `server.classic_group` (Kafka's `ClassicGroup`).

States: Empty -> PreparingRebalance -> CompletingRebalance -> Stable (and Dead after deletion). A join
starts a rebalance; it completes when every known member has rejoined or the rebalance timeout passed
(members that did not rejoin are removed); the leader gets the members' metadata, SyncGroup hands out its
assignments. Members that stop heartbeating for their session timeout are removed.

Committed offsets and group metadata are durable in the internal topic `__consumer_offsets`
(server.offsets_topic, Kafka's GroupMetadataManager): a commit is appended in Kafka's record schemas and
fsynced before it is acknowledged. A commit that could not be written (a full disk) is answered
NOT_COORDINATOR, as Kafka's `GroupMetadataManager.storeOffsets` answers a KAFKA_STORAGE_ERROR of the offsets
topic: the client looks the coordinator up again and retries.
Transactional offset commits (TxnOffsetCommit, KIP-98/447) are transactional batches of the producer in the
group's offsets partition: pending until the transaction's marker there applies them (commit) or drops them
(abort); pending ones survive a restart, and the transaction coordinator completes or aborts their
transaction after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from pathlib import Path
from typing import Any

from chronolog.config import BrokerConfig
from chronolog.errors import ErrorCode, KafkaError, KafkaStorageErrorError
from chronolog.records.group_records import GroupMetadataValue, MemberMetadata
from chronolog.server.classic_group import COMPLETING, DEAD, EMPTY, PREPARING, STABLE, Group, Member
from chronolog.server.consumer_group import ConsumerGroups
from chronolog.server.consumer_group_store import ConsumerGroupStore
from chronolog.server.offsets_topic import OffsetStore
from chronolog.server.streams_group import StreamsGroups
from chronolog.server.streams_group_store import StreamsGroupStore

log = logging.getLogger(__name__)

class GroupCoordinator:
    def __init__(self, state_dir: Path, broker_config: BrokerConfig, logs: Any = None) -> None:
        """`logs` is the broker's LogManager (where `__consumer_offsets` lives); without one (a coordinator
        on its own, in tests) the coordinator keeps its own in `state_dir`. `state_dir` is where the file of
        earlier versions is found for its migration."""
        self.config = broker_config
        own = logs is None
        if own:
            from chronolog.storage import LogManager
            logs = LogManager(state_dir, broker_config)
            logs.startup(background=False)
        self.store = OffsetStore(logs, broker_config, legacy_dir=state_dir, owns_logs=own)
        self.groups: dict[str, Group] = {}  # classic groups; `consumer` holds the KIP-848 ones (one id, one type)
        self.consumer = ConsumerGroups(self, ConsumerGroupStore(self.store))
        self.streams = StreamsGroups(self, StreamsGroupStore(self.store))  # KIP-1071 streams groups
        self._reaper: asyncio.Task | None = None
        self._retention: asyncio.Task | None = None
        self._creating: asyncio.Future | None = None
        self._loaded = asyncio.Event()

    @property
    def loaded(self) -> bool:
        return self._loaded.is_set()

    async def wait_loaded(self) -> None:
        """Until `start` has read `__consumer_offsets`: a group request arriving meanwhile waits for it (Kafka
        answers COORDINATOR_LOAD_IN_PROGRESS and the client asks again; here the answer comes after the load)."""
        await self._loaded.wait()

    async def offsets_topic_ready(self) -> bool:
        """Kafka creates `__consumer_offsets` when a client first looks for a group's coordinator
        (`KafkaApis.handleFindCoordinatorRequest`), not in the middle of the group's first rebalance. Its
        partitions are made in a thread, so the event loop goes on answering (heartbeats of other groups
        included) while they are created and fsynced. False when it could not be created (COORDINATOR_NOT_AVAILABLE,
        the client asks again)."""
        if self.store.ready:
            return True
        if self._creating is None or self._creating.done():
            self._creating = asyncio.ensure_future(asyncio.to_thread(self.store.ensure_topic))
        try:
            await asyncio.shield(self._creating)
        except Exception as exc:  # noqa: BLE001 (a failed creation is answered, never raised out of the handler)
            log.warning("%s not created: %s", "__consumer_offsets", exc)
            return False
        return True

    async def start(self) -> None:
        """Reads `__consumer_offsets` in a worker thread (GroupMetadataManager's load runs on the coordinator's
        own threads too): the broker answers produce, fetch and metadata requests meanwhile; group requests
        wait for the load (the broker's dispatcher asks `wait_loaded`)."""
        await asyncio.to_thread(self.store.load)
        self.consumer.restore(self.store.consumer_records)  # KIP-848 groups, with their members
        self.streams.restore(self.store.streams_records, self.store.logs.topics())
        for g, meta in self.store.groups.items():
            if g not in self.consumer.groups and g not in self.streams.groups:
                self.groups[g] = self._loaded_group(g, meta)
        for g, _t, _p in self.store.offsets:
            if g not in self.consumer.groups and g not in self.streams.groups:
                self.groups.setdefault(g, Group(g, new_group=False))
        self._reaper = asyncio.create_task(self._expire_members())
        self._retention = asyncio.create_task(self._expire_offsets())
        self._loaded.set()

    @staticmethod
    def _loaded_group(group_id: str, meta: GroupMetadataValue) -> Group:
        """ClassicGroup.fromRecord: the group as its last GroupMetadata record left it: its generation,
        protocol and leader, and its members with their subscriptions and assignments, Stable (Empty without
        members). Their session timers start now (GroupMetadataManager.onLoaded), so a member that goes on
        heartbeating, committing or committing in a transaction with its generation is still known."""
        group = Group(group_id, generation=meta.generation, protocol_type=meta.protocol_type or None,
                      new_group=False)
        if meta.members:
            group.state, group.protocol_name, group.leader = STABLE, meta.protocol, meta.leader
            for m in meta.members:
                group.members[m.member_id] = Member(
                    m.member_id, m.group_instance_id, m.client_id, m.client_host, m.session_timeout,
                    m.rebalance_timeout if m.rebalance_timeout >= 0 else m.session_timeout, meta.protocol_type,
                    [(meta.protocol or "", bytes(m.subscription))], assignment=bytes(m.assignment))
        group.compute_subscribed()
        return group

    async def stop(self) -> None:
        for task in (self._reaper, self._retention):
            if task is not None:
                task.cancel()
        for group in self.groups.values():
            for task in (group.rebalance_task, group.sync_task):
                if task is not None:
                    task.cancel()
        await asyncio.to_thread(self.consumer.close)  # group-state writes still queued
        await asyncio.to_thread(self.streams.store.close)
        self.store.close()

    def partition_for(self, group_id: str) -> int:
        """The group's `__consumer_offsets` partition (GroupMetadataManager.partitionFor)."""
        return self.store.partition_for(group_id)

    def offline(self, group_id: str) -> bool:
        """The group's partition could not be opened at start: its state was not loaded, so nothing here
        may answer for it (Kafka's broker does not lead that partition: COORDINATOR_NOT_AVAILABLE)."""
        return bool(self.store.offline) and self.store.partition_for(group_id) in self.store.offline

    def _has_members(self, group_id: str) -> bool:
        """A classic or KIP-848 group with members: its offsets do not expire."""
        classic = self.groups.get(group_id)
        consumer = self.consumer.groups.get(group_id)
        return bool(classic is not None and classic.members) or bool(consumer is not None and consumer.members) \
            or self.streams.has_members(group_id)

    async def _expire_offsets(self) -> None:
        """GroupMetadataManager's offsets-retention task: every offsets.retention.check.interval.ms."""
        while True:
            await asyncio.sleep(int(self.config["offsets.retention.check.interval.ms"]) / 1000.0)
            try:
                self.store.expire(int(time.time() * 1000), int(self.config["offsets.retention.minutes"]) * 60000,
                                  self._has_members)
            except Exception:
                log.exception("offsets retention failed")

    def _store_group(self, group: Group) -> None:
        """GroupMetadataManager.storeGroup: the group's generation, protocol, leader and members (with their
        assignments) once a rebalance completed; a failure is logged (the members' state is in memory)."""
        members = tuple(MemberMetadata(m.member_id, m.client_id, m.client_host, m.session_timeout_ms,
                                       dict(m.protocols).get(group.protocol_name or "", b""), m.assignment,
                                       m.rebalance_timeout_ms, m.group_instance_id)
                        for m in group.members.values())
        value = GroupMetadataValue(group.protocol_type or "", group.generation, group.protocol_name, group.leader,
                                   int(time.time() * 1000), members)
        try:
            self.store.store_group(group.group_id, value)
        except (KafkaStorageErrorError, KafkaError) as exc:
            log.warning("group %s: metadata of generation %d not written: %s", group.group_id, group.generation, exc)

    # -- membership ---------------------------------------------------------------------------------
    def group(self, group_id: str) -> Group:
        return self.groups.setdefault(group_id, Group(group_id))

    async def join(self, group_id: str, member_id: str, instance_id: str | None, client_id: str, client_host: str,
                   session_timeout: int, rebalance_timeout: int, protocol_type: str,
                   protocols: list[tuple[str, bytes]], require_known_member: bool,
                   topics: dict[str, int] | None = None, skip_assignment: bool = False) -> dict:
        """`topics`: partition counts, for a classic member joining a consumer group. `skip_assignment`:
        the answer may tell a leader not to assign (JoinGroup v9+, KIP-814)."""
        # GroupCoordinatorService.joinGroup: the group id, then the session timeout
        if not group_id:
            return {"error_code": ErrorCode.INVALID_GROUP_ID}
        if not (self.config["group.min.session.timeout.ms"] <= session_timeout
                <= self.config["group.max.session.timeout.ms"]):
            return {"error_code": ErrorCode.INVALID_SESSION_TIMEOUT, "member_id": member_id}
        if group_id in self.streams.groups:  # getOrMaybeCreateClassicGroup: "Group g is not a classic group."
            return {"error_code": ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "member_id": member_id}
        if self.consumer.has_members(group_id):  # Kafka: classicGroupJoinToConsumerGroup, any migration policy
            result = self.consumer.classic_join(group_id, member_id, instance_id, client_id, client_host,
                                                session_timeout, rebalance_timeout, protocol_type, protocols,
                                                require_known_member, topics, write=False)
            failed = await self.consumer.durable_async(group_id)  # answered once the group's records are durable
            return {"error_code": failed["error_code"], "member_id": result.get("member_id")} if failed else result
        if not self.consumer.give_way(group_id):  # an empty consumer group becomes a classic one
            return {"error_code": ErrorCode.NOT_COORDINATOR, "member_id": member_id}
        # classicGroupJoinToClassicGroup: an absent group is made only for a member without id; the new group
        # is written (Empty) even when the join is refused at once.
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return {"error_code": ErrorCode.UNKNOWN_MEMBER_ID, "member_id": member_id}
            group = self.group(group_id)
            answer = self._join_refused(group, member_id, instance_id, client_id, session_timeout, protocol_type,
                                        protocols, require_known_member)
            if answer is not None:
                self._store_group(group)
                return answer
        else:
            answer = self._join_refused(group, member_id, instance_id, client_id, session_timeout, protocol_type,
                                        protocols, require_known_member)
            if answer is not None:
                return answer
        leader_before = group.leader
        replaced = False
        if not member_id:  # ClassicGroup.generateMemberId: a static member's id starts with its instance id
            member_id = f"{instance_id if instance_id is not None else client_id or 'member'}-{uuid.uuid4()}"
            old = None if instance_id is None else self._static_member(group, instance_id)
            if old is not None:  # a restarted static member takes over its old entry and assignment
                self._replace_static_member(group, old, member_id)
                replaced = True
        group.pending.pop(member_id, None)  # a pending member (KIP-394) joins with its id
        member = group.members.get(member_id)
        if member is None:
            member = Member(member_id, instance_id, client_id, client_host, session_timeout, rebalance_timeout,
                            protocol_type, protocols)
            group.members[member_id] = member
        member.protocols, member.protocol_type = protocols, protocol_type
        member.session_timeout_ms, member.rebalance_timeout_ms = session_timeout, rebalance_timeout
        member.last_heartbeat = time.monotonic()
        group.protocol_type = protocol_type
        if replaced and group.state == STABLE and group.protocol_name == self._common_protocol(
                group, group.members[group.leader].protocols):
            # updateStaticMemberThenRebalanceOrCompleteJoin: a static member back in a stable group, the
            # group's protocol unchanged, gets the current generation with no rebalance and its SyncGroup
            # the assignment it had. Nobody assigns: a returning leader is told to skip it (v9+; it still
            # watches the topics' partitions as leader), before v9 it is named a follower.
            self._store_group(group)
            leads = skip_assignment and group.leader == member_id
            return {"error_code": 0, "generation_id": group.generation, "protocol_type": group.protocol_type,
                    "protocol_name": group.protocol_name,
                    "leader": group.leader if skip_assignment else leader_before, "member_id": member_id,
                    "members": self._join_members(group) if leads else [], "skip_assignment": leads}
        loop = asyncio.get_running_loop()
        future = member.join_future = loop.create_future()
        self._prepare_rebalance(group)
        self._maybe_complete_join(group)
        return await future

    def _join_refused(self, group: Group, member_id: str, instance_id: str | None, client_id: str,
                      session_timeout: int, protocol_type: str, protocols: list[tuple[str, bytes]],
                      require_known_member: bool) -> dict | None:
        """classicGroupJoinNewMember/classicGroupJoinExistingMember's checks in their order: the answer of a
        join refused (or told its member id first, KIP-394), or None when the member joins the rebalance."""
        if group.state == DEAD:
            return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE, "member_id": member_id}
        if not self._supports_protocols(group, protocol_type, protocols):
            return {"error_code": ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "member_id": member_id}
        if not member_id:
            if instance_id is None and require_known_member:
                # classicGroupJoinNewDynamicMember: a pending member, not yet one of the group's, until it joins
                # again with this id or its session timeout passes
                new_id = f"{client_id}-{uuid.uuid4()}"
                group.pending[new_id] = time.monotonic() + session_timeout / 1000.0
                return {"error_code": ErrorCode.MEMBER_ID_REQUIRED, "member_id": new_id}
            return None
        if member_id in group.pending:
            return None
        error = self._validate_member(group, member_id, instance_id)
        if error:
            return {"error_code": error, "member_id": member_id}
        if group.state == EMPTY:  # "unexpected Empty state": the member resets its generation and rejoins
            return {"error_code": ErrorCode.UNKNOWN_MEMBER_ID, "member_id": member_id}
        return None

    @staticmethod
    def _supports_protocols(group: Group, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """ClassicGroup.supportsProtocols: an Empty group takes any protocol type and protocols but none;
        otherwise the group's type, and one protocol all its members support."""
        if group.state == EMPTY:
            return bool(protocol_type) and bool(protocols)
        names = {n for n, _ in protocols}
        return group.protocol_type == protocol_type and any(
            all(name in {n for n, _ in m.protocols} for m in group.members.values()) for name in names)

    def _common_protocol(self, group: Group, protocols: list[tuple[str, bytes]]) -> str | None:
        names = [n for n, _ in protocols]
        for name in names:
            if all(name in [n for n, _ in m.protocols] for m in group.members.values() if m.protocols):
                return name
        return None

    def _prepare_rebalance(self, group: Group) -> None:
        if group.state == PREPARING:
            return
        for m in group.members.values():
            if m.sync_future is not None and not m.sync_future.done():
                m.sync_future.set_result({"error_code": ErrorCode.REBALANCE_IN_PROGRESS})
        was_new = group.state == EMPTY
        group.state = PREPARING
        timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0) / 1000.0
        delay = self.config["group.initial.rebalance.delay.ms"] / 1000.0 if was_new else 0.0
        group.rebalance_task = asyncio.create_task(self._rebalance_deadline(group, timeout, delay))

    async def _rebalance_deadline(self, group: Group, timeout: float, delay: float) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            if delay:
                await asyncio.sleep(delay)
                group.new_group = False
                self._maybe_complete_join(group)
                if group.state != PREPARING:
                    return
            await asyncio.sleep(max(0.0, timeout - delay))
            if group.state == PREPARING:
                for mid in [mid for mid, m in group.members.items() if m.join_future is None
                            or m.join_future.done()]:
                    del group.members[mid]  # did not rejoin in time
                self._complete_join(group)

    async def _sync_deadline(self, group: Group, generation: int, timeout: float) -> None:
        """expirePendingSync: members that did not send SyncGroup within the rebalance timeout are removed and
        the group rebalances (or is Empty without them)."""
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(timeout)
            if group.generation != generation or group.state not in (COMPLETING, STABLE) or not group.pending_sync:
                return
            late = [mid for mid in group.members if mid in group.pending_sync]
            log.info("group %s: %s removed, no SyncGroup within the rebalance timeout", group.group_id, late)
            for mid in late:
                self._remove_member(group, mid)

    def _maybe_complete_join(self, group: Group) -> None:
        if group.state != PREPARING:
            return
        if group.new_group and self.config["group.initial.rebalance.delay.ms"] > 0:
            return  # the initial delay lets more members arrive first
        if not group.pending and all(m.join_future is not None and not m.join_future.done()
                                     for m in group.members.values()):  # ClassicGroup.hasAllMembersJoined
            if group.rebalance_task is not None and group.rebalance_task is not asyncio.current_task():
                group.rebalance_task.cancel()
            self._complete_join(group)

    @staticmethod
    def _join_members(group: Group) -> list[dict]:
        """The members as a leader's JoinGroup answer lists them (ClassicGroup.currentClassicGroupMembers)."""
        return [{"member_id": x.member_id, "group_instance_id": x.group_instance_id,
                 "metadata": dict(x.protocols).get(group.protocol_name, b"")} for x in group.members.values()]

    def _complete_join(self, group: Group) -> None:
        joined = {mid: m for mid, m in group.members.items() if m.join_future is not None and not m.join_future.done()}
        group.members = joined
        if group.sync_task is not None and group.sync_task is not asyncio.current_task():
            group.sync_task.cancel()
        if not joined:
            group.state, group.leader, group.protocol_name = EMPTY, None, None
            group.generation += 1
            group.compute_subscribed()
            self._store_group(group)
            return
        group.generation += 1
        group.state = COMPLETING
        group.pending_sync = set(joined)
        timeout = max(m.rebalance_timeout_ms for m in joined.values()) / 1000.0  # ClassicGroup.rebalanceTimeoutMs
        group.sync_task = asyncio.create_task(self._sync_deadline(group, group.generation, max(timeout, 0.0)))
        if group.leader not in joined:
            group.leader = next(iter(joined))
        leader = joined[group.leader]
        group.protocol_name = self._common_protocol(group, leader.protocols) or leader.protocols[0][0]
        group.compute_subscribed()
        for mid, m in joined.items():
            members = self._join_members(group) if mid == group.leader else []
            m.join_future.set_result({"error_code": 0, "generation_id": group.generation,
                                      "protocol_type": group.protocol_type, "protocol_name": group.protocol_name,
                                      "leader": group.leader, "member_id": mid, "members": members,
                                      "skip_assignment": False})
            m.join_future = None
            m.last_heartbeat = time.monotonic()

    async def sync(self, group_id: str, generation: int, member_id: str,
                   assignments: dict[str, bytes], instance_id: str | None = None,
                   protocol_type: str | None = None, protocol_name: str | None = None) -> dict:
        # classicGroupSync: an absent or Empty group does not know the member
        if group_id in self.consumer.groups:
            if not self.consumer.has_members(group_id):
                return {"error_code": ErrorCode.UNKNOWN_MEMBER_ID}
            return self.consumer.classic_sync(group_id, generation, member_id)
        group = self.groups.get(group_id)
        if group is None or group.state == EMPTY:
            return {"error_code": ErrorCode.UNKNOWN_MEMBER_ID}
        error = self._validate_member(group, member_id, instance_id)  # validateSyncGroup, in its order
        if error:
            return {"error_code": error}
        if generation != group.generation:
            return {"error_code": ErrorCode.ILLEGAL_GENERATION}
        if any(asked is not None and known is not None and asked != known for asked, known in (
                (protocol_type, group.protocol_type), (protocol_name, group.protocol_name))):
            return {"error_code": ErrorCode.INCONSISTENT_GROUP_PROTOCOL}
        if group.state == PREPARING:
            return {"error_code": ErrorCode.REBALANCE_IN_PROGRESS}
        member = group.members[member_id]
        member.last_heartbeat = time.monotonic()
        group.pending_sync.discard(member_id)
        if group.state == STABLE:
            return {"error_code": 0, "assignment": member.assignment, "protocol_type": group.protocol_type,
                    "protocol_name": group.protocol_name}
        future = member.sync_future = asyncio.get_running_loop().create_future()
        if member_id == group.leader:
            for mid, m in group.members.items():
                m.assignment = assignments.get(mid, b"")
            group.state = STABLE
            now = time.monotonic()
            self._store_group(group)
            for m in group.members.values():
                if m.sync_future is not None and not m.sync_future.done():
                    m.sync_future.set_result({"error_code": 0, "assignment": m.assignment,
                                              "protocol_type": group.protocol_type,
                                              "protocol_name": group.protocol_name})
                    m.last_heartbeat = now  # its session restarts with the answer (propagateAssignment)
        return await future

    def heartbeat(self, group_id: str, generation: int, member_id: str, instance_id: str | None = None) -> int:
        if group_id in self.consumer.groups:
            return self.consumer.classic_heartbeat(group_id, generation, member_id)
        # classicGroupHeartbeatToClassicGroup: the member, its generation, then the group's state
        group = self.groups.get(group_id)
        if group is not None and group.state == DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = self._validate_member(group, member_id, instance_id)
        if error:
            return error
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        if group.state == EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        group.members[member_id].last_heartbeat = time.monotonic()
        return ErrorCode.REBALANCE_IN_PROGRESS if group.state == PREPARING else 0

    def leave(self, group_id: str, member_ids: list[str]) -> list[int]:
        """Members leaving by member id: their error codes."""
        error, results = self.leave_members(group_id, [(mid, None) for mid in member_ids])
        return [r[2] for r in results] if not error else [error] * len(member_ids)

    def leave_members(self, group_id: str, members: list[tuple[str, str | None]]
                      ) -> tuple[int, list[tuple[str, str | None, int]]]:
        """LeaveGroup (GroupMetadataManager.classicGroupLeave): (member id, group instance id) pairs; from v3
        a static member may be named by its instance id alone (an empty member id: KIP-345's administrative
        removal), and leaves at once. The group's error, and each member's (member id as answered, instance
        id, error)."""
        if group_id in self.consumer.groups:
            return 0, [self._consumer_leave(group_id, mid, iid) for mid, iid in members]
        group = self.groups.get(group_id)
        if group is None:  # each member unknown (Kafka 4.4 answers so, the group's error none)
            return 0, [(mid, iid, ErrorCode.UNKNOWN_MEMBER_ID) for mid, iid in members]
        if group.state == DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        results = []
        for mid, iid in members:
            if not mid:  # by instance id alone
                static = self._static_member(group, iid) if iid is not None else None
                if static is None:
                    results.append((mid, iid, ErrorCode.UNKNOWN_MEMBER_ID))
                    continue
                log.info("group %s: static member %s (instance %s) removed by LeaveGroup", group_id, static, iid)
                self._remove_member(group, static)
                results.append((mid, iid, 0))
                continue
            if mid in group.pending:  # a pending member (KIP-394) leaves at once
                del group.pending[mid]
                results.append((mid, iid, 0))
                continue
            if iid is not None:  # ClassicGroup.validateMember
                static = self._static_member(group, iid)
                if static is None or static != mid:
                    results.append((mid, iid, ErrorCode.UNKNOWN_MEMBER_ID if static is None
                                    else ErrorCode.FENCED_INSTANCE_ID))
                    continue
            if mid not in group.members:
                results.append((mid, iid, ErrorCode.UNKNOWN_MEMBER_ID))
                continue
            self._remove_member(group, mid)
            results.append((mid, iid, 0))
        return 0, results

    def _consumer_leave(self, group_id: str, member_id: str, instance_id: str | None) -> tuple[str, str | None, int]:
        answered, error = self.consumer.classic_leave(group_id, member_id, instance_id)
        return answered, instance_id, error

    @staticmethod
    def _static_member(group: Group, instance_id: str) -> str | None:
        return next((m.member_id for m in group.members.values() if m.group_instance_id == instance_id), None)

    @classmethod
    def _validate_member(cls, group: Group | None, member_id: str, instance_id: str | None) -> int:
        """ClassicGroup.validateMember: a static member's old id (its instance taken over by a newer
        consumer, the old one still running) is fenced, so that it stops rather than joining again and
        taking the instance back in turn."""
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if instance_id is not None:
            static = cls._static_member(group, instance_id)
            if static is not None and static != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
            return 0 if static is not None else ErrorCode.UNKNOWN_MEMBER_ID
        return 0 if member_id in group.members else ErrorCode.UNKNOWN_MEMBER_ID

    @staticmethod
    def _replace_static_member(group: Group, old_id: str, new_id: str) -> None:
        """ClassicGroup.replaceStaticMember: the entry, with its assignment, under the new member id; the old
        id's pending JoinGroup or SyncGroup is fenced."""
        member = group.members.pop(old_id)
        for future, answer in ((member.join_future, {"error_code": ErrorCode.FENCED_INSTANCE_ID, "member_id": old_id}),
                               (member.sync_future, {"error_code": ErrorCode.FENCED_INSTANCE_ID})):
            if future is not None and not future.done():
                future.set_result(answer)
        member.join_future = member.sync_future = None
        member.member_id = new_id
        group.members[new_id] = member
        if group.leader == old_id:
            group.leader = new_id

    def _remove_member(self, group: Group, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        member = group.members.pop(member_id, None)
        if member is not None and member.join_future is not None and not member.join_future.done():
            member.join_future.set_result({"error_code": ErrorCode.UNKNOWN_MEMBER_ID, "member_id": member_id})
        if member is not None and member.sync_future is not None and not member.sync_future.done():
            # Its SyncGroup is answered, not left pending: a pending answer holds the member's connection,
            # whose requests are answered in order, until the client gives up on it.
            member.sync_future.set_result({"error_code": ErrorCode.UNKNOWN_MEMBER_ID})
        if not group.members:
            for task in (group.rebalance_task, group.sync_task):
                if task is not None and task is not asyncio.current_task():
                    task.cancel()
            group.state, group.leader = EMPTY, None
            group.generation += 1
            group.compute_subscribed()
            self._store_group(group)  # as Kafka's rebalance of a group left empty stores it without members
        elif group.state in (STABLE, COMPLETING):
            self._prepare_rebalance(group)
        else:
            self._maybe_complete_join(group)

    async def _expire_members(self) -> None:
        while True:
            await asyncio.sleep(0.25)
            now = time.monotonic()
            for group_id in self.consumer.expire(now, write=False):
                await self.consumer.durable_async(group_id)  # a failure is logged; the next write carries it
            for group_id in self.streams.expire(now):
                await self.streams.durable_async(group_id)
            self.expire_members(now)

    def expire_members(self, now: float) -> None:
        """Remove classic members silent for their session timeout (monotonic `now`). A member waiting for
        its JoinGroup or SyncGroup answer is not expired (`ClassicGroupMember.hasSatisfiedHeartbeat`: "members
        that are awaiting a rebalance automatically satisfy expected heartbeats"): it cannot heartbeat then,
        and a follower waits in SyncGroup for as long as its leader takes to assign."""
        for group in list(self.groups.values()):
            expired = [mid for mid, deadline in group.pending.items() if now > deadline]
            for mid in expired:  # removePendingMemberAndUpdateClassicGroup
                del group.pending[mid]
            if expired:
                self._maybe_complete_join(group)
            for mid, m in list(group.members.items()):
                waiting = any(f is not None and not f.done() for f in (m.join_future, m.sync_future))
                if not waiting and now - m.last_heartbeat > m.session_timeout_ms / 1000.0:
                    log.info("group %s: member %s expired", group.group_id, mid)
                    self._remove_member(group, mid)

    # -- offsets ------------------------------------------------------------------------------------
    def commit(self, group_id: str, generation: int, member_id: str,
               offsets: list[tuple[str, int, int, int, str | None]], api_version: int = 9,
               instance_id: str | None = None) -> int:
        """Member commits need the current generation; simple commits (generation -1, no member id, as
        kafka-consumer-groups.sh and our reset-offsets send) need a group without active members. The write
        runs here, on the caller's thread (`commit_async` is what the broker calls)."""
        error = self._check_commit(group_id, generation, member_id, api_version, offsets, instance_id)
        if error:
            return error
        try:
            self.store.commit(group_id, offsets)
        except KafkaStorageErrorError:
            return ErrorCode.NOT_COORDINATOR  # GroupMetadataManager.storeOffsets: KAFKA_STORAGE_ERROR -> NOT_COORDINATOR
        return 0

    async def commit_async(self, group_id: str, generation: int, member_id: str,
                           offsets: list[tuple[str, int, int, int, str | None]], api_version: int = 9,
                           instance_id: str | None = None) -> int:
        """`commit` with the append and its fsync in a worker thread: the event loop answers everyone else
        meanwhile, and the commit is answered (and its offsets readable) only once it is durable, as Kafka's
        coordinator runtime completes a write when it is committed to the log."""
        error = self._check_commit(group_id, generation, member_id, api_version, offsets, instance_id)
        if error:
            return error
        try:
            written = await asyncio.to_thread(self.store.write_commit, group_id, offsets)
        except KafkaStorageErrorError:
            return ErrorCode.NOT_COORDINATOR
        if written is not None:
            self.store.apply_commit(group_id, offsets, *written)
        return 0

    def _check_commit(self, group_id: str, generation: int, member_id: str, api_version: int,
                      offsets: list[tuple[str, int, int, int, str | None]] = (),
                      instance_id: str | None = None) -> int:
        if group_id in self.consumer.groups:  # a KIP-848 group: member epochs instead of generations
            return self.consumer.validate_commit(group_id, member_id, generation, api_version,
                                                 [(o[0], o[1]) for o in offsets])
        if group_id in self.streams.groups:  # a streams group (KIP-1071): member epochs too
            return self.streams.validate_commit(group_id, member_id, generation, [(o[0], o[1]) for o in offsets],
                                                api_version=api_version)
        # OffsetMetadataManager.validateOffsetCommit: an absent group becomes a simple one only for a commit
        # without a generation (else GROUP_ID_NOT_FOUND from v9, ILLEGAL_GENERATION before); then
        # ClassicGroup.validateOffsetCommit.
        group = self.groups.get(group_id)
        if group is None:
            if generation >= 0:
                return ErrorCode.GROUP_ID_NOT_FOUND if api_version >= 9 else ErrorCode.ILLEGAL_GENERATION
            group = self.group(group_id)
        if group.state == DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation < 0 and group.state == EMPTY:
            return 0  # the admin client's or a consumer without group management's commit
        if generation >= 0 or member_id or instance_id is not None:
            error = self._validate_member(group, member_id, instance_id)
            if error:
                return error
            if generation != group.generation:
                return ErrorCode.ILLEGAL_GENERATION
        else:
            return ErrorCode.UNKNOWN_MEMBER_ID  # no member named, and the group has members
        if group.state == COMPLETING:
            return ErrorCode.REBALANCE_IN_PROGRESS
        group.members[member_id].last_heartbeat = time.monotonic()
        return 0

    def txn_commit(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                   producer_id: int, offsets: list[tuple[str, int, int, int, str | None]],
                   producer_epoch: int = 0, api_version: int = 3) -> int:
        """GroupCoordinator.commitTransactionalOffsets: the group's checks, then the offsets written as the
        producer's transactional batch; they stay pending until the transaction ends."""
        error = self._check_txn_commit(group_id, generation, member_id, instance_id, offsets, api_version)
        if error:
            return error
        try:
            self.store.txn_commit(group_id, producer_id, producer_epoch, offsets)
        except KafkaStorageErrorError:
            return ErrorCode.NOT_COORDINATOR  # as commit_offsets: the client finds the coordinator again and retries
        return 0

    def _check_txn_commit(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                          offsets: list[tuple[str, int, int, int, str | None]], api_version: int) -> int:
        """OffsetMetadataManager.validateTransactionalOffsetCommit (Kafka 4.4, KIP-447/KIP-1251): an absent
        group is made a simple one for a commit without generation, else ILLEGAL_GENERATION
        (GROUP_ID_NOT_FOUND from v6); a KIP-848 group checks member epochs (ConsumerGroup), where a stale
        epoch answers ILLEGAL_GENERATION below v6; a classic group its members
        (ClassicGroup.validateOffsetCommit with isTransactional)."""
        if group_id in self.consumer.groups:
            error = self.consumer.validate_commit(group_id, member_id, generation, api_version,
                                                  [(o[0], o[1]) for o in offsets], transactional=True,
                                                  instance_id=instance_id)
            if error == ErrorCode.STALE_MEMBER_EPOCH and api_version < 6:
                return ErrorCode.ILLEGAL_GENERATION
            return error
        if group_id in self.streams.groups:
            error = self.streams.validate_commit(group_id, member_id, generation, [(o[0], o[1]) for o in offsets],
                                                 transactional=True, instance_id=instance_id)
            return ErrorCode.ILLEGAL_GENERATION if error == ErrorCode.STALE_MEMBER_EPOCH and api_version < 6 \
                else error
        group = self.groups.get(group_id)
        if group is None:
            if generation >= 0:
                return ErrorCode.GROUP_ID_NOT_FOUND if api_version >= 6 else ErrorCode.ILLEGAL_GENERATION
            group = self.group(group_id)
            group.new_group = False
        if group.state == DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation < 0 and group.state == EMPTY:
            return 0  # the admin client's or a consumer without group management's commit
        if generation >= 0 or member_id or instance_id is not None:
            if instance_id is not None:  # ClassicGroup.validateMember
                static = next((m.member_id for m in group.members.values() if m.group_instance_id == instance_id),
                              None)
                if static is None:
                    return ErrorCode.UNKNOWN_MEMBER_ID
                if static != member_id:
                    return ErrorCode.FENCED_INSTANCE_ID
            if member_id not in group.members:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if generation != group.generation:
                return ErrorCode.ILLEGAL_GENERATION
        return 0

    def complete_transaction(self, producer_id: int, commit: bool, producer_epoch: int | None = None,
                             partitions: set[int] | None = None) -> None:
        """The transaction's markers in its `__consumer_offsets` partitions (`partitions`; None: those
        holding its pending offsets), then its pending offsets applied or dropped
        (GroupCoordinator.onTransactionCompleted). This coordinator owns the offsets partitions, so the
        transaction coordinator's markers for them are appended here, as a partition leader appends
        WriteTxnMarkers. Raises KafkaStorageErrorError when a marker could not be written."""
        if producer_id not in self.store.pending and not partitions:
            return
        self.store.write_markers(producer_id, 0 if producer_epoch is None else producer_epoch, bool(commit),
                                 partitions)

    def has_pending(self, group_id: str, topic: str, partition: int) -> bool:
        """OffsetFetch with require_stable (KIP-447): is a transactional commit of this partition open?"""
        key = (group_id, topic, partition)
        return any(key in entries for entries in self.store.pending.values())

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None):
        if partitions is None:
            return {(t, p): v for (g, t, p), v in self.store.offsets.items() if g == group_id}
        return {(t, p): self.store.offsets.get((group_id, t, p), (-1, -1, None)) for t, p in partitions}

    def offset_delete_error(self, group_id: str) -> int:
        """OffsetMetadataManager.validateOffsetDelete: the group's error for an OffsetDelete, or 0. A classic
        group with members refuses unless it uses the consumer protocol (ClassicGroup.validateOffsetDelete)."""
        group = self.groups.get(group_id)
        if group is None:
            return 0 if group_id in self.consumer.groups or group_id in self.streams.groups \
                else ErrorCode.GROUP_ID_NOT_FOUND
        if group.state in (PREPARING, COMPLETING, STABLE) and group.protocol_type != "consumer":
            return ErrorCode.NON_EMPTY_GROUP
        return 0

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        group = self.groups.get(group_id)
        subscribed = self.consumer.subscribed_topics(group_id) | self.streams.subscribed_topics(group_id)
        if group is not None:
            subscribed |= {t for t, _p in partitions if group.is_subscribed(t)}
        out, gone = {}, []
        for t, p in partitions:
            if t in subscribed:
                out[(t, p)] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                out[(t, p)] = 0
                gone.append((t, p))
        try:
            self.store.delete_offsets(group_id, gone)
        except KafkaStorageErrorError:
            for tp in gone:
                out[tp] = ErrorCode.NOT_COORDINATOR
        return out

    def delete_group(self, group_id: str) -> int:
        group = self.groups.get(group_id)
        if group is None:
            error = self.consumer.delete(group_id)
            if error is None:
                error = self.streams.delete(group_id)
            if error is None:
                return ErrorCode.GROUP_ID_NOT_FOUND
            if not error:
                try:
                    self.store.store_group(group_id, None, classic=False)  # its offsets' tombstones
                except KafkaStorageErrorError:
                    return ErrorCode.NOT_COORDINATOR
            return error
        if group.state in (PREPARING, COMPLETING, STABLE):  # ClassicGroup.validateDeleteGroup
            return ErrorCode.NON_EMPTY_GROUP
        try:
            self.store.store_group(group_id, None)  # tombstones of its offsets and of the group
        except KafkaStorageErrorError:
            return ErrorCode.NOT_COORDINATOR
        del self.groups[group_id]
        return 0

    def describe(self, group_id: str) -> dict:
        group = self.groups.get(group_id)
        if group is None:
            return {"error_code": 0, "group_id": group_id, "group_state": DEAD, "protocol_type": "",
                    "protocol_data": "", "members": []}
        return {"error_code": 0, "group_id": group_id, "group_state": group.state,
                "protocol_type": group.protocol_type or "", "protocol_data": group.protocol_name or "",
                "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                             "client_id": m.client_id, "client_host": m.client_host,
                             "member_metadata": dict(m.protocols).get(group.protocol_name or "", b""),
                             "member_assignment": m.assignment} for m in group.members.values()],
                "authorized_operations": -2147483648}

    def list_groups(self) -> list[dict]:
        return [{"group_id": g.group_id, "protocol_type": g.protocol_type or "", "group_state": g.state,
                 "group_type": "classic"} for g in self.groups.values()] + self.consumer.list_groups() \
            + self.streams.list_groups()
