"""The KIP-848 group APIs (ConsumerGroupHeartbeat, ConsumerGroupDescribe) and the cluster views Kafka 4.x
admin clients use (DescribeCluster, DescribeTopicPartitions). The group state lives in the group
coordinator (`ctx.coordinator.consumer`, server/consumer_group.py); these handlers translate topic ids and
names and check authorization as KafkaApis does."""

from __future__ import annotations

import uuid
from typing import Any

from chronolog.errors import ErrorCode, InvalidTopicExceptionError
from chronolog.protocol.core import INTERNAL_TOPICS, ms, topic_uuid
from chronolog.protocol.operations import GROUP, NOT_ASKED, TOPIC, authorized, cluster_operations
from chronolog.protocol.registry import RequestContext, register
from chronolog.storage.basics import LEADER_EPOCH
from chronolog.storage.partition_metadata import validate_topic_name

BROKER_ENDPOINT = 1  # EndpointType.BROKER (0 is UNKNOWN, 2 CONTROLLER)


def _ids(ctx: RequestContext) -> dict[uuid.UUID, str]:
    return {topic_uuid(ctx, name): name for name in ctx.log_manager.topics()}


def _wire_assignment(ctx: RequestContext, assignment: dict[str, frozenset[int]]) -> dict:
    return {"topic_partitions": [{"topic_id": topic_uuid(ctx, t), "topic_name": t, "partitions": sorted(ps)}
                                 for t, ps in sorted(assignment.items()) if ctx.log_manager.has_topic(t)]}


@register(68, 0, 1)
async def consumer_group_heartbeat(req: Any, ctx: RequestContext) -> dict:
    """GroupMetadataManager.consumerGroupHeartbeat; KafkaApis checks Read on the group first. Answered once
    the group's changed records are durable (written off the event loop)."""
    if not ctx.allowed("read", "group", req.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "member_epoch": -1,
                "heartbeat_interval": 0}
    owned = None
    if req.topic_partitions is not None:
        names = _ids(ctx)
        owned = {}
        for tp in req.topic_partitions:
            name = names.get(tp.topic_id)
            if name is not None and tp.partitions:  # a deleted topic's partitions are gone from the member too
                owned[name] = frozenset(int(p) for p in tp.partitions)
    subscribed = None if req.subscribed_topic_names is None else list(req.subscribed_topic_names)
    result = await ctx.coordinator.consumer.heartbeat_async(
        req.group_id, req.member_id, int(req.member_epoch), instance_id=req.instance_id, rack_id=req.rack_id,
        rebalance_timeout_ms=ms(req.rebalance_timeout), subscribed=subscribed,
        regex=getattr(req, "subscribed_topic_regex", None), assignor=req.server_assignor, owned=owned,
        client_id=ctx.client_id or "", client_host=ctx.client_host, topics=ctx.log_manager.topics(),
        api_version=ctx.api_version)
    assignment = result["assignment"]
    return {"throttle_time": 0, "error_code": result["error_code"], "error_message": result["error_message"],
            "member_id": result["member_id"], "member_epoch": result["member_epoch"],
            "heartbeat_interval": result["heartbeat_interval_ms"],
            "assignment": None if assignment is None else {"topic_partitions": [
                {"topic_id": topic_uuid(ctx, t), "partitions": sorted(ps)}
                for t, ps in sorted(assignment.items()) if ctx.log_manager.has_topic(t)]}}


@register(69, 0, 1)
def consumer_group_describe(req: Any, ctx: RequestContext) -> dict:
    groups = []
    for gid in req.group_ids:
        empty = {"group_id": gid, "group_state": "", "group_epoch": -1, "assignment_epoch": -1,
                 "assignor_name": "", "members": [], "authorized_operations": NOT_ASKED}
        if not gid:  # GroupCoordinatorService.consumerGroupDescribe (isGroupIdNotEmpty), before authorization
            groups.append({**empty, "error_code": ErrorCode.INVALID_GROUP_ID, "error_message": None})
            continue
        if not ctx.allowed("describe", "group", gid):
            groups.append({**empty, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "error_message": None})
            continue
        group = ctx.coordinator.consumer.describe(gid)
        if group is None:  # GroupMetadataManager.consumerGroupDescribe: absent, or a classic group
            message = f"Group {gid} is not a consumer group." if gid in ctx.coordinator.groups else \
                f"Group {gid} not found."
            groups.append({**empty, "error_code": ErrorCode.GROUP_ID_NOT_FOUND, "error_message": message})
            continue
        members = [{"member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                    "member_epoch": m.epoch, "client_id": m.client_id, "client_host": m.client_host,
                    "subscribed_topic_names": sorted(m.names), "subscribed_topic_regex": m.regex,
                    "assignment": _wire_assignment(ctx, m.assigned),
                    "target_assignment": _wire_assignment(ctx, group.target.get(m.member_id, {})),
                    "member_type": 1}  # 1: the consumer protocol (0 would be a classic member)
                   for m in group.members.values()]
        ops = authorized(ctx, "group", gid, GROUP) if req.include_authorized_operations else NOT_ASKED
        groups.append({"error_code": 0, "error_message": None, "group_id": gid, "group_state": group.state,
                       "group_epoch": group.epoch, "assignment_epoch": group.assignment_epoch,
                       "assignor_name": group.assignor, "members": members, "authorized_operations": ops})
    return {"throttle_time": 0, "groups": groups}


@register(60, 0, 2)
def describe_cluster(req: Any, ctx: RequestContext) -> dict:
    """AuthHelper.computeDescribeClusterResponse: a broker answers broker endpoints only."""
    endpoint = int(getattr(req, "endpoint_type", BROKER_ENDPOINT))
    base = {"throttle_time": 0, "cluster_id": ctx.state.cluster_id, "controller_id": -1, "brokers": [],
            "endpoint_type": BROKER_ENDPOINT, "cluster_authorized_operations": NOT_ASKED}
    if endpoint != BROKER_ENDPOINT:
        code = ErrorCode.INVALID_REQUEST if ctx.api_version == 0 else (
            ErrorCode.UNSUPPORTED_ENDPOINT_TYPE if endpoint not in (1, 2) else ErrorCode.MISMATCHED_ENDPOINT_TYPE)
        return {**base, "error_code": code, "error_message": f"Unsupported endpoint type {endpoint}"
                if endpoint not in (1, 2) else "The request was sent to an endpoint of type BROKER, but we "
                "wanted an endpoint of type CONTROLLER"}
    ops = cluster_operations(ctx, bool(req.include_cluster_authorized_operations))
    node = ctx.state.node_id
    return {**base, "error_code": 0, "error_message": None, "controller_id": node,
            "brokers": [{"broker_id": node, "host": ctx.advertised_host, "port": ctx.advertised_port,
                         "rack": None, "is_fenced": False}],
            "cluster_authorized_operations": ops}


def _int32(value: int) -> int:
    """Java's int arithmetic: a cursor near 2^31 plus the page size wraps, as in Kafka's metadata cache."""
    return (value + 2**31) % 2**32 - 2**31


@register(75, 0, 0)
def describe_topic_partitions(req: Any, ctx: RequestContext) -> dict:
    """DescribeTopicPartitionsRequestHandler + KRaftMetadataCache.getTopicMetadataForDescribeTopicResponse
    (KIP-966): topics by name (none: every topic the principal may describe) from the cursor's topic on,
    sorted, paged by `response_partition_limit`; a cursor whose topic is not asked for, or whose partition is
    negative, is INVALID_REQUEST for every topic asked for. Topics not authorized come last."""
    manager = ctx.log_manager
    fetch_all = not req.topics
    cursor = req.cursor
    cursor_name = cursor.topic_name if cursor is not None else ""
    asked = set(manager.topics()) if fetch_all else {t.name for t in req.topics}
    names = sorted(n for n in asked if n >= cursor_name)
    if cursor is not None and ((not fetch_all and cursor_name not in names) or int(cursor.partition_index) < 0):
        return {"throttle_time": 0, "next_cursor": None, "topics": [
            {"error_code": ErrorCode.INVALID_REQUEST, "name": t.name, "topic_id": uuid.UUID(int=0),
             "is_internal": False, "partitions": [], "topic_authorized_operations": NOT_ASKED}
            for t in req.topics]}
    allowed = [n for n in names if ctx.allowed("describe", "topic", n, log_if_denied=not fetch_all)]
    refused = [] if fetch_all else [
        {"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "name": n, "topic_id": uuid.UUID(int=0),
         "is_internal": False, "partitions": [], "topic_authorized_operations": NOT_ASKED}
        for n in names if n not in set(allowed)]
    topics, remaining, next_cursor = [], max(1, min(int(req.response_partition_limit), 2000)), None
    node = ctx.state.node_id
    for name in allowed:
        if remaining == 0:  # the next page starts at this topic, whether or not it exists
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        if not manager.has_topic(name):
            if not fetch_all:
                try:
                    validate_topic_name(name)
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                except InvalidTopicExceptionError:
                    code = ErrorCode.INVALID_TOPIC_EXCEPTION
                topics.append({"error_code": code, "name": name, "topic_id": uuid.UUID(int=0),
                               "is_internal": name in INTERNAL_TOPICS, "partitions": [],
                               "topic_authorized_operations": NOT_ASKED})
            continue
        count = manager.topics()[name]
        first = int(cursor.partition_index) if name == cursor_name else 0
        last = min(count, _int32(first + remaining))
        partitions = [{"error_code": 0, "partition_index": p, "leader_id": node, "leader_epoch": LEADER_EPOCH,
                       "replica_nodes": [node], "isr_nodes": [node], "eligible_leader_replicas": [],
                       "last_known_elr": [], "offline_replicas": []} for p in range(first, last)]
        topics.append({"error_code": 0, "name": name, "topic_id": topic_uuid(ctx, name),
                       "is_internal": name in INTERNAL_TOPICS, "partitions": partitions,
                       "topic_authorized_operations": authorized(ctx, "topic", name, TOPIC)})
        if last < count:
            next_cursor = {"topic_name": name, "partition_index": last}
            break
        remaining -= len(partitions)
    return {"throttle_time": 0, "topics": topics + refused, "next_cursor": next_cursor}
