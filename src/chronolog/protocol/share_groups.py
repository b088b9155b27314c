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


# A partition of a request or session: (topic key, index), the topic key its name, or ("", id) for a topic id
# the broker does not know (Kafka's TopicIdPartition with a null name, apart by its id).
Key = tuple[Any, int]


def _key(ctx: RequestContext, topic_id: Any, index: int) -> tuple[Key, str | None]:
    name = ctx.state.topic_name(topic_id)
    return (name if name is not None else ("", topic_id), int(index)), name


def _topic_id(ctx: RequestContext, topic: Any) -> Any:
    return topic_uuid(ctx, topic) if isinstance(topic, str) else topic[1]


def _session(ctx: RequestContext, group_id: str, member_id: str, epoch: int, *, opening: bool,
             asked: list[Key] | tuple = (), forgotten: list[Key] | tuple = ()) -> Any:
    """ShareSessionCache: epoch 0 opens a session with the request's partitions (ShareFetch only), -1 ends
    it, any other must be the session's next epoch: its partitions are updated, those new to it answered
    in the next response (SharePartitionManager.newContext, ShareSession.update)."""
    from_cache = _shares(ctx).sessions
    key = (group_id, member_id)
    if epoch == 0:
        if not opening:
            raise _SessionError(ErrorCode.INVALID_SHARE_SESSION_EPOCH, "ShareAcknowledge cannot open a session")
        session = _shares(ctx).open_session(group_id, member_id)
        session.partitions.update(dict.fromkeys(asked, False))
        if ctx.connection is not None:
            session.owner = ctx.connection
            # one session a connection, the last it opened (ShareSessionCache.connectionIdToSessionMap): its
            # close ends only that one; a member's earlier session of another group stays
            ctx.connection.closers["share session"] = lambda: _disconnected(ctx, key, session)
        return session
    session = from_cache.get(key)
    if session is None:
        raise _SessionError(ErrorCode.SHARE_SESSION_NOT_FOUND, f"Share session for member {member_id} not found")
    if epoch == -1:
        return session
    if epoch != session.epoch:
        raise _SessionError(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                            f"Expected epoch {session.epoch} but got {epoch}")
    for k in asked:
        session.partitions.setdefault(k, True)
    for k in forgotten:
        session.partitions.pop(k, None)
    session.epoch = 1 if session.epoch == INT32_MAX else session.epoch + 1
    return session


def _disconnected(ctx: RequestContext, key: tuple[str, str], session: Any) -> None:
    """The connection that opened a share session closed: the session ends and its records go back
    (ShareSessionCache's disconnect listener), unless a newer session replaced it or it ended (stale)."""
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


def _invalid(req: Any) -> tuple[int, str | None] | None:
    """KafkaApis' checks before a share session is looked at, in its order: a group id, Read on the group,
    a member id of 1-36 characters."""
    return None if req.group_id is not None else (ErrorCode.INVALID_REQUEST, "Invalid group id in the request.")


def _member_invalid(req: Any) -> tuple[int, str | None] | None:
    if not req.member_id or len(req.member_id) > 36:  # KafkaApis.isMemberIdValid
        return ErrorCode.INVALID_REQUEST, "Invalid member id in the request."
    return None


def _bad_batches(batches: Any, renew: bool, supports_renew: bool) -> str | None:
    """KafkaApis.validateAcknowledgementBatches: ordered, non-overlapping batches whose types are one per
    offset (or one for all) and known (RENEW, 4, from v2 and in a renewing request only)."""
    last = -1
    top = 4 if supports_renew else 3
    for b in batches:
        first, end, types = int(b.first_offset), int(b.last_offset), list(b.acknowledge_types)
        if end < first or first < last:  # (as Kafka: from -1, and a batch may start where the last ended)
            return "Invalid acknowledgement batch offsets"
        if not types or (len(types) != 1 and len(types) != end - first + 1):
            return "Invalid acknowledgement types"
        if any(t < 0 or t > top for t in types) or (4 in types and not renew):
            return "Invalid acknowledgement type"
        last = end
    return None


def _acknowledgements(ctx: RequestContext, group_id: str, member_id: str, topics: Any, *, renew: bool,
                      supports_renew: bool) -> dict[Key, tuple[int, str | None]]:
    """KafkaApis.handleAcknowledgements over the request's partitions: a topic id the broker does not know
    UNKNOWN_TOPIC_ID for each of its partitions; a known partition once, with its last occurrence's
    batches, checked (INVALID_REQUEST), authorized, hosted (UNKNOWN_TOPIC_OR_PARTITION); then those with
    batches go to SharePartitionManager.acknowledge, and those without are answered (NONE) only when some
    partition did."""
    erroneous: dict[Key, tuple[int, str | None]] = {}
    data: dict[Key, tuple[str, Any]] = {}
    for t in topics:
        for p in t.partitions:
            key, name = _key(ctx, t.topic_id, p.partition_index)
            if name is None:
                erroneous[key] = (ErrorCode.UNKNOWN_TOPIC_ID, None)
            else:
                data[key] = (name, p.acknowledgement_batches)
    interested, empty = {}, {}
    for key, (name, batches) in data.items():
        bad = _bad_batches(batches, renew, supports_renew)
        if bad is not None:
            erroneous[key] = (ErrorCode.INVALID_REQUEST, bad)
        elif not ctx.allowed("read", "topic", name):
            erroneous[key] = (ErrorCode.TOPIC_AUTHORIZATION_FAILED, None)
        elif not _hosted(ctx, name, key[1]):
            erroneous[key] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
        elif not batches:
            empty[key] = (0, None)
        else:
            interested[key] = (name, batches)
    if not interested:
        return erroneous
    results: dict[Key, tuple[int, str | None]] = {}
    shares = _shares(ctx)
    for key, (name, batches) in interested.items():
        group = shares.groups.get(group_id)
        if group is None or (name, key[1]) not in group.partitions:
            # SharePartitionManager.acknowledge: no share-partition of the group (nothing fetched) is unknown
            results[key] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
            continue
        try:
            shares.acknowledge(group_id, member_id, name, key[1],
                               [(int(b.first_offset), int(b.last_offset), [int(t) for t in b.acknowledge_types])
                                for b in batches])
            results[key] = (0, None)
        except Exception as exc:
            results[key] = _code(exc)
    return {**results, **erroneous, **empty}


def _lock_ms(ctx: RequestContext, group_id: str | None) -> int:
    return int(_shares(ctx).group_config(group_id or "", "share.record.lock.duration.ms"))


def _top_error(ctx: RequestContext, code: int, message: str | None = None, group_id: str | None = None) -> dict:
    return {"throttle_time": 0, "error_code": code, "error_message": message,
            "acquisition_lock_timeout": _lock_ms(ctx, group_id), "responses": [], "node_endpoints": []}


# -- ShareFetch ---------------------------------------------------------------------------------------------
@register(78, 1, 2)
async def share_fetch(req: Any, ctx: RequestContext) -> dict:
    """KafkaApis.handleShareFetchRequest: the request's checks, the session (SharePartitionManager.newContext),
    the acknowledgements, then the fetch of the session's partitions (acquiring records under locks, waiting up
    to MaxWaitMs for any), answered as ShareSessionContext does: a new session every partition, a later
    request those with records, an error, or new to the session."""
    group_id, member_id, epoch = req.group_id, req.member_id, int(req.share_session_epoch)
    renew = ctx.api_version >= 2 and bool(getattr(req, "is_renew_ack", False))
    failed = _invalid(req)
    if failed is None and not ctx.allowed("read", "group", group_id):
        failed = ErrorCode.GROUP_AUTHORIZATION_FAILED, None
    if failed is None:
        failed = _member_invalid(req)
    if failed is None and renew and (
            int(req.max_bytes or 0) or int(req.min_bytes or 0) or int(req.max_records or 0) or ms(req.max_wait)):
        failed = ErrorCode.INVALID_REQUEST, "maxBytes, minBytes, maxRecords and maxWaitMs must be 0 if isRenewAck is true."
    acking = any(p.acknowledgement_batches for t in req.topics for p in t.partitions)
    if failed is None and epoch == 0 and acking:
        failed = ErrorCode.INVALID_REQUEST, "Acknowledge data present on initial epoch"
    if failed is not None:
        return _top_error(ctx, *failed, group_id)
    asked = [_key(ctx, t.topic_id, p.partition_index)[0] for t in req.topics for p in t.partitions]
    forgotten = [_key(ctx, f.topic_id, index)[0] for f in req.forgotten_topics_data or () for index in f.partitions]
    try:
        session = _session(ctx, group_id, member_id, epoch, opening=True, asked=asked, forgotten=forgotten)
    except _SessionError as exc:
        return _top_error(ctx, exc.code, str(exc), group_id)
    node = ctx.state.node_id
    results: dict[Key, dict] = {}

    def entry(key: Key) -> dict:
        return results.setdefault(key, {
            "partition_index": key[1], "error_code": 0, "error_message": None, "acknowledge_error_code": 0,
            "acknowledge_error_message": None, "current_leader": {"leader_id": node, "leader_epoch": LEADER_EPOCH},
            "records": b"", "acquired_records": []})

    acks = _acknowledgements(ctx, group_id, member_id, req.topics, renew=renew,
                             supports_renew=ctx.api_version >= 2) if acking else {}
    if epoch != -1 and not renew:
        # the context's partitions: the request's (a new session) or the session's; the unknown, unauthorized and
        # not hosted ones answered with their error, the others fetched
        partitions = list(dict.fromkeys(asked)) if epoch == 0 else list(session.partitions)
        # SharePartitionManager.processShareFetch answers at once, with nothing, when MaxRecords or MaxBytes is 0
        fetching = int(req.max_records or 0) != 0 and int(req.max_bytes or 0) != 0
        interested = []
        for key in partitions:
            name = key[0] if isinstance(key[0], str) else None
            if name is None:
                entry(key)["error_code"] = ErrorCode.UNKNOWN_TOPIC_ID
            elif not ctx.allowed("read", "topic", name):
                entry(key)["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif not _hosted(ctx, name, key[1]):
                entry(key)["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                interested.append(key)
                if fetching and epoch == 0 and _assigned(ctx, group_id, name, key[1]):
                    # a new session lists what it will fetch once the share-partition is initialized: Kafka 4.4
                    # assigns only initialized partitions, and leaves out the others (no answer yet)
                    entry(key)
        if interested and fetching:
            await _fetch(req, ctx, group_id, member_id, interested, entry)
        if epoch != 0:  # ShareSessionContext.updateAndGenerateResponseData's PartitionIterator
            for key in list(results):
                out = results[key]
                must = bool(out["records"]) or bool(session.partitions.get(key)) or bool(out["error_code"])
                if key in session.partitions:
                    session.partitions[key] = bool(out["error_code"])
                if not must:
                    del results[key]
    for key, (code, message) in acks.items():
        out = entry(key)
        out["acknowledge_error_code"], out["acknowledge_error_message"] = code, message
    if epoch == -1:
        _close(ctx, group_id, member_id)
    responses: dict[Any, list[dict]] = {}
    for (topic, _index), out in results.items():
        responses.setdefault(topic, []).append(out)
    return {"throttle_time": 0, "error_code": 0, "error_message": None,
            "acquisition_lock_timeout": _lock_ms(ctx, group_id),
            "responses": [{"topic_id": _topic_id(ctx, topic), "partitions": parts} for topic, parts in responses.items()],
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


async def _fetch(req: Any, ctx: RequestContext, group_id: str, member_id: str, interested: list[Key],
                 entry: Any) -> None:
    """SharePartitionManager.fetchMessages over the hosted, authorized partitions of the context."""
    shares = _shares(ctx)
    deadline = time.monotonic() + ms(req.max_wait) / 1000.0
    max_records = int(req.max_records)
    strict = int(getattr(req, "share_acquire_mode", 0)) == ACQUIRE_RECORD_LIMIT
    keys = [(name, index) for name, index in interested]
    while True:
        left_records = max_records
        left_bytes = int(req.max_bytes) if req.max_bytes is not None else INT32_MAX
        got = False
        for key in list(keys):
            name, index = key
            if left_records <= 0 or left_bytes <= 0:
                break
            if not _hosted(ctx, name, index):  # deleted while waiting
                entry(key)["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                keys.remove(key)
                continue
            if not _initialized(ctx, group_id, name, index):
                continue
            try:
                acquired, data = shares.acquire(group_id, member_id, name, index, max_records=left_records,
                                                max_bytes=left_bytes, strict=strict)
            except Exception as exc:
                entry(key)["error_code"] = _code(exc)[0]
                continue
            if acquired:
                out = entry(key)
                out["records"] = bytes(out["records"]) + data if out["records"] else data
                out["acquired_records"] = list(out["acquired_records"]) + [
                    {"first_offset": a, "last_offset": z, "delivery_count": c} for a, z, c in acquired]
                left_records -= sum(z - a + 1 for a, z, _ in acquired)
                left_bytes -= len(data)
                got = True
        now = time.monotonic()
        if got or now >= deadline or not keys:
            return
        timeout = deadline - now
        locks = shares.next_deadline(group_id, keys)
        if locks is not None:
            timeout = max(0.0, min(timeout, locks - now + 0.001))
        await shares.wait(timeout, ctx.state.data_waiters)


# -- ShareAcknowledge ---------------------------------------------------------------------------------------
@register(79, 1, 2)
def share_acknowledge(req: Any, ctx: RequestContext) -> dict:
    """KafkaApis.handleShareAcknowledgeRequest: acknowledgements within an open session; epoch -1 also
    closes it."""
    group_id, member_id, epoch = req.group_id, req.member_id, int(req.share_session_epoch)
    failed = _invalid(req)
    if failed is None and not ctx.allowed("read", "group", group_id):
        failed = ErrorCode.GROUP_AUTHORIZATION_FAILED, None
    if failed is None:
        failed = _member_invalid(req)
    if failed is not None:
        return _top_error(ctx, *failed, group_id)
    try:
        _session(ctx, group_id, member_id, epoch, opening=False)
    except _SessionError as exc:
        return _top_error(ctx, exc.code, str(exc), group_id)
    node = ctx.state.node_id
    acks = _acknowledgements(ctx, group_id, member_id, req.topics, renew=ctx.api_version >= 2 and bool(
        getattr(req, "is_renew_ack", False)), supports_renew=ctx.api_version >= 2)
    by_topic: dict[Any, dict] = {}
    for (topic, index), (code, message) in acks.items():
        by_topic.setdefault(topic, {"topic_id": _topic_id(ctx, topic), "partitions": []})["partitions"].append(
            {"partition_index": index, "error_code": code, "error_message": message,
             "current_leader": {"leader_id": node, "leader_epoch": LEADER_EPOCH}})
    if epoch == -1:
        _close(ctx, group_id, member_id)
    return {"throttle_time": 0, "error_code": 0, "error_message": None,
            "acquisition_lock_timeout": _lock_ms(ctx, group_id), "responses": list(by_topic.values()),
            "node_endpoints": []}


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
