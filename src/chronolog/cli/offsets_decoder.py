"""`dump-log --offsets-decoder`: `__consumer_offsets` records as kafka-dump-log.sh prints them
(DumpLogSegments.OffsetsMessageParser).

A key prints as `{"type":"<key version>","data":{...}}` and a value as `{"version":"<value version>","data":
{...}}`, the data in the schema's field order with only the fields of that version (Kafka's generated
JsonConverters), bytes as base64; a tombstone's payload is `<DELETE>`. For a group of the consumer
protocol, each member's subscription and assignment are decoded (ConsumerProtocolSubscription /
ConsumerProtocolAssignment) as Kafka's parser does, and kept as base64 when they do not parse. A KIP-848
consumer group's records (key types 3-8) print through their schemas' JSON converters too: `groupId` /
`memberId` keys, topic ids as Kafka's `Uuid.toString` (url-safe base64), a classic member's tagged
`classicMemberMetadata` only when present. Record types this broker does not write (share groups, key
types 9 and up) print as Kafka prints a type it cannot decode.
"""

from __future__ import annotations

import base64
import json
import struct
import uuid

from chronolog.errors import KafkaError
from chronolog.records import group_records as gr
from chronolog.records.consumer_protocol import TopicPartitions, read_assignment, read_subscription
from chronolog.records.group_records import (
    GroupMetadataKey,
    OffsetCommitKey,
    key_version,
    read_group_metadata_value,
    read_key,
    read_offset_commit_value,
    value_version,
)

DELETE = "<DELETE>"


def _json(obj: dict) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def parse(key: bytes | None, value: bytes | None, offset: int) -> tuple[str, str | None]:
    """(key text, payload text or None) of one record, as OffsetsMessageParser.parse returns them."""
    if key is None:
        return (f"Error at offset {offset}, skipping. Failed to decode message at offset {offset} using offset "
                "topic decoder (message had a missing key)", None)
    try:
        version = key_version(key)
        parsed = read_key(key)
        if parsed is None:
            return f"Unknown record type {version} at offset {offset}, skipping.", None
        if isinstance(parsed, gr.ConsumerGroupKey | gr.ConsumerGroupMemberKey):
            data = {"groupId": parsed.group}
            if isinstance(parsed, gr.ConsumerGroupMemberKey):
                data["memberId"] = parsed.member_id
            key_text = _json({"type": str(version), "data": data})
            if value is None:
                return key_text, DELETE
            return key_text, _json({"version": str(value_version(value)), "data": _consumer_json(version, value)})
        if isinstance(parsed, OffsetCommitKey):
            key_text = _json({"type": str(version), "data": {"group": parsed.group, "topic": parsed.topic,
                                                             "partition": parsed.partition}})
        else:
            assert isinstance(parsed, GroupMetadataKey)
            key_text = _json({"type": str(version), "data": {"group": parsed.group}})
        if value is None:
            return key_text, DELETE
        vv = value_version(value)
        if isinstance(parsed, OffsetCommitKey):
            data = _offset_commit_json(value, vv)
        else:
            data = _group_metadata_json(value, vv)
        return key_text, _json({"version": str(vv), "data": data})
    except (KafkaError, struct.error, UnicodeDecodeError) as exc:
        return f"Error at offset {offset}, skipping. {exc}", None


def _offset_commit_json(value: bytes, version: int) -> dict:
    v = read_offset_commit_value(value)
    out: dict = {"offset": v.offset}
    if version >= 3:
        out["leaderEpoch"] = v.leader_epoch
    out["metadata"] = v.metadata
    out["commitTimestamp"] = v.commit_timestamp
    if version == 1:
        out["expireTimestamp"] = v.expire_timestamp
    return out


def _group_metadata_json(value: bytes, version: int) -> dict:
    v = read_group_metadata_value(value)
    out: dict = {"protocolType": v.protocol_type, "generation": v.generation, "protocol": v.protocol,
                 "leader": v.leader}
    if version >= 2:
        out["currentStateTimestamp"] = v.current_state_timestamp
    members = []
    consumer = v.protocol_type == "consumer"
    for m in v.members:
        member: dict = {"memberId": m.member_id}
        if version >= 3:
            member["groupInstanceId"] = m.group_instance_id
        member["clientId"] = m.client_id
        member["clientHost"] = m.client_host
        if version >= 1:
            member["rebalanceTimeout"] = m.rebalance_timeout
        member["sessionTimeout"] = m.session_timeout
        member["subscription"] = _subscription(m.subscription) if consumer else _b64(m.subscription)
        member["assignment"] = _assignment(m.assignment) if consumer else _b64(m.assignment)
        members.append(member)
    out["members"] = members
    return out


def _uuid(u: uuid.UUID) -> str:
    """Kafka's Uuid.toString: url-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def _topic_partitions(tps: gr.TopicPartitions) -> list[dict]:
    return [{"topicId": _uuid(tid), "partitions": list(ps)} for tid, ps in tps]


def _consumer_json(kind: int, value: bytes) -> dict:
    """The value of a KIP-848 record (key types 3-8), as its generated JsonConverter writes it."""
    if kind == gr.CONSUMER_GROUP_METADATA:
        return {"epoch": gr.read_epoch_value(value)}
    if kind == gr.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
        return {"assignmentEpoch": gr.read_epoch_value(value)}
    if kind == gr.CONSUMER_GROUP_PARTITION_METADATA:
        return {"topics": [{"topicId": _uuid(t.topic_id), "topicName": t.name, "numPartitions": t.num_partitions,
                            "partitionMetadata": [{"partition": p, "racks": list(r)} for p, r in t.partition_racks]}
                           for t in gr.read_partition_metadata_value(value)]}
    if kind == gr.CONSUMER_GROUP_MEMBER_METADATA:
        m = gr.read_member_metadata_value(value)
        out: dict = {"instanceId": m.instance_id, "rackId": m.rack_id, "clientId": m.client_id,
                     "clientHost": m.client_host, "subscribedTopicNames": list(m.subscribed_topic_names),
                     "subscribedTopicRegex": m.subscribed_topic_regex, "rebalanceTimeoutMs": m.rebalance_timeout_ms,
                     "serverAssignor": m.server_assignor}
        if m.classic is not None:
            out["classicMemberMetadata"] = {
                "sessionTimeoutMs": m.classic.session_timeout_ms,
                "supportedProtocols": [{"name": n, "metadata": _b64(b)} for n, b in m.classic.protocols]}
        return out
    if kind == gr.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
        return {"topicPartitions": _topic_partitions(gr.read_target_assignment_member_value(value))}
    c = gr.read_current_assignment_value(value)
    return {"memberEpoch": c.member_epoch, "previousMemberEpoch": c.previous_member_epoch, "state": c.state,
            "assignedPartitions": _topic_partitions(c.assigned),
            "partitionsPendingRevocation": _topic_partitions(c.pending_revocation)}


def _partitions_json(tps: TopicPartitions) -> list[dict]:
    return [{"topic": topic, "partitions": list(parts)} for topic, parts in tps]


def _subscription(data: bytes) -> object:
    """The member's ConsumerProtocolSubscription with the fields of its version, or the original bytes
    (base64) when it does not parse."""
    try:
        sub = read_subscription(data)
    except ValueError:
        return _b64(data)
    out: dict = {"topics": list(sub.topics), "userData": _b64(sub.user_data)}
    if sub.version >= 1:
        out["ownedPartitions"] = _partitions_json(sub.owned_partitions)
    if sub.version >= 2:
        out["generationId"] = sub.generation_id
    if sub.version >= 3:
        out["rackId"] = sub.rack_id
    return out


def _assignment(data: bytes) -> object:
    """The member's ConsumerProtocolAssignment, or the original bytes (base64) when it does not parse."""
    try:
        assignment = read_assignment(data)
    except ValueError:
        return _b64(data)
    return {"assignedPartitions": _partitions_json(assignment.partitions), "userData": _b64(assignment.user_data)}
