"""Topic administration: CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords, DescribeConfigs,
AlterConfigs, IncrementalAlterConfigs, DescribeLogDirs, and what a one-node cluster answers to ElectLeaders
and ListPartitionReassignments; each as Kafka 4.4's controller checks and answers it (tests/differential).
Config changes are validated, persisted and applied to live logs at once (the time configs above all:
`message.timestamp.type`, the timestamp bounds, `segment.ms`, `retention.ms`, `segment.bytes`,
`index.interval.bytes`). The delegation token APIs are in protocol.delegation_tokens."""

from __future__ import annotations

import re
import uuid
from typing import Any

from chronolog.config import (
    REPLICATION_FACTOR_INVALID,
    TOPIC_CONFIGS,
    TopicConfig,
    check_replication_factor,
    validate_remote_storage,
)
from chronolog.errors import (
    ErrorCode,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicExceptionError,
    KafkaError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from chronolog.protocol import broker_configs, group_configs
from chronolog.protocol.config_entries import ConfigView, broker_entries, created_topic_configs, topic_entries
from chronolog.protocol.core import error_of, topic_uuid
from chronolog.protocol.registry import RequestContext, register

TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4


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
    """`ControllerApis.createTopics` + `ReplicationControlManager.createTopics`, checks in Kafka's order: a
    name twice in the request, authorization, the name (`Topic.validate`, a collision of '.' and '_' with an
    existing topic), existence, the configs, replicas and partitions, the mutation quota.

    A created topic (and one that validate_only would create) is answered with its partitions, replication
    factor, topic id (v7+; a fresh one for validate_only, as Kafka's) and its effective configs sorted by
    name (v5+): Kafka's Java AdminClient streams that list and fails on a null one. Without DESCRIBE_CONFIGS
    on the topic the configs are left out and `topic_config_error_code` says TOPIC_AUTHORIZATION_FAILED. A
    refused topic keeps the schema defaults (-1, -1, no configs)."""
    names = [t.name for t in req.topics]
    duplicates = {n for n in names if names.count(n) > 1}
    existing = set(ctx.log_manager.topics())
    collisions: dict[str, str] = {}
    for name in sorted(existing):
        if "." in name or "_" in name:
            collisions.setdefault(name.replace(".", "_"), name)
    view = ConfigView(ctx.broker_config)
    results, tail, plans = [], [], []
    effective = [t for t in req.topics if t.name not in duplicates and t.name != "__cluster_metadata"]
    # ControllerApis: the partitions asked for (a manual assignment's count, else num_partitions) above one
    # batch of records fail the request as a whole, before any topic is looked at.
    if sum(len(t.assignments) if t.assignments else int(t.num_partitions) for t in effective) > \
            MAX_RECORDS_PER_USER_OP:
        return _all_refused(req, "Excessively large number of partitions per request.")
    for t in req.topics:
        if t.name in duplicates:
            if not any(r["name"] == t.name for r in tail):
                tail.append(_refused(t.name, ErrorCode.INVALID_REQUEST, "Duplicate topic name."))
            continue
        if t.name == "__cluster_metadata":
            tail.append(_refused(t.name, ErrorCode.INVALID_REQUEST,
                                 "Creation of internal topic __cluster_metadata is prohibited."))
            continue
        if not ctx.allowed("create", "topic", t.name):
            tail.append(_refused(t.name, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed."))
            continue
        out = {"name": t.name, "error_code": 0, "error_message": None, "num_partitions": -1,
               "replication_factor": -1, "configs": [], "topic_config_error_code": 0}
        try:
            plans.append((t, out, *_check_new_topic(ctx, t, existing, collisions)))
        except Exception as exc:
            out.update(error_code=error_of(exc), error_message=str(exc))
        results.append(out)
    # The controller writes a topic, its configs and its partitions as records of one batch, at most
    # MAX_RECORDS_PER_USER_OP: a request asking for more fails as a whole (BoundedListTooLongException).
    if sum(1 + len(configs) + partitions for _, _, partitions, configs in plans) > MAX_RECORDS_PER_USER_OP:
        return _all_refused(req, "Unable to perform excessively large batch operation.")
    for t, out, partitions, configs in plans:
        try:
            if req.validate_only:
                ctx.log_manager.check_partition_budget(partitions)
                out["topic_id"] = uuid.uuid4()
            else:
                _take_mutations(ctx, partitions)
                ctx.log_manager.create_topic(t.name, partitions, configs)
                out["topic_id"] = topic_uuid(ctx, t.name)
            if ctx.allowed("describe_configs", "topic", t.name, log_if_denied=False):
                out.update(num_partitions=partitions, replication_factor=1,
                           configs=created_topic_configs(view, configs))
            else:
                out["topic_config_error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        except Exception as exc:
            out.update(error_code=error_of(exc), error_message=str(exc))
            out.pop("topic_id", None)
    return {"throttle_time": 0, "topics": results + tail}


MAX_RECORDS_PER_USER_OP = 10000  # QuorumController


def _all_refused(req: Any, message: str) -> dict:
    """A CreateTopics the controller fails as a whole: every topic answered POLICY_VIOLATION."""
    return {"throttle_time": 0, "topics": [_refused(t.name, ErrorCode.POLICY_VIOLATION, message)
                                           for t in req.topics]}


def _refused(name: str, code: int, message: str) -> dict:
    return {"name": name, "error_code": code, "error_message": message, "num_partitions": -1,
            "replication_factor": -1, "configs": [], "topic_config_error_code": 0}


def validate_topic_name(name: str) -> None:
    """Kafka 4.4's `Topic.validate`, with its messages."""
    if not name:
        raise InvalidTopicExceptionError("Topic name is invalid: the empty string is not allowed")
    if name in (".", ".."):
        raise InvalidTopicExceptionError(f"Topic name is invalid: '{name}' is not allowed")
    if len(name) > 249:
        raise InvalidTopicExceptionError(f"Topic name is invalid: the length of '{name}' is longer than the max "
                                         "allowed length 249")
    if not _LEGAL_TOPIC.fullmatch(name):
        raise InvalidTopicExceptionError(f"Topic name is invalid: '{name}' contains one or more characters other "
                                         "than ASCII alphanumerics, '.', '_' and '-'")


_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")


def _check_new_topic(ctx: RequestContext, t: Any, existing: set[str],
                     collisions: dict[str, str]) -> tuple[int, dict[str, str]]:
    """Everything `ReplicationControlManager.createTopics` checks before it creates: the topic's partition
    count and configs."""
    validate_topic_name(t.name)
    if t.name in existing:
        raise TopicAlreadyExistsError(f"Topic '{t.name}' already exists.")
    if ("." in t.name or "_" in t.name) and t.name.replace(".", "_") in collisions:
        raise InvalidTopicExceptionError(f"Topic '{t.name}' collides with existing topic: "
                                         f"{collisions[t.name.replace('.', '_')]}")
    configs = {}
    for c in t.configs:
        if c.value is None:
            raise InvalidConfigError(f"Null value not supported for topic configs: {c.name}")
        configs[c.name] = c.value
    validate_remote_storage(TopicConfig.from_kafka(configs, ctx.broker_config.topic_defaults()),
                            system_enabled=ctx.broker_config["remote.log.storage.system.enable"])
    if t.assignments:
        if int(t.replication_factor) != -1:
            raise InvalidRequestError("A manual partition assignment was specified, but replication factor was "
                                      "not set to -1.")
        if int(t.num_partitions) != -1:
            raise InvalidRequestError("A manual partition assignment was specified, but numPartitions was not "
                                      "set to -1.")
        seen: set[int] = set()
        rf = None
        for a in t.assignments:
            if a.partition_index in seen:
                raise InvalidReplicaAssignmentError(f"Found multiple manual partition assignments for partition "
                                                    f"{a.partition_index}")
            seen.add(a.partition_index)
            _check_replicas([int(b) for b in a.broker_ids], ctx.state.node_id, rf)
            rf = len(a.broker_ids)
        if seen != set(range(len(seen))):
            raise InvalidReplicaAssignmentError("partitions should be a consecutive 0-based integer sequence")
        return len(seen), configs
    rf, partitions = int(t.replication_factor), int(t.num_partitions)
    if rf < -1 or rf == 0:  # before the partition count, as the controller checks them
        raise InvalidReplicationFactorError(REPLICATION_FACTOR_INVALID)
    if partitions < -1 or partitions == 0:
        raise InvalidPartitionsError("Number of partitions was set to an invalid non-positive value.")
    check_replication_factor(rf, int(ctx.broker_config["default.replication.factor"]))
    return (int(ctx.broker_config["num.partitions"]) if partitions == -1 else partitions), configs


def _check_replicas(replicas: list[int], node_id: int, replication_factor: int | None = None) -> None:
    """`ReplicationControlManager.validateManualPartitionAssignment` on a one-node cluster: the replicas in
    broker id order, each registered and once, as many as the topic's other partitions have."""
    if not replicas:
        raise InvalidReplicaAssignmentError("The manual partition assignment includes an empty replica list.")
    previous = None
    for broker in sorted(replicas):
        if broker != node_id:
            raise InvalidReplicaAssignmentError(f"The manual partition assignment includes broker {broker}, but "
                                                "no such broker is registered.")
        if broker == previous:
            raise InvalidReplicaAssignmentError(f"The manual partition assignment includes the broker {broker} "
                                                "more than once.")
        previous = broker
    if replication_factor is not None and len(replicas) != replication_factor:
        raise InvalidReplicaAssignmentError(f"The manual partition assignment includes a partition with "
                                            f"{len(replicas)} replica(s), but this is not consistent with previous "
                                            f"partitions, which have {replication_factor} replica(s).")


@register(20, 1, 6)
def delete_topics(req: Any, ctx: RequestContext) -> dict:
    """`ControllerApis.deleteTopics`: topics by name (v0-5, and v6 without an id) or by id (v6); names and ids
    given twice, both or neither are refused (INVALID_REQUEST), unknown ones answered with Kafka's default
    messages, refused ones with TOPIC_AUTHORIZATION_FAILED (without the name of a topic the principal may
    not describe). Kafka shuffles the answers so their order tells nothing; here they come in request
    order, errors first."""
    if not ctx.broker_config["delete.topic.enable"]:
        code = ErrorCode.INVALID_REQUEST if ctx.api_version < 3 else ErrorCode.TOPIC_DELETION_DISABLED
        names = list(getattr(req, "topic_names", None) or []) + [t.name for t in (getattr(req, "topics", None) or [])]
        return {"throttle_time": 0, "responses": [
            {"name": n, "error_code": code, "error_message": "Topic deletion is disabled."} for n in names]}
    errors: list[dict] = []

    def answer(name: str | None, topic_id: uuid.UUID | None, code: int = 0, message: str | None = None) -> None:
        errors.append({"name": name, "topic_id": topic_id or _ZERO, "error_code": code, "error_message": message})

    given_names = list(getattr(req, "topic_names", None) or [])
    given_ids = []
    for t in getattr(req, "topics", None) or []:
        tid = t.topic_id if t.topic_id not in (None, _ZERO) else None
        if t.name is None and tid is None:
            answer(None, None, ErrorCode.INVALID_REQUEST, "Neither topic name nor id were specified.")
        elif t.name is None:
            given_ids.append(tid)
        elif tid is None:
            given_names.append(t.name)
        else:
            answer(t.name, tid, ErrorCode.INVALID_REQUEST, "You may not specify both topic name and topic id.")
    for name in dict.fromkeys(n for n in given_names if given_names.count(n) > 1):
        answer(name, None, ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
    for tid in dict.fromkeys(i for i in given_ids if given_ids.count(i) > 1):
        answer(None, tid, ErrorCode.INVALID_REQUEST, "Duplicate topic id.")
    to_delete: dict[uuid.UUID, str] = {}
    for tid in (i for i in given_ids if given_ids.count(i) == 1):
        name = ctx.state.topic_name(tid)
        if name is None:
            answer(None, tid, ErrorCode.UNKNOWN_TOPIC_ID, "This server does not host this topic ID.")
        elif not ctx.allowed("delete", "topic", name):
            describable = ctx.allowed("describe", "topic", name, log_if_denied=False)
            answer(name if describable else None, tid, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                   "Topic authorization failed.")
        else:
            to_delete[tid] = name
    for name in (n for n in given_names if given_names.count(n) == 1):
        if not ctx.allowed("describe", "topic", name, log_if_denied=False) or \
                (ctx.log_manager.has_topic(name) and not ctx.allowed("delete", "topic", name)):
            answer(name, None, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.")
        elif not ctx.log_manager.has_topic(name):
            answer(name, None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this "
                   "topic-partition.")
        else:
            tid = topic_uuid(ctx, name)
            if tid in to_delete or tid in given_ids:
                to_delete.pop(tid, None)
                answer(name, tid, ErrorCode.INVALID_REQUEST, "The provided topic name maps to an ID that was "
                       "already supplied.")
            else:
                to_delete[tid] = name
    done = []
    for tid, name in to_delete.items():
        out = {"name": name, "topic_id": tid, "error_code": 0, "error_message": None}
        try:
            _take_mutations(ctx, ctx.log_manager.topics().get(name, 0))
            ctx.log_manager.delete_topic(name)
        except Exception as exc:
            out.update(error_code=error_of(exc), error_message=str(exc))
        done.append(out)
    return {"throttle_time": 0, "responses": errors + done}


_ZERO = uuid.UUID(int=0)


@register(37, 0, 3)
def create_partitions(req: Any, ctx: RequestContext) -> dict:
    """`ControllerApis.createPartitions` + `ReplicationControlManager.createPartitions`: a name given twice
    is answered once (INVALID_REQUEST), then the refused ones, then the rest, with Kafka's checks and
    messages. An unknown topic is answered without a message, as Kafka's."""
    names = [t.name for t in req.topics]
    duplicates = list(dict.fromkeys(n for n in names if names.count(n) > 1))
    head = [{"name": n, "error_code": ErrorCode.INVALID_REQUEST, "error_message": "Duplicate topic name."}
            for n in duplicates]
    grown = sum(max(0, int(t.count) - ctx.log_manager.topics().get(t.name, int(t.count))) for t in req.topics
                if t.name not in duplicates)
    if grown > MAX_RECORDS_PER_USER_OP:  # as CreateTopics: one batch of partition records at most
        return {"throttle_time": 0, "results": [
            {"name": t.name, "error_code": ErrorCode.POLICY_VIOLATION,
             "error_message": "Unable to perform excessively large batch operation."} for t in req.topics]}
    refused, results = [], []
    for t in req.topics:
        if t.name in duplicates:
            continue
        out = {"name": t.name, "error_code": 0, "error_message": None}
        if not ctx.allowed("alter", "topic", t.name):
            refused.append({**out, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED})
            continue
        try:
            current = ctx.log_manager.topics().get(t.name)
            if current is None:
                raise _Unexplained(code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            count = int(t.count)
            if count == current:
                raise InvalidPartitionsError(f"Topic already has {current} partition(s).")
            if count < current:
                raise InvalidPartitionsError(f"The topic {t.name} currently has {current} partition(s); {count} "
                                             "would not be an increase.")
            if t.assignments is not None:
                if len(t.assignments) != count - current:
                    raise InvalidReplicaAssignmentError(f"Attempted to add {count - current} additional "
                                                        f"partition(s), but only {len(t.assignments)} assignment(s) "
                                                        "were specified.")
                for a in t.assignments:
                    _check_replicas([int(b) for b in a.broker_ids], ctx.state.node_id, 1)
            if not req.validate_only:
                _take_mutations(ctx, count - current)
            ctx.log_manager.create_partitions(t.name, count, validate_only=bool(req.validate_only))
        except Exception as exc:
            out.update(error_code=error_of(exc), error_message=None if isinstance(exc, _Unexplained) else str(exc))
        results.append(out)
    return {"throttle_time": 0, "results": head + refused + results}


@register(21, 0, 2)
def delete_records(req: Any, ctx: RequestContext) -> dict:
    """`KafkaApis.handleDeleteRecordsRequest`: one answer per partition (a partition asked twice keeps the
    last offset asked), UNKNOWN_TOPIC_OR_PARTITION for one the broker does not have."""
    asked: dict[str, dict[int, int]] = {}
    for t in req.topics:
        parts = asked.setdefault(t.name, {})
        for p in t.partitions:
            parts[int(p.partition_index)] = int(p.offset)
    topics = []
    for name, parts in asked.items():
        answers = []
        for partition, offset in parts.items():
            out = {"partition_index": partition, "low_watermark": -1, "error_code": 0}
            try:
                denied = _denied(ctx, "delete", name)
                if denied:
                    raise denied
                if not 0 <= partition < ctx.log_manager.topics().get(name, 0):
                    raise _Unexplained(code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                out["low_watermark"] = ctx.log_manager.get_log(name, partition).delete_records_before(offset)
            except Exception as exc:
                out["error_code"] = error_of(exc)
            answers.append(out)
        topics.append({"name": name, "partitions": answers})
    return {"throttle_time": 0, "topics": topics}


@register(32, 1, 4)
def describe_configs(req: Any, ctx: RequestContext) -> dict:
    """`ConfigHelper.handleDescribeConfigsRequest`: authorized resources first, then the refused ones; no
    keys (null or empty) means every config, unknown keys are left out."""
    if any(r.resource_type not in _DESCRIBABLE for r in req.resources):
        return {"throttle_time": 0, "results": [
            {"error_code": ErrorCode.INVALID_REQUEST, "error_message": INVALID_REQUEST_MESSAGE,
             "resource_type": r.resource_type, "resource_name": r.resource_name, "configs": []}
            for r in req.resources]}
    results, refused = [], []
    synonyms = bool(getattr(req, "include_synonyms", False))
    docs = bool(getattr(req, "include_documentation", False))
    view = ConfigView(ctx.broker_config)
    for r in req.resources:
        keys = list(r.configuration_keys) if r.configuration_keys else None
        out = {"error_code": 0, "error_message": "", "resource_type": r.resource_type,
               "resource_name": r.resource_name, "configs": []}
        if r.resource_type == TOPIC_RESOURCE and not ctx.allowed("describe_configs", "topic", r.resource_name):
            out.update(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message="Topic authorization failed.")
            refused.append(out)
            continue
        if r.resource_type == BROKER_RESOURCE and not ctx.allowed("describe_configs", "cluster", "kafka-cluster"):
            out.update(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                       error_message="Cluster authorization failed.")
            refused.append(out)
            continue
        try:
            if r.resource_type == TOPIC_RESOURCE:
                validate_topic_name(r.resource_name)
                if not ctx.log_manager.has_topic(r.resource_name):
                    out["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    out["configs"] = topic_entries(view, ctx.log_manager.topic_overrides(r.resource_name), keys,
                                                   synonyms, docs)
            elif r.resource_type == BROKER_RESOURCE:
                cluster_default = not r.resource_name
                if not cluster_default:
                    _broker_id(ctx, r.resource_name)
                out["configs"] = broker_entries(view, keys, synonyms, docs, cluster_default)
            elif r.resource_type == group_configs.GROUP_RESOURCE:  # KIP-848 and KIP-932 group configs
                out["configs"] = group_configs.describe(ctx, r.resource_name, keys, synonyms, docs)
            elif r.resource_type in _UNSERVED:
                raise InvalidRequestError(f"chronolog has no {_UNSERVED[r.resource_type]} configs")
        except Exception as exc:
            out.update(error_code=error_of(exc), error_message=str(exc), configs=[])
        results.append(out)
    return {"throttle_time": 0, "results": results + refused}


# Resource types Kafka describes and chronolog does not (docs/differences.md).
_UNSERVED = {8: "broker logger (log4j)", 16: "client metrics"}
# ConfigHelper's partition of the resources by authorization throws for any other type: the whole request
# is answered INVALID_REQUEST, each resource with the error's default message.
_DESCRIBABLE = frozenset({TOPIC_RESOURCE, BROKER_RESOURCE, group_configs.GROUP_RESOURCE, *_UNSERVED})
INVALID_REQUEST_MESSAGE = ("This most likely occurs because of a request being malformed by the client library or "
                           "the message was sent to an incompatible broker. See the broker logs for more details.")


def _broker_id(ctx: RequestContext, name: str, describing: bool = True) -> int:
    """`ConfigHelper.resourceNameToBrokerId` (describing) or `ConfigAdminManager`'s check (altering), and this
    broker's id only."""
    try:
        broker = int(name)
    except ValueError:
        raise InvalidRequestError(f"Broker id must be an integer, but it is: {name}") from None
    if broker != ctx.state.node_id:
        raise InvalidRequestError(f"Unexpected broker id, expected {ctx.state.node_id}"
                                  f"{' or empty string' if describing else ''}, but received {name}")
    return broker


class _Unexplained(KafkaError):
    """An error Kafka answers without a message."""


SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_OPS = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}


def _alter(ctx: RequestContext, req: Any, incremental: bool) -> dict:
    """IncrementalAlterConfigs (`ConfigurationControlManager.incrementalAlterConfigResource`) and AlterConfigs
    (`legacyAlterConfigResource`: the given configs replace every override). APPEND and SUBTRACT work on the
    topic's override, or on the config's default when it has none, as Kafka's `getParts`. The whole new set
    of overrides is validated before anything is stored; validate_only stores nothing. Broker configs are
    not changed at run time here (docs/differences.md): they are refused in one line.

    As Kafka, the broker's checks come first (`ConfigAdminManager.preprocess`: duplicates, null values, the
    resource type, authorization), then the controller's; an operation Kafka does not know fails every
    resource that reached the controller (UNKNOWN_SERVER_ERROR, no message)."""
    seen = [(r.resource_type, r.resource_name) for r in req.resources]
    outs, passed = [], []
    for r in req.resources:
        out = {"error_code": 0, "error_message": None, "resource_type": r.resource_type,
               "resource_name": r.resource_name}
        outs.append(out)
        try:
            _preprocess(ctx, r, incremental, seen)
            passed.append((r, out))
        except Exception as exc:
            out.update(error_code=error_of(exc), error_message=str(exc))
    if incremental and any(_reaches_unknown_op(r) for r, _ in passed):
        for _, out in passed:  # OpType.forId fails while the controller reads the request
            out.update(error_code=ErrorCode.UNKNOWN_SERVER_ERROR, error_message=None)
        return {"throttle_time": 0, "responses": outs}
    for r, out in passed:
        try:
            if r.resource_type == group_configs.GROUP_RESOURCE:
                group_configs.alter(ctx, r, incremental, bool(req.validate_only),
                                    _controller_order(r.configs) if incremental else list(r.configs))
                continue
            if r.resource_type == BROKER_RESOURCE:  # the controller applies it
                broker_configs.refuse_changes(r, incremental, ConfigView(ctx.broker_config).dynamic_default)
                continue
            overrides = _altered(ctx, r, incremental)
            tiered = ctx.log_manager.has_topic(r.resource_name) and \
                ctx.log_manager.topic_config(r.resource_name).remote_storage_enable
            validate_remote_storage(TopicConfig.from_kafka(overrides, ctx.broker_config.topic_defaults()),
                                    system_enabled=ctx.broker_config["remote.log.storage.system.enable"],
                                    was_enabled=tiered)  # LogConfig.validateTopicLogConfigValues (KIP-405)
            if not ctx.log_manager.has_topic(r.resource_name):  # checked after the configs, as Kafka does
                raise UnknownTopicOrPartitionError(f"The topic '{r.resource_name}' does not exist.")
            if not req.validate_only:
                ctx.log_manager.alter_topic_config(r.resource_name, overrides, replace=True)
        except Exception as exc:
            out.update(error_code=error_of(exc), error_message=str(exc))
    return {"throttle_time": 0, "responses": outs}


def _controller_order(configs: Any) -> list:
    """A resource's configs in the order Kafka's controller meets them: the keys of a `java.util.HashMap` of
    16 buckets, by bucket of `String.hashCode` (spread as HashMap does), in request order within one."""
    def bucket(name: str) -> int:
        h = 0
        for unit in name.encode("utf-16-be").hex(" ", 2).split():
            h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & 15
    return sorted(configs, key=lambda c: bucket(c.name or ""))


def _reaches_unknown_op(r: Any) -> bool:
    """The controller goes through a resource's operations and stops at the first APPEND or SUBTRACT of a
    config that is not a list (an error of that resource); an unknown operation reached before that throws,
    failing the whole request."""
    for c in _controller_order(r.configs):
        op = int(c.config_operation)
        if op not in _OPS:
            return True
        if op in (APPEND, SUBTRACT) and getattr(TOPIC_CONFIGS.get(c.name), "type", None) != "list":
            return False
    return False


def _preprocess(ctx: RequestContext, r: Any, incremental: bool, seen: list[tuple[int, str]]) -> None:
    """The broker's checks of one resource; a topic resource that passes goes on to the controller's."""
    if seen.count((r.resource_type, r.resource_name)) > 1:
        raise InvalidRequestError("Each resource must appear at most once.")
    names = [c.name for c in r.configs]
    if len(set(names)) != len(names):
        raise InvalidRequestError("Error due to duplicate config keys")
    nulls = [c.name for c in r.configs
             if (int(getattr(c, "config_operation", SET)) if incremental else SET) != DELETE and c.value is None]
    if nulls:
        raise InvalidRequestError(f"Null value not supported for : {', '.join(nulls)}")
    if r.resource_type == BROKER_RESOURCE:
        if not ctx.allowed("alter_configs", "cluster", "kafka-cluster"):  # before the node id and the values
            raise KafkaError("Cluster authorization failed.", code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        if r.resource_name:
            _broker_id(ctx, r.resource_name, describing=False)
        broker_configs.preprocess(r, incremental)
        return
    if r.resource_type == group_configs.GROUP_RESOURCE:
        group_configs.preprocess(ctx, r)
        return
    if r.resource_type in _UNSERVED:
        raise InvalidRequestError(f"chronolog has no {_UNSERVED[r.resource_type]} configs")
    if r.resource_type != TOPIC_RESOURCE:
        raise InvalidRequestError(f"Unknown resource type {r.resource_type}")
    if not ctx.allowed("alter_configs", "topic", r.resource_name):
        raise KafkaError("Topic authorization failed.", code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)


def _altered(ctx: RequestContext, r: Any, incremental: bool) -> dict[str, str]:
    """The topic's overrides after the request's operations (none when it does not exist: its existence is
    checked after the configs)."""
    exists = ctx.log_manager.has_topic(r.resource_name)
    overrides = ctx.log_manager.topic_overrides(r.resource_name) if incremental and exists else {}
    for c in _controller_order(r.configs) if incremental else r.configs:
        op = int(getattr(c, "config_operation", SET)) if incremental else SET
        if op == SET:
            overrides[c.name] = c.value
        elif op == DELETE:
            overrides.pop(c.name, None)
        else:
            defn = TOPIC_CONFIGS.get(c.name)
            if defn is None or defn.type != "list":
                raise InvalidConfigError(f"Can't {_OPS[op]} to key {c.name} because its type is not LIST.")
            old = overrides.get(c.name)
            parts = [v for v in (old if old is not None else str(defn.default)).split(",") if v]
            for v in (c.value or "").split(","):
                if op == APPEND and v not in parts:
                    parts.append(v)
                elif op == SUBTRACT and v in parts:
                    parts.remove(v)
            overrides[c.name] = ",".join(parts)
    validate_topic_name(r.resource_name)  # ControllerConfigurationValidator: the name, then the configs
    return overrides


@register(33, 0, 2)
def alter_configs(req: Any, ctx: RequestContext) -> dict:
    return _alter(ctx, req, incremental=False)


@register(44, 0, 1)
def incremental_alter_configs(req: Any, ctx: RequestContext) -> dict:
    return _alter(ctx, req, incremental=True)


# -- ElectLeaders, ListPartitionReassignments: what a one-node cluster answers ----------------------------
@register(43, 0, 2)
def elect_leaders(req: Any, ctx: RequestContext) -> dict:
    """`ReplicationControlManager.electLeaders` on one node: every partition's only replica leads it, so a
    preferred or unclean election is never needed (ELECTION_NOT_NEEDED); asked for every partition (null),
    each topic is answered without partitions, as Kafka leaves out those with the leader they want."""
    if not ctx.allowed("alter", "cluster", "kafka-cluster"):
        return {"throttle_time": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "replica_election_results": []}
    # Kafka: the controller's deadline is the request's timeout (none left: REQUEST_TIMED_OUT), and an election
    # type other than preferred (0) or unclean (1) is INVALID_REQUEST; each partition asked gets the error too.
    timeout = req.timeout.total_seconds() if hasattr(req.timeout, "total_seconds") else int(req.timeout) / 1000
    code = ErrorCode.REQUEST_TIMED_OUT if timeout <= 0 else (
        ErrorCode.INVALID_REQUEST if int(getattr(req, "election_type", 0)) not in (0, 1) else 0)
    if req.topic_partitions is not None and not req.topic_partitions:  # nothing asked: answered at once
        return {"throttle_time": 0, "error_code": 0, "replica_election_results": []}
    if code:
        return {"throttle_time": 0, "error_code": code, "replica_election_results": [
            {"topic": t.topic, "partition_result": [{"partition_id": int(p), "error_code": code,
                                                     "error_message": None} for p in t.partitions]}
            for t in req.topic_partitions or ()]}
    topics = ctx.log_manager.topics()
    if req.topic_partitions is None:
        return {"throttle_time": 0, "error_code": 0, "replica_election_results": [
            {"topic": name, "partition_result": []} for name in sorted(topics)]}
    results = []
    for t in req.topic_partitions:
        parts = []
        for p in t.partitions:
            if t.topic not in topics:
                code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {t.topic}"
            elif not 0 <= int(p) < topics[t.topic]:
                code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {t.topic}-{p}"
            else:
                code, message = ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."
            parts.append({"partition_id": int(p), "error_code": code, "error_message": message})
        results.append({"topic": t.topic, "partition_result": parts})
    return {"throttle_time": 0, "error_code": 0, "replica_election_results": results}


@register(46, 0, 0)
def list_partition_reassignments(req: Any, ctx: RequestContext) -> dict:
    """No partition is ever being reassigned on one node (`kafka-reassign-partitions --list`: "No partition
    reassignments found."); AlterPartitionReassignments is not served."""
    if not ctx.allowed("describe", "cluster", "kafka-cluster"):
        return {"throttle_time": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "error_message": "Cluster authorization failed.", "topics": []}
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "topics": []}


# -- DescribeLogDirs ---------------------------------------------------------------------------------
@register(35, 0, 5)
def describe_log_dirs(req: Any, ctx: RequestContext) -> dict:
    """`KafkaApis.handleDescribeLogDirsRequest` + `ReplicaManager.describeLogDirs`: one log dir (the data
    dir), each hosted partition's size with offsetLag 0 (high watermark = log end offset on a single
    replica) and isFutureKey false; null topics means every partition; partitions we do not host are left
    out, and topics left without partitions too. Without DESCRIBE on the cluster the answer is no log dirs
    and CLUSTER_AUTHORIZATION_FAILED (the top-level error exists from v3; older versions see no dirs).
    v5's IsCordoned (KIP-1066) is false: the one log dir always takes new partitions."""
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
    result = {"error_code": 0, "log_dir": str(data_dir), "is_cordoned": False,
              "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()]}
    try:
        import shutil  # (with its archive codecs) not by every broker's start

        usage = shutil.disk_usage(data_dir)
        result.update(total_bytes=usage.total, usable_bytes=usage.free)
    except OSError:  # Kafka answers KAFKA_STORAGE_ERROR for a dir it cannot read
        result = {"error_code": ErrorCode.KAFKA_STORAGE_ERROR, "log_dir": str(data_dir), "topics": []}
    return {"throttle_time": 0, "error_code": 0, "results": [result]}
