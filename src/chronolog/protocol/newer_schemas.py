"""Message versions Kafka 4.4 has and kio 0.6.5 (the newest release) does not, written as kio generates them
from Kafka's JSON schemas (clients/src/main/resources/common/message/*.json) so kio's readers and writers
serve them: TxnOffsetCommit v6 (topics by id, KIP-1319), DeleteGroups v3 (an error message per group) and
ApiVersions v5 (the cluster and node the client means to reach, KIP-1242).
`codec.request_schema`/`response_schema` look here for a version kio has no schema for. Drop an entry once kio has it.
(No `from __future__ import annotations`: kio reads the fields' types, which must not be strings.)"""

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.api_versions.v4 import request as api_versions_v4_request
from kio.schema.api_versions.v4 import response as api_versions_v4_response
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.schema.types import GroupId, ProducerId, TransactionalId
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32, i32Timedelta, i64


def kio_entity(api_key: int, version: int, header: type, kind: EntityType = EntityType.nested) -> Callable[[type], type]:
    """The five class attributes kio generates on every entity (`kio.static.protocol.Entity`): set on the class
    before `@dataclass` makes it (they are not fields). `header`: the request or response header schema."""
    def entity(cls: type) -> type:
        cls.__type__ = kind
        cls.__version__ = i16(version)
        cls.__flexible__ = True
        cls.__api_key__ = i16(api_key)
        cls.__header_schema__ = header
        return cls
    return entity


# -- TxnOffsetCommit v6 (TxnOffsetCommitRequest.json / TxnOffsetCommitResponse.json) --------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
@kio_entity(28, 6, RequestHeader)
class TxnOffsetCommitRequestPartition:
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    committed_offset: i64 = field(metadata={"kafka_type": "int64"})
    committed_leader_epoch: i32 = field(metadata={"kafka_type": "int32"}, default=i32(-1))
    committed_metadata: str | None = field(metadata={"kafka_type": "string"})


@dataclass(frozen=True, slots=True, kw_only=True)
@kio_entity(28, 6, RequestHeader)
class TxnOffsetCommitRequestTopic:
    topic_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid"})
    partitions: tuple[TxnOffsetCommitRequestPartition, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
@kio_entity(28, 6, RequestHeader, EntityType.request)
class TxnOffsetCommitRequest:
    transactional_id: TransactionalId = field(metadata={"kafka_type": "string"})
    group_id: GroupId = field(metadata={"kafka_type": "string"})
    producer_id: ProducerId = field(metadata={"kafka_type": "int64"})
    producer_epoch: i16 = field(metadata={"kafka_type": "int16"})
    generation_id: i32 = field(metadata={"kafka_type": "int32"}, default=i32(-1))  # GenerationIdOrMemberEpoch
    member_id: str = field(metadata={"kafka_type": "string"}, default="")
    group_instance_id: str | None = field(metadata={"kafka_type": "string"}, default=None)
    topics: tuple[TxnOffsetCommitRequestTopic, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
@kio_entity(28, 6, ResponseHeader)
class TxnOffsetCommitResponsePartition:
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})


@dataclass(frozen=True, slots=True, kw_only=True)
@kio_entity(28, 6, ResponseHeader)
class TxnOffsetCommitResponseTopic:
    topic_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid"})
    partitions: tuple[TxnOffsetCommitResponsePartition, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
@kio_entity(28, 6, ResponseHeader, EntityType.response)
class TxnOffsetCommitResponse:
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    topics: tuple[TxnOffsetCommitResponseTopic, ...]


# -- DeleteGroups v3 (DeleteGroupsRequest.json / DeleteGroupsResponse.json) -----------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
@kio_entity(42, 3, RequestHeader, EntityType.request)
class DeleteGroupsRequest:
    groups_names: tuple[GroupId, ...] = field(metadata={"kafka_type": "string"}, default=())


@dataclass(frozen=True, slots=True, kw_only=True)
@kio_entity(42, 3, ResponseHeader)
class DeletableGroupResult:
    group_id: GroupId = field(metadata={"kafka_type": "string"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
@kio_entity(42, 3, ResponseHeader, EntityType.response)
class DeleteGroupsResponse:
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    results: tuple[DeletableGroupResult, ...]


# -- ApiVersions v5 (ApiVersionsRequest.json / ApiVersionsResponse.json) ----------------------------------------
# The request adds ClusterId and NodeId; the response is v4's.
@dataclass(frozen=True, slots=True, kw_only=True)
class ApiVersionsRequest(api_versions_v4_request.ApiVersionsRequest):
    __version__: ClassVar[i16] = i16(5)
    cluster_id: str | None = field(metadata={"kafka_type": "string"}, default=None)
    node_id: i32 = field(metadata={"kafka_type": "int32"}, default=i32(-1))


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiVersionsResponse(api_versions_v4_response.ApiVersionsResponse):
    __version__: ClassVar[i16] = i16(5)


REQUESTS: dict[tuple[int, int], type] = {(28, 6): TxnOffsetCommitRequest, (42, 3): DeleteGroupsRequest,
                                         (18, 5): ApiVersionsRequest}
RESPONSES: dict[tuple[int, int], type] = {(28, 6): TxnOffsetCommitResponse, (42, 3): DeleteGroupsResponse,
                                          (18, 5): ApiVersionsResponse}
