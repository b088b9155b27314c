"""A consumer group described as kafka-consumer-groups.sh describes it, with lag in records and in record
time (what a replay tool is asked: how far behind in hours, not offsets). Shared by `chronolog groups
describe`, `chronolog lag` and the console's group page."""

from __future__ import annotations

from typing import Any

from chronolog.errors import ChronologError
from chronolog.timetravel.client import kafka_error_text


class GroupNotFoundError(ChronologError):
    """A group the broker does not know (Kafka's GROUP_ID_NOT_FOUND, or a DEAD group with nothing committed)."""


def admin_result(future: Any, what: str, timeout: float = 15) -> Any:
    """An admin client future's result, or one `ChronologError` line saying what failed."""
    from confluent_kafka import KafkaException
    try:
        return future.result(timeout)
    except KafkaException as exc:
        raise ChronologError(f"{what}: {kafka_error_text(exc)}") from None


def group_state(value: Any) -> str:
    """A group state as Kafka's tools print it (`ConsumerGroupState.STABLE` -> `STABLE`)."""
    return str(value).split(".")[-1].upper()


def _record_time(source: Any, topic: str, partition: int, offset: int) -> int | None:
    for rec in source.read(topic, partition, offset, offset + 1):
        return rec.timestamp
    return None


def lag_row(source: Any, topic: str, partition: int, committed: int | None) -> dict:
    """One partition's committed offset, log start and end, lag in records and in record time (the newest
    record's time minus the time of the first unread record, the way time-lag exporters estimate it);
    shared by consumer and streams groups, which both commit offsets."""
    low, high = source.watermarks(topic, partition)
    lag = None if committed is None else max(0, high - max(committed, low))
    lag_ms = None
    if lag:
        first_unread = _record_time(source, topic, partition, max(committed, low))
        last = _record_time(source, topic, partition, high - 1)
        if first_unread is not None and last is not None:
            lag_ms = max(0, last - first_unread)
    elif lag == 0:
        lag_ms = 0
    return {"topic": topic, "partition": partition, "committed": committed, "log_start": low, "log_end": high,
            "lag": lag, "lag_ms": lag_ms}


def committed_offsets(source: Any, group: str) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the group's committed offset (OffsetFetch: consumer and streams groups alike)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException

    retrying = getattr(source, "retrying", lambda fn: fn())
    try:
        offsets = retrying(lambda: source.admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], request_timeout=15)[group].result(15))
    except KafkaException as exc:
        raise ChronologError(f"offsets of {group}: {kafka_error_text(exc)}") from None
    return {(tp.topic, tp.partition): tp.offset for tp in offsets.topic_partitions}


def describe_group(source: Any, group: str) -> dict:
    """Members and, per committed partition, offsets, lag in records and lag in record time (the largest
    timestamp seen minus the time of the first unread record, the way time-lag exporters estimate it)."""
    from confluent_kafka import KafkaError, KafkaException

    retrying = getattr(source, "retrying", lambda fn: fn())  # a moving coordinator is asked again, bounded
    try:
        described = retrying(lambda: source.admin.describe_consumer_groups([group], request_timeout=15)[group]
                             .result(15))
    except KafkaException as exc:
        if exc.args and getattr(exc.args[0], "code", lambda: None)() == KafkaError.GROUP_ID_NOT_FOUND:
            raise GroupNotFoundError(f"group {group} does not exist") from None
        raise ChronologError(f"describe group {group}: {kafka_error_text(exc)}") from None
    state = group_state(described.state)
    members = []
    owner: dict[tuple[str, int], str] = {}
    for m in described.members:
        tps = list(m.assignment.topic_partitions) if m.assignment else []
        members.append({"member_id": m.member_id, "client_id": m.client_id, "host": m.host,
                        "partitions": [f"{tp.topic}-{tp.partition}" for tp in tps]})
        for tp in tps:
            owner[(tp.topic, tp.partition)] = m.member_id
    committed_at = committed_offsets(source, group)
    if state == "DEAD" and not committed_at and not owner:
        raise GroupNotFoundError(f"group {group} does not exist")
    rows = []
    for key in owner:  # assigned but never committed: shown with "-", as kafka-consumer-groups.sh does
        committed_at.setdefault(key, -1)
    for (topic, partition), offset in sorted(committed_at.items()):
        row = lag_row(source, topic, partition, offset if offset >= 0 else None)
        rows.append({**row, "member": owner.get((topic, partition))})
    return {"group": group, "state": state, "members": members, "partitions": rows}
