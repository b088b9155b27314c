"""Streams groups (KIP-1071, `group.protocol=streams`): the broker assigns Kafka Streams tasks.

Kafka's `GroupMetadataManager.streamsGroupHeartbeat` with the streams `CurrentAssignmentBuilder`, for one
broker. A member joins with epoch 0 and the application's topology; the group keeps the first topology (a
member with another topology epoch is refused while the group has members: Kafka 4.4 does not update a
topology in place), configures it against the topics (server/streams_topology.py: tasks per subtopology, the
internal repartition and changelog topics, which the broker creates) and assigns tasks with the sticky
assignor. Every change of the group (a member joining or leaving, its process or tags changing, the
configured topology changing) bumps the group epoch and computes a new target assignment. Each member then
reconciles on its own heartbeats: tasks it must give up are revoked first (it keeps its epoch until it
reports them gone), active tasks another member still owns are handed over once that member released them,
and its epoch becomes the target's. A member silent for `group.streams.session.timeout.ms`, or not revoking
within its rebalance timeout, is fenced; leaving is epoch -1 (or -2 for a static member).

A group id names one group: classic, consumer or streams. Committed offsets are shared with the other group
types' store (OffsetCommit/TxnOffsetCommit carry the member epoch, checked here). The group's state is
durable in `__consumer_offsets` before an answer goes out (server/streams_group_store.py).
"""

from __future__ import annotations

import copy
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from chronolog.config import check_replication_factor
from chronolog.errors import ErrorCode, InvalidTopicExceptionError
from chronolog.server.assignment import inter as _inter
from chronolog.server.assignment import minus as _minus
from chronolog.server.assignment import union as _union
from chronolog.server.consumer_group import delete_empty_group, fenced_members, offset_fetch_error
from chronolog.server.streams_topology import (
    MISSING_INTERNAL_TOPICS,
    SHUTDOWN_APPLICATION,
    STALE_TOPOLOGY,
    AssignorMember,
    Configured,
    InvalidTopology,
    Tasks,
    Topology,
    configure,
    java_hash_order,
    sticky_assign,
    summarize_topics,
    topology_of,
)
from chronolog.storage.partition_metadata import validate_topic_name

log = logging.getLogger(__name__)

LEAVE_EPOCH, STATIC_LEAVE_EPOCH = -1, -2
EMPTY, NOT_READY, ASSIGNING, RECONCILING, STABLE = "Empty", "NotReady", "Assigning", "Reconciling", "Stable"
KINDS = ("active", "standby", "warmup")
STREAMS_INVALID_TOPOLOGY = 130  # Errors.STREAMS_INVALID_TOPOLOGY


@dataclass
class StreamsMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    process_id: str = ""
    user_endpoint: tuple[str, int] | None = None
    client_tags: dict[str, str] = field(default_factory=dict)
    topology_epoch: int = 0
    rebalance_timeout_ms: int = 300000
    epoch: int = 0
    previous_epoch: int = -1
    # what the member was told it owns, and what it must give up before its next epoch, per kind
    assigned: dict[str, Tasks] = field(default_factory=lambda: {k: {} for k in KINDS})
    revoking: dict[str, Tasks] = field(default_factory=lambda: {k: {} for k in KINDS})
    revoke_deadline: float | None = None
    static_left: bool = False
    last_heartbeat: float = field(default_factory=time.monotonic)
    task_offsets: list[tuple[str, int, int]] = field(default_factory=list)
    task_end_offsets: list[tuple[str, int, int]] = field(default_factory=list)
    # The member epoch each active task was assigned at (KIP-1251, as for consumer groups): a commit with an
    # older epoch is valid for partitions of tasks it was assigned at or before that epoch.
    task_epochs: dict[tuple[str, int], int] = field(default_factory=dict)

    def stamp(self) -> None:
        held = {(s, p) for a in (self.assigned["active"], self.revoking["active"]) for s, ps in a.items() for p in ps}
        for t in held - self.task_epochs.keys():
            self.task_epochs[t] = self.epoch
        for t in self.task_epochs.keys() - held:
            del self.task_epochs[t]


@dataclass
class StreamsGroup:
    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    topology: Topology | None = None
    members: dict[str, StreamsMember] = field(default_factory=dict)
    target: dict[str, dict[str, Tasks]] = field(default_factory=dict)  # member -> kind -> tasks
    topic_sizes: dict[str, int] = field(default_factory=dict)  # the topics its topology was configured with
    configured: Configured = field(default_factory=lambda: Configured(None))
    endpoint_epoch: int = 0
    shutdown_requested: bool = False

    @property
    def state(self) -> str:
        """StreamsGroup.State."""
        if not self.members:
            return EMPTY
        if self.configured.tasks is None:
            return NOT_READY
        if self.assignment_epoch != self.epoch:
            return ASSIGNING
        if any(m.epoch != self.assignment_epoch or any(m.revoking[k] for k in KINDS)
               or m.assigned != self.target.get(m.member_id, _no_tasks()) for m in self.members.values()):
            return RECONCILING
        return STABLE


def _no_tasks() -> dict[str, Tasks]:
    return {k: {} for k in KINDS}


class HeartbeatError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


@dataclass
class HeartbeatRequest:
    """The fields of a StreamsGroupHeartbeat the group reads (None: unchanged since the last heartbeat)."""

    group_id: str
    member_id: str
    epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    topology: Topology | None = None
    owned: dict[str, Tasks] | None = None  # kind -> tasks, None when the member did not say
    # the owned lists as sent (active, standby, warmup; entries in order, empty ones kept), for their check
    owned_ids: tuple[list[tuple[str, list[int]]], ...] | None = None
    process_id: str | None = None
    user_endpoint: tuple[str, int] | None = None
    client_tags: dict[str, str] | None = None
    task_offsets: list[tuple[str, int, int]] | None = None
    task_end_offsets: list[tuple[str, int, int]] | None = None
    shutdown_application: bool = False
    client_id: str = ""
    client_host: str = ""

    def owned_lists(self) -> tuple[list[tuple[str, list[int]]], ...]:
        """ActiveTasks, StandbyTasks, WarmupTasks as (subtopology, partitions) lists: as sent, else from `owned`."""
        if self.owned_ids is not None:
            return self.owned_ids
        owned = self.owned or {}
        return tuple([(sid, sorted(ps)) for sid, ps in sorted(owned.get(k, {}).items())] for k in KINDS)


class StreamsGroups:
    """The streams half of the group coordinator (its `streams` attribute). `store` writes the groups'
    records (server/streams_group_store.py); `create_topic(name, partitions, configs)` makes internal topics, and
    `may_create(name)` says whether the member's principal may (CREATE on the topic; None: any)."""

    def __init__(self, owner: Any, store: Any) -> None:
        self.owner = owner
        self.store = store
        self.groups: dict[str, StreamsGroup] = {}
        # Group configs set with IncrementalAlterConfigs on the GROUP resource (streams.session.timeout.ms,
        # streams.heartbeat.interval.ms, streams.num.standby.replicas), given by the broker: group id -> configs
        self.group_configs: dict[str, dict[str, str]] = {}
        # AutoTopicCreationManager's ExpiringErrorCache: why an internal topic could not be created, until when
        # (monotonic seconds): topic -> (message, expiry)
        self.creation_errors: dict[str, tuple[str, float]] = {}

    @property
    def config(self):
        return self.owner.config

    def _cfg(self, name: str, default: int, group_id: str | None = None) -> int:
        """GroupConfigManager: the group's `streams.*` config, else the broker's `group.streams.*`."""
        if group_id is not None:
            value = self.group_configs.get(group_id, {}).get(name.removeprefix("group."))
            if value is not None:
                return int(value)
        try:
            return int(self.config[name])
        except KeyError:
            return default

    # -- heartbeat ----------------------------------------------------------------------------------------
    async def heartbeat_async(self, req: HeartbeatRequest, topics: dict[str, int], create_topic,
                              may_create: Callable[[str], bool] | None = None) -> dict:
        """One StreamsGroupHeartbeat, answered once the group's changed state is durable."""
        try:
            result = self._heartbeat(req, topics, _Creator(create_topic, may_create))
        except HeartbeatError as exc:
            log.debug("streams group %s: heartbeat of %s refused: %s", req.group_id, req.member_id, exc.message)
            return {"error_code": exc.code, "error_message": exc.message, "member_id": req.member_id,
                    "member_epoch": -1, "heartbeat_interval_ms": 0}
        failed = await self.store.durable_async(req.group_id, self.groups.get(req.group_id))
        if failed:
            return {**failed, "member_id": req.member_id, "member_epoch": -1, "heartbeat_interval_ms": 0}
        return result

    def parse_heartbeat(self, req: Any, client_id: str, client_host: str, rebalance_timeout_ms: int
                        ) -> tuple[HeartbeatRequest | None, tuple[int, str | None] | None]:
        """A StreamsGroupHeartbeat request checked in KafkaApis' and the group coordinator's order: the
        topology's topic names (STREAMS_INVALID_TOPOLOGY), source-topic regexes (INVALID_REQUEST: Kafka 4.4
        does not take them yet), the request's fields (INVALID_REQUEST), then the topology's structure.
        (The request, None), or (None, (error code, message))."""
        if req.topology is not None:
            bad = _bad_topic_names(req.topology)
            if bad:
                return None, (STREAMS_INVALID_TOPOLOGY, bad)
            if any(s.source_topic_regex for s in req.topology.subtopologies):
                return None, (ErrorCode.INVALID_REQUEST, "Regular expressions for source topics are not supported yet.")
        owned = owned_ids = None
        if req.active_tasks is not None or req.standby_tasks is not None or req.warmup_tasks is not None:
            owned = {k: tasks_of(getattr(req, f"{k}_tasks")) or {} for k in KINDS}
            owned_ids = tuple([(t.subtopology_id, [int(p) for p in t.partitions or ()])
                               for t in getattr(req, f"{k}_tasks") or ()] for k in KINDS)
        endpoint = None if req.user_endpoint is None else (req.user_endpoint.host, int(req.user_endpoint.port))
        tags = None if req.client_tags is None else {kv.key: kv.value for kv in req.client_tags}
        request = HeartbeatRequest(
            req.group_id, req.member_id, int(req.member_epoch), instance_id=req.instance_id, rack_id=req.rack_id,
            rebalance_timeout_ms=rebalance_timeout_ms, owned=owned, owned_ids=owned_ids, process_id=req.process_id,
            user_endpoint=endpoint, client_tags=tags, task_offsets=_offsets(req.task_offsets),
            task_end_offsets=_offsets(req.task_end_offsets), shutdown_application=bool(req.shutdown_application),
            client_id=client_id, client_host=client_host)
        try:
            self.validate(request, req.topology is not None, tuple(getattr(req, f"{k}_tasks") is None for k in KINDS),
                          tuple(bool(getattr(req, f"{k}_tasks")) for k in KINDS), _counted_changelog(req.topology))
        except HeartbeatError as exc:
            return None, (exc.code, exc.message)
        if req.topology is not None:
            try:
                request.topology = topology_of(req.topology)
            except InvalidTopology as exc:
                return None, (STREAMS_INVALID_TOPOLOGY, str(exc))
        return request, None

    @staticmethod
    def validate(req: HeartbeatRequest, has_topology: bool, owned_nulls: tuple[bool, bool, bool],
                 listed: tuple[bool, bool, bool] = (False, False, False), counted_changelog: str | None = None
                 ) -> None:
        """GroupCoordinatorService.throwIfStreamsGroupHeartbeatRequestIsInvalid (before the topology's own checks).
        `owned_nulls`: which of ActiveTasks, StandbyTasks, WarmupTasks the request left null; `listed`: which
        of them list a task, even one of no partitions (a list Kafka finds not empty);
        `counted_changelog`: the message for a joining topology's changelog topic given a partition count."""
        bad = ErrorCode.INVALID_REQUEST
        if not req.member_id:
            raise HeartbeatError(bad, "MemberId can't be empty.")
        if not req.group_id:
            raise HeartbeatError(bad, "GroupId can't be empty.")
        if req.instance_id == "":
            raise HeartbeatError(bad, "InstanceId can't be empty.")
        if req.rack_id == "":
            raise HeartbeatError(bad, "RackId can't be empty.")
        if req.epoch == 0:
            if req.rebalance_timeout_ms == -1:
                raise HeartbeatError(bad, "RebalanceTimeoutMs must be provided in first request.")
            for kind, name, null, lists in zip(KINDS, ("ActiveTasks", "StandbyTasks", "WarmupTasks"), owned_nulls,
                                               listed, strict=True):
                # throwIfNotEmptyCollection refuses a null list too (wire fuzzer seed 18)
                if null or lists or (req.owned is not None and req.owned.get(kind)):
                    raise HeartbeatError(bad, f"{name} must be empty when (re-)joining.")
            if not has_topology:
                raise HeartbeatError(bad, "Topology must be non-null when (re-)joining.")
            if counted_changelog is not None:  # throwIfInvalidTopology, only when joining
                raise HeartbeatError(STREAMS_INVALID_TOPOLOGY, counted_changelog)
        elif req.epoch == STATIC_LEAVE_EPOCH:
            if req.instance_id is None:
                raise HeartbeatError(bad, "InstanceId can't be null.")
        elif req.epoch < STATIC_LEAVE_EPOCH:
            raise HeartbeatError(bad, f"MemberEpoch is {req.epoch}, but must be greater than or equal to -2.")
        if any(owned_nulls) and not all(owned_nulls):
            raise HeartbeatError(bad, "If one task-type is non-null, all must be non-null.")
        if has_topology and req.epoch != 0:
            raise HeartbeatError(bad, "Topology can only be provided when (re-)joining.")

    def _group(self, group_id: str, create: bool) -> StreamsGroup:
        group = self.groups.get(group_id)
        if group is not None:
            return group
        classic = self.owner.groups.get(group_id)
        if (classic is not None and classic.members) or self.owner.consumer.groups.get(group_id) is not None:
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a streams group.")
        if not create:
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Streams group {group_id} not found.")
        if classic is not None:  # an empty classic group (offsets only) gives way, as Kafka's empty groups do
            del self.owner.groups[group_id]
        group = self.groups[group_id] = StreamsGroup(group_id)
        return group

    def _heartbeat(self, req: HeartbeatRequest, topics: dict[str, int], creator: _Creator) -> dict:
        duplicate = _duplicate_task_offset(req)
        if duplicate is None:
            return self._checked_heartbeat(req, topics, creator)
        # MemberTaskOffsets.update throws once the member is checked and the topology configured: the
        # heartbeat's records are dropped, so the group goes back to what it was (wire fuzzer seed 39)
        saved, classic = copy.deepcopy(self.groups.get(req.group_id)), self.owner.groups.get(req.group_id)
        try:
            return self._checked_heartbeat(req, topics, creator, duplicate)
        finally:
            if saved is None:
                self.groups.pop(req.group_id, None)
            else:
                self.groups[req.group_id] = saved
            if classic is not None:
                self.owner.groups[req.group_id] = classic

    def _checked_heartbeat(self, req: HeartbeatRequest, topics: dict[str, int], creator: _Creator,
                           duplicate: str | None = None) -> dict:
        if req.epoch == 0 and req.topology is not None and all(
                t in topics for s in req.topology.subtopologies for t in s.source_topics):
            # configuring the topology once its source topics exist, Kafka 4.4 refuses a subtopology that reads
            # nothing (InternalTopicManager: "Subtopology does not contain any source topics"); while one is
            # missing it answers the missing topics' status
            for s in req.topology.subtopologies:
                if not (s.source_topics or s.source_regex or s.repartition_sources):
                    raise HeartbeatError(STREAMS_INVALID_TOPOLOGY, "Subtopology does not contain any source topics")
        group = self._group(req.group_id, create=req.epoch == 0)
        interval = self._cfg("group.streams.heartbeat.interval.ms", 5000, req.group_id)
        if req.epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            member = group.members.get(req.member_id)
            if member is None:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of "
                                     f"group {req.group_id}.")
            if req.epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
                member.static_left = True
            else:
                self._remove(group, req.member_id, "left", topics)
            return {"error_code": 0, "error_message": None, "member_id": req.member_id, "member_epoch": req.epoch,
                    "heartbeat_interval_ms": 0}
        changed = False
        member = group.members.get(req.member_id)
        status: list[tuple[int, str]] = []
        if req.epoch == 0:
            topology = req.topology
            if group.topology is None or (not group.members and topology != group.topology):
                group.topology, changed = topology, True  # the first member's topology initializes the group
            elif topology.epoch != group.topology.epoch:
                if topology.epoch < group.topology.epoch:
                    status.append((STALE_TOPOLOGY, f"The member's topology epoch {topology.epoch} is lower than "
                                   f"the group's topology epoch {group.topology.epoch}."))
                else:
                    raise HeartbeatError(ErrorCode.INVALID_REQUEST, "Topology updates are not supported yet.")
            static = next((m for m in group.members.values() if req.instance_id is not None
                           and m.instance_id == req.instance_id and m.member_id != req.member_id), None)
            if static is not None:
                if not static.static_left:
                    raise HeartbeatError(ErrorCode.UNRELEASED_INSTANCE_ID, f"Static member {req.member_id} with "
                                         f"instance id {req.instance_id} cannot join the group because the "
                                         f"instance id is owned by {static.member_id} member.")
                member = self._replace_static(group, static, req.member_id)
            elif member is None:
                member = group.members[req.member_id] = StreamsMember(req.member_id, instance_id=req.instance_id)
                changed = True
            else:  # a rejoin (after a fencing the client saw): starts from nothing
                member.assigned, member.revoking, member.epoch, member.previous_epoch = _no_tasks(), _no_tasks(), 0, -1
                member.task_epochs = {}
            member.topology_epoch = topology.epoch
        else:
            if member is None:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of "
                                     f"group {req.group_id}.")
            self._check_epoch(member, req.epoch, req.owned)
        owned_lists = req.owned_lists()
        if any(owned_lists):
            invalid = _invalid_task(self._ready_tasks(group, topics), owned_lists)
            if invalid is not None:
                raise HeartbeatError(ErrorCode.INVALID_REQUEST, invalid)
        if duplicate is not None:
            raise HeartbeatError(ErrorCode.INVALID_REQUEST, duplicate)
        member.last_heartbeat = time.monotonic()
        member.client_id, member.client_host = req.client_id, req.client_host
        if req.rebalance_timeout_ms > 0:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.rack_id is not None and req.rack_id != member.rack_id:
            member.rack_id, changed = req.rack_id, True
        if req.process_id is not None and req.process_id != member.process_id:
            member.process_id, changed = req.process_id, True
        if req.client_tags is not None and req.client_tags != member.client_tags:
            member.client_tags, changed = req.client_tags, True
        if req.user_endpoint is not None and req.user_endpoint != member.user_endpoint:
            member.user_endpoint = req.user_endpoint
            group.endpoint_epoch += 1
        if req.task_offsets is not None:
            member.task_offsets = req.task_offsets
        if req.task_end_offsets is not None:
            member.task_end_offsets = req.task_end_offsets
        if req.shutdown_application:
            group.shutdown_requested = True
        if self._configure(group, topics, creator):
            changed = True
        status += group.configured.status
        if changed:
            self._new_target(group)
        before = {k: dict(v) for k, v in member.assigned.items()}
        self._reconcile(group, member, req.owned)
        if group.shutdown_requested:
            status.append((SHUTDOWN_APPLICATION, "A KafkaStreams instance encountered a fatal error and requested "
                           "a shutdown for the entire application."))
        send = req.epoch == 0 or member.assigned != before or (req.owned is not None and any(
            req.owned.get(k, {}) != member.assigned[k] for k in KINDS))
        out = {"error_code": 0, "error_message": None, "member_id": member.member_id, "member_epoch": member.epoch,
               "heartbeat_interval_ms": interval, "status": [{"status_code": c, "status_detail": d} for c, d in status],
               "endpoint_information_epoch": group.endpoint_epoch}
        if send:
            out.update({f"{k}_tasks": _wire_tasks(member.assigned[k]) for k in KINDS})
        if any(m.user_endpoint is not None for m in group.members.values()):
            out["partitions_by_user_endpoint"] = self._endpoints(group)
        return out

    def _ready_tasks(self, group: StreamsGroup, topics: dict[str, int]) -> dict[str, int] | None:
        """The tasks per subtopology of the group's topology configured against `topics`, None while it is not
        ready (ConfiguredTopology.isReady: source topics or internal topics missing, as right after a join on
        Kafka, which creates internal topics later). Nothing of the group changes: a refused heartbeat leaves
        the configuration to the next one."""
        if group.configured.tasks is not None and self._relevant_sizes(group, topics) == group.topic_sizes:
            return group.configured.tasks
        configured = configure(group.topology, topics)
        return None if configured.to_create else configured.tasks

    def _configure(self, group: StreamsGroup, topics: dict[str, int], creator: _Creator) -> bool:
        """The topology configured against the topics now; the internal topics it lacks are created (Kafka's
        coordinator asks the controller to; here the log manager makes them at once). True when the tasks
        changed (a new target assignment is due)."""
        relevant = self._relevant_sizes(group, topics)
        if relevant == group.topic_sizes and group.configured.tasks is not None:
            return False
        configured = configure(group.topology, topics)
        if configured.tasks is not None and configured.to_create:
            topics = self._create_internal(group, configured, topics, creator)
            if all(name in topics for name in configured.to_create):
                configured = configure(group.topology, topics)
        before = group.configured.tasks
        group.configured = configured
        group.topic_sizes = self._relevant_sizes(group, topics)
        return configured.tasks != before

    def _create_internal(self, group: StreamsGroup, configured: Configured, topics: dict[str, int],
                         creator: _Creator) -> dict[str, int]:
        """KafkaApis.streamsGroupHeartbeat with AutoTopicCreationManager: the missing internal topics are created
        only if the member may CREATE every one of them; the ones the broker refuses (a replication factor it
        cannot honour) stay missing. While any is, the topology is not ready: MISSING_INTERNAL_TOPICS names
        them, and the refusals cached by earlier attempts (Kafka learns of its own from the controller after
        answering), for twice the heartbeat interval. The topics as they are now."""
        missing = list(configured.to_create)
        detail = f"Internal topics are missing: {summarize_topics(missing)}"
        denied = [n for n in missing if creator.may_create is not None and not creator.may_create(n)]
        if denied:
            detail += f"; Unauthorized to CREATE on topics {', '.join(java_hash_order(denied))}."
        else:
            now = time.monotonic()
            ttl = 2 * self._cfg("group.streams.heartbeat.interval.ms", 5000, group.group_id) / 1000.0
            known = {n: self.creation_errors[n][0] for n in java_hash_order(missing)
                     if n in self.creation_errors and self.creation_errors[n][1] > now}
            factors = {t.name: t.replication_factor for s in group.topology.subtopologies
                       for t in (*s.repartition_sources, *s.changelogs)}
            for name in missing:
                partitions, configs = configured.to_create[name]
                try:
                    # 0 is Kafka Streams' "unset": the broker's default, as -1
                    check_replication_factor(factors.get(name, 0) or -1, self._cfg("default.replication.factor", 1))
                    creator.create(name, partitions, configs)
                except Exception as exc:  # noqa: BLE001 (answered in the status, the client waits)
                    self.creation_errors[name] = (str(exc), now + ttl)
                    log.info("streams group %s: internal topic %s not created: %s", group.group_id, name, exc)
                    continue
                self.creation_errors.pop(name, None)
                log.info("streams group %s: created internal topic %s (%d partitions)", group.group_id, name,
                         partitions)
                topics = {**topics, name: partitions}
            if known:
                failed = [f"{n} ({m})" for n, m in known.items()]
                more = f" and {len(failed) - 3} more" if len(failed) > 3 else ""
                detail += f"; Creation failed: {', '.join(failed[:3])}{more}."
        if denied or any(n not in topics for n in missing):
            configured.tasks, configured.status = None, [(MISSING_INTERNAL_TOPICS, detail)]
        return topics

    @staticmethod
    def _relevant_sizes(group: StreamsGroup, topics: dict[str, int]) -> dict[str, int]:
        if group.topology is None:
            return {}
        names = {t for s in group.topology.subtopologies for t in s.source_topics}
        names |= {t.name for s in group.topology.subtopologies for t in (*s.repartition_sources, *s.changelogs)}
        names |= {t for ts in group.configured.sources.values() for t in ts}
        sizes = {t: topics[t] for t in names if t in topics}
        if any(s.source_regex for s in group.topology.subtopologies):
            sizes["\0regex"] = hash(tuple(sorted(topics)))  # a new topic may match a regex
        return sizes

    def _endpoints(self, group: StreamsGroup) -> list[dict]:
        """PartitionsByUserEndpoint: per member with an endpoint, the source partitions of its tasks."""
        sources = group.configured.sources
        out = []
        for m in group.members.values():
            if m.user_endpoint is None:
                continue

            def parts(*kinds: str, m: StreamsMember = m) -> list[dict]:
                by_topic: dict[str, set[int]] = {}
                for k in kinds:
                    for sid, ps in m.assigned[k].items():
                        for t in sources.get(sid, ()):
                            by_topic.setdefault(t, set()).update(ps)
                return [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted(by_topic.items())]

            out.append({"user_endpoint": {"host": m.user_endpoint[0], "port": m.user_endpoint[1]},
                        "active_partitions": parts("active"), "standby_partitions": parts("standby", "warmup")})
        return out

    @staticmethod
    def _replace_static(group: StreamsGroup, old: StreamsMember, member_id: str) -> StreamsMember:
        new = StreamsMember(member_id, instance_id=old.instance_id, rack_id=old.rack_id, process_id=old.process_id,
                            client_tags=old.client_tags, user_endpoint=old.user_endpoint,
                            rebalance_timeout_ms=old.rebalance_timeout_ms, epoch=old.epoch,
                            previous_epoch=old.previous_epoch)
        new.assigned, new.revoking, new.task_epochs = old.assigned, old.revoking, old.task_epochs
        del group.members[old.member_id]
        group.members[member_id] = new
        if old.member_id in group.target:
            group.target[member_id] = group.target.pop(old.member_id)
        return new

    @staticmethod
    def _check_epoch(member: StreamsMember, epoch: int, owned: dict[str, Tasks] | None) -> None:
        """throwIfStreamsGroupMemberEpochIsInvalid."""
        if epoch == member.epoch:
            return
        if epoch == member.previous_epoch and owned is not None and not _minus(owned.get("active", {}),
                                                                               member.assigned["active"]):
            return
        raise HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH, f"The streams group member has a "
                             f"{'smaller' if epoch < member.epoch else 'greater'} member epoch ({epoch}) than the "
                             f"one known by the group coordinator ({member.epoch}). The member must abandon all its "
                             f"tasks and rejoin.")

    def _new_target(self, group: StreamsGroup) -> None:
        """A new group epoch and its target assignment (the sticky assignor)."""
        group.epoch += 1
        tasks = group.configured.tasks
        if not group.members or tasks is None:
            group.target = {mid: _no_tasks() for mid in group.members}
        else:
            assignor_members = [AssignorMember(m.member_id, m.process_id or m.member_id,
                                               _union(group.target.get(m.member_id, _no_tasks())["active"],
                                                      m.assigned["active"]),
                                               group.target.get(m.member_id, _no_tasks())["standby"])
                                for m in group.members.values()]
            standbys = self._cfg("group.streams.num.standby.replicas", 0, group.group_id)
            result = sticky_assign(assignor_members, tasks, standbys)
            group.target = {mid: {"active": a, "standby": s, "warmup": {}} for mid, (a, s) in result.items()}
        group.assignment_epoch = group.epoch

    def _reconcile(self, group: StreamsGroup, member: StreamsMember, owned: dict[str, Tasks] | None) -> None:
        """The streams CurrentAssignmentBuilder: revoke first, then take the target's tasks (active ones once
        no other member owns them)."""
        if any(member.revoking[k] for k in KINDS) and owned is not None and not any(
                _inter(owned.get(k, {}), member.revoking[k]) for k in KINDS):
            member.revoking, member.revoke_deadline = _no_tasks(), None
        if any(member.revoking[k] for k in KINDS):
            member.stamp()
            return
        target = group.target.get(member.member_id, _no_tasks())
        if member.epoch != group.assignment_epoch:
            revoke = {k: _minus(member.assigned[k], target[k]) for k in KINDS}
            if any(revoke.values()):
                member.assigned = {k: _inter(member.assigned[k], target[k]) for k in KINDS}
                member.revoking = revoke
                member.revoke_deadline = time.monotonic() + member.rebalance_timeout_ms / 1000.0
                member.stamp()
                return
            member.previous_epoch, member.epoch = member.epoch, group.assignment_epoch
        held: Tasks = {}
        for other in group.members.values():
            if other is not member:
                held = _union(held, _union(other.assigned["active"], other.revoking["active"]))
        member.assigned = {"active": _union(member.assigned["active"], _minus(target["active"], held)),
                           "standby": target["standby"], "warmup": target["warmup"]}
        member.stamp()

    def _remove(self, group: StreamsGroup, member_id: str, why: str, topics: dict[str, int] | None = None) -> None:
        log.info("streams group %s: member %s %s", group.group_id, member_id, why)
        group.members.pop(member_id, None)
        group.target.pop(member_id, None)
        if not group.members:
            group.shutdown_requested = False
        self._new_target(group)

    def expire(self, now: float) -> list[str]:
        """Members silent past the session timeout, or not revoking within the rebalance timeout, are fenced.
        The ids of the groups changed (their records are the caller's to write)."""
        changed = []
        for group in list(self.groups.values()):
            session = self._cfg("group.streams.session.timeout.ms", 45000, group.group_id) / 1000.0
            hit = False
            for mid, why in fenced_members(group.members, now, lambda _m, s=session: s):
                self._remove(group, mid, why)
                hit = True
            if hit:
                changed.append(group.group_id)
        return changed

    async def durable_async(self, group_id: str) -> dict | None:
        return await self.store.durable_async(group_id, self.groups.get(group_id))

    # -- what the rest of the coordinator asks ------------------------------------------------------------
    def validate_commit(self, group_id: str, member_id: str, epoch: int, partitions=(), *,
                        transactional: bool = False, instance_id: str | None = None, api_version: int = 9) -> int:
        """StreamsGroup.validateOffsetCommit: as a consumer group's (server/consumer_group.py): a commit
        without a member goes to an empty group (or, transactional without member or instance, to any); a
        member commits with OffsetCommit v9+ (UNSUPPORTED_VERSION before) and its epoch, or an older one for
        partitions of tasks it held since (KIP-1251)."""
        group = self.groups[group_id]
        if epoch < 0 and not group.members:
            return 0
        if transactional and epoch == -1 and member_id == "" and instance_id is None:
            return 0
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if not transactional and api_version < 9:  # wire fuzzer seed 27
            return ErrorCode.UNSUPPORTED_VERSION  # "OffsetCommit version 9 or above must be used by members ..."
        if epoch == member.epoch:
            return 0
        if epoch > member.epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        task_of = self._task_of(group)
        for topic, partition in partitions:
            sid = task_of.get(topic)
            assigned_at = member.task_epochs.get((sid, partition)) if sid is not None else None
            if assigned_at is None or epoch < assigned_at:
                return ErrorCode.STALE_MEMBER_EPOCH
        return 0

    def validate_fetch(self, group_id: str, member_id: str | None, epoch: int) -> int:
        """StreamsGroup.validateOffsetFetch (OffsetFetch v9+): without a member id and epoch (an admin client)
        any fetch goes; a member must be known (UNKNOWN_MEMBER_ID) and at its epoch (STALE_MEMBER_EPOCH). 0
        when the group is not a streams group (wire fuzzer seed 27)."""
        return offset_fetch_error(self.groups, group_id, member_id, epoch)

    @staticmethod
    def _task_of(group: StreamsGroup) -> dict[str, str]:
        return {t: sid for sid, ts in group.configured.sources.items() for t in ts}

    def has_members(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and bool(group.members)

    def subscribed_topics(self, group_id: str) -> set[str]:
        """StreamsGroup.isSubscribedToTopic: the topics its members read (none once it is empty, so that
        OffsetDelete of an empty group goes, as `kafka-streams-groups --delete-offsets` does on Kafka)."""
        group = self.groups.get(group_id)
        if group is None or not group.members:
            return set()
        return {t for ts in group.configured.sources.values() for t in ts}

    def delete(self, group_id: str) -> int | None:
        """DeleteGroups of a streams group: None when it is not one."""
        return delete_empty_group(self.groups, group_id, self.store)

    def describe(self, group_id: str) -> StreamsGroup | None:
        return self.groups.get(group_id)

    def list_groups(self) -> list[dict]:
        return [{"group_id": g.group_id, "protocol_type": "streams", "group_state": g.state, "group_type": "streams"}
                for g in self.groups.values()]

    def restore(self, records: dict[str, bytes], topics: dict[str, int]) -> None:
        """The groups replayed from their records read at start; members' timers start now."""
        self.groups.update(self.store.replay(records))
        for group in self.groups.values():
            group.configured = configure(group.topology, topics)
            group.topic_sizes = self._relevant_sizes(group, topics)


@dataclass
class _Creator:
    """How one heartbeat makes internal topics: the broker's create call, and its principal's CREATE check."""

    create: Callable[[str, int, dict[str, str]], Any]
    may_create: Callable[[str], bool] | None = None


def _counted_changelog(wire: Any) -> str | None:
    """GroupCoordinatorService.throwIfInvalidTopology: a changelog topic's partition count is the number of its
    subtopology's tasks, so a joining topology giving one (any but 0) is invalid (found with wire fuzzer seed 27)."""
    for s in () if wire is None else wire.subtopologies:
        for t in s.state_changelog_topics:
            if int(t.partitions) != 0:
                return f"Changelog topic {t.name} must have an undefined partition count, but it is set to {t.partitions}."
    return None


def _bad_topic_names(wire: Any) -> str | None:
    """KafkaApis.streamsGroupHeartbeat: every topic the topology names must be a valid name
    (STREAMS_INVALID_TOPOLOGY otherwise), checked before anything else of the request."""
    for s in wire.subtopologies:
        names = [*s.source_topics, *s.repartition_sink_topics,
                 *(t.name for t in (*s.state_changelog_topics, *s.repartition_source_topics))]
        for name in names:
            try:
                validate_topic_name(name)
            except InvalidTopicExceptionError as exc:
                return str(exc)
    return None


def _invalid_task(tasks: dict[str, int] | None, owned_ids: tuple[list[tuple[str, list[int]]], ...]) -> str | None:
    """GroupMetadataManager.throwIfRequestContainsInvalidTasks, on ActiveTasks, StandbyTasks then WarmupTasks:
    an owned task's subtopology must be in the configured topology (even with no partitions listed) and its
    partition below that subtopology's task count. Skipped while the topology is not ready (`tasks` None)."""
    if tasks is None:
        return None
    for listed in owned_ids:
        for sid, partitions in listed:
            count = tasks.get(sid)
            if count is None:
                return f"Subtopology {sid} does not exist in the topology."
            for p in partitions:
                if p < 0 or p >= count:
                    return f"Task {p} for subtopology {sid} is invalid. Number of tasks for this subtopology: {count}"
    return None


def _duplicate_task_offset(req: HeartbeatRequest) -> str | None:
    """MemberTaskOffsets.toNestedMap: TaskOffsets or TaskEndOffsets naming one task twice is INVALID_REQUEST."""
    for offsets in (req.task_offsets, req.task_end_offsets):
        seen: set[tuple[str, int]] = set()
        for sid, partition, _ in offsets or ():
            if (sid, partition) in seen:
                return f"Task offsets contain a duplicate entry for subtopology {sid} and partition {partition}."
            seen.add((sid, partition))
    return None


def _offsets(wire: Any) -> list[tuple[str, int, int]] | None:
    return None if wire is None else [(o.subtopology_id, int(o.partition), int(o.offset)) for o in wire]


def new_member_id() -> str:
    return str(uuid.uuid4())


def _wire_tasks(tasks: Tasks) -> list[dict]:
    return [{"subtopology_id": sid, "partitions": sorted(ps)} for sid, ps in sorted(tasks.items()) if ps]


def tasks_of(wire: Any) -> Tasks | None:
    """A request's []TaskIds (None stays None: unchanged)."""
    if wire is None:
        return None
    out: dict[str, frozenset[int]] = {}
    for t in wire:
        if t.partitions:
            out[t.subtopology_id] = out.get(t.subtopology_id, frozenset()) | frozenset(int(p) for p in t.partitions)
    return out
