"""StreamsGroupHeartbeat v1 and StreamsGroupDescribe v1 (Kafka 4.4; KIP-1331 topology descriptions, KIP-1357
assignor name), which kio 0.6.5 does not have, written as kio generates them from Kafka's JSON schemas
(StreamsGroupHeartbeat*.json, StreamsGroupDescribe*.json) in the style of protocol/newer_schemas.py, and
added to its tables when protocol/streams_groups.py (their only server) is imported. Drop them once kio has them.

Heartbeat v1: the request is v0's; the response replaces the int32 AcceptableRecoveryLagLegacy with the int64
AcceptableRecoveryLag after TaskOffsetIntervalMs and adds TopologyDescriptionRequired. Describe v1: the request
adds IncludeTopologyDescription; each group adds TopologyDescription, TopologyDescriptionStatus, AssignorName.
(No `from __future__ import annotations`: kio reads the fields' types, which must not be strings.)"""

from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.response_header.v1.header import ResponseHeader
from kio.schema.streams_group_describe.v0 import request as describe_v0_request
from kio.schema.streams_group_describe.v0 import response as describe_v0
from kio.schema.streams_group_heartbeat.v0 import request as heartbeat_v0_request
from kio.schema.streams_group_heartbeat.v0 import response as heartbeat_v0
from kio.schema.types import TopicName
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from chronolog.protocol import newer_schemas
from chronolog.protocol.newer_schemas import kio_entity


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamsGroupHeartbeatRequest(heartbeat_v0_request.StreamsGroupHeartbeatRequest):
    __version__: ClassVar[i16] = i16(1)


@dataclass(frozen=True, slots=True, kw_only=True)
@kio_entity(88, 1, ResponseHeader, EntityType.response)
class StreamsGroupHeartbeatResponse:
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)
    member_id: str = field(metadata={"kafka_type": "string"})
    member_epoch: i32 = field(metadata={"kafka_type": "int32"})
    heartbeat_interval: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    task_offset_interval: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    acceptable_recovery_lag: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
    status: tuple[heartbeat_v0.Status, ...] | None
    active_tasks: tuple[heartbeat_v0.TaskIds, ...] | None = None
    standby_tasks: tuple[heartbeat_v0.TaskIds, ...] | None = None
    warmup_tasks: tuple[heartbeat_v0.TaskIds, ...] | None = None
    topology_description_required: bool = field(metadata={"kafka_type": "bool"}, default=False)
    endpoint_information_epoch: i32 = field(metadata={"kafka_type": "int32"})
    partitions_by_user_endpoint: tuple[heartbeat_v0.EndpointToPartitions, ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamsGroupDescribeRequest(describe_v0_request.StreamsGroupDescribeRequest):
    __version__: ClassVar[i16] = i16(1)
    include_topology_description: bool = field(metadata={"kafka_type": "bool"}, default=False)


@dataclass(frozen=True, slots=True, kw_only=True)
@kio_entity(89, 1, ResponseHeader)
class TopologyDescriptionNode:
    name: str = field(metadata={"kafka_type": "string"})
    node_type: i8 = field(metadata={"kafka_type": "int8"})
    source_topics: tuple[TopicName, ...] = field(metadata={"kafka_type": "string"}, default=())
    sink_topic: TopicName | None = field(metadata={"kafka_type": "string"}, default=None)
    stores: tuple[str, ...] = field(metadata={"kafka_type": "string"}, default=())
    successors: tuple[str, ...] = field(metadata={"kafka_type": "string"}, default=())


@dataclass(frozen=True, slots=True, kw_only=True)
@kio_entity(89, 1, ResponseHeader)
class TopologyDescriptionSubtopology:
    subtopology_id: str = field(metadata={"kafka_type": "string"})
    nodes: tuple[TopologyDescriptionNode, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
@kio_entity(89, 1, ResponseHeader)
class TopologyDescriptionGlobalStore:
    source: TopologyDescriptionNode
    processor: TopologyDescriptionNode


@dataclass(frozen=True, slots=True, kw_only=True)
@kio_entity(89, 1, ResponseHeader)
class TopologyDescription:
    subtopologies: tuple[TopologyDescriptionSubtopology, ...]
    global_stores: tuple[TopologyDescriptionGlobalStore, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedGroup(describe_v0.DescribedGroup):
    __version__: ClassVar[i16] = i16(1)
    topology_description: TopologyDescription | None = field(default=None)
    topology_description_status: i8 = field(metadata={"kafka_type": "int8"}, default=i8(0))
    assignor_name: str | None = field(metadata={"kafka_type": "string"}, default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamsGroupDescribeResponse(describe_v0.StreamsGroupDescribeResponse):
    __version__: ClassVar[i16] = i16(1)
    groups: tuple[DescribedGroup, ...]


newer_schemas.REQUESTS.update({(88, 1): StreamsGroupHeartbeatRequest, (89, 1): StreamsGroupDescribeRequest})
newer_schemas.RESPONSES.update({(88, 1): StreamsGroupHeartbeatResponse, (89, 1): StreamsGroupDescribeResponse})
