"""The streams group APIs (KIP-1071): StreamsGroupHeartbeat (88) and StreamsGroupDescribe (89), versions 0-1.

The group state lives in the group coordinator (`ctx.coordinator.streams`, server/streams_group.py); these
handlers check authorization as KafkaApis does (READ on the group for a heartbeat, DESCRIBE on the topics
of a topology, CREATE for the internal topics the broker makes; DESCRIBE on the group for a describe) and
translate the wire structures. Version 1 (KIP-1331) is answered as Kafka 4.4 answers without a
`group.streams.topology.description.plugin.class`: no topology description is required from the members
(TopologyDescriptionRequired false, so they never send StreamsGroupTopologyDescriptionUpdate, 93, which is
not served) and none is stored (TopologyDescriptionStatus NOT_STORED when asked for).
"""

from __future__ import annotations

from typing import Any

from chronolog.errors import ErrorCode
from chronolog.protocol import streams_schemas  # noqa: F401  (the v1 schemas kio lacks)
from chronolog.protocol.core import ms
from chronolog.protocol.operations import GROUP, NOT_ASKED, authorized
from chronolog.protocol.registry import FEATURES, RequestContext, register

# StreamsVersion.SV_1: what a freshly formatted Kafka 4.4 cluster finalizes (`kafka-features describe`)
FEATURES["streams.version"] = (0, 1, 1)

KINDS = ("active", "standby", "warmup")  # the task kinds of an assignment
# The group configs' defaults Kafka answers with (GroupConfig: streams.acceptable.recovery.lag and
# streams.task.offset.interval.ms): warm-up tasks are not assigned here, so they only inform the client.
ACCEPTABLE_RECOVERY_LAG, TASK_OFFSET_INTERVAL_MS = 10000, 60000
NOT_REQUESTED, NOT_STORED = 0, 1  # StreamsGroupDescribeResponse.TopologyDescriptionStatus
ASSIGNOR = "sticky"  # StickyTaskAssignor.STICKY_ASSIGNOR_NAME, the only one served


def _refused(code: int, message: str | None, member_id: str) -> dict:
    return {"throttle_time": 0, "error_code": code, "error_message": message, "member_id": member_id,
            "member_epoch": -1, "heartbeat_interval": 0, "acceptable_recovery_lag": 0, "task_offset_interval": 0,
            "status": None, "endpoint_information_epoch": 0}


def _host(host: str) -> str:
    """The member's ClientHost as Kafka shows it (InetAddress.toString: "/127.0.0.1")."""
    return host if host.startswith("/") else f"/{host}"


@register(88, 0, 1)
async def streams_group_heartbeat(req: Any, ctx: RequestContext) -> dict:
    """GroupMetadataManager.streamsGroupHeartbeat, answered once the group's changed state is durable."""
    if not ctx.allowed("read", "group", req.group_id):
        return _refused(ErrorCode.GROUP_AUTHORIZATION_FAILED, None, req.member_id)
    request, refused = ctx.coordinator.streams.parse_heartbeat(req, ctx.client_id or "", _host(ctx.client_host),
                                                               ms(req.rebalance_timeout))
    if refused is not None:
        return _refused(*refused, req.member_id)
    if request.topology is not None:
        topology = request.topology
        names = {t for s in topology.subtopologies for t in s.source_topics}
        names |= {t.name for s in topology.subtopologies for t in (*s.repartition_sources, *s.changelogs)}
        denied = sorted(t for t in names if not ctx.allowed("describe", "topic", t))
        if denied:
            return _refused(ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"Unauthorized to DESCRIBE on topics "
                            f"{', '.join(denied)}.", req.member_id)

    result = await ctx.coordinator.streams.heartbeat_async(
        request, ctx.log_manager.topics(), ctx.log_manager.create_topic,
        lambda name: ctx.allowed("create", "topic", name))
    out = {"throttle_time": 0, "error_code": result["error_code"], "error_message": result["error_message"],
           "member_id": result["member_id"], "member_epoch": result["member_epoch"],
           "heartbeat_interval": result["heartbeat_interval_ms"],
           "acceptable_recovery_lag": ACCEPTABLE_RECOVERY_LAG, "task_offset_interval": TASK_OFFSET_INTERVAL_MS,
           "topology_description_required": False,
           "status": result.get("status"), "endpoint_information_epoch": result.get("endpoint_information_epoch", 0),
           "partitions_by_user_endpoint": result.get("partitions_by_user_endpoint")}
    for k in KINDS:
        out[f"{k}_tasks"] = result.get(f"{k}_tasks")
    return out


def _wire_tasks(tasks: dict[str, frozenset[int]]) -> list[dict]:
    return [{"subtopology_id": sid, "partitions": sorted(ps)} for sid, ps in sorted(tasks.items()) if ps]


def _assignment(assigned: dict[str, dict[str, frozenset[int]]]) -> dict:
    return {f"{k}_tasks": _wire_tasks(assigned.get(k, {})) for k in KINDS}


def _info(name: str, partitions: int, replication_factor: int, configs: dict[str, str] | tuple) -> dict:
    """A topology's internal topic: its replication factor as the member declared it, as Kafka shows it."""
    return {"name": name, "partitions": partitions, "replication_factor": replication_factor,
            "topic_configs": [{"key": k, "value": v} for k, v in sorted(dict(configs).items())]}


def _member(m: Any, target: dict) -> dict:
    return {"member_id": m.member_id, "member_epoch": m.epoch, "instance_id": m.instance_id, "rack_id": m.rack_id,
            "client_id": m.client_id, "client_host": m.client_host, "topology_epoch": m.topology_epoch,
            "process_id": m.process_id,
            "user_endpoint": None if m.user_endpoint is None else {"host": m.user_endpoint[0],
                                                                   "port": m.user_endpoint[1]},
            "client_tags": [{"key": k, "value": v} for k, v in sorted(m.client_tags.items())],
            "task_offsets": [{"subtopology_id": s, "partition": p, "offset": o} for s, p, o in m.task_offsets],
            "task_end_offsets": [{"subtopology_id": s, "partition": p, "offset": o} for s, p, o in m.task_end_offsets],
            "assignment": _assignment(m.assigned), "target_assignment": _assignment(target), "is_classic": False}


@register(89, 0, 1)
def streams_group_describe(req: Any, ctx: RequestContext) -> dict:
    """GroupMetadataManager.streamsGroupDescribe; KafkaApis checks DESCRIBE on each group."""
    groups = []
    for gid in req.group_ids:
        empty = {"group_id": gid, "group_state": "", "group_epoch": -1, "assignment_epoch": -1, "topology": None,
                 "members": [], "authorized_operations": NOT_ASKED, "assignor_name": None}
        if not gid:  # GroupCoordinatorService.streamsGroupDescribe: isGroupIdNotEmpty
            groups.append({**empty, "error_code": ErrorCode.INVALID_GROUP_ID, "error_message": None})
            continue
        if not ctx.allowed("describe", "group", gid):
            groups.append({**empty, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "error_message": None})
            continue
        group = ctx.coordinator.streams.describe(gid)
        if group is None:
            known = gid in ctx.coordinator.groups or gid in ctx.coordinator.consumer.groups
            groups.append({**empty, "error_code": ErrorCode.GROUP_ID_NOT_FOUND,
                           "error_message": f"Group {gid} is not a streams group." if known
                           else f"Group {gid} not found."})
            continue
        topology = None
        if group.topology is not None:
            # configured: the resolved source topics and the internal topics' partition counts; not (yet)
            # configured: the topology as the members declared it (partitions 0), as Kafka 4.4 shows it
            configured = group.configured if group.configured.tasks is not None else None
            counts = ctx.log_manager.topics() if configured is not None else {}
            subs = []
            for s in group.topology.subtopologies:
                internal = {x.name for x in s.repartition_sources}
                sources = [t for t in configured.sources.get(s.id, ()) if t not in internal] if configured \
                    else list(s.source_topics)
                subs.append({"subtopology_id": s.id, "source_topics": sources,
                             "repartition_sink_topics": list(s.repartition_sinks),
                             "state_changelog_topics": [_info(t.name, counts.get(t.name, t.partitions),
                                                              t.replication_factor, t.configs) for t in s.changelogs],
                             "repartition_source_topics": [_info(t.name, counts.get(t.name, t.partitions),
                                                                 t.replication_factor, t.configs)
                                                           for t in s.repartition_sources]})
            topology = {"epoch": group.topology.epoch, "subtopologies": subs}
        ops = authorized(ctx, "group", gid, GROUP) if req.include_authorized_operations else NOT_ASKED
        members = [_member(m, group.target.get(m.member_id, {})) for m in group.members.values()]
        groups.append({"error_code": 0, "error_message": None, "group_id": gid, "group_state": group.state,
                       "group_epoch": group.epoch, "assignment_epoch": group.assignment_epoch, "topology": topology,
                       "members": members, "authorized_operations": ops, "assignor_name": ASSIGNOR,
                       "topology_description": None,
                       "topology_description_status": NOT_STORED if getattr(req, "include_topology_description",
                                                                            False) else NOT_REQUESTED})
    return {"throttle_time": 0, "groups": groups}
