"""The share-group APIs (KIP-932, "queues for Kafka") at Kafka 4.4's versions: ShareGroupHeartbeat (76),
ShareGroupDescribe (77), ShareFetch (78), ShareAcknowledge (79), DescribeShareGroupOffsets (90),
AlterShareGroupOffsets (91), DeleteShareGroupOffsets (92), and the `share.version` feature (level 2, as a
freshly formatted Kafka 4.4 cluster finalizes it).

The state lives in `ctx.state.share_groups` (server/share_group.py); these handlers translate topic ids,
check authorization as KafkaApis does and run the share sessions' epochs (ShareSessionCache). The share
coordinator's own APIs (83-87) are not served: chronolog keeps the state in files (server/share_state.py),
so nothing sends them.
"""

from __future__ import annotations

import time
from typing import Any

from chronolog.errors import ErrorCode
from chronolog.protocol.core import ms, topic_uuid
from chronolog.protocol.operations import GROUP, NOT_ASKED, authorized
from chronolog.protocol.registry import FEATURES, RequestContext, register
from chronolog.storage.basics import LEADER_EPOCH

FEATURES["share.version"] = (0, 2, 2)  # ShareVersion.SV_2: Kafka 4.4's default
INT32_MAX = 2**31 - 1
ACQUIRE_RECORD_LIMIT = 1  # ShareAcquireMode.RECORD_LIMIT (0: batch-optimized)


def _shares(ctx: RequestContext) -> Any:
    return ctx.state.share_groups


def _code(exc: Exception) -> tuple[int, str | None]:
    return int(getattr(exc, "code", ErrorCode.UNKNOWN_SERVER_ERROR)), (str(exc) or None)


def _wire_assignment(ctx: RequestContext, assignment: dict[str, frozenset[int]], names: bool) -> dict:
    return {"topic_partitions": [
        {"topic_id": topic_uuid(ctx, t), **({"topic_name": t} if names else {}), "partitions": sorted(ps)}
        for t, ps in sorted(assignment.items()) if ctx.log_manager.has_topic(t)]}


# -- ShareGroupHeartbeat ---------------------------------------------------------------------------------------
@register(76, 1, 1)
def share_group_heartbeat(req: Any, ctx: RequestContext) -> dict:
    """GroupMetadataManager.shareGroupHeartbeat; KafkaApis checks Read on the group and Describe on the
    subscribed topics first."""
    fail = {"throttle_time": 0, "member_id": req.member_id, "member_epoch": -1, "heartbeat_interval": 0}
    if not ctx.allowed("read", "group", req.group_id):
        return {**fail, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    subscribed = None if req.subscribed_topic_names is None else list(req.subscribed_topic_names)
    if subscribed and any(not ctx.allowed("describe", "topic", t) for t in subscribed):
        return {**fail, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    coordinator = ctx.coordinator
    other = coordinator is not None and (req.group_id in coordinator.groups or req.group_id in coordinator.consumer.groups)
    try:
        result = _shares(ctx).heartbeat(req.group_id, req.member_id, int(req.member_epoch), rack_id=req.rack_id,
                                        subscribed=subscribed, client_id=ctx.client_id or "",
                                        client_host=ctx.client_host, topics=ctx.log_manager.topics(),
                                        other_group=other)
    except Exception as exc:
        code, message = _code(exc)
        return {**fail, "error_code": code, "error_message": message}
    assignment = result["assignment"]
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "member_id": result["member_id"],
            "member_epoch": result["member_epoch"], "heartbeat_interval": result["heartbeat_interval"],
            "assignment": None if assignment is None else _wire_assignment(ctx, assignment, names=False)}


# -- ShareGroupDescribe ------------------------------------------------------------------------------------------
@register(77, 1, 1)
def share_group_describe(req: Any, ctx: RequestContext) -> dict:
    groups = []
    shares = _shares(ctx)
    for gid in req.group_ids:
        empty = {"group_id": gid, "group_state": "", "group_epoch": 0, "assignment_epoch": 0,
                 "assignor_name": "", "members": [], "authorized_operations": NOT_ASKED}
        if not ctx.allowed("describe", "group", gid):
            groups.append({**empty, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "error_message": None})
            continue
        if not gid:
            groups.append({**empty, "error_code": ErrorCode.INVALID_GROUP_ID, "error_message": None})
            continue
        group = shares.known(gid)
        if group is None:
            coordinator = ctx.coordinator
            other = coordinator is not None and (gid in coordinator.groups or gid in coordinator.consumer.groups)
            groups.append({**empty, "error_code": ErrorCode.GROUP_ID_NOT_FOUND, "error_message":
                           f"Group {gid} is not a share group." if other else f"Group {gid} not found."})
            continue
        members = [{"member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.epoch,
                    "client_id": m.client_id, "client_host": m.client_host,
                    "subscribed_topic_names": list(m.subscribed),
                    "assignment": _wire_assignment(ctx, m.assigned, names=True)} for m in group.members.values()]
        ops = authorized(ctx, "group", gid, GROUP) if req.include_authorized_operations else NOT_ASKED
        groups.append({"error_code": 0, "error_message": None, "group_id": gid, "group_state": group.state,
                       "group_epoch": group.epoch, "assignment_epoch": group.assignment_epoch,
                       "assignor_name": "simple", "members": members, "authorized_operations": ops})
    return {"throttle_time": 0, "groups": groups}


# -- share sessions ----------------------------------------------------------------------------------------------
class _SessionError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _session(ctx: RequestContext, group_id: str, member_id: str, epoch: int, *, opening: bool) -> Any:
    """ShareSessionCache: epoch 0 opens a session (ShareFetch only), -1 closes it, any other must be the
    session's next epoch."""
    from_cache = _shares(ctx).sessions
    key = (group_id, member_id)
    if epoch == 0:
        if not opening:
            raise _SessionError(ErrorCode.INVALID_SHARE_SESSION_EPOCH, "ShareAcknowledge cannot open a session")
        session = _shares(ctx).open_session(group_id, member_id)
        if ctx.connection is not None:
            session.owner = ctx.connection
            ctx.connection.closers[("share session", key)] = lambda: _disconnected(ctx, key, session)
        return session
    session = from_cache.get(key)
    if session is None:
        raise _SessionError(ErrorCode.SHARE_SESSION_NOT_FOUND, f"Share session for member {member_id} not found")
    if epoch == -1:
        return session
    if epoch != session.epoch:
        raise _SessionError(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                            f"Expected epoch {session.epoch} but got {epoch}")
    session.epoch = 1 if session.epoch == INT32_MAX else session.epoch + 1
    return session


def _disconnected(ctx: RequestContext, key: tuple[str, str], session: Any) -> None:
    """The connection that opened a share session closed: the session ends and its records go back
    (ShareSessionCache's disconnect listener), unless a newer session replaced it."""
    if _shares(ctx).sessions.get(key) is session:
        _close(ctx, *key)


def _close(ctx: RequestContext, group_id: str, member_id: str) -> None:
    """The final request of a session (epoch -1): the member's acquired records go back (KafkaApis
    releases them with SharePartitionManager.releaseSession)."""
    shares = _shares(ctx)
    shares.sessions.pop((group_id, member_id), None)
    group = shares.groups.get(group_id)
    if group is not None:
        shares.release_member(group, member_id)


def _acknowledge(ctx: RequestContext, group_id: str, member_id: str, name: str | None, topic_id: Any,
                 partition: int, batches: Any, renew: bool = True) -> tuple[int, str | None]:
    if name is None:  # an unknown topic id before the batches are looked at, as KafkaApis does
        return ErrorCode.UNKNOWN_TOPIC_ID, None
    bad = _bad_batches(batches, renew)
    if bad is not None:
        return ErrorCode.INVALID_REQUEST, bad
    if not ctx.allowed("read", "topic", name):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED, None
    if not _hosted(ctx, name, partition):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
    if not batches:  # nothing to acknowledge of a partition that exists: done
        return 0, None
    group = _shares(ctx).groups.get(group_id)
    if group is None or (name, partition) not in group.partitions:
        # SharePartitionManager.acknowledge: no share-partition of the group (nothing fetched) is unknown
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
    try:
        _shares(ctx).acknowledge(group_id, member_id, name, partition,
                                 [(int(b.first_offset), int(b.last_offset), [int(t) for t in b.acknowledge_types])
                                  for b in batches])
    except Exception as exc:
        return _code(exc)
    return 0, None


def _invalid(req: Any, epoch: int) -> str | None:
    """KafkaApis' checks before a share session is looked at: a group id and a member id, RENEW only within
    an open session."""
    if req.group_id is None:
        return "Group id must be set"
    if not req.member_id:
        return "Member id must be set"
    return None


def _bad_batches(batches: Any, renew: bool) -> str | None:
    """KafkaApis.validateAcknowledgementBatches: ordered, non-overlapping batches whose types are one per
    offset (or one for all) and known."""
    last = -1
    for b in batches:
        first, end, types = int(b.first_offset), int(b.last_offset), list(b.acknowledge_types)
        if end < first or first < last:  # (as Kafka: from -1, and a batch may start where the last ended)
            return "Invalid acknowledgement batch offsets"
        if not types or (len(types) != 1 and len(types) != end - first + 1):
            return "Invalid acknowledgement types"
        if any(t not in (0, 1, 2, 3, 4) or (t == 4 and not renew) for t in types):
            return "Invalid acknowledgement type"
        last = end
    return None


def _lock_ms(ctx: RequestContext, group_id: str | None) -> int:
    return int(_shares(ctx).group_config(group_id or "", "share.record.lock.duration.ms"))


def _top_error(ctx: RequestContext, code: int, message: str | None = None, group_id: str | None = None) -> dict:
    return {"throttle_time": 0, "error_code": code, "error_message": message,
            "acquisition_lock_timeout": _lock_ms(ctx, group_id), "responses": [], "node_endpoints": []}


def _leader() -> dict:
    return {"leader_id": -1, "leader_epoch": -1}


# -- ShareFetch ---------------------------------------------------------------------------------------------
@register(78, 1, 2)
async def share_fetch(req: Any, ctx: RequestContext) -> dict:
    """KafkaApis.handleShareFetchRequest + SharePartitionManager.fetchMessages: acknowledgements first, then
    the session's partitions are fetched, acquiring records under locks, waiting up to MaxWaitMs for any."""
    group_id, member_id, epoch = req.group_id, req.member_id, int(req.share_session_epoch)
    invalid = _invalid(req, epoch)
    if invalid is None and epoch == 0 and any(p.acknowledgement_batches for t in req.topics for p in t.partitions):
        invalid = "Acknowledge data present on initial epoch"
    if invalid is None and getattr(req, "is_renew_ack", False) and epoch in (0, -1):
        invalid = "Renew acknowledgements are not allowed in the initial or final request of a share session"
    if invalid is None and getattr(req, "is_renew_ack", False) and (
            int(req.max_bytes or 0) or int(req.min_bytes or 0) or int(req.max_records or 0) or ms(req.max_wait)):
        invalid = "maxBytes, minBytes, maxRecords and maxWaitMs must be set to 0 if isRenewAck is true"
    if invalid is not None:
        return _top_error(ctx, ErrorCode.INVALID_REQUEST, invalid, group_id)
    if not ctx.allowed("read", "group", group_id):
        return _top_error(ctx, ErrorCode.GROUP_AUTHORIZATION_FAILED, None, group_id)
    try:
        session = _session(ctx, group_id, member_id, epoch, opening=True)
    except _SessionError as exc:
        return _top_error(ctx, exc.code, str(exc), group_id)
    node = ctx.state.node_id
    results: dict[tuple[str | None, int], dict] = {}
    ids: dict[str | None, Any] = {}

    def entry(name: str | None, topic_id: Any, partition: int) -> dict:
        key = name if name is not None else ("", topic_id)  # unknown topics apart, by their ids
        ids[key] = topic_id
        return results.setdefault((key, partition), {
            "partition_index": partition, "error_code": 0, "error_message": None, "acknowledge_error_code": 0,
            "acknowledge_error_message": None, "current_leader": {"leader_id": node, "leader_epoch": LEADER_EPOCH},
            "records": b"", "acquired_records": []})

    # KafkaApis acknowledges only when the request carries acknowledgements, and then every partition of it
    # but those it hosts with none: those of unknown topics UNKNOWN_TOPIC_ID, the others as
    # SharePartitionManager.acknowledge answers
    acking = any(p.acknowledgement_batches for t in req.topics for p in t.partitions)
    for t in req.topics:
        name = ctx.state.topic_name(t.topic_id)
        for p in t.partitions:
            index = int(p.partition_index)
            if name is None:
                if epoch != -1 or acking:  # (the final request answers acknowledgements only)
                    out = entry(None, t.topic_id, index)
                    out["error_code"] = 0 if epoch == -1 else ErrorCode.UNKNOWN_TOPIC_ID
                    if acking:
                        out["acknowledge_error_code"] = ErrorCode.UNKNOWN_TOPIC_ID
                continue
            hosted = _hosted(ctx, name, index)
            if not hosted and (epoch != -1 or acking):
                entry(name, t.topic_id, index)["error_code"] = 0 if epoch == -1 else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if hosted and epoch != -1:
                session.partitions[(name, index)] = None
            if acking and (p.acknowledgement_batches or not hosted):
                code, message = _acknowledge(ctx, group_id, member_id, name, t.topic_id, index,
                                             p.acknowledgement_batches, bool(getattr(req, "is_renew_ack", False)))
                out = entry(name, t.topic_id, index)
                out["acknowledge_error_code"], out["acknowledge_error_message"] = code, message
            elif hosted and epoch == 0 and _assigned(ctx, group_id, name, index):
                # a new session lists what it will fetch once the share-partition is initialized: Kafka 4.4
                # assigns only initialized partitions, and leaves out the others (no answer yet)
                entry(name, t.topic_id, index)
    for f in req.forgotten_topics_data or ():
        name = ctx.state.topic_name(f.topic_id)
        for index in f.partitions:
            session.partitions.pop((name, int(index)), None)
    if epoch == -1:
        _close(ctx, group_id, member_id)
    elif not getattr(req, "is_renew_ack", False):
        await _fetch(req, ctx, group_id, member_id, session, entry)
    responses: dict[Any, list[dict]] = {}
    for (key, _index), out in results.items():
        responses.setdefault(key, []).append(out)
    return {"throttle_time": 0, "error_code": 0, "error_message": None,
            "acquisition_lock_timeout": _lock_ms(ctx, group_id),
            "responses": [{"topic_id": topic_uuid(ctx, key) if isinstance(key, str) else ids[key], "partitions": parts}
                          for key, parts in responses.items()],
            "node_endpoints": []}


def _assigned(ctx: RequestContext, group_id: str, name: str, index: int) -> bool:
    group = _shares(ctx).known(group_id)
    return group is not None and any(index in m.assigned.get(name, ()) for m in group.members.values())


def _initialized(ctx: RequestContext, group_id: str, name: str, index: int) -> bool:
    """Whether the share-partition's state exists or may be made: Kafka's group coordinator initializes it
    for the partitions it assigns (or AlterShareGroupOffsets sets); a fetch of any other finds no state to
    read and gets nothing."""
    group = _shares(ctx).groups.get(group_id)
    return group is not None and ((name, index) in group.partitions or _assigned(ctx, group_id, name, index))


async def _fetch(req: Any, ctx: RequestContext, group_id: str, member_id: str, session: Any, entry: Any) -> None:
    shares = _shares(ctx)
    deadline = time.monotonic() + ms(req.max_wait) / 1000.0
    max_records = int(getattr(req, "max_records", 0) or 0) or 500
    strict = int(getattr(req, "share_acquire_mode", 0)) == ACQUIRE_RECORD_LIMIT
    while True:
        left_records = max_records
        left_bytes = int(req.max_bytes) if req.max_bytes is not None else INT32_MAX
        got = False
        for name, index in list(session.partitions):
            if left_records <= 0 or left_bytes <= 0:
                break
            if not ctx.log_manager.has_topic(name) or index >= ctx.log_manager.topics()[name]:
                entry(name, None, index)["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                session.partitions.pop((name, index), None)
                continue
            if not ctx.allowed("read", "topic", name):
                entry(name, topic_uuid(ctx, name), index)["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            if not _initialized(ctx, group_id, name, index):
                continue
            try:
                acquired, data = shares.acquire(group_id, member_id, name, index, max_records=left_records,
                                                max_bytes=left_bytes, strict=strict)
            except Exception as exc:
                entry(name, topic_uuid(ctx, name), index)["error_code"] = _code(exc)[0]
                continue
            if acquired:
                out = entry(name, topic_uuid(ctx, name), index)
                out["records"] = bytes(out["records"]) + data if out["records"] else data
                out["acquired_records"] = list(out["acquired_records"]) + [
                    {"first_offset": a, "last_offset": z, "delivery_count": c} for a, z, c in acquired]
                left_records -= sum(z - a + 1 for a, z, _ in acquired)
                left_bytes -= len(data)
                got = True
        now = time.monotonic()
        if got or now >= deadline or not session.partitions:
            return
        timeout = deadline - now
        locks = shares.next_deadline(group_id, list(session.partitions))
        if locks is not None:
            timeout = max(0.0, min(timeout, locks - now + 0.001))
        await shares.wait(timeout, ctx.state.data_waiters)


# -- ShareAcknowledge ---------------------------------------------------------------------------------------
@register(79, 1, 2)
def share_acknowledge(req: Any, ctx: RequestContext) -> dict:
    """KafkaApis.handleShareAcknowledgeRequest: acknowledgements within an open session; epoch -1 also
    closes it."""
    group_id, member_id, epoch = req.group_id, req.member_id, int(req.share_session_epoch)
    invalid = _invalid(req, epoch)
    if invalid is not None:
        return _top_error(ctx, ErrorCode.INVALID_REQUEST, invalid, group_id)
    if not ctx.allowed("read", "group", group_id):
        return _top_error(ctx, ErrorCode.GROUP_AUTHORIZATION_FAILED, None, group_id)
    try:
        _session(ctx, group_id, member_id or "", epoch, opening=False)
    except _SessionError as exc:
        return _top_error(ctx, exc.code, str(exc), group_id)
    node = ctx.state.node_id
    renew = bool(getattr(req, "is_renew_ack", False))
    # KafkaApis' maps: an unknown topic's partitions UNKNOWN_TOPIC_ID and a known one's partitions that are
    # malformed or not hosted, each once (a known one with its last occurrence's batches); the hosted ones
    # only when any of them has something to acknowledge
    acking = any(p.acknowledgement_batches for t in req.topics for p in t.partitions
                 if (name := ctx.state.topic_name(t.topic_id)) is not None and _hosted(ctx, name, int(p.partition_index)))
    asked: dict[tuple[Any, int], tuple[str | None, Any, Any]] = {}
    for t in req.topics:
        name = ctx.state.topic_name(t.topic_id)
        for p in t.partitions:
            key = (name if name is not None else ("", t.topic_id), int(p.partition_index))
            if name is None and key in asked:
                continue
            asked.pop(key, None)
            asked[key] = (name, t.topic_id, p.acknowledgement_batches)
    by_topic: dict[Any, dict] = {}
    for (topic_key, index), (name, topic_id, batches) in asked.items():
        if name is not None and not acking and _hosted(ctx, name, index):
            continue
        code, message = _acknowledge(ctx, group_id, member_id, name, topic_id, index, batches, renew)
        by_topic.setdefault(topic_key, {"topic_id": topic_id, "partitions": []})["partitions"].append(
            {"partition_index": index, "error_code": code, "error_message": message,
             "current_leader": {"leader_id": node, "leader_epoch": LEADER_EPOCH}})
    responses = list(by_topic.values())
    if epoch == -1:
        _close(ctx, group_id, member_id)
    return {"throttle_time": 0, "error_code": 0, "error_message": None,
            "acquisition_lock_timeout": _lock_ms(ctx, group_id), "responses": responses, "node_endpoints": []}


# -- share-group offsets (KIP-932's admin APIs) ----------------------------------------------------------------
_NOT_HOSTED = "This server does not host this topic-partition."


def _hosted(ctx: RequestContext, name: str, partition: int) -> bool:
    return ctx.log_manager.has_topic(name) and 0 <= partition < ctx.log_manager.topics()[name]


@register(90, 0, 1)
def describe_share_group_offsets(req: Any, ctx: RequestContext) -> dict:
    """GroupCoordinatorService.describeShareGroupOffsets: each partition's start offset and (v1, KIP-1226)
    its lag: the records from the start to the high watermark not yet acknowledged or archived; -1 and -1
    for a partition the group has no state for, or of a topic that does not exist. No topics (null) means every
    partition with state. Kafka 4.4 never answers a request naming a partition that does not exist of a topic
    that does, and fails one naming a negative partition, a topic with no partitions or the empty group id
    (UNKNOWN_SERVER_ERROR); chronolog answers UNKNOWN_TOPIC_OR_PARTITION per partition or the group's
    partitions (pinned by tests/differential/test_share_fuzzed.py)."""
    shares = _shares(ctx)
    groups = []
    for g in req.groups:
        gid = g.group_id
        if not ctx.allowed("describe", "group", gid):
            groups.append({"group_id": gid, "topics": [], "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                           "error_message": "Group authorization failed."})
            continue
        state = shares.offsets(gid)
        if g.topics is None:
            wanted: dict[str, list[int]] = {}
            for name, index in sorted(state):
                if ctx.log_manager.has_topic(name):
                    wanted.setdefault(name, []).append(index)
            asked = list(wanted.items())
        else:  # a topic that exists: each partition once, a topic named twice merged (Kafka's map of topic
            # to partitions); one that does not: as asked
            merged: dict[str, list[int]] = {}
            asked = []
            for t in g.topics:
                if not ctx.log_manager.has_topic(t.topic_name):
                    asked.append((t.topic_name, [int(p) for p in t.partitions]))
                    continue
                if t.topic_name not in merged:
                    asked.append((t.topic_name, merged.setdefault(t.topic_name, [])))
                seen = merged[t.topic_name]
                seen.extend(p for p in dict.fromkeys(int(p) for p in t.partitions) if p not in seen)
        topics = []
        for name, indexes in asked:
            parts = []
            denied = not ctx.allowed("describe", "topic", name)
            for index in indexes:
                out = {"partition_index": index, "start_offset": -1, "leader_epoch": LEADER_EPOCH, "lag": -1,
                       "error_code": 0, "error_message": None}
                if denied:
                    out.update(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, leader_epoch=-1)
                elif not ctx.log_manager.has_topic(name):
                    pass  # a topic that does not exist: no state, no error (Kafka 4.4 answers so)
                elif not _hosted(ctx, name, index):
                    out.update(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, error_message=_NOT_HOSTED,
                               leader_epoch=-1)
                elif (sp := state.get((name, index))) is not None:
                    start, done = sp.summary()
                    hw = ctx.log_manager.get_log(name, index).high_watermark
                    out.update(start_offset=start, lag=max(0, hw - start - done))
                parts.append(out)
            topics.append({"topic_name": name, "topic_id": topic_uuid(ctx, name) if ctx.log_manager.has_topic(name)
                           else None, "partitions": parts})
        groups.append({"group_id": gid, "topics": topics, "error_code": 0, "error_message": None})
    return {"throttle_time": 0, "groups": groups}


def _admin_group(ctx: RequestContext, group_id: str, operation: str, *, must_exist: bool) -> tuple[int, str | None]:
    shares = _shares(ctx)
    if not group_id:
        return ErrorCode.INVALID_GROUP_ID, "The group id must not be empty."
    if not ctx.allowed(operation, "group", group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed."
    coordinator = ctx.coordinator
    if coordinator is not None and (group_id in coordinator.groups or group_id in coordinator.consumer.groups):
        return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group."
    group = shares.known(group_id)
    if group is None and must_exist:
        return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found."
    if group is not None and group.members:
        return ErrorCode.NON_EMPTY_GROUP, "The group is not empty."
    return 0, None


@register(91, 0, 0)
def alter_share_group_offsets(req: Any, ctx: RequestContext) -> dict:
    """GroupCoordinatorService.alterShareGroupOffsets: new start offsets for an empty (or new) share group;
    the partitions' in-flight state goes. Topics that do not exist are answered first, as Kafka does."""
    code, message = _admin_group(ctx, req.group_id, "read", must_exist=False)
    if code:
        return {"throttle_time": 0, "error_code": code, "error_message": message, "responses": []}
    shares = _shares(ctx)
    missing, found = [], []
    for t in req.topics:
        name = t.topic_name
        if not ctx.log_manager.has_topic(name) or not ctx.allowed("read", "topic", name):
            error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if ctx.allowed("read", "topic", name) \
                else ErrorCode.TOPIC_AUTHORIZATION_FAILED
            missing.append({"topic_name": name, "topic_id": None, "partitions": [
                {"partition_index": p.partition_index, "error_code": error,
                 "error_message": _NOT_HOSTED if error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION else None}
                for p in t.partitions]})
            continue
        shares.altered_group(req.group_id)
        parts = []
        for p in t.partitions:
            index = int(p.partition_index)
            if not _hosted(ctx, name, index):
                parts.append({"partition_index": index, "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                              "error_message": _NOT_HOSTED})
                continue
            shares.alter_offset(req.group_id, name, index, int(p.start_offset))
            parts.append({"partition_index": index, "error_code": 0, "error_message": None})
        found.append({"topic_name": name, "topic_id": topic_uuid(ctx, name), "partitions": parts})
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "responses": missing + found}


@register(92, 0, 0)
def delete_share_group_offsets(req: Any, ctx: RequestContext) -> dict:
    """GroupCoordinatorService.deleteShareGroupOffsets: an empty share group forgets its state of the topics
    (the next member starts where share.auto.offset.reset says). Unknown topics are answered last."""
    code, message = _admin_group(ctx, req.group_id, "delete", must_exist=True)
    if code:
        return {"throttle_time": 0, "error_code": code, "error_message": message, "responses": []}
    shares = _shares(ctx)
    found, missing = [], []
    done: set[str] = set()
    for name in (t.topic_name for t in req.topics):
        if name in done:  # a topic whose state went is answered once however often it is named
            continue
        if not ctx.allowed("read", "topic", name):
            missing.append({"topic_name": name, "topic_id": None, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                            "error_message": None})
        elif not ctx.log_manager.has_topic(name):
            missing.append({"topic_name": name, "topic_id": None, "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            "error_message": _NOT_HOSTED})
        elif not any(topic == name for topic, _ in shares.offsets(req.group_id)):
            missing.append({"topic_name": name, "topic_id": None, "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            "error_message": "The group has no state for this topic."})
        else:
            shares.delete_offsets(req.group_id, name)
            done.add(name)
            found.append({"topic_name": name, "topic_id": topic_uuid(ctx, name), "error_code": 0,
                          "error_message": None})
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "responses": found + missing}
