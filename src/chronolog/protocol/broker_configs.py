"""AlterConfigs and IncrementalAlterConfigs of a BROKER resource (per broker, or the cluster default with the
empty name): Kafka's checks (`ConfigAdminManager.validateBrokerConfigChange` on the broker that takes the
request, then the controller), and then chronolog's refusal to change broker configs at run time
(docs/differences.md, "Admin"): a request that would change nothing (no configs, or only DELETEs of dynamic
configs chronolog does not have) succeeds as it does in Kafka."""

from __future__ import annotations

from typing import Any

from chronolog.config import BROKER_CONFIGS, TOPIC_CONFIGS, BrokerConfig
from chronolog.errors import InvalidConfigError, InvalidRequestError, KafkaError

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_OP_NAMES = {APPEND: "append", SUBTRACT: "subtract"}


def _types() -> dict[str, str]:
    """Each broker config name chronolog knows (Kafka's `KafkaConfig.configKeys` as far as chronolog has them:
    its broker settings and the topic configs' broker synonyms) and its type."""
    out = {}
    for defn in TOPIC_CONFIGS.values():
        for syn in defn.synonyms:
            out.setdefault(syn, defn.type)
    for defn in BROKER_CONFIGS.values():
        for name in (defn.name, *defn.synonyms):
            out[name] = defn.type
    return out


BROKER_CONFIG_TYPES = _types()


def preprocess(r: Any, incremental: bool) -> None:
    """`validateBrokerConfigChange`: every operation known (INVALID_REQUEST), then APPEND and SUBTRACT only on
    a known LIST config (`prepareIncrementalConfigs`: INVALID_CONFIG), then the new values' types
    (`DynamicBrokerConfig.validate`: INVALID_REQUEST, KAFKA-13609)."""
    ops = [(int(c.config_operation) if incremental else SET, c) for c in r.configs]
    for op, _ in ops:
        if op not in (SET, DELETE, APPEND, SUBTRACT):
            raise InvalidRequestError(f"Unknown operations type {op}")
    for op, c in ops:
        if op in _OP_NAMES:
            kind = BROKER_CONFIG_TYPES.get(c.name)
            if kind is None:
                raise InvalidConfigError(f"Unknown config name: {c.name}")
            if kind != "list":
                raise InvalidConfigError(f"Config value {_OP_NAMES[op]} is not allowed for config key: {c.name}")
    for op, c in ops:
        if op == SET and c.name in BROKER_CONFIG_TYPES:
            try:
                BrokerConfig({c.name: c.value})
            except KafkaError as exc:
                raise InvalidRequestError(str(exc)) from None


def refuse_changes(r: Any, incremental: bool, dynamic_default: dict[str, str]) -> None:
    """The controller's step: the resource's dynamic configs after the request (chronolog's only one is the
    cluster default `min.insync.replicas` a Kafka 4.x cluster is formatted with, `dynamic_default`), checked
    as Kafka 4.4 does with eligible leader replicas (KIP-966) on: a per-broker `min.insync.replicas` is never
    set nor deleted, the cluster's never removed (INVALID_CONFIG). What is left is success when nothing
    changes, and otherwise refused (INVALID_REQUEST): chronolog does not change broker configs at run time."""
    cluster = not r.resource_name
    before = dict(dynamic_default) if cluster else {}
    after = dict(before) if incremental else {}
    for c in r.configs:
        op = int(c.config_operation) if incremental else SET
        if op == DELETE:
            after.pop(c.name, None)
        elif op == SET:
            after[c.name] = c.value
        else:  # APPEND or SUBTRACT of a LIST config: a value of its own, whatever it comes to
            after[c.name] = None
    if not cluster and any(c.name == MIN_INSYNC_REPLICAS for c in r.configs):
        raise InvalidConfigError("Broker-level min.insync.replicas cannot be altered while ELR is enabled.")
    if cluster and MIN_INSYNC_REPLICAS not in after:
        raise InvalidConfigError("Cluster-level min.insync.replicas cannot be removed while ELR is enabled.")
    changed = sorted(name for name in after.keys() | before.keys() if after.get(name) != before.get(name))
    if changed:
        raise InvalidRequestError("chronolog does not change broker configs at run time: set "
                                  f"{', '.join(changed)} in the broker's settings and restart it")


MIN_INSYNC_REPLICAS = "min.insync.replicas"
