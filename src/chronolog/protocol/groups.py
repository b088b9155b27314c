"""Consumer-group APIs (classic protocol): thin translations between kio requests and the coordinator
on `ctx.coordinator`. FindCoordinator keeps min version 0: librdkafka < 2.11 has no group coordinator
otherwise (docs/protocol.md)."""

from __future__ import annotations

from typing import Any

from chronolog.errors import ErrorCode
from chronolog.protocol.core import ms, topic_uuid
from chronolog.protocol.registry import RequestContext, register


def _group_denied(ctx: RequestContext, op: str, group_id: str) -> bool:
    return not ctx.allowed(op, "group", group_id)


def _share_group(ctx: RequestContext, group_id: str) -> bool:
    """The id names a share group (KIP-932): the classic-group APIs find a group of another type, which
    Kafka's GroupMetadataManager refuses as it finds it (getOrMaybeCreateClassicGroup, validateOffsetCommit)."""
    shares = ctx.state.share_groups
    return shares is not None and shares.known(group_id) is not None


def _coordinator_denied(ctx: RequestContext, key_type: int, key: str) -> int:
    """KafkaApis.handleFindCoordinatorRequest: Describe on the group (key type 0) or on the transactional
    id (key type 1); the error code, or 0. A transactional id's coordinator is ready once
    __transaction_state exists (KafkaApis creates the internal topic here)."""
    if key_type == 1:
        if not ctx.allowed("describe", "transactional_id", key):
            return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        if ctx.state.transactions is None or ctx.state.transactions.offline_id(key):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        ctx.state.transactions.ensure_ready()
        return 0
    if key_type != 0:
        return ErrorCode.INVALID_REQUEST
    return ErrorCode.GROUP_AUTHORIZATION_FAILED if _group_denied(ctx, "describe", key) else 0


async def _group_coordinator_ready(ctx: RequestContext, key_type: int, error: int, key: str) -> int:
    """The group coordinator is ready once `__consumer_offsets` exists; a failed creation is
    COORDINATOR_NOT_AVAILABLE, which clients retry."""
    if error or key_type != 0 or ctx.coordinator is None:
        return error
    if ctx.coordinator.offline(key):  # its partition could not be opened at start
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return 0 if await ctx.coordinator.offsets_topic_ready() else ErrorCode.COORDINATOR_NOT_AVAILABLE


# v5 only allows TRANSACTION_ABORTABLE (KIP-890); v6 adds key type 2, a share group's state partition
# ("group:topicId:partition", KIP-932), asked for by brokers' share persisters: no share coordinator here,
# so INVALID_REQUEST, which Kafka answers for key type 2 below v6 and for a malformed key (differences.md).
@register(10, 0, 6)
async def find_coordinator(req: Any, ctx: RequestContext) -> dict:
    node = {"node_id": ctx.state.node_id, "host": ctx.advertised_host, "port": ctx.advertised_port}
    nowhere = {"node_id": -1, "host": "", "port": -1}
    key_type = int(getattr(req, "key_type", 0))
    if ctx.api_version >= 4:
        coordinators = []
        for k in req.coordinator_keys:
            error = await _group_coordinator_ready(ctx, key_type, _coordinator_denied(ctx, key_type, k), k)
            coordinators.append({"key": k, "error_code": error, "error_message": ErrorCode(error).name if error else None,
                                 **(nowhere if error else node)})
        return {"throttle_time": 0, "coordinators": coordinators}
    error = await _group_coordinator_ready(ctx, key_type, _coordinator_denied(ctx, key_type, req.key), req.key)
    if error:
        return {"throttle_time": 0, "error_code": error, "error_message": ErrorCode(error).name, **nowhere}
    return {"throttle_time": 0, "error_code": 0, "error_message": None, **node}


@register(11, 0, 9)  # v8: a reason; v9: skip_assignment in the answer (KIP-814): a returning static leader
async def join_group(req: Any, ctx: RequestContext) -> dict:
    if _group_denied(ctx, "read", req.group_id):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "generation_id": -1, "member_id": ""}
    session = ms(req.session_timeout)
    rebalance = ms(getattr(req, "rebalance_timeout", req.session_timeout))
    if req.group_id and ctx.coordinator.config["group.min.session.timeout.ms"] <= session <= \
            ctx.coordinator.config["group.max.session.timeout.ms"] and _share_group(ctx, req.group_id):
        # classicGroupJoin: "Group exists but it's not a consumer group"
        return {"throttle_time": 0, "error_code": ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "generation_id": -1,
                "protocol_type": None, "protocol_name": None if ctx.api_version >= 7 else "", "leader": "",
                "member_id": "", "members": []}
    result = await ctx.coordinator.join(
        req.group_id, req.member_id, getattr(req, "group_instance_id", None), ctx.client_id or "",
        ctx.client_host, session, rebalance, req.protocol_type,
        [(p.name, bytes(p.metadata)) for p in req.protocols], require_known_member=ctx.api_version >= 4,
        topics=ctx.log_manager.topics(), skip_assignment=ctx.api_version >= 9)
    base = {"throttle_time": 0, "generation_id": -1, "protocol_type": None, "protocol_name": None,
            "leader": "", "member_id": "", "members": []}
    base.update(result)
    if ctx.api_version < 7 and base["protocol_name"] is None:
        base["protocol_name"] = ""
    return base


@register(14, 0, 5)
async def sync_group(req: Any, ctx: RequestContext) -> dict:
    protocol_type, protocol_name = getattr(req, "protocol_type", None), getattr(req, "protocol_name", None)
    if ctx.api_version >= 5 and (protocol_type is None or protocol_name is None):
        # KafkaApis.handleSyncGroupRequest (areMandatoryProtocolTypeAndNamePresent), before anything else
        return {"error_code": ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "assignment": b""}
    if _group_denied(ctx, "read", req.group_id):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "assignment": b""}
    if not req.group_id:  # GroupCoordinatorService.isGroupIdNotEmpty
        return {"error_code": ErrorCode.INVALID_GROUP_ID, "assignment": b""}
    result = await ctx.coordinator.sync(req.group_id, int(req.generation_id), req.member_id,
                                        {a.member_id: bytes(a.assignment) for a in req.assignments},
                                        getattr(req, "group_instance_id", None), protocol_type, protocol_name)
    out = {"throttle_time": 0, "assignment": b"", "protocol_type": None, "protocol_name": None}
    out.update(result)
    return out


@register(12, 0, 4)
def heartbeat(req: Any, ctx: RequestContext) -> dict:
    if _group_denied(ctx, "read", req.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    if not req.group_id:  # GroupCoordinatorService.isGroupIdNotEmpty
        return {"throttle_time": 0, "error_code": ErrorCode.INVALID_GROUP_ID}
    return {"throttle_time": 0,
            "error_code": ctx.coordinator.heartbeat(req.group_id, int(req.generation_id), req.member_id,
                                                    getattr(req, "group_instance_id", None))}


@register(13, 0, 5)
def leave_group(req: Any, ctx: RequestContext) -> dict:
    if _group_denied(ctx, "read", req.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "members": []}
    if not req.group_id:  # GroupCoordinatorService.isGroupIdNotEmpty
        return {"throttle_time": 0, "error_code": ErrorCode.INVALID_GROUP_ID, "members": []}
    if ctx.api_version >= 3:  # a batch; a static member may be named by its group.instance.id alone (KIP-345)
        error, results = ctx.coordinator.leave_members(
            req.group_id, [(m.member_id, m.group_instance_id) for m in req.members])
        return {"throttle_time": 0, "error_code": error,
                "members": [{"member_id": mid, "group_instance_id": iid, "error_code": e} for mid, iid, e in results]}
    error, results = ctx.coordinator.leave_members(req.group_id, [(req.member_id, None)])
    return {"throttle_time": 0, "error_code": error or results[0][2]}


def _names_by_id(ctx: RequestContext) -> dict:
    """Topic id -> name (KIP-516), for the versions that name topics by id (OffsetCommit/OffsetFetch v10)."""
    return {topic_uuid(ctx, name): name for name in ctx.log_manager.topics()}


@register(8, 2, 10)  # v9: KIP-848 members commit with their member epoch; v10: topics by id (KIP-848)
async def offset_commit(req: Any, ctx: RequestContext) -> dict:
    generation = int(getattr(req, "generation_id_or_member_epoch", getattr(req, "generation_id", -1)))
    ids = _names_by_id(ctx) if ctx.api_version >= 10 else None
    names = [ids.get(t.topic_id) if ids is not None else t.name for t in req.topics]  # None: an unknown id
    offsets, topics = [], []
    denied = _group_denied(ctx, "read", req.group_id)
    for name, t in zip(names, req.topics, strict=True):
        if name is None:
            continue
        for p in t.partitions:
            offsets.append((name, p.partition_index, int(p.committed_offset),
                            int(getattr(p, "committed_leader_epoch", -1)), p.committed_metadata))
    # KafkaApis.handleOffsetCommitRequest: Read on the group, then Read on each topic; partitions that do not
    # exist are answered UNKNOWN_TOPIC_OR_PARTITION, and the group is not asked when nothing is left.
    unreadable = {n for n in names if n is not None and not ctx.allowed("read", "topic", n)}
    error = 0
    if denied:
        error = ErrorCode.GROUP_AUTHORIZATION_FAILED
    else:
        kept = [o for o in offsets if o[0] not in unreadable and _exists(ctx, o[0], o[1])]
        if kept and req.group_id and _share_group(ctx, req.group_id):
            error = ErrorCode.GROUP_ID_NOT_FOUND  # a share group takes no commits (validateOffsetCommit)
        elif kept:
            error = await ctx.coordinator.commit_async(req.group_id, generation, req.member_id or "", kept,
                                                       api_version=ctx.api_version,
                                                       instance_id=getattr(req, "group_instance_id", None))

    def partition_error(name: str | None, partition: int) -> int:
        if denied:
            return error
        if name is None:
            return ErrorCode.UNKNOWN_TOPIC_ID
        if name in unreadable:
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED
        return error if _exists(ctx, name, partition) else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    for name, t in zip(names, req.topics, strict=True):
        topics.append({"name": getattr(t, "name", name), "topic_id": getattr(t, "topic_id", None), "partitions": [
            {"partition_index": p.partition_index, "error_code": partition_error(name, int(p.partition_index))}
            for p in t.partitions]})
    return {"throttle_time": 0, "topics": topics}


def _exists(ctx: RequestContext, topic: str, partition: int) -> bool:
    """The partition is in the metadata (KafkaApis asks metadataCache.contains for each one committed)."""
    count = ctx.log_manager.topics().get(topic)
    return count is not None and 0 <= partition < count


def _offsets_for(ctx: RequestContext, group_id: str, topics: Any, require_stable: bool = False,
                 by_id: bool = False) -> list[dict]:
    """KafkaApis.handleOffsetFetchRequest: a requested topic without Describe answers
    TOPIC_AUTHORIZATION_FAILED per partition; asking for all topics leaves such topics out. With
    require_stable (KIP-447) a partition with a pending transactional commit answers UNSTABLE_OFFSET_COMMIT
    (GroupMetadataManager.getOffsets), so the consumer retries instead of reading an offset about to move.
    `by_id` (v10): topics named by id; an unknown id answers UNKNOWN_TOPIC_ID, and asking for all topics
    leaves out those no longer in the metadata (they have no id)."""
    ids = _names_by_id(ctx) if by_id else None
    named = [(ids.get(t.topic_id) if by_id else t.name, t) for t in topics] if topics is not None else None
    hidden = {n for n, _t in named or [] if n is not None and not ctx.allowed("describe", "topic", n)}
    wanted = None if named is None else [(n, int(p)) for n, t in named if n is not None and n not in hidden
                                         for p in t.partition_indexes]
    found = ctx.coordinator.fetch_offsets(group_id, wanted)
    if topics is None:  # all of the group's topics: leave out those it may not describe (once per topic)
        visible = {t for t in {t for t, _p in found} if ctx.allowed("describe", "topic", t, log_if_denied=False)
                   and (not by_id or ctx.log_manager.has_topic(t))}
        found = {tp: v for tp, v in found.items() if tp[0] in visible}
    def entry(t: str, p: int) -> dict:
        offset, epoch, meta = found[(t, p)]
        unstable = require_stable and ctx.coordinator.has_pending(group_id, t, p)
        return {"partition_index": p, "committed_offset": -1 if unstable else offset,
                "committed_leader_epoch": -1 if unstable else epoch, "metadata": "" if unstable else meta or "",
                "error_code": ErrorCode.UNSTABLE_OFFSET_COMMIT if unstable else 0}

    by_topic: dict[str, list[dict]] = {}
    if named is None:
        for t, p in found:
            by_topic.setdefault(t, []).append(entry(t, p))

    def failed(t: Any, code: int) -> list[dict]:
        return [{"partition_index": int(p), "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
                 "error_code": code} for p in t.partition_indexes]

    out = []
    if named is None:
        for t, parts in by_topic.items():
            out.append({"name": t, "topic_id": topic_uuid(ctx, t) if by_id else None, "partitions": parts})
        return out
    for n, t in named:
        if n is None:
            parts = failed(t, ErrorCode.UNKNOWN_TOPIC_ID)
        elif n in hidden:
            parts = failed(t, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        else:  # each partition as asked, a topic or partition asked twice answered twice (as Kafka does)
            parts = [entry(n, int(p)) for p in t.partition_indexes]
        out.append({"name": n or "", "topic_id": getattr(t, "topic_id", None), "partitions": parts})
    return out


def _validate_fetch(ctx: RequestContext, group_id: str, member_id: str | None, epoch: int) -> int:
    """The group's validateOffsetFetch: a KIP-848 consumer group's or a streams group's member and epoch."""
    coordinator = ctx.coordinator
    return coordinator.consumer.validate_fetch(group_id, member_id, epoch) or \
        coordinator.streams.validate_fetch(group_id, member_id, epoch)


@register(9, 1, 10)  # v9: KIP-848 members fetch with their member id and epoch; v10: topics by id
def offset_fetch(req: Any, ctx: RequestContext) -> dict:
    if ctx.api_version >= 8:
        groups = []
        for g in req.groups:
            if _group_denied(ctx, "describe", g.group_id):
                groups.append({"group_id": g.group_id, "topics": [], "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED})
            elif error := _validate_fetch(ctx, g.group_id, getattr(g, "member_id", None),
                                          int(getattr(g, "member_epoch", -1))):
                groups.append({"group_id": g.group_id, "topics": [], "error_code": error})
            else:
                groups.append({"group_id": g.group_id, "error_code": 0, "topics": _offsets_for(
                    ctx, g.group_id, g.topics, bool(getattr(req, "require_stable", False)),
                    by_id=ctx.api_version >= 10)})
        return {"throttle_time": 0, "groups": groups}
    if _group_denied(ctx, "describe", req.group_id):
        return {"throttle_time": 0, "topics": [], "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    return {"throttle_time": 0, "error_code": 0,
            "topics": _offsets_for(ctx, req.group_id, req.topics, bool(getattr(req, "require_stable", False)))}


@register(15, 0, 6)
def describe_groups(req: Any, ctx: RequestContext) -> dict:
    """v6 (KIP-1043): a group that is not there, or not a classic group, answers GROUP_ID_NOT_FOUND rather
    than a Dead group without error."""
    groups = []
    for g in req.groups:
        if _group_denied(ctx, "describe", g):
            groups.append({"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "group_id": g, "group_state": "",
                           "protocol_type": "", "protocol_data": "", "members": []})
            continue
        described = ctx.coordinator.describe(g)
        if ctx.api_version >= 6 and g not in ctx.coordinator.groups:
            described["error_code"] = ErrorCode.GROUP_ID_NOT_FOUND
            shares = ctx.state.share_groups
            described["error_message"] = f"Group {g} is not a classic group." \
                if g in ctx.coordinator.consumer.groups or (shares is not None and shares.known(g) is not None) \
                else f"Group {g} not found."
        groups.append(described)
    return {"throttle_time": 0, "groups": groups}


@register(16, 0, 5)
def list_groups(req: Any, ctx: RequestContext) -> dict:
    """v4 filters by state (KIP-518), v5 by type (KIP-848), each case-insensitively."""
    states = {s.lower() for s in getattr(req, "states_filter", None) or []}
    types = {t.lower() for t in getattr(req, "types_filter", None) or []}
    shares = ctx.state.share_groups.list_groups() if ctx.state.share_groups is not None else []  # KIP-932
    groups = [g for g in ctx.coordinator.list_groups() + shares
              if (not states or g["group_state"].lower() in states) and (not types or g["group_type"] in types)
              and not _group_denied(ctx, "describe", g["group_id"])]
    return {"throttle_time": 0, "error_code": 0, "groups": groups}


@register(42, 0, 3)
def delete_groups(req: Any, ctx: RequestContext) -> dict:
    """KafkaApis.handleDeleteGroupsRequest: each name once (`distinct`), the groups the principal may not
    delete answered last. v3 adds an error message per group (its schema is ours, protocol.newer_schemas)."""
    results, refused = [], []
    for g in dict.fromkeys(req.groups_names):
        shares = ctx.state.share_groups
        if _group_denied(ctx, "delete", g):
            refused.append({"group_id": g, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                            "error_message": ErrorCode.GROUP_AUTHORIZATION_FAILED.name})
            continue
        if shares is not None and g in shares.groups:  # a share group (KIP-932)
            error = shares.delete_group(g)
        else:
            error = ctx.coordinator.delete_group(g)
        results.append({"group_id": g, "error_code": error, "error_message": ErrorCode(error).name if error else None})
    return {"throttle_time": 0, "results": results + refused}


@register(47, 0, 0)
def offset_delete(req: Any, ctx: RequestContext) -> dict:
    """KafkaApis.handleOffsetDeleteRequest: unreadable topics, unknown topics and partitions are answered
    per partition first; then the coordinator's group checks (the empty id INVALID_GROUP_ID, an unknown
    group GROUP_ID_NOT_FOUND, a classic group with members NON_EMPTY_GROUP) answer the whole request alone,
    as `OffsetDeleteResponse.Builder.merge`."""
    if _group_denied(ctx, "delete", req.group_id):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "throttle_time": 0, "topics": []}
    counts = ctx.log_manager.topics()
    asked: list[tuple[str, int]] = []  # every partition as asked: one named twice is answered twice, as Kafka does
    answered: dict[tuple[str, int], int] = {}
    wanted = []
    for t in req.topics:
        for p in t.partitions:
            tp = (t.name, int(p.partition_index))
            asked.append(tp)
            if not ctx.allowed("read", "topic", t.name):
                answered[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif not 0 <= tp[1] < counts.get(t.name, 0):
                answered[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif tp not in wanted:
                wanted.append(tp)
    if not req.group_id:
        return {"error_code": ErrorCode.INVALID_GROUP_ID, "throttle_time": 0, "topics": []}
    if _share_group(ctx, req.group_id):
        return {"error_code": ErrorCode.GROUP_ID_NOT_FOUND, "throttle_time": 0, "topics": []}
    if error := ctx.coordinator.offset_delete_error(req.group_id):
        return {"error_code": error, "throttle_time": 0, "topics": []}
    answered.update(ctx.coordinator.delete_offsets(req.group_id, wanted))
    topics: dict[str, list[dict]] = {}
    for name, partition in asked:
        topics.setdefault(name, []).append({"partition_index": partition, "error_code": answered[(name, partition)]})
    return {"error_code": 0, "throttle_time": 0,
            "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]}
