"""Topic administration: CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords, DescribeConfigs,
AlterConfigs, IncrementalAlterConfigs, DescribeLogDirs. Config changes are validated, persisted and applied to live logs
at once (the time configs above all: `message.timestamp.type`, the timestamp bounds, `segment.ms`,
`retention.ms`, `segment.bytes`, `index.interval.bytes`)."""

from __future__ import annotations

import uuid
from typing import Any

from chronolog.config import BROKER_CONFIGS, TOPIC_CONFIGS
from chronolog.errors import ErrorCode, KafkaError, UnknownTopicOrPartitionError
from chronolog.protocol.core import error_of, topic_uuid
from chronolog.protocol.registry import RequestContext, register

TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
SOURCE_DYNAMIC_TOPIC, SOURCE_STATIC_BROKER, SOURCE_DEFAULT = 1, 4, 5
_KAFKA_TYPES = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7}


def _take_mutations(ctx: RequestContext, partitions: int) -> None:
    """KIP-599's strict controller mutation quota (server.quotas): THROTTLING_QUOTA_EXCEEDED for this topic
    once the client's bucket is used up."""
    take = getattr(ctx.state.quotas, "take_mutations", None)
    if take is not None and partitions > 0:
        take(ctx, partitions)


def _denied(ctx: RequestContext, op: str, name: str) -> KafkaError | None:
    if not ctx.allowed(op, "topic", name):
        return KafkaError(f"not authorized to {op} topic {name}", code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    return None


@register(19, 2, 7)
def create_topics(req: Any, ctx: RequestContext) -> dict:
    """`ControllerApis.createTopics` + `ReplicationControlManager.createTopics`. A created topic (and one that
    validate_only would create) is answered with its partitions, replication factor, topic id (v7+; a fresh
    one for validate_only, as Kafka's) and its effective configs sorted by name (v5+): Kafka's Java
    AdminClient streams that list and fails on a null one. Without DESCRIBE_CONFIGS on the topic the configs
    are left out and `topic_config_error_code` says TOPIC_AUTHORIZATION_FAILED. A refused topic keeps the
    schema defaults (-1, -1, no configs)."""
    results = []
    for t in req.topics:
        out = {"name": t.name, "error_code": 0, "error_message": None, "num_partitions": -1,
               "replication_factor": -1, "configs": [], "topic_config_error_code": 0}
        try:
            denied = _denied(ctx, "create", t.name)
            if denied:
                raise denied
            partitions = int(t.num_partitions)
            if partitions == -1:
                partitions = int(ctx.broker_config["num.partitions"])
            if int(t.replication_factor) not in (-1, 1):
                raise KafkaError(f"Replication factor {t.replication_factor} is larger than the 1 available "
                                 "broker", code=ErrorCode.INVALID_REPLICATION_FACTOR)
            configs = {c.name: c.value for c in t.configs}
            if req.validate_only:
                from chronolog.config import TopicConfig
                from chronolog.storage.manager import validate_topic_name
                validate_topic_name(t.name)
                TopicConfig.from_kafka(configs, ctx.broker_config.topic_defaults())  # as create_topic checks
                if ctx.log_manager.has_topic(t.name):
                    raise KafkaError(f"Topic '{t.name}' already exists.", code=ErrorCode.TOPIC_ALREADY_EXISTS)
                ctx.log_manager.check_partition_budget(partitions)
                out["topic_id"] = uuid.uuid4()
            else:
                _take_mutations(ctx, partitions)
                ctx.log_manager.create_topic(t.name, partitions, configs)
                out["topic_id"] = topic_uuid(ctx, t.name)
            if ctx.allowed("describe_configs", "topic", t.name, log_if_denied=False):
                described = _topic_entries(ctx, configs, None, False)
                out.update(num_partitions=partitions, replication_factor=1, configs=[
                    {k: e[k] for k in ("name", "value", "read_only", "config_source", "is_sensitive")}
                    for e in sorted(described, key=lambda e: e["name"])])
            else:
                out["topic_config_error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        except Exception as exc:
            out.update(error_code=error_of(exc), error_message=str(exc))
            out.pop("topic_id", None)
        results.append(out)
    return {"throttle_time": 0, "topics": results}


@register(20, 1, 6)
def delete_topics(req: Any, ctx: RequestContext) -> dict:
    names = list(getattr(req, "topic_names", None) or []) + [t.name for t in (getattr(req, "topics", None) or [])]
    results = []
    for name in names:
        out = {"name": name, "error_code": 0, "error_message": None}
        try:
            if not ctx.broker_config["delete.topic.enable"]:
                raise KafkaError("topic deletion is disabled", code=ErrorCode.TOPIC_DELETION_DISABLED)
            denied = _denied(ctx, "delete", name)
            if denied:
                raise denied
            out["topic_id"] = topic_uuid(ctx, name) if ctx.log_manager.has_topic(name) else None
            _take_mutations(ctx, ctx.log_manager.topics().get(name, 0))
            ctx.log_manager.delete_topic(name)
        except Exception as exc:
            out.update(error_code=error_of(exc), error_message=str(exc))
        results.append(out)
    return {"throttle_time": 0, "responses": results}


@register(37, 0, 3)
def create_partitions(req: Any, ctx: RequestContext) -> dict:
    results = []
    for t in req.topics:
        out = {"name": t.name, "error_code": 0, "error_message": None}
        try:
            denied = _denied(ctx, "alter", t.name)
            if denied:
                raise denied
            if not req.validate_only:
                _take_mutations(ctx, int(t.count) - ctx.log_manager.topics().get(t.name, int(t.count)))
            ctx.log_manager.create_partitions(t.name, int(t.count), validate_only=bool(req.validate_only))
        except Exception as exc:
            out.update(error_code=error_of(exc), error_message=str(exc))
        results.append(out)
    return {"throttle_time": 0, "results": results}


@register(21, 0, 2)
def delete_records(req: Any, ctx: RequestContext) -> dict:
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            out = {"partition_index": p.partition_index, "low_watermark": -1, "error_code": 0}
            try:
                denied = _denied(ctx, "delete", t.name)
                if denied:
                    raise denied
                out["low_watermark"] = ctx.log_manager.get_log(t.name, p.partition_index).delete_records_before(
                    int(p.offset))
            except Exception as exc:
                out["error_code"] = error_of(exc)
            parts.append(out)
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}


def _describe_topic(ctx: RequestContext, name: str, keys: list[str] | None, docs: bool) -> list[dict]:
    return _topic_entries(ctx, ctx.log_manager.topic_overrides(name), keys, docs)


def _topic_entries(ctx: RequestContext, overrides: dict[str, str], keys: list[str] | None,
                   docs: bool) -> list[dict]:
    """DescribeConfigs' entries of a topic with these overrides on the broker's defaults."""
    from chronolog.config import TopicConfig

    broker_defaults = ctx.broker_config.topic_defaults()
    effective = TopicConfig.from_kafka(overrides, broker_defaults, validate_values=False).to_kafka()
    out = []
    for key, defn in TOPIC_CONFIGS.items():
        if keys and key not in keys:
            continue
        source = SOURCE_DYNAMIC_TOPIC if key in overrides else (
            SOURCE_STATIC_BROKER if key in broker_defaults else SOURCE_DEFAULT)
        out.append({"name": key, "value": effective[key], "read_only": False, "config_source": source,
                    "is_default": source == SOURCE_DEFAULT, "is_sensitive": False, "synonyms": [],
                    "config_type": _KAFKA_TYPES.get(defn.type, 0), "documentation": defn.doc if docs else None})
    return out


def _describe_broker(ctx: RequestContext, keys: list[str] | None, docs: bool) -> list[dict]:
    out = []
    for key, defn in BROKER_CONFIGS.items():
        if keys and key not in keys:
            continue
        value = ctx.broker_config[key]
        sensitive = defn.type == "password"  # DescribeConfigs answers a password config's value as null
        text = None if sensitive else str(value).lower() if isinstance(value, bool) else str(value)
        out.append({"name": key, "value": text,
                    "read_only": True, "config_source": SOURCE_STATIC_BROKER, "is_default": False,
                    "is_sensitive": sensitive, "synonyms": [], "config_type": _KAFKA_TYPES.get(defn.type, 0),
                    "documentation": defn.doc if docs else None})
    return out


@register(32, 1, 4)
def describe_configs(req: Any, ctx: RequestContext) -> dict:
    results = []
    docs = bool(getattr(req, "include_documentation", False))
    for r in req.resources:
        keys = list(r.configuration_keys) if r.configuration_keys is not None else None
        out = {"error_code": 0, "error_message": None, "resource_type": r.resource_type,
               "resource_name": r.resource_name, "configs": []}
        try:
            if r.resource_type == TOPIC_RESOURCE:
                if not ctx.allowed("describe_configs", "topic", r.resource_name):
                    raise KafkaError("not authorized", code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                out["configs"] = _describe_topic(ctx, r.resource_name, keys, docs)
            elif r.resource_type == BROKER_RESOURCE:
                if not ctx.allowed("describe_configs", "cluster", "kafka-cluster"):
                    raise KafkaError("not authorized", code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
                out["configs"] = _describe_broker(ctx, keys, docs)
            else:
                raise KafkaError(f"unsupported resource type {r.resource_type}", code=ErrorCode.INVALID_REQUEST)
        except UnknownTopicOrPartitionError as exc:
            out.update(error_code=exc.code, error_message=str(exc))
        except Exception as exc:
            out.update(error_code=error_of(exc), error_message=str(exc))
        results.append(out)
    return {"throttle_time": 0, "results": results}


def _alter(ctx: RequestContext, req: Any, incremental: bool) -> dict:
    responses = []
    for r in req.resources:
        out = {"error_code": 0, "error_message": None, "resource_type": r.resource_type,
               "resource_name": r.resource_name}
        try:
            if r.resource_type == BROKER_RESOURCE and not ctx.allowed("alter_configs", "cluster", "kafka-cluster"):
                raise KafkaError("not authorized", code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
            if r.resource_type != TOPIC_RESOURCE:
                raise KafkaError("only topic configs can be changed at run time", code=ErrorCode.INVALID_REQUEST)
            if not ctx.allowed("alter_configs", "topic", r.resource_name):
                raise KafkaError("not authorized", code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            set_, delete = {}, []
            for c in r.configs:
                op = int(getattr(c, "config_operation", 0)) if incremental else 0
                if op == 0:
                    set_[c.name] = c.value
                elif op == 1:
                    delete.append(c.name)
                else:
                    raise KafkaError("APPEND/SUBTRACT apply to list configs only", code=ErrorCode.INVALID_CONFIG)
            if not req.validate_only:
                ctx.log_manager.alter_topic_config(r.resource_name, set_, delete, replace=not incremental)
            else:
                ctx.log_manager.topic_overrides(r.resource_name)
        except Exception as exc:
            out.update(error_code=error_of(exc), error_message=str(exc))
        responses.append(out)
    return {"throttle_time": 0, "responses": responses}


@register(33, 0, 2)
def alter_configs(req: Any, ctx: RequestContext) -> dict:
    return _alter(ctx, req, incremental=False)


@register(44, 0, 1)
def incremental_alter_configs(req: Any, ctx: RequestContext) -> dict:
    return _alter(ctx, req, incremental=True)


# -- DescribeLogDirs ---------------------------------------------------------------------------------
@register(35, 0, 4)
def describe_log_dirs(req: Any, ctx: RequestContext) -> dict:
    """`KafkaApis.handleDescribeLogDirsRequest` + `ReplicaManager.describeLogDirs`: one log dir (the data
    dir), each hosted partition's size with offsetLag 0 (high watermark = log end offset on a single
    replica) and isFutureKey false; null topics means every partition; partitions we do not host are left
    out, and topics left without partitions too. Without DESCRIBE on the cluster the answer is no log dirs
    and CLUSTER_AUTHORIZATION_FAILED (the top-level error exists from v3; older versions see no dirs)."""
    if not ctx.allowed("describe", "cluster", "kafka-cluster"):
        return {"throttle_time": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "results": []}
    logs = ctx.log_manager.logs()
    if req.topics is None:
        wanted = set(logs)
    else:
        wanted = {(t.topic, int(p)) for t in req.topics for p in t.partitions}
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), plog in sorted(logs.items()):
        if (topic, partition) in wanted:
            by_topic.setdefault(topic, []).append({"partition_index": partition, "partition_size": plog.size,
                                                   "offset_lag": 0, "is_future_key": False})
    data_dir = ctx.log_manager.data_dir.absolute()
    result = {"error_code": 0, "log_dir": str(data_dir),
              "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()]}
    try:
        import shutil  # (with its archive codecs) not by every broker's start

        usage = shutil.disk_usage(data_dir)
        result.update(total_bytes=usage.total, usable_bytes=usage.free)
    except OSError:  # Kafka answers KAFKA_STORAGE_ERROR for a dir it cannot read
        result = {"error_code": ErrorCode.KAFKA_STORAGE_ERROR, "log_dir": str(data_dir), "topics": []}
    return {"throttle_time": 0, "error_code": 0, "results": [result]}
