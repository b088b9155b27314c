"""Topic and broker configs with Kafka's names, defaults, types and validation.

Defaults are Kafka 4.0's (`LogConfig`, `ServerLogConfigs`); broker synonyms follow
`ServerTopicConfigSynonyms`. One deliberate difference: `segment.bytes` accepts values down to 14 bytes
(Kafka < 4.0) instead of 4.0's 1 MiB floor (KIP-1030), because small segments are how tests and small
deployments exercise rolling; see docs/configuration.md.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from chronolog.errors import ChronologError, InvalidConfigError, InvalidReplicationFactorError

LONG_MAX = 9223372036854775807


@dataclass(frozen=True)
class ConfigDef:
    """One config: its Kafka name, type, default, bounds, broker synonyms (first one wins) and doc."""

    name: str
    type: str  # "int" | "long" | "string" | "boolean" | "list" | "password"
    default: Any
    doc: str
    synonyms: tuple[str, ...] = ()
    minimum: int | None = None
    choices: tuple[str, ...] | None = None
    synonym_scale: Mapping[str, int] = dataclasses.field(default_factory=dict)  # e.g. hours -> ms
    synonym_negative: int | None = None  # what any negative broker-synonym value stands for, if allowed
    maximum: int | None = None
    # Kafka's extra validator of the value (its message), for the rules bounds cannot say.
    check: Callable[[str, Any], None] | None = None
    # A Kafka config chronolog takes only at its default: why any other value is refused (INVALID_CONFIG)
    # rather than accepted and ignored.
    unsupported: str | None = None


def _d(name: str, type_: str, default: Any, doc: str, synonyms: tuple[str, ...] = (), minimum: int | None = None,
       choices: tuple[str, ...] | None = None, scale: Mapping[str, int] | None = None,
       synonym_negative: int | None = None, maximum: int | None = None,
       check: Callable[[str, Any], None] | None = None, unsupported: str | None = None) -> ConfigDef:
    return ConfigDef(name, type_, default, doc, synonyms, minimum, choices, dict(scale or {}), synonym_negative,
                     maximum, check, unsupported)


def _gzip_level(name: str, value: Any) -> None:
    """GzipCompression.LEVEL_VALIDATOR."""
    if value != -1 and not 1 <= value <= 9:
        raise InvalidConfigError(f"Invalid value {value} for configuration {name}: Value must be between 1 and 9 "
                                 "or equal to -1")


def _throttled_replicas(name: str, value: Any) -> None:
    """ThrottledReplicaListValidator: '*' or partitionId:brokerId pairs."""
    items = [v.strip() for v in str(value).split(",") if v.strip()]
    if items == ["*"] or all(re.fullmatch(r"\d+:\d+", v) for v in items):
        return
    raise InvalidConfigError(f"Invalid value [{', '.join(items)}] for configuration {name}: {name} must be the "
                             "literal '*' or a list of replicas in the following format: "
                             "[partitionId]:[brokerId],[partitionId]:[brokerId],...")


_TIERED = "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage."


_HOUR = 3_600_000
_MINUTE = 60_000

TOPIC_CONFIGS: dict[str, ConfigDef] = {c.name: c for c in (
    _d("segment.bytes", "int", 1073741824, "Roll a new segment when the active one would exceed this size.",
       ("log.segment.bytes",), 14),
    _d("segment.ms", "long", 604800000, "Roll when the first batch's max timestamp is this old (KIP-32/33).",
       ("log.roll.ms", "log.roll.hours"), 1, scale={"log.roll.hours": _HOUR}),
    _d("segment.jitter.ms", "long", 0, "Random jitter subtracted from segment.ms per segment.",
       ("log.roll.jitter.ms", "log.roll.jitter.hours"), 0, scale={"log.roll.jitter.hours": _HOUR}),
    # Kafka's validator says atLeast(4), but a .timeindex below one 12-byte entry has no slot for the final
    # entry `LogSegment.onBecomeInactiveSegment` writes, so Kafka's first roll of such a topic fails
    # (BufferOverflowException in `TimeIndex.maybeAppend`). Refused here instead (docs/differences.md).
    _d("segment.index.bytes", "int", 10485760, "Preallocated size of each .index and .timeindex file.",
       ("log.index.size.max.bytes",), 12),
    _d("index.interval.bytes", "int", 4096, "Bytes appended between two offset/time index entries.",
       ("log.index.interval.bytes",), 0),
    _d("retention.ms", "long", 604800000, "Delete a segment when its largest timestamp is older (-1: never).",
       ("log.retention.ms", "log.retention.minutes", "log.retention.hours"), -1,
       scale={"log.retention.minutes": _MINUTE, "log.retention.hours": _HOUR},
       synonym_negative=-1),  # KafkaConfig.logRetentionTimeMillis: any negative broker value is -1
    _d("retention.bytes", "long", -1, "Delete oldest segments while the partition exceeds this (-1: never).",
       ("log.retention.bytes",)),
    _d("cleanup.policy", "list", "delete", "delete: retention removes old segments; compact: the log cleaner "
       "keeps the last record of each key; compact,delete: both; empty: neither (kept forever).",
       ("log.cleanup.policy",), choices=("compact", "delete")),
    # -- compaction (LogConfig, CleanerConfig; docs/compaction.md) --
    _d("delete.retention.ms", "long", 86400000, "How long a tombstone (and an empty transaction's marker) is "
       "kept after the cleaner first met it (KIP-534 delete horizon).", ("log.cleaner.delete.retention.ms",), 0),
    _d("min.compaction.lag.ms", "long", 0, "A segment whose largest timestamp is younger is not cleaned "
       "(KIP-58).", ("log.cleaner.min.compaction.lag.ms",), 0),
    _d("max.compaction.lag.ms", "long", LONG_MAX, "A dirty segment whose first batch is older is cleaned even "
       "below min.cleanable.dirty.ratio (KIP-354).", ("log.cleaner.max.compaction.lag.ms",), 1),
    _d("min.cleanable.dirty.ratio", "double", 0.5, "Clean a log when its dirty part is at least this share "
       "of the cleanable bytes.", ("log.cleaner.min.cleanable.ratio",), 0),
    _d("message.timestamp.type", "string", "CreateTime", "CreateTime keeps the producer's timestamp; "
       "LogAppendTime stamps batches with the broker clock.", ("log.message.timestamp.type",),
       choices=("CreateTime", "LogAppendTime")),
    _d("message.timestamp.before.max.ms", "long", LONG_MAX, "Reject CreateTime timestamps older than now by more.",
       ("log.message.timestamp.before.max.ms",), 0),
    _d("message.timestamp.after.max.ms", "long", 3600000, "Reject CreateTime timestamps newer than now by more "
       "(Kafka 4.0 default: 1 hour; protects retention from future timestamps).",
       ("log.message.timestamp.after.max.ms",), 0),
    _d("message.timestamp.difference.max.ms", "long", LONG_MAX, "Deprecated alias: sets both bounds above when "
       "they are left at their defaults.", ("log.message.timestamp.difference.max.ms",), 0),
    _d("file.delete.delay.ms", "long", 60000, "Delay before a .deleted segment file is removed.",
       ("log.segment.delete.delay.ms",), 0),
    _d("max.message.bytes", "int", 1048588, "Largest record batch (after compression) accepted.",
       ("message.max.bytes",), 0),
    _d("compression.type", "string", "producer", "Codec on disk; producer keeps what the producer sent.",
       ("compression.type",), choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
    _d("flush.messages", "long", LONG_MAX, "fsync after this many messages.", ("log.flush.interval.messages",), 1),
    _d("flush.ms", "long", LONG_MAX, "fsync when unflushed data is this old.", ("log.flush.interval.ms",), 0),
    _d("preallocate", "boolean", False, "Preallocate segment files: only false (segment files grow as they are "
       "written).", ("log.preallocate",),
       unsupported="chronolog does not preallocate segment files (only false is accepted)"),
    _d("min.insync.replicas", "int", 1, "Accepted for compatibility; a single node is always in sync.",
       ("min.insync.replicas",), 1),
    # -- the rest of Kafka 4.4's topic configs (LogConfig): described as Kafka describes them. Those a single
    # Kafka node without tiered storage also accepts and ignores are accepted; those Kafka would honour and
    # chronolog does not are refused at any value but their default.
    _d("compression.gzip.level", "int", -1, "gzip level when compression.type is gzip: only the default.",
       ("compression.gzip.level",), check=_gzip_level,
       unsupported="chronolog compresses at the codec's default level (only -1 is accepted)"),
    _d("compression.lz4.level", "int", 9, "lz4 level when compression.type is lz4: only the default.",
       ("compression.lz4.level",), 1, maximum=17,
       unsupported="chronolog compresses at the codec's default level (only 9 is accepted)"),
    _d("compression.zstd.level", "int", 3, "zstd level when compression.type is zstd: only the default.",
       ("compression.zstd.level",), -131072, maximum=22,
       unsupported="chronolog compresses at the codec's default level (only 3 is accepted)"),
    _d("max.decompressed.message.bytes", "int", 2147483639, "Largest decompressed batch: only the default.",
       ("max.decompressed.message.bytes",), 1,
       unsupported="chronolog does not bound decompressed batches per topic (only 2147483639 is accepted)"),
    _d("errors.deadletterqueue.group.enable", "boolean", False, "Share groups' dead-letter topics: only false "
       "(share groups are not served).", (),
       unsupported="chronolog serves no share groups (only false is accepted)"),
    # -- tiered storage (KIP-405; storage/remote/, docs/storage.md "Tiered storage") --
    _d("remote.storage.enable", "boolean", False, "Copy closed segments to the tier (remote.log.storage.dir) and "
       "keep serving them; needs remote.log.storage.system.enable on the broker.", ()),
    _d("remote.log.copy.disable", "boolean", False, "Tiered topic: stop copying (tiered segments stay readable; "
       "local retention is then retention.*).", ()),
    _d("remote.log.delete.on.disable", "boolean", False, "Delete the tiered segments when remote.storage.enable "
       "is turned off.", ()),
    _d("local.retention.ms", "long", -2, "Tiered topic: how long copied segments stay on local disk (-2: "
       "retention.ms).", ("log.local.retention.ms",), -2),
    _d("local.retention.bytes", "long", -2, "Tiered topic: local bytes kept of copied segments (-2: "
       "retention.bytes).", ("log.local.retention.bytes",), -2),
    _d("remote.copy.lag.ms", "long", 0, "Delayed upload (Kafka 4.4): only 0 with tiered storage (segments are "
       "copied once closed).", ("log.remote.copy.lag.ms",)),
    _d("remote.copy.lag.bytes", "long", -1, "Delayed upload (Kafka 4.4): only -1 with tiered storage.",
       ("log.remote.copy.lag.bytes",)),
    _d("leader.replication.throttled.replicas", "list", "", "Replication throttle: accepted, no effect on a "
       "single node (no followers).", (), check=_throttled_replicas),
    _d("follower.replication.throttled.replicas", "list", "", "Replication throttle: accepted, no effect on a "
       "single node (no followers).", (), check=_throttled_replicas),
    _d("unclean.leader.election.enable", "boolean", False, "Accepted, no effect: a single node is the only "
       "replica.", ("unclean.leader.election.enable",)),
)}

BROKER_CONFIGS: dict[str, ConfigDef] = {c.name: c for c in (
    _d("node.id", "int", 1, "This broker's id in Metadata.", ("broker.id",), 0),
    _d("log.dirs", "list", "", "Data directory (one is supported).", ("log.dir",)),
    _d("log.retention.check.interval.ms", "long", 300000, "How often retention runs.", (), 1),
    _d("log.flush.scheduler.interval.ms", "long", LONG_MAX, "How often flush.ms is checked.", (), 0),
    _d("log.flush.offset.checkpoint.interval.ms", "int", 60000, "How often recovery points are checkpointed.",
       (), 0),
    _d("producer.id.expiration.ms", "int", 86400000, "How long a producer id is remembered after the max "
       "timestamp of its last batch (its sequence numbers, for recognising retries).", (), 1),
    _d("producer.id.expiration.check.interval.ms", "int", 600000, "How often expired producer ids are "
       "forgotten.", (), 1),
    _d("auto.create.topics.enable", "boolean", True, "Create unknown topics on Metadata/Produce.", ()),
    _d("num.partitions", "int", 1, "Partitions of auto-created topics.", (), 1),
    _d("default.replication.factor", "int", 1, "Accepted; a single node has replication factor 1.", (), 1),
    _d("socket.request.max.bytes", "int", 104857600, "Largest request frame accepted.", (), 1),
    _d("group.initial.rebalance.delay.ms", "int", 3000, "Delay of the first rebalance of a new group.", (), 0),
    _d("group.min.session.timeout.ms", "int", 6000, "Smallest session timeout a member may ask for.", (), 0),
    _d("group.max.session.timeout.ms", "int", 1800000, "Largest session timeout a member may ask for.", (), 0),
    # -- consumer groups of KIP-848 (GroupCoordinatorConfig; server/consumer_group.py) --
    _d("group.consumer.heartbeat.interval.ms", "int", 5000, "How often consumer-protocol members heartbeat.",
       (), 1),
    _d("group.consumer.session.timeout.ms", "int", 45000, "A consumer-protocol member silent this long is "
       "removed from its group.", (), 1),
    _d("group.consumer.assignors", "list", "uniform,range", "Server-side assignors; the first is the default.",
       (), choices=("uniform", "range")),
    _d("group.consumer.migration.policy", "string", "disabled", "Only `disabled`: a non-empty classic group "
       "refuses consumer-protocol members (an empty one changes type); classic members may join a consumer "
       "group.", (), choices=("disabled",)),
    # -- streams groups (KIP-1071; GroupCoordinatorConfig; server/streams_group.py) --
    _d("group.streams.heartbeat.interval.ms", "int", 5000, "How often streams group members heartbeat.", (), 1),
    _d("group.streams.session.timeout.ms", "int", 45000, "A streams group member silent this long is removed "
       "from its group.", (), 1),
    _d("group.streams.num.standby.replicas", "int", 0, "Standby tasks per active task in streams groups.", (), 0,
       maximum=2),
    # -- share groups (KIP-932; ShareGroupConfig, GroupCoordinatorConfig; server/share_group.py) --
    _d("group.share.record.lock.duration.ms", "int", 30000, "How long a share consumer holds the records it "
       "fetched before they may be delivered again (the group config share.record.lock.duration.ms "
       "overrides it).", (), 1000, maximum=3600000),
    _d("group.share.min.record.lock.duration.ms", "int", 15000, "Smallest share.record.lock.duration.ms a "
       "group may set.", (), 1000, maximum=3600000),
    _d("group.share.max.record.lock.duration.ms", "int", 60000, "Largest share.record.lock.duration.ms a "
       "group may set.", (), 1000, maximum=3600000),
    _d("group.share.delivery.count.limit", "int", 5, "Deliveries of a record before it is archived (the "
       "group config share.delivery.count.limit overrides it).", (), 2, maximum=10),
    _d("group.share.partition.max.record.locks", "int", 2000, "Records of a share-partition in flight at "
       "once.", (), 100, maximum=10000),
    _d("group.share.session.timeout.ms", "int", 45000, "A share group member silent this long is removed.",
       (), 1),
    _d("group.share.heartbeat.interval.ms", "int", 5000, "How often share group members heartbeat.", (), 1),
    _d("group.share.max.size", "int", 200, "Members a share group may have.", (), 1, maximum=1000),
    # -- transactions (KIP-98; TransactionStateManagerConfig, TransactionLogConfig; docs/transactions.md) --
    _d("transaction.max.timeout.ms", "int", 900000, "Largest transaction.timeout.ms a producer may ask for "
       "(InitProducerId answers INVALID_TRANSACTION_TIMEOUT above it).", (), 1),
    _d("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000, "How often transactions "
       "older than their timeout are aborted.", (), 1),
    _d("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3600000, "How often unused "
       "transactional ids are expired.", (), 1),
    _d("transactional.id.expiration.ms", "int", 604800000, "A transactional id without a transaction, unused "
       "this long, is forgotten.", (), 1),
    _d("transaction.state.log.num.partitions", "int", 50, "Partitions of __transaction_state (used when the "
       "topic is created; an existing topic keeps its count).", (), 1),
    _d("transaction.state.log.segment.bytes", "int", 104857600, "segment.bytes of __transaction_state.", (), 14),
    _d("transaction.partition.verification.enable", "boolean", True, "Refuse transactional batches for a "
       "partition their transaction did not add (KIP-890 part 1).", ()),
    # -- the log cleaner (CleanerConfig; docs/compaction.md) --
    _d("log.cleaner.enable", "boolean", True, "Run the log cleaner (compacted topics are only compacted "
       "while it runs).", ()),
    _d("log.cleaner.threads", "int", 1, "Cleaner threads: one is supported (more are refused).", (), 1),
    _d("log.cleaner.dedupe.buffer.size", "long", 134217728, "Memory for the offset map, 24 bytes per key "
       "(16-byte MD5 + offset); a dirty part with more keys is cleaned in several passes.", (), 0),
    _d("log.cleaner.io.buffer.load.factor", "double", 0.9, "Share of the offset map's slots filled before a "
       "pass stops.", (), 0),
    _d("log.cleaner.io.max.bytes.per.second", "double", 1.7976931348623157e308, "Read plus write bytes per "
       "second the cleaner may use.", (), 0),
    _d("log.cleaner.backoff.ms", "long", 15000, "Sleep of the cleaner when no log needs cleaning.", (), 0),
    _d("offsets.retention.minutes", "int", 10080, "Committed offsets of groups without members are kept this "
       "long after their last commit (then tombstoned in __consumer_offsets).", (), 1),
    _d("offsets.retention.check.interval.ms", "long", 600000, "How often expired offsets are looked for.", (), 1),
    _d("offsets.topic.num.partitions", "int", 50, "Partitions of __consumer_offsets (used when the topic is "
       "created, on the first group write; an existing topic keeps its count).", (), 1),
    _d("offsets.topic.segment.bytes", "int", 104857600, "segment.bytes of __consumer_offsets.", (), 14),
    _d("delete.topic.enable", "boolean", True, "Allow DeleteTopics.", ()),
    _d("max.broker.partitions", "int", 10000,
       "chronolog (KIP-578's name): partitions the broker holds in all; CreateTopics, CreatePartitions and "
       "auto-creation beyond it get POLICY_VIOLATION instead of exhausting file descriptors and memory.", (), 1),
    _d("num.recovery.threads.per.data.dir", "int", 2, "Threads that open (and after a crash recover) the "
       "partitions of the data dir at start (Kafka's default since 4.0: 2).", (), 1),
    _d("chronolog.log.open.files.max", "int", 0,
       "chronolog (Kafka has none): most descriptors segment files (.log, index files and their maps, "
       ".txnindex) hold at once; idle ones are closed, least recently used first, and reopened on use. "
       "0: half the process's open-files limit (RLIMIT_NOFILE, raised to its hard limit at start); a "
       "figure at or above that limit is refused.", (), 0),
    _d("chronolog.log.dir.low.space.bytes", "long", 1073741824,
       "chronolog (Kafka has none): WARN once when the data dir's file system has fewer free bytes than "
       "this (checked every second), and INFO when it has more again; 0 turns the warning off.", (), 0),
    _d("chronolog.log.dir.write.retry.ms", "long", 5000,
       "chronolog: after a write to a partition failed (disk full, I/O error) its appends get "
       "KAFKA_STORAGE_ERROR without touching the disk for this long, then one tries again.", (), 1),
    # -- tiered storage (KIP-405; RemoteLogManagerConfig) --
    _d("remote.log.storage.system.enable", "boolean", False, "Allow topics with remote.storage.enable.", ()),
    _d("remote.log.manager.task.interval.ms", "long", 30000, "How often closed segments are copied to the tier "
       "and tiered segments past retention deleted.", (), 1),
    _d("remote.log.storage.dir", "string", "", "chronolog: where tiered segments go, a directory or a URI "
       "pyarrow opens (s3://bucket/prefix, gs://...); default <log.dirs>/../<data dir name>-tier.", ()),
    _d("remote.log.index.file.cache.total.size.bytes", "long", 1073741824, "Bytes of tiered indexes kept "
       "in memory (RemoteIndexCache).", (), 1),
    _d("chronolog.remote.log.reader.cache.bytes", "long", 67108864, "chronolog: bytes of tiered segments' "
       "byte ranges kept in memory.", (), 0),
    _d("listeners.allow.non.loopback.without.auth", "boolean", False,
       "chronolog: allow a listener without authentication on a non-loopback address.", ()),
    # -- listeners, TLS, SASL, ACLs, connection bounds (docs/security.md) --
    _d("listeners", "list", "", "NAME://host:port,... (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL or mapped "
       "names); empty: one PLAINTEXT listener from --host/--port.", ()),
    _d("advertised.listeners", "list", "", "Addresses given to clients in Metadata/FindCoordinator, by "
       "listener name; empty: the listener's own address.", ()),
    _d("listener.security.protocol.map", "string",
       "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
       "Listener name to security protocol.", ()),
    _d("sasl.enabled.mechanisms", "list", "SCRAM-SHA-256,SCRAM-SHA-512", "SASL mechanisms offered on SASL "
       "listeners.", (), choices=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")),
    _d("sasl.server.max.receive.size", "int", 524288, "Largest frame accepted before authentication.", (), 1),
    _d("ssl.keystore.type", "string", "PEM", "Only PEM is supported.", (), choices=("PEM",)),
    _d("ssl.keystore.location", "string", "", "PEM file with the certificate chain and the private key.", ()),
    _d("ssl.keystore.certificate.chain", "password", "", "PEM certificate chain inline (with ssl.keystore.key).",
       ()),
    _d("ssl.keystore.key", "password", "", "PEM private key inline (with ssl.keystore.certificate.chain).", ()),
    _d("ssl.key.password", "password", "", "Password of an encrypted private key.", ()),
    _d("ssl.truststore.type", "string", "PEM", "Only PEM is supported.", (), choices=("PEM",)),
    _d("ssl.truststore.location", "string", "", "PEM file of the CAs that sign client certificates.", ()),
    _d("ssl.truststore.certificates", "password", "", "PEM CA certificates inline.", ()),
    _d("ssl.client.auth", "string", "none", "Client certificates: none, requested or required.", (),
       choices=("none", "requested", "required")),
    _d("ssl.enabled.protocols", "list", "TLSv1.2,TLSv1.3", "TLS versions accepted.", (),
       choices=("TLSv1.2", "TLSv1.3")),
    _d("ssl.principal.mapping.rules", "string", "DEFAULT", "Client certificate to principal: DEFAULT is "
       "User:<subject CN>; RULE:pattern/replacement/[LU] rules apply to the RFC 2253 DN.", ()),
    _d("authorizer.class.name", "string", "", "Any non-empty value enables ACLs (chronolog-acls.json).", ()),
    _d("super.users", "string", "", "Principals allowed everything: User:a;User:b.", ()),
    _d("allow.everyone.if.no.acl.found", "boolean", False, "Allow access to resources no ACL applies to.", ()),
    _d("max.connections", "int", 2147483647, "Connections beyond this are closed at accept.", (), 0),
    _d("max.connections.per.ip", "int", 2147483647, "Connections per client IP beyond this are closed at "
       "accept.", (), 0),
    _d("max.connections.per.ip.overrides", "string", "", "Per-IP limits: ip:count,ip:count.", ()),
    _d("queued.max.requests", "int", 500, "Requests handled at once across all connections.", (), 1),
    _d("connections.max.idle.ms", "long", 600000, "Close a connection that has neither sent nor been sent a "
       "byte for this long, unless a request of it is being served (negative: never).", ()),
    _d("connections.failed.authentication.delay.ms", "int", 100,
       "How long the answer to a failed authentication is held back before it is sent and the connection "
       "closed (KIP-306): slows password guessing.", (), 0),
    _d("quota.window.num", "int", 11, "Samples a client quota rate is measured over.", (), 1),
    _d("quota.window.size.seconds", "int", 1, "Length of one client quota sample.", (), 1),
    _d("connections.max.reauth.ms", "long", 0, "Lifetime of a SASL session (KIP-368), sent to clients in "
       "SaslAuthenticate; a connection that has not re-authenticated by then is closed at its next request "
       "(0: sessions never expire).", (), 0),
)}


class Password:
    """A secret config value (Kafka's `ConfigDef.Type.PASSWORD`): `str()` hides it, as Kafka's `Password`
    does, so it never reaches a log line or a DescribeConfigs answer; `.value` is the secret."""

    __slots__ = ("value",)

    def __init__(self, value: str) -> None:
        self.value = value

    def __str__(self) -> str:
        return "[hidden]"

    __repr__ = __str__

    def __bool__(self) -> bool:
        return bool(self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Password) and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)


def _coerce(defn: ConfigDef, raw: Any, scale: int = 1) -> Any:
    value = _parse(defn, raw, scale)
    if defn.check is not None:
        defn.check(defn.name, value)
    if defn.unsupported is not None and value != defn.default:
        message = defn.unsupported
        raise InvalidConfigError(message if message == _TIERED else
                                 f"Invalid value {raw} for configuration {defn.name}: {message}")
    return value


def _parse(defn: ConfigDef, raw: Any, scale: int = 1) -> Any:
    """`ConfigDef.parseType` and the config's range validator, with Kafka's messages."""
    if raw is None:
        raise InvalidConfigError(f"{defn.name}: a value is required")
    try:
        if defn.type in ("int", "long"):
            value = int(str(raw).strip()) * scale
            if defn.minimum is not None and value < defn.minimum:
                raise InvalidConfigError(f"Invalid value {raw} for configuration {defn.name}: "
                                         f"Value must be at least {defn.minimum}")
            if defn.maximum is not None and value > defn.maximum:
                raise InvalidConfigError(f"Invalid value {raw} for configuration {defn.name}: "
                                         f"Value must be no more than {defn.maximum}")
            if defn.type == "int" and value > 2**31 - 1:
                raise InvalidConfigError(f"Invalid value {raw} for configuration {defn.name}: not an int32")
            return value
        if defn.type == "double":
            value = float(str(raw).strip())
            if value != value or (defn.minimum is not None and value < defn.minimum):
                raise InvalidConfigError(f"Invalid value {java_double(value)} for configuration {defn.name}: "
                                         f"Value must be at least {defn.minimum}")
            if defn.name in _RATIOS and value > 1:
                raise InvalidConfigError(f"Invalid value {java_double(value)} for configuration {defn.name}: "
                                         "Value must be no more than 1")
            return value
        if defn.type == "boolean":
            text = str(raw).strip().lower()
            if text not in ("true", "false"):
                raise InvalidConfigError(f"Invalid value {raw} for configuration {defn.name}: "
                                         "Expected value to be either true or false")
            return text == "true"
        if defn.type == "password":
            return raw if isinstance(raw, Password) else Password(str(raw))
        text = str(raw).strip()
        if defn.choices is not None:
            if defn.type == "list":  # an empty list is a list (KIP-1161: cleanup.policy= means neither)
                items = [t.strip() for t in text.split(",")] if text else []
            else:
                items = [text]
            for item in items:
                if item not in defn.choices:  # ValidList names the item, ValidString the value
                    raise InvalidConfigError(f"Invalid value {item} for configuration {defn.name}: "
                                             f"String must be one of: {', '.join(defn.choices)}")
            return ",".join(items) if defn.type == "list" else text
        return text
    except ValueError:
        kind = {"int": "INT", "long": "LONG", "double": "DOUBLE"}.get(defn.type, defn.type.upper())
        raise InvalidConfigError(f"Invalid value {raw} for configuration {defn.name}: "
                                 f"Not a number of type {kind}") from None


def java_double(value: float) -> str:
    """A double as Java's `Double.toString` writes it (what Kafka answers and prints): 0.5, 2.0, 1.0E7,
    1.7976931348623157E308 (the shortest digits, as Python's repr, in Java's layout)."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(float(value))
    from decimal import Decimal  # here, not at the top: every process that reads a config would import it

    sign, digits, exponent = Decimal(repr(float(value))).normalize().as_tuple()
    text = "".join(map(str, digits))
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{len(text) + int(exponent) - 1}"


_RATIOS = ("min.cleanable.dirty.ratio", "log.cleaner.io.buffer.load.factor")


def _attr(name: str) -> str:
    return name.replace(".", "_")


@dataclass(frozen=True)
class TopicConfig:
    """The effective config of one topic. Build with `from_kafka`; attributes are the Kafka names in
    snake_case (`segment.bytes` -> `segment_bytes`)."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_ms: int = 604800000
    retention_bytes: int = -1
    cleanup_policy: str = "delete"
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = 3600000
    message_timestamp_difference_max_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60000
    max_message_bytes: int = 1048588
    compression_type: str = "producer"
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    preallocate: bool = False
    min_insync_replicas: int = 1
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    max_decompressed_message_bytes: int = 2147483639
    errors_deadletterqueue_group_enable: bool = False
    remote_storage_enable: bool = False
    remote_log_copy_disable: bool = False
    remote_log_delete_on_disable: bool = False
    local_retention_ms: int = -2
    local_retention_bytes: int = -2
    remote_copy_lag_ms: int = 0
    remote_copy_lag_bytes: int = -1
    leader_replication_throttled_replicas: str = ""
    follower_replication_throttled_replicas: str = ""
    unclean_leader_election_enable: bool = False

    @classmethod
    def from_kafka(cls, overrides: Mapping[str, str] | None = None,
                   defaults: Mapping[str, str] | None = None, *, validate_values: bool = True) -> TopicConfig:
        """Topic-level overrides on top of broker-level defaults (already in topic names).

        `validate_values=False` skips the rules between configs (`validate_values`), for configs already
        stored: a data dir written before a rule existed still opens (each value is still checked).

        The deprecated `message.timestamp.difference.max.ms` fills the before/after bounds only where they
        were not set explicitly, as `LogConfig.getMessageTimestampBeforeMaxMs` did in Kafka 3.6-3.9.
        """
        merged: dict[str, str] = {}
        for source in (defaults or {}, overrides or {}):
            for key, value in source.items():
                if key not in TOPIC_CONFIGS:
                    raise InvalidConfigError(f"Unknown topic config name: {key}")
                merged[key] = value
        values = {_attr(name): _coerce(TOPIC_CONFIGS[name], raw) for name, raw in merged.items()}
        diff = values.get("message_timestamp_difference_max_ms")
        if diff is not None:
            values.setdefault("message_timestamp_before_max_ms", diff)
            values.setdefault("message_timestamp_after_max_ms", diff)
        config = cls(**values)
        if validate_values:
            config.validate_values()
        return config

    def validate_values(self) -> None:
        """The rules between configs (`LogConfig.validateValues`), checked on the merged config at creation,
        alteration and broker start, as Kafka does."""
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise InvalidConfigError(f"conflict topic config setting min.compaction.lag.ms "
                                     f"({self.min_compaction_lag_ms}) > max.compaction.lag.ms "
                                     f"({self.max_compaction_lag_ms})")

    def to_kafka(self) -> dict[str, str]:
        out = {}
        for name in TOPIC_CONFIGS:
            value = getattr(self, _attr(name))
            out[name] = str(value).lower() if isinstance(value, bool) else \
                java_double(value) if isinstance(value, float) else str(value)
        return out

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def compacted(self) -> bool:
        """`cleanup.policy` holds `compact` (alone or with `delete`): the log cleaner's, keys required."""
        return "compact" in self.cleanup_policy

    @property
    def deletes(self) -> bool:
        """`cleanup.policy` holds `delete`: retention and DeleteRecords apply."""
        return "delete" in self.cleanup_policy


def validate_topic_overrides(overrides: Mapping[str, str]) -> dict[str, str]:
    """Check names and values; returns the overrides normalised to strings (raises InvalidConfigError)."""
    TopicConfig.from_kafka(overrides)
    return {k: str(v) for k, v in overrides.items()}


def _check_local_retention(unit: str, local: int, total: int) -> None:
    """`LogConfig`'s checks of local.retention.bytes and local.retention.ms: local.retention.<unit> (-2: as
    retention.<unit>) may be neither -1 nor more than a bounded retention.<unit>, with Kafka's messages."""
    if total > -1 and local != -2:
        if local == -1:
            raise InvalidConfigError(f"Invalid value -1 for configuration local.retention.{unit}: Value must not be "
                                     f"-1 as retention.{unit} value is set as {total}.")
        if local > total:
            raise InvalidConfigError(f"Invalid value {local} for configuration local.retention.{unit}: Value must "
                                     f"not be more than retention.{unit} property value: {total}")


def validate_remote_storage(config: TopicConfig, *, system_enabled: bool, was_enabled: bool = False) -> None:
    """`LogConfig.validateTopicLogConfigValues`' rules of tiered storage (KIP-405, KIP-950), checked where a
    topic's configs are created or altered, with Kafka's messages."""
    if config.remote_storage_enable:
        if not system_enabled:
            raise InvalidConfigError(_TIERED)
        if config.compacted:
            raise InvalidConfigError("Remote log storage is unsupported for the compacted topics")
        _check_local_retention("bytes", config.local_retention_bytes, config.retention_bytes)
        _check_local_retention("ms", config.local_retention_ms, config.retention_ms)
        if config.remote_log_copy_disable:
            if config.local_retention_bytes not in (-2, config.retention_bytes):
                raise InvalidConfigError("When `remote.log.copy.disable` is set to true, the `local.retention.bytes` "
                                         "and `retention.bytes` must be set to the identical value because there "
                                         "will be no more logs copied to the remote storage.")
            if config.local_retention_ms not in (-2, config.retention_ms):
                raise InvalidConfigError("When `remote.log.copy.disable` is set to true, the `local.retention.ms` "
                                         "and `retention.ms` must be set to the identical value because there will "
                                         "be no more logs copied to the remote storage.")
        # Kafka 4.4's delayed upload (remote.copy.lag.*) is not built here: refused rather than ignored.
        if config.remote_copy_lag_ms != 0:
            raise InvalidConfigError(f"Invalid value {config.remote_copy_lag_ms} for configuration remote.copy.lag.ms: "
                                     "chronolog copies a segment once it is closed (only 0 is accepted)")
        if config.remote_copy_lag_bytes != -1:
            raise InvalidConfigError(f"Invalid value {config.remote_copy_lag_bytes} for configuration "
                                     "remote.copy.lag.bytes: chronolog copies a segment once it is closed (only -1 "
                                     "is accepted)")
    elif was_enabled and not config.remote_log_delete_on_disable:
        raise InvalidConfigError(
            "It is invalid to disable remote storage without deleting remote data. If you want to keep the remote "
            "data and turn to read only, please set `remote.storage.enable=true,remote.log.copy.disable=true`. If "
            "you want to disable remote storage and delete all remote data, please set "
            "`remote.storage.enable=false,remote.log.delete.on.disable=true`.")


class BrokerConfig:
    """Broker-level settings by Kafka's names, plus the broker synonyms of every topic config."""

    def __init__(self, settings: Mapping[str, str] | None = None) -> None:
        self._raw: dict[str, str] = {}
        self._topic_defaults: dict[str, str] = {}
        self._values: dict[str, Any] = {name: d.default for name, d in BROKER_CONFIGS.items()}
        synonym_of: dict[str, tuple[ConfigDef, str]] = {}
        for defn in TOPIC_CONFIGS.values():
            for syn in defn.synonyms:
                synonym_of[syn] = (defn, syn)
        broker_synonym_of = {syn: d for d in BROKER_CONFIGS.values() for syn in d.synonyms}
        # Apply finer-grained synonyms last so `log.retention.ms` beats `log.retention.hours` (Kafka's order).
        items = sorted((settings or {}).items(), key=lambda kv: -self._rank(kv[0], synonym_of))
        for key, raw in items:
            self._raw[key] = str(raw)
            if key in BROKER_CONFIGS or key in broker_synonym_of:
                defn = BROKER_CONFIGS.get(key) or broker_synonym_of[key]
                self._values[defn.name] = _coerce(defn, raw)
            elif key in synonym_of:
                defn, syn = synonym_of[key]
                value = _coerce(dataclasses.replace(defn, minimum=None), raw, defn.synonym_scale.get(syn, 1))
                if defn.synonym_negative is not None and value < 0:
                    value = defn.synonym_negative
                if defn.minimum is not None and value < defn.minimum:
                    bound = f": Value must be at least {defn.minimum}" if syn not in defn.synonym_scale else ""
                    raise InvalidConfigError(f"Invalid value {raw} for configuration {key}{bound}")
                self._topic_defaults[defn.name] = str(value).lower() if isinstance(value, bool) else str(value)
            elif key in TOPIC_CONFIGS:
                self._topic_defaults[key] = str(_coerce(TOPIC_CONFIGS[key], raw))
            else:
                raise InvalidConfigError(f"Unknown broker config name: {key}")
        TopicConfig.from_kafka(self._topic_defaults)
        if self._values["log.cleaner.threads"] != 1:
            raise InvalidConfigError(f"Invalid value {self._values['log.cleaner.threads']} for configuration "
                                     "log.cleaner.threads: chronolog runs one cleaner thread (set 1)")

    @staticmethod
    def _rank(key: str, synonym_of: Mapping[str, tuple[ConfigDef, str]]) -> int:
        if key not in synonym_of:
            return 0
        defn, syn = synonym_of[key]
        return defn.synonyms.index(syn)

    def get(self, name: str) -> Any:
        if name in self._values:
            return self._values[name]
        raise InvalidConfigError(f"Unknown broker config name: {name}")

    def __getitem__(self, name: str) -> Any:
        return self.get(name)

    def topic_defaults(self) -> dict[str, str]:
        """Broker-level defaults for topic configs, in topic-config names."""
        return dict(self._topic_defaults)

    def default_topic_config(self) -> TopicConfig:
        return TopicConfig.from_kafka(None, self._topic_defaults)

    def raw(self) -> dict[str, str]:
        return dict(self._raw)


def parse_pairs(items: list[str], option: str = "--config") -> dict[str, str]:
    """`key=value` items as given on a command line (`--config`, `-X`), one clear error for anything else."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ChronologError(f"{option} takes key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


REPLICATION_FACTOR_INVALID = "Replication factor must be larger than 0, or -1 to use the default value."


def check_replication_factor(factor: int, default: int) -> None:
    """A new topic's replication factor as a one-node KRaft controller checks it (ReplicationControlManager):
    -1 is `default.replication.factor` (`default`), and one broker honours no more than 1."""
    if factor < -1 or factor == 0:
        raise InvalidReplicationFactorError(REPLICATION_FACTOR_INVALID)
    factor = default if factor == -1 else factor
    if factor > 1:
        raise InvalidReplicationFactorError(f"Unable to replicate the partition {factor} time(s): The target "
                                            f"replication factor of {factor} cannot be reached because only 1 "
                                            "broker(s) are registered or some brokers have all their log "
                                            "directories cordoned.")
