"""The config entries DescribeConfigs and CreateTopics answer, as Kafka's `ConfigHelper` builds them: each
config's value, source, synonyms (KIP-226), type, read-only and sensitive flags.

A topic config's synonyms are the topic's own override (TOPIC_CONFIG) followed by its broker synonyms
(`ServerTopicConfigSynonyms`) in Kafka's order of sources: dynamic per-broker, dynamic cluster default,
static (the broker's settings), default. As `ConfigHelper.configSynonyms`, that list starts at the first
entry named like the primary broker synonym, so a config whose primary has no default (`log.retention.ms`,
`log.roll.ms`) lists none and is sourced DEFAULT_CONFIG while `log.retention.hours` is not set as
`log.retention.ms`: Kafka's answer, quirk included.

chronolog changes no broker config at run time, so the dynamic per-broker source is never used. The cluster
default `min.insync.replicas` is: a Kafka 4.x KRaft cluster is formatted with it (from the static value)
for eligible leader replicas (KIP-966), and a fresh single-node Kafka describes it so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chronolog.config import BROKER_CONFIGS, TOPIC_CONFIGS, ConfigDef, TopicConfig, java_double

# DescribeConfigsResponse.ConfigSource
TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 2, 3, 4, 5
# DescribeConfigsResponse.ConfigType
TYPES = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7, "class": 8,
         "password": 9}
# Broker synonyms of topic configs whose Kafka default is null, and the defaults of the secondary ones.
_NULL_DEFAULT = frozenset({"log.roll.ms", "log.roll.jitter.ms", "log.retention.ms", "log.retention.minutes",
                           "log.flush.interval.ms"})
_SECONDARY = {"log.roll.hours": ("168", "int"), "log.roll.jitter.hours": ("0", "int"),
              "log.retention.hours": ("168", "int"), "log.retention.minutes": (None, "int")}
# chronolog's broker configs that Kafka can change at run time (`DynamicBrokerConfig.AllDynamicConfigs`):
# described read_only false, as Kafka does; the rest read-only.
_DYNAMIC = frozenset({
    "listener.security.protocol.map", "listeners", "log.cleaner.backoff.ms", "log.cleaner.dedupe.buffer.size",
    "log.cleaner.io.buffer.load.factor", "log.cleaner.io.max.bytes.per.second", "log.cleaner.threads",
    "max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides",
    "num.recovery.threads.per.data.dir", "producer.id.expiration.ms", "sasl.enabled.mechanisms", "ssl.client.auth",
    "ssl.enabled.protocols", "ssl.key.password", "ssl.keystore.certificate.chain", "ssl.keystore.key",
    "ssl.keystore.location", "ssl.keystore.type", "ssl.truststore.certificates", "ssl.truststore.location",
    "ssl.truststore.type", "transaction.partition.verification.enable",
})
# Topic configs chronolog still accepts that Kafka 4.x removed: described only where they are set.
_LEGACY = frozenset({"message.timestamp.difference.max.ms"})
_KEEP = ("name", "value", "read_only", "config_source", "is_sensitive")


def text(value: Any, type_: str) -> str | None:
    """A config value as Kafka writes it (`ConfigDef.convertToString`)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return java_double(value)
    return str(value)


def _topic_synonym_defs() -> dict[str, tuple[ConfigDef, str]]:
    """Every broker synonym of a topic config: its topic config and Kafka's default as text (None: null)."""
    out = {}
    for defn in TOPIC_CONFIGS.values():
        for name in defn.synonyms:
            if name in _NULL_DEFAULT:
                default = None
            elif name in _SECONDARY:
                default = _SECONDARY[name][0]
            else:
                default = text(defn.default, defn.type)
            out[name] = (defn, default)
    return out


TOPIC_SYNONYMS = _topic_synonym_defs()


class ConfigView:
    """One broker's configs as DescribeConfigs sees them: static settings, the dynamic cluster defaults and
    the defaults, by broker config name."""

    def __init__(self, broker_config: Any) -> None:
        self.broker_config = broker_config
        self.static = {k: v for k, v in broker_config.raw().items() if k in BROKER_CONFIGS or k in TOPIC_SYNONYMS}
        mir = self.static.get("min.insync.replicas", "1")
        self.dynamic_default = {"min.insync.replicas": mir}

    @staticmethod
    def default(name: str) -> str | None:
        if name in TOPIC_SYNONYMS:
            return TOPIC_SYNONYMS[name][1]
        defn = BROKER_CONFIGS[name]
        return None if defn.type == "password" else text(defn.default, defn.type)

    def synonyms(self, name: str, names: tuple[str, ...], sensitive: bool = False,
                 cluster_default: bool = False) -> list[dict]:
        """`ConfigHelper.configSynonyms(name, names)`: each source in turn, from the first entry called
        `name`. `cluster_default`: only the dynamic cluster defaults (the broker resource named "")."""
        found = []
        sources = [(self.dynamic_default, DYNAMIC_DEFAULT_BROKER_CONFIG)]
        if not cluster_default:
            sources += [(self.static, STATIC_BROKER_CONFIG), ({n: self.default(n) for n in names}, DEFAULT_CONFIG)]
        for values, source in sources:
            for n in names:
                if values.get(n) is not None:
                    found.append({"name": n, "value": None if sensitive else values[n], "source": source})
        while found and found[0]["name"] != name:
            found.pop(0)
        return found


def topic_entries(view: ConfigView, overrides: Mapping[str, str], keys: list[str] | None = None,
                  synonyms: bool = False, docs: bool = False, as_given: bool = False) -> list[dict]:
    """`ConfigHelper.createTopicConfigEntry` for every topic config (or the `keys` asked for): the topic's
    `overrides` on the broker's defaults. `as_given`: an override's value as the request wrote it (what
    CreateTopics answers), not as parsed and written back (what DescribeConfigs answers)."""
    effective = TopicConfig.from_kafka(overrides, view.broker_config.topic_defaults(), validate_values=False)
    defaults = view.broker_config.topic_defaults()
    out = []
    for key, defn in TOPIC_CONFIGS.items():
        if keys and key not in keys:
            continue
        if key in _LEGACY and key not in overrides and key not in defaults:
            continue
        value = text(getattr(effective, key.replace(".", "_")), defn.type)
        if as_given and key in overrides:
            value = str(overrides[key])
        found = [{"name": key, "value": value, "source": TOPIC_CONFIG}] if key in overrides else []
        if defn.synonyms:
            found += view.synonyms(defn.synonyms[0], _broker_names(defn))
        out.append({"name": key, "value": value, "read_only": False,
                    "config_source": found[0]["source"] if found else DEFAULT_CONFIG,
                    "is_default": not found or found[0]["source"] == DEFAULT_CONFIG, "is_sensitive": False,
                    "synonyms": found if synonyms else [], "config_type": TYPES.get(defn.type, 0),
                    "documentation": defn.doc if docs else None})
    return out


def _broker_names(defn: ConfigDef) -> tuple[str, ...]:
    """`DynamicBrokerConfig.brokerConfigSynonyms`: a topic config's broker names, finest unit first."""
    return defn.synonyms


def created_topic_configs(view: ConfigView, overrides: Mapping[str, str]) -> list[dict]:
    """CreateTopics v5+'s `configs` of a created topic: its entries sorted by name, five fields each
    (`ReplicationControlManager.createTopic`)."""
    entries = sorted(topic_entries(view, overrides, as_given=True), key=lambda e: e["name"])
    return [{k: e[k] for k in _KEEP} for e in entries]


def broker_names() -> list[str]:
    """The broker configs DescribeConfigs lists: chronolog's broker settings and every topic config's broker
    synonyms (Kafka lists all of KafkaConfig; those chronolog has no use for are left out,
    docs/differences.md)."""
    names = list(BROKER_CONFIGS)
    names += [n for n in TOPIC_SYNONYMS if n not in BROKER_CONFIGS]
    return names


def broker_entries(view: ConfigView, keys: list[str] | None = None, synonyms: bool = False, docs: bool = False,
                   cluster_default: bool = False) -> list[dict]:
    """`ConfigHelper.createBrokerConfigEntry` for this broker (`cluster_default`: the resource named "",
    which lists only the dynamic cluster defaults)."""
    out = []
    for name in broker_names():
        if keys and name not in keys:
            continue
        if cluster_default and name not in view.dynamic_default:
            continue
        if name in TOPIC_SYNONYMS:
            defn, _ = TOPIC_SYNONYMS[name]
            type_ = _SECONDARY.get(name, (None, defn.type))[1]
            names = _broker_names(defn)
            doc = defn.doc
        else:
            defn = BROKER_CONFIGS[name]
            type_, names, doc = defn.type, (name,), defn.doc
        sensitive = type_ == "password"
        found = view.synonyms(name, names, sensitive, cluster_default)
        if cluster_default:
            value = view.dynamic_default[name]
        elif name in view.static:
            value = view.static[name]
        elif name in TOPIC_SYNONYMS or name in view.dynamic_default:
            value = view.dynamic_default.get(name, view.default(name))
        else:
            value = text(view.broker_config[name], type_)
        out.append({"name": name, "value": None if sensitive else value,
                    "read_only": not (name in _DYNAMIC or (name in TOPIC_SYNONYMS and name not in _SECONDARY)),
                    "config_source": found[0]["source"] if found else DEFAULT_CONFIG,
                    "is_default": not found or found[0]["source"] == DEFAULT_CONFIG, "is_sensitive": sensitive,
                    "synonyms": found if synonyms else [], "config_type": TYPES.get(type_, 0),
                    "documentation": doc if docs else None})
    return out
