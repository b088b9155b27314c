"""The client side of ApiVersions, Metadata and Fetch, sans I/O: request frames out, plain answers in.

A reader that wants the raw record batches of a partition (to decode them into columns, not into one
Python object per record as librdkafka's consumer hands them out) speaks Fetch itself. Requests and
responses are kio's entities (Kafka's own schemas); this module only picks versions, frames and reduces a
response to what a reader needs. The socket loop lives with the reader (`timetravel.fetcher`).

Versions: Fetch v4 is the first with `isolation_level`, the last stable offset and the aborted
transactions (KIP-98); we use the highest non-flexible one both sides know (up to v11), so no topic ids
(v13) are needed. Metadata up to v8, ApiVersions v0 (every broker answers it).
"""

from __future__ import annotations

import datetime
import io
import struct
from dataclasses import dataclass

from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i16, i32, i64

from chronolog.errors import CorruptMessageError

API_VERSIONS, METADATA, FETCH = 18, 3, 1
FETCH_MIN, FETCH_MAX = 4, 11
METADATA_MIN, METADATA_MAX = 1, 8
READ_UNCOMMITTED, READ_COMMITTED = 0, 1  # `IsolationLevel`


@dataclass(frozen=True)
class PartitionFetch:
    """One partition of a Fetch response: what a reader needs to go on."""

    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: tuple[tuple[int, int], ...]   # (producer id, first offset) of aborted transactions
    records: bytes


@dataclass(frozen=True)
class PartitionLeader:
    error_code: int
    leader: int


@dataclass(frozen=True)
class Metadata:
    brokers: dict[int, tuple[str, int]]
    topic_error: int | None            # None: the topic is not in the answer
    partitions: dict[int, PartitionLeader]


def _frame(api_key: int, version: int, correlation_id: int, client_id: str, body) -> bytes:
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    entity_writer(RequestHeader)(out, RequestHeader(request_api_key=i16(api_key), request_api_version=i16(version),
                                                    correlation_id=i32(correlation_id), client_id=client_id))
    entity_writer(type(body))(out, body)
    data = bytearray(out.getbuffer())
    struct.pack_into(">i", data, 0, len(data) - 4)
    return bytes(data)


def read_response(api_key: int, version: int, frame: bytes, correlation_id: int):
    """The response entity of a frame (without its size prefix); response header v0 (non-flexible)."""
    (got,) = struct.unpack_from(">i", frame, 0)
    if got != correlation_id:
        raise CorruptMessageError(f"response correlation id {got}, expected {correlation_id}")
    cls = load_response_schema(api_key, version)
    try:
        body, _used = entity_reader(cls)(frame, 4)
    except Exception as exc:  # kio raises SerialError, ValueError ... on bytes that are not this response
        raise CorruptMessageError(f"cannot decode {cls.__name__} v{version}: {exc}") from None
    return body


def api_versions_request(correlation_id: int, client_id: str) -> bytes:
    return _frame(API_VERSIONS, 0, correlation_id, client_id, load_request_schema(API_VERSIONS, 0)())


def read_api_versions(frame: bytes, correlation_id: int) -> dict[int, tuple[int, int]]:
    body = read_response(API_VERSIONS, 0, frame, correlation_id)
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in body.api_keys}


def pick(versions: dict[int, tuple[int, int]], api_key: int, lo: int, hi: int) -> int | None:
    """The highest version in [lo, hi] that the broker supports, None if none."""
    found = versions.get(api_key)
    if found is None or found[1] < lo or found[0] > hi:
        return None
    return min(hi, found[1])


def metadata_request(version: int, correlation_id: int, client_id: str, topic: str) -> bytes:
    cls = load_request_schema(METADATA, version)
    mod = __import__(cls.__module__, fromlist=["MetadataRequestTopic"])
    fields = {"topics": (mod.MetadataRequestTopic(name=topic),)}
    names = {f for f in cls.__dataclass_fields__}
    if "allow_auto_topic_creation" in names:
        fields["allow_auto_topic_creation"] = False
    for extra in ("include_cluster_authorized_operations", "include_topic_authorized_operations"):
        if extra in names:
            fields[extra] = False
    return _frame(METADATA, version, correlation_id, client_id, cls(**fields))


def read_metadata(version: int, frame: bytes, correlation_id: int, topic: str) -> Metadata:
    body = read_response(METADATA, version, frame, correlation_id)
    brokers = {int(b.node_id): (b.host, int(b.port)) for b in body.brokers}
    for t in body.topics:
        if t.name == topic:
            parts = {int(p.partition_index): PartitionLeader(int(p.error_code.value), int(p.leader_id))
                     for p in t.partitions}
            return Metadata(brokers, int(t.error_code.value), parts)
    return Metadata(brokers, None, {})


def fetch_request(version: int, correlation_id: int, client_id: str, topic: str, partition: int, offset: int,
                  *, max_bytes: int, isolation_level: int, max_wait_ms: int = 0) -> bytes:
    """A one-partition Fetch of `offset` (no fetch session: session id 0, epoch -1, as a plain consumer
    without KIP-227 sessions)."""
    cls = load_request_schema(FETCH, version)
    mod = __import__(cls.__module__, fromlist=["FetchPartition", "FetchTopic"])
    pnames = mod.FetchPartition.__dataclass_fields__
    pfields = {"partition": i32(partition), "fetch_offset": i64(offset), "partition_max_bytes": i32(max_bytes)}
    if "current_leader_epoch" in pnames:
        pfields["current_leader_epoch"] = i32(-1)
    if "log_start_offset" in pnames:
        pfields["log_start_offset"] = i64(-1)
    names = cls.__dataclass_fields__
    fields = {"replica_id": i32(-1), "max_wait": datetime.timedelta(milliseconds=max_wait_ms), "min_bytes": i32(1),
              "max_bytes": i32(max_bytes), "isolation_level": i8(isolation_level),
              "topics": (mod.FetchTopic(topic=topic, partitions=(mod.FetchPartition(**pfields),)),)}
    if "session_id" in names:
        fields.update(session_id=i32(0), session_epoch=i32(-1), forgotten_topics_data=())
    if "rack_id" in names:
        fields["rack_id"] = ""
    return _frame(FETCH, version, correlation_id, client_id, cls(**{k: v for k, v in fields.items() if k in names}))


def read_fetch(version: int, frame: bytes, correlation_id: int, topic: str, partition: int) -> PartitionFetch:
    body = read_response(FETCH, version, frame, correlation_id)
    top = int(body.error_code.value) if hasattr(body, "error_code") else 0
    for t in body.responses:
        if t.topic != topic:
            continue
        for p in t.partitions:
            if int(p.partition_index) == partition:
                aborted = tuple((int(a.producer_id), int(a.first_offset)) for a in (p.aborted_transactions or ()))
                return PartitionFetch(int(p.error_code.value) or top, int(p.high_watermark),
                                      int(p.last_stable_offset), int(getattr(p, "log_start_offset", -1)),
                                      aborted, bytes(p.records or b""))
    raise CorruptMessageError(f"the Fetch response holds no answer for {topic}-{partition}")
