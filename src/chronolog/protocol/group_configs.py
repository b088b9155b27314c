"""Group configs (KIP-848, KIP-932): DescribeConfigs and (Incremental)AlterConfigs on GROUP resources
(type 32), as Kafka 4.4's `GroupConfig` names, types, defaults and validates them. The values are kept by
the share groups' state (server/share_group.py, durable in its state directory); the share-group ones
(`share.*`) and the KIP-848 session and heartbeat ones are what chronolog's groups read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from chronolog.errors import ErrorCode, InvalidConfigError, InvalidRequestError, KafkaError

GROUP_RESOURCE = 32
BOOLEAN, STRING, INT, LIST = 1, 2, 3, 7  # DescribeConfigsResponse ConfigType
GROUP_CONFIG_SOURCE, DEFAULT_CONFIG_SOURCE = 8, 5
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


@dataclass(frozen=True)
class GroupConfigDef:
    name: str
    type: int
    default: str
    synonym: str  # the broker config that gives the default (Kafka's synonym in DescribeConfigs)
    at_least: int | None = None
    group_range: tuple[Any, Any] | None = None  # GroupConfig.validate's bounds: values or broker config names


def _d(name: str, type_: int, default: str, synonym: str | None = None, at_least: int | None = None,
       group_range: tuple[Any, Any] | None = None) -> GroupConfigDef:
    return GroupConfigDef(name, type_, default, synonym or name, at_least, group_range)


GROUP_CONFIGS: dict[str, GroupConfigDef] = {d.name: d for d in (
    _d("consumer.session.timeout.ms", INT, "45000", "group.consumer.session.timeout.ms", 1, (45000, 60000)),
    _d("consumer.heartbeat.interval.ms", INT, "5000", "group.consumer.heartbeat.interval.ms", 1, (5000, 15000)),
    _d("consumer.assignment.interval.ms", INT, "1000", "group.consumer.assignment.interval.ms", 0),
    _d("share.session.timeout.ms", INT, "45000", "group.share.session.timeout.ms", 1, (45000, 60000)),
    _d("share.heartbeat.interval.ms", INT, "5000", "group.share.heartbeat.interval.ms", 1, (5000, 15000)),
    _d("share.record.lock.duration.ms", INT, "30000", "group.share.record.lock.duration.ms", 1,
       ("group.share.min.record.lock.duration.ms", "group.share.max.record.lock.duration.ms")),
    _d("share.delivery.count.limit", INT, "5", "group.share.delivery.count.limit", 1, (2, 10)),
    _d("share.partition.max.record.locks", INT, "2000", "group.share.partition.max.record.locks", 100),
    _d("share.assignment.interval.ms", INT, "1000", "group.share.assignment.interval.ms", 0),
    _d("share.auto.offset.reset", STRING, "latest"),
    _d("share.isolation.level", STRING, "read_uncommitted"),
    _d("share.renew.acknowledge.enable", BOOLEAN, "true"),
    _d("streams.session.timeout.ms", INT, "45000", "group.streams.session.timeout.ms", 1, (45000, 60000)),
    _d("streams.heartbeat.interval.ms", INT, "5000", "group.streams.heartbeat.interval.ms", 1, (5000, 15000)),
    _d("streams.num.standby.replicas", INT, "0", "group.streams.num.standby.replicas", 0),
    _d("streams.initial.rebalance.delay.ms", INT, "3000", "group.streams.initial.rebalance.delay.ms", 0),
    _d("streams.assignment.interval.ms", INT, "1000", "group.streams.assignment.interval.ms", 0),
    _d("streams.assignor.name", STRING, "sticky", "group.streams.assignors"),
    _d("streams.rack.aware.assignment.tags", LIST, "", "group.streams.rack.aware.assignment.tags"),
    _d("errors.deadletterqueue.topic.name", STRING, ""),
    _d("errors.deadletterqueue.copy.record.enable", BOOLEAN, "false"),
)}


_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?", re.IGNORECASE)


def duration_ms(text: str) -> int | None:
    """An ISO-8601 duration (`PnDTnHnMn.nS`, share.auto.offset.reset's `by_duration:`) in ms, or None."""
    match = _DURATION.fullmatch(text.strip())
    if not match or not any(match.groups()):
        return None
    d, h, m, s = match.groups()
    return int(((int(d or 0) * 24 + int(h or 0)) * 60 + int(m or 0)) * 60_000 + float(s or 0) * 1000)


def _default(defn: GroupConfigDef, broker_config: Any) -> str:
    try:
        return str(broker_config[defn.synonym])
    except Exception:
        return defn.default


def _bound(bound: Any, broker_config: Any) -> int:
    return int(broker_config[bound]) if isinstance(bound, str) else int(bound)


def validate(name: str, value: str, broker_config: Any) -> None:
    """GroupConfig.validate (ConfigDef's parse and validators, then the group bounds), Kafka's messages."""
    defn = GROUP_CONFIGS.get(name)
    if defn is None:
        raise InvalidConfigError(f"Unknown group config name: {name}")
    if defn.type == INT:
        try:
            number = int(value.strip())
        except ValueError:
            raise InvalidConfigError(f"Invalid value {value} for configuration {name}: Not a number of type INT") \
                from None
        if defn.at_least is not None and number < defn.at_least:
            raise InvalidConfigError(f"Invalid value {value} for configuration {name}: Value must be at least "
                                     f"{defn.at_least}")
        if defn.group_range is not None:
            lo, hi = (_bound(b, broker_config) for b in defn.group_range)
            if not lo <= number <= hi:
                raise InvalidConfigError(f"{name} must be in the range {lo} to {hi} inclusive.")
    elif defn.type == BOOLEAN:
        if value.strip().lower() not in ("true", "false"):
            raise InvalidConfigError(f"Invalid value {value} for configuration {name}: Expected value to be either "
                                     "true or false")
    elif name == "share.auto.offset.reset":
        if value not in ("latest", "earliest") and not (
                value.startswith("by_duration:") and duration_ms(value[len("by_duration:"):]) is not None):
            raise InvalidConfigError(
                f"Invalid value {value} for configuration share.auto.offset.reset: Invalid value `{value}` for "
                "configuration share.auto.offset.reset. The value must be either 'earliest', 'latest' or of the "
                "format 'by_duration:<PnDTnHnMn.nS>'.")
    elif name == "share.isolation.level" and value not in ("read_committed", "read_uncommitted"):
        raise InvalidConfigError(f"Invalid value {value} for configuration share.isolation.level: String must be "
                                 "one of: read_committed, read_uncommitted")
    elif name == "streams.assignor.name" and value != "sticky":
        raise InvalidConfigError(f"streams.assignor.name '{value}' is not a registered task assignor. Registered "
                                 "assignors are: [sticky].")


def describe(ctx: Any, group_id: str, keys: list[str] | None, synonyms: bool, docs: bool) -> list[dict]:
    """ConfigHelper's GROUP branch: every group config (or the keys asked for that exist), set ones with
    source GROUP_CONFIG and the broker default as their synonym."""
    if not ctx.allowed("describe_configs", "group", group_id):
        raise KafkaError("Group authorization failed.", code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    stored = ctx.state.share_groups.configs.get(group_id, {}) if ctx.state.share_groups is not None else {}
    out = []
    for name, defn in GROUP_CONFIGS.items():
        if keys is not None and name not in keys:
            continue
        default = _default(defn, ctx.broker_config)
        chain = [{"name": defn.synonym, "value": default, "source": DEFAULT_CONFIG_SOURCE}]
        if name in stored:
            chain.insert(0, {"name": name, "value": stored[name], "source": GROUP_CONFIG_SOURCE})
        out.append({"name": name, "value": chain[0]["value"], "read_only": False, "config_source": chain[0]["source"],
                    "is_sensitive": False, "synonyms": chain if synonyms else [], "config_type": defn.type,
                    "documentation": None})
    return out


def preprocess(ctx: Any, r: Any) -> None:
    """The broker's checks of a GROUP resource before the configs (ConfigAdminManager.preprocess)."""
    if not r.resource_name:
        raise InvalidRequestError("Default group resources are not allowed.")
    if not ctx.allowed("alter_configs", "group", r.resource_name):
        raise KafkaError("Group authorization failed.", code=ErrorCode.GROUP_AUTHORIZATION_FAILED)


def alter(ctx: Any, r: Any, incremental: bool, validate_only: bool, ordered: list) -> None:
    """The group's configs after the request's operations (AlterConfigs: the given ones replace all), each
    validated; stored unless validate_only."""
    shares = ctx.state.share_groups
    configs = dict(shares.configs.get(r.resource_name, {})) if incremental else {}
    for c in ordered:
        op = int(getattr(c, "config_operation", SET)) if incremental else SET
        defn = GROUP_CONFIGS.get(c.name)
        if op in (APPEND, SUBTRACT) and (defn is None or defn.type != LIST):
            raise InvalidConfigError(f"Can't {('APPEND', 'SUBTRACT')[op - APPEND]} to key {c.name} because its "
                                     "type is not LIST.")
        if op == DELETE:
            if defn is None:
                raise InvalidConfigError(f"Unknown group config name: {c.name}")
            configs.pop(c.name, None)
            continue
        if op == SET:
            value = c.value
        else:
            parts = [v for v in configs.get(c.name, _default(defn, ctx.broker_config)).split(",") if v]
            for v in (c.value or "").split(","):
                if op == APPEND and v not in parts:
                    parts.append(v)
                elif op == SUBTRACT and v in parts:
                    parts.remove(v)
            value = ",".join(parts)
        validate(c.name, value, ctx.broker_config)
        configs[c.name] = value
    if not validate_only:
        shares.set_configs(r.resource_name, configs)
