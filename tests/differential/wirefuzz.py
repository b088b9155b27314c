"""Valid Kafka requests made at random from Kafka's message schemas (kio's classes), sent raw to a broker, and
the error codes of the answers: the wire-level differential fuzzer's parts (test_wire_fuzz.py runs them).

A request is generated as plain values by walking the request class's fields: strings from small pools of
names that exist on both brokers and names that do not, integers near the boundaries that matter for their
field, arrays of 0-3 entries, nullable fields sometimes null. `FIXES` then adjusts, per API, what would make
the comparison meaningless (a state change that differs by design, a wait as long as a random timeout);
each adjustment names its reason. Topic ids differ between the brokers: requests carry `TopicRef`s, turned
into each broker's id of that topic when the request is written.

Everything is drawn from one `random.Random`: a seed gives the same requests in the same order.
"""

from __future__ import annotations

import dataclasses
import datetime
import random
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)

from chronolog.protocol import codec
from chronolog.records import SimpleRecord, build_batch
from tests.differential.wire import API_VERSIONS as API_VERSIONS  # re-exported: the tests name them here
from tests.differential.wire import CLOSED as CLOSED
from tests.differential.wire import TIMED_OUT as TIMED_OUT
from tests.differential.wire import Wire as Wire
from tests.differential.wire import error_codes as error_codes
from tests.differential.wire import request_class as request_class


@dataclasses.dataclass(frozen=True)
class TopicRef:
    """The id of one of the fuzzer's topics, whichever broker it is written for."""

    name: str


@dataclasses.dataclass(frozen=True)
class ProducerRef:
    """The producer id or epoch (`field` "id" or "epoch") a broker last gave one of the fuzzer's
    transactional ids (its InitProducerId or EndTxn v5 answer, `track_producers`), whichever broker the
    request is written for, plus `delta` (an epoch before or after it); -1 before any."""

    transactional_id: str
    field: str
    delta: int = 0


def track_producers(api_key: int, values: dict, body: Any, producers: dict) -> None:
    """Note the producer id and epoch of a transactional id an answer gave, for its ProducerRefs."""
    txn_id = values.get("transactional_id")
    if api_key not in (22, 26) or not txn_id or getattr(body, "error_code", None) != 0:
        return
    if getattr(body, "producer_id", -1) >= 0:
        producers[ProducerRef(txn_id, "id")] = int(body.producer_id)
        producers[ProducerRef(txn_id, "epoch")] = int(body.producer_epoch)


# -- values -------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Pools:
    """The names requests draw from: the fuzzer's topics (which exist on both brokers) and names that exist
    nowhere, groups, transactional ids."""

    topics: tuple[str, ...]
    missing_topics: tuple[str, ...] = ("fz-missing", "fz-missing-2")
    groups: tuple[str, ...] = ("fz-group", "fz-group-2")
    transactional_ids: tuple[str, ...] = ("fz-txn", "fz-txn-2")
    users: tuple[str, ...] = ("fz-user", "fz-user-2")
    partitions: dict[str, int] = dataclasses.field(default_factory=dict)  # of each topic (1 if not given)
    share_groups: tuple[str, ...] = ("fz-share", "fz-share-2")  # the only groups share-group APIs make

    def topic(self, rng: random.Random) -> str:
        return rng.choice(self.topics + self.topics + self.missing_topics)


INT_BITS = {"int8": 8, "int16": 16, "uint16": 16, "int32": 32, "int64": 64}
TIME_FIELDS = {"timedelta_i32", "timedelta_i64"}
CONFIG_NAMES = ("retention.ms", "cleanup.policy", "segment.bytes", "min.insync.replicas", "max.message.bytes",
                "no.such.config", "")
CONFIG_VALUES = ("1000", "-1", "compact", "delete", "abc", "")
NOW_MS = 1_750_000_000_000


def _boundary(rng: random.Random, bits: int) -> int:
    top = (1 << (bits - 1)) - 1
    return rng.choice([0, 1, -1, 2, 3, top, -top - 1, rng.randrange(-100, 100)])


def _int_for(name: str, kafka_type: str, rng: random.Random) -> int:
    """An integer for field `name`: near the values that decide something for such a field."""
    bits = INT_BITS[kafka_type]
    if kafka_type == "uint16":  # a port (StreamsGroupHeartbeat's Endpoint): unsigned
        return rng.choice([0, 1, 9092, 65535])
    if kafka_type == "int16" and name.endswith(("_topics", "_regex")):  # CopartitionGroup: indexes into arrays
        return rng.choice([0, 0, 1, 2, -1, 7])
    if "partition" in name or name in ("index",):
        return rng.choice([0, 0, 1, 2, -1, 7, (1 << 31) - 1])
    if "timestamp" in name:
        return rng.choice([-1, -2, -3, -4, -5, -6, -7, 0, NOW_MS, NOW_MS + 10**12])
    if "offset" in name:
        return rng.choice([-1, -2, 0, 0, 1, 5, 1000, (1 << 63) - 1])
    if "epoch" in name:
        return rng.choice([-1, 0, 0, 1, 5])
    if name == "producer_id":
        return rng.choice([-1, 0, 4242])
    if name in ("num_partitions", "count"):
        return rng.choice([-1, 0, 1, 2, 4, 100_000])
    if name == "replication_factor":
        return rng.choice([-1, 0, 1, 2])
    if name in ("resource_type", "resource_type_filter"):
        return rng.choice([0, 1, 2, 2, 3, 4, 5, 6, 99])
    if name in ("pattern_type", "pattern_type_filter"):
        return rng.choice([0, 1, 2, 3, 3, 4, 9])
    if name == "operation":
        return rng.choice(range(0, 15))
    if name == "permission_type":
        return rng.choice([0, 1, 2, 3])
    if name == "key_type":
        return rng.choice([0, 0, 1, 2, 3])
    if name == "isolation_level":
        return rng.choice([0, 0, 1, 2])
    if name == "config_operation":
        return rng.choice([0, 1, 2, 3, 4])
    if name == "acks":
        return rng.choice([-1, 1, 1, 2])  # (0: no answer to compare)
    if name in ("max_bytes", "min_bytes", "partition_max_bytes"):
        return rng.choice([0, 1, 1 << 20, -1, (1 << 31) - 1])
    if name in ("node_id", "broker_id", "replica_id", "leader_id"):
        return rng.choice([-1, 0, 1, 2])
    return _boundary(rng, bits)


def _string_for(name: str, owner: str, rng: random.Random, pools: Pools) -> str:
    lower_owner = owner.lower()
    if name == "name" and "config" in lower_owner:
        return rng.choice(CONFIG_NAMES)
    if name == "value" and "config" in lower_owner:
        return rng.choice(CONFIG_VALUES)
    if name == "name" and "protocol" in lower_owner:
        return rng.choice(["range", "roundrobin", "x"])
    if name in ("name", "topic", "topic_name", "topics", "topic_names", "subscribed_topic_names"):
        if any(w in lower_owner for w in ("user", "scram")):
            return rng.choice(pools.users)
        return pools.topic(rng)
    if "group" in name or name in ("key", "coordinator_keys", "groups_names", "groups", "states_filter"):
        return rng.choice(pools.groups + pools.transactional_ids + ("",))
    if "transactional_id" in name:
        return rng.choice(pools.transactional_ids + ("",))
    if name in ("member_id",):
        return rng.choice(["", "fz-member"])
    if name in ("protocol_type",):
        return rng.choice(["consumer", ""])
    if name == "mechanism":
        return rng.choice(["PLAIN", "SCRAM-SHA-256", "GSSAPI"])
    if name.startswith("client_software"):
        return rng.choice(["wirefuzz", "1.0", "bad name!"])
    if name in ("resource_name", "resource_name_filter", "entity_name", "match"):
        return rng.choice([*pools.topics[:1], "*", "kafka-cluster", "1", pools.missing_topics[0]])
    if "principal" in name:
        return rng.choice(["User:alice", "User:*", "bad"])
    if name in ("host", "host_filter"):
        return rng.choice(["*", "127.0.0.1"])
    if name in ("entity_type", "key") or "quota" in name:
        return rng.choice(["user", "client-id", "producer_byte_rate", "nope"])
    if "path" in name or "dir" in name:
        return rng.choice(["/nonexistent", ""])
    return rng.choice(["", "x", "fuzz"])


def _records(rng: random.Random) -> bytes | None:
    """A Produce partition's records: usually one valid v2 batch, sometimes none or empty. (Not garbage: Kafka
    4.4 then fails every partition of the request with CORRUPT_MESSAGE, chronolog only that partition; in
    docs/differences.md.)"""
    if rng.random() < 0.05:  # (not null: Kafka 4.4 never answers a Produce with null records)
        return b""
    now = int(time.time() * 1000)
    records = [SimpleRecord(now, rng.choice([None, b"k"]), rng.randbytes(rng.choice([0, 10, 100])))
               for _ in range(rng.choice([1, 1, 3]))]
    return build_batch(records)


def values_for(cls: type, rng: random.Random, pools: Pools, depth: int = 0) -> dict[str, Any]:
    """Plain values for every field of kio class `cls` (codec.build makes the entity)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        kind = classify_field(f)
        optional = is_optional(f)
        if optional and rng.random() < 0.15:
            out[f.name] = None
            continue
        if isinstance(kind, EntityField):
            out[f.name] = values_for(kind.type_, rng, pools, depth + 1)
        elif isinstance(kind, EntityTupleField):
            out[f.name] = [values_for(kind.type_, rng, pools, depth + 1) for _ in range(_count(rng, depth))]
        elif isinstance(kind, PrimitiveTupleField):
            kafka_type = f.metadata.get("kafka_type")
            out[f.name] = [_primitive(f.name, kafka_type, cls.__name__, rng, pools) for _ in range(_count(rng, depth))]
        else:
            out[f.name] = _primitive(f.name, f.metadata.get("kafka_type"), cls.__name__, rng, pools)
    return out


def _count(rng: random.Random, depth: int) -> int:
    return rng.choice([0, 1, 1, 2, 3] if depth < 2 else [0, 1, 2])


def _primitive(name: str, kafka_type: str | None, owner: str, rng: random.Random, pools: Pools) -> Any:
    if kafka_type in INT_BITS:
        return _int_for(name, kafka_type, rng)
    if kafka_type in TIME_FIELDS:
        return datetime.timedelta(milliseconds=rng.choice([0, 10, 50, 6000, 30_000, -1]))
    if kafka_type == "datetime_i64":
        return datetime.datetime.fromtimestamp(NOW_MS / 1000, datetime.UTC)
    if kafka_type == "bool":
        return rng.random() < 0.5
    if kafka_type == "float64":
        return rng.choice([0.0, 1.5, -1.0, 1e9])
    if kafka_type == "uuid":
        return rng.choice([TopicRef(rng.choice(pools.topics)), TopicRef(rng.choice(pools.topics)),
                           uuid.UUID(int=0), uuid.UUID(int=rng.getrandbits(128))])
    if kafka_type == "records":
        return _records(rng)
    if kafka_type == "bytes":
        return rng.randbytes(rng.choice([0, 4, 16]))
    if kafka_type == "string":
        return _string_for(name, owner, rng, pools)
    raise AssertionError(f"no generator for {kafka_type} ({owner}.{name})")


def resolve(values: Any, ids: dict[Any, Any]) -> Any:
    """`values` with each TopicRef replaced by this broker's id of the topic, each ProducerRef by its
    producer id or epoch (in `ids` too)."""
    if isinstance(values, TopicRef):
        return ids[values.name]
    if isinstance(values, ProducerRef):
        known = ids.get(ProducerRef(values.transactional_id, values.field))
        return -1 if known is None else known + values.delta
    if isinstance(values, dict):
        return {k: resolve(v, ids) for k, v in values.items()}
    if isinstance(values, list):
        return [resolve(v, ids) for v in values]
    return values


# -- classic groups' timers ---------------------------------------------------------------------------------
SESSION_TIMEOUT = datetime.timedelta(seconds=6)  # Kafka's group.min.session.timeout.ms (chronolog's too)
REBALANCE_TIMEOUT = datetime.timedelta(seconds=3)
JOIN_GROUP, SYNC_GROUP, LEAVE_GROUP = 11, 14, 13
MEMBER_ID_REQUIRED = 79


class GroupTimers:
    """The moments a classic group's timers may fire on either broker, waited out before the next request.

    A member's session, its SyncGroup (`expirePendingSync`), a rebalance's wait for the members to rejoin and
    a KIP-394 pending member each end a timeout after a JoinGroup or LeaveGroup answered (GroupMetadataManager
    arms them then): the same moment on both brokers but for a few milliseconds. A request arriving within
    them would find the member on one broker and not on the other; so from each such request's sending to
    its answer, plus each timeout the group's joins gave, and a margin either side, no request is sent.
    """

    def __init__(self, margin: float = 0.1) -> None:
        self.margin = margin
        self.timeouts: dict[str, set[float]] = {}  # a group's session and rebalance timeouts, in seconds
        self.windows: list[tuple[float, float]] = []

    def wait(self) -> None:
        """Until no timer may fire soon (a margin covers the coming request's own time)."""
        while True:
            now = time.monotonic()
            self.windows = [w for w in self.windows if w[1] > now]
            ends = [end for start, end in self.windows if start <= now + self.margin]
            if not ends:
                return
            time.sleep(max(ends) - now)

    def note(self, api_key: int, values: dict, answers: list[list[tuple[str, int]]], sent: float,
             answered: float) -> None:
        """After a request sent at `sent` and answered (by both brokers) at `answered`, with each broker's
        error codes: a join that made a member (or a pending one), or a leave that removed one, arms timers."""
        group = values.get("group_id")
        if api_key == JOIN_GROUP:
            if not any(code in (0, MEMBER_ID_REQUIRED) for codes in answers for _, code in codes):
                return
            session = values["session_timeout"].total_seconds()
            rebalance = values["rebalance_timeout"].total_seconds() if "rebalance_timeout" in values else session
            self.timeouts.setdefault(group, set()).update((session, max(rebalance, 0.0)))
        elif api_key not in (LEAVE_GROUP, SYNC_GROUP) or group not in self.timeouts or not any(
                code == 0 for codes in answers for code in _member_codes(codes)):
            return
        for timeout in self.timeouts[group]:
            self.windows.append((sent + timeout - self.margin, answered + timeout + self.margin))


def _member_codes(codes: list[tuple[str, int]]) -> list[int]:
    """A LeaveGroup's answers for its members (v3+: each member's, before: the request's) or a SyncGroup's."""
    return [c for path, c in codes if path == "members.error_code"] or [c for path, c in codes if path == "error_code"]


# -- per-API adjustments ------------------------------------------------------------------------------------
def _short_waits(v: dict, *names: str) -> None:
    for name in names:
        if name in v:
            v[name] = datetime.timedelta(milliseconds=min(max(v[name].total_seconds() * 1000, 0), 50))


def _validate_only(v: dict, version: int, rng: random.Random, pools: Pools) -> None:
    """Creations and config changes only validated: a change would differ in time on the two brokers (Kafka
    applies them through its controller, asynchronously)."""
    v["validate_only"] = True
    _controller_timeout(v)


# ConfigResource.Type.forId: any other id is UNKNOWN (0)
_CONFIG_RESOURCE_TYPES = frozenset({0, 2, 4, 8, 16, 32})


def _fix_alter_configs(v: dict, version: int, rng: random.Random, pools: Pools) -> None:
    """Validated only, and no resource twice: Kafka 4.4 never answers a legacy AlterConfigs naming one
    resource twice, counting every unknown type as UNKNOWN (its response's map of resources throws
    IllegalStateException); chronolog answers each INVALID_REQUEST. Pinned by test_wire_fuzz.py."""
    _validate_only(v, version, rng, pools)
    seen: set[tuple[int, str]] = set()
    kept = []
    for r in v.get("resources") or ():
        key = (r["resource_type"] if r["resource_type"] in _CONFIG_RESOURCE_TYPES else 0, r["resource_name"])
        if key not in seen:
            seen.add(key)
            kept.append(r)
    v["resources"] = kept


def _controller_timeout(v: dict) -> None:
    """Time enough for Kafka's controller: with a few milliseconds Kafka answers REQUEST_TIMED_OUT, a matter
    of its timing, not of what it decides."""
    if "timeout" in v:
        v["timeout"] = datetime.timedelta(seconds=10)


def _fix_elect_leaders(v: dict, version: int, rng: random.Random, pools: Pools) -> None:
    """No timeout of a few milliseconds: Kafka's controller times the election out (REQUEST_TIMED_OUT) only
    if its event queue reaches it after the deadline (QuorumController.electLeaders, KafkaEventQueue), a race
    whose result depends on its load; chronolog answers the election. Timeouts of 0 or less (timed out on
    both) and long ones stay. Pinned by test_wire_fuzz_sweep.py::test_elect_leaders_with_a_short_timeout."""
    if datetime.timedelta(0) < v["timeout"] < datetime.timedelta(seconds=1):
        v["timeout"] = datetime.timedelta(seconds=10)


def _fix_produce(v: dict, version: int, rng: random.Random, pools: Pools) -> None:
    v["transactional_id"] = None  # transactional batches need a transaction: InitProducerId first (not fuzzed)
    # acks other than -1, 0, 1: Kafka 4.4's answers vary (CORRUPT_MESSAGE, or none at all); 0: no answer
    v["acks"] = rng.choice([-1, 1])
    seen = set()
    for t in v.get("topic_data") or ():
        # a partition twice in one request: Kafka 4.4 appends one occurrence's records but may answer with
        # another's validation error (its response map merges them); chronolog answers and appends the last
        key = t.get("name") or t.get("topic_id")
        t["partition_data"] = [p for p in t["partition_data"]
                               if not ((key, p["index"]) in seen or seen.add((key, p["index"])))]
        for p in t["partition_data"]:
            if p["records"] is None:  # null records: Kafka 4.4 never answers the request
                p["records"] = b""
    _short_waits(v, "timeout")


def _fix_fetch(v: dict, version: int, rng: random.Random, pools: Pools) -> None:
    # chronolog has no incremental fetch sessions (docs/differences.md): sessionless requests only; no
    # follower fetches (replica ids, replica state, cluster id: replication is not served).
    v["session_id"] = 0
    v["session_epoch"] = rng.choice([-1, 0])
    v["replica_id"] = -1
    v.pop("replica_state", None)
    v["cluster_id"] = None
    v["forgotten_topics_data"] = []
    _short_waits(v, "max_wait")
    # Kafka 4.4 fails these with UNKNOWN_SERVER_ERROR (its IsolationLevel.forId throws; a negative byte limit
    # reaches an internal error): nothing to copy
    v["isolation_level"] = rng.choice([0, 1])
    for key in ("min_bytes", "max_bytes"):
        v[key] = abs(v[key])
    for t in v.get("topics") or ():
        topic_id = t.get("topic_id")
        if version >= 13 and not isinstance(topic_id, TopicRef) and (topic_id is None or not topic_id.int):
            # the null topic id with more than one partition: Kafka 4.4 fails the request with
            # UNKNOWN_SERVER_ERROR (with one partition both answer UNKNOWN_TOPIC_ID, pinned)
            t["topic_id"] = TopicRef(rng.choice(pools.topics))
        for p in t.get("partitions") or ():
            p["partition_max_bytes"] = abs(p["partition_max_bytes"])
    for t in v.get("topics") or ():
        for p in t.get("partitions") or ():
            p.pop("replica_directory_id", None)
            p.pop("high_watermark", None)
            p["log_start_offset"] = -1  # only followers send it


def _fix_metadata(v: dict, version: int, rng: random.Random, pools: Pools) -> None:
    # Auto-creation's answers differ by design (Kafka: UNKNOWN_TOPIC_OR_PARTITION until its controller made
    # the topic; chronolog: ready at once, docs/differences.md), and would leave topics only one side has:
    # none asked for (v0-3 cannot say so: existing topics only).
    v["allow_auto_topic_creation"] = False
    if v.get("topics") is None or (version == 0 and not v.get("topics")):
        # "every topic" answers for whatever other tests left on each broker: the fuzzer's own topics instead
        v["topics"] = [{"name": name} for name in pools.topics]
    for t in v.get("topics") or ():
        topic_id = t.get("topic_id")
        if version >= 12 and t.get("name") is None and (topic_id is None or getattr(topic_id, "int", 1) == 0):
            t["name"] = rng.choice(pools.topics)  # neither name nor id: Kafka 4.4 fails (UNKNOWN_SERVER_ERROR)
    if version < 4 and v.get("topics"):
        for t in v["topics"]:
            t["name"] = rng.choice(pools.topics)


def _fix_list_offsets(v: dict, version: int, rng: random.Random, pools: Pools) -> None:
    _fix_replica(v, version, rng, pools)
    v["isolation_level"] = rng.choice([0, 1])  # 2: Kafka's IsolationLevel.forId throws (UNKNOWN_SERVER_ERROR)


def _fix_replica(v: dict, version: int, rng: random.Random, pools: Pools) -> None:
    v["replica_id"] = -1  # consumers only: replicas' requests are not served (no replication)


def _fix_delete_topics(v: dict, version: int, rng: random.Random, pools: Pools) -> None:
    """Only topics that exist on neither side: Kafka deletes asynchronously, and the fuzzer's topics must stay."""
    for key in ("topic_names",):
        if key in v:
            v[key] = [rng.choice(pools.missing_topics) for _ in v[key]]
    for t in v.get("topics") or ():
        t["name"] = rng.choice(pools.missing_topics + (None,))
        if not isinstance(t.get("topic_id"), uuid.UUID):
            t["topic_id"] = uuid.UUID(int=rng.getrandbits(128))
    _controller_timeout(v)


def _fix_join(v: dict, version: int, rng: random.Random, pools: Pools) -> None:
    # Before v4 an unknown member only (a new member without id would wait for the rebalance); from v4 the
    # empty id is answered MEMBER_ID_REQUIRED at once, or joins a static member.
    if version < 4 or not v.get("member_id"):
        v["member_id"] = "fz-member" if version < 4 else rng.choice(["", "fz-member"])
    # A protocol named twice: Kafka 4.4 never answers such a join once it reaches a rebalance, and the group
    # stays PreparingRebalance for good (pinned by tests/differential/test_groups_fuzzed.py): each name once.
    seen: set[str] = set()
    v["protocols"] = [p for p in v["protocols"] if not (p["name"] in seen or seen.add(p["name"]))]
    # Static members (v5+, no member id) do join. A valid session timeout is the shortest one brokers take
    # (group.min.session.timeout.ms) and a rebalance timeout at most 3 s: a join waits for a group's other
    # members at most that long, well within the Wire's timeout, and GroupTimers knows when members expire
    # (the fuzzer never sends a member's SyncGroup: it is removed a rebalance timeout after its join).
    # Half the joins get that session timeout (of the generator's values only a third are valid), more of
    # them no member id and the consumer protocol type: more members, whose groups the other APIs then find.
    if rng.random() < 0.5:
        v["session_timeout"] = SESSION_TIMEOUT
    if version >= 4 and rng.random() < 0.5:
        v["member_id"] = ""
    if not v["protocol_type"] and rng.random() < 0.5:
        v["protocol_type"] = "consumer"
    for key, bound in (("session_timeout", SESSION_TIMEOUT), ("rebalance_timeout", REBALANCE_TIMEOUT)):
        if key in v and v[key] > bound:
            v[key] = bound


def _fix_heartbeat_848(v: dict, version: int, rng: random.Random, pools: Pools) -> None:
    # Joining (epoch 0) starts a member whose session then runs out at different moments on the two brokers.
    if v.get("member_epoch") == 0:
        v["member_epoch"] = rng.choice([-1, 1, 5])


def _fix_scram(v: dict, version: int, rng: random.Random, pools: Pools) -> None:
    v["upsertions"] = []  # no users made: the shared brokers' other tests list users


def _fix_timeouts(v: dict, version: int, rng: random.Random, pools: Pools) -> None:
    _short_waits(v, "timeout")


def _fix_describe_topic_partitions(v: dict, version: int, rng: random.Random, pools: Pools) -> None:
    """Named topics only: an empty list asks for every topic of the broker, and the two sides are shared
    with the other differential tests, whose topics differ in time (Kafka creates and deletes in the
    background). The paging over every topic is compared by tests/protocol/test_consumer_groups.py."""
    if not v.get("topics"):
        v["topics"] = [{"name": rng.choice(pools.topics)}]


def _fix_streams_heartbeat(v: dict, version: int, rng: random.Random, pools: Pools) -> None:
    """Topologies without internal topics: Kafka creates a topology's changelog and repartition topics in the
    background after answering, chronolog at once, so a later request would find a topic on one broker only
    (tests/differential/test_streams_groups.py compares the creation itself, waiting for Kafka). Client tags
    name each key once: Kafka 4.4 fails a heartbeat naming one twice with UNKNOWN_SERVER_ERROR (its map of
    tags throws), and so does one whose topology's epoch is negative (StreamsTopology throws): neither is
    generated; pinned by test_wire_fuzz_sweep.py::test_streams_heartbeats_kafka_fails. Nor a join with a user
    endpoint whose topology reads a topic that does not exist: Kafka 4.4 fails it with UNKNOWN_SERVER_ERROR (its
    EndpointToPartitionsManager throws), chronolog lets the member join; its source topics are the pool's
    (pinned by test_wire_fuzz_sweep.py::test_streams_join_with_an_endpoint_and_missing_topics). Each
    subtopology id once: Kafka 4.4 fails a topology naming one twice with UNKNOWN_SERVER_ERROR, chronolog
    answers STREAMS_INVALID_TOPOLOGY (seed 27; pinned by test_streams_heartbeats_kafka_fails)."""
    if v.get("topology") is not None and v.get("user_endpoint") is not None:
        for sub in v["topology"]["subtopologies"]:
            sub["source_topics"] = [t if t in pools.topics else pools.topics[0] for t in sub["source_topics"]]
    if v.get("topology") is not None:
        ids: set[str] = set()
        v["topology"]["subtopologies"] = [s for s in v["topology"]["subtopologies"]
                                          if not (s["subtopology_id"] in ids or ids.add(s["subtopology_id"]))]
    if v.get("topology") is not None and v["topology"]["epoch"] < 0:
        v["topology"]["epoch"] = 0
    if v.get("client_tags"):
        seen: set[str] = set()
        v["client_tags"] = [t for t in v["client_tags"] if not (t["key"] in seen or seen.add(t["key"]))]
    for sub in (v.get("topology") or {}).get("subtopologies") or ():
        sub["state_changelog_topics"] = []
        sub["repartition_source_topics"] = []
        sub["copartition_groups"] = []


# Producer ids neither broker hands out: Kafka counts from 0 (blocks of 1,000 from its controller),
# chronolog from the clock in milliseconds, so a small id names a producer of one broker only.
UNALLOCATED_PRODUCER_ID = 1 << 48


def _fix_producer_ids(v: dict, version: int, rng: random.Random, pools: Pools) -> None:
    """The transaction APIs: half the time the producer id (and mostly its epoch) a broker gave the
    transactional id (ProducerRef), otherwise producer ids no broker allocated (or -1 and the int64
    bounds), so both find the same unknown producers. Transaction timeouts are long or invalid: a
    transaction that times out is aborted at a different moment by each broker."""
    def walk(obj: Any) -> None:
        if isinstance(obj, dict):
            keys = [k for k in obj if k.endswith("producer_id")]
            for key in keys:
                value = obj[key]
                if isinstance(value, int) and 0 <= value < UNALLOCATED_PRODUCER_ID:
                    obj[key] = UNALLOCATED_PRODUCER_ID
                if rng.random() < 0.5:
                    prefix = key[:-len("producer_id")]
                    txn_id = obj.get(f"{prefix}transactional_id") or rng.choice(pools.transactional_ids)
                    obj[key] = ProducerRef(txn_id, "id")
                    if rng.random() < 0.8 and f"{prefix}producer_epoch" in obj:
                        obj[f"{prefix}producer_epoch"] = ProducerRef(txn_id, "epoch", rng.choice([0, 0, 0, -1, 1]))
            for value in obj.values():
                walk(value)
        elif isinstance(obj, list):
            for item in obj:
                walk(item)
    walk(v)
    timeout = v.get("transaction_timeout")
    if isinstance(timeout, datetime.timedelta) and timeout.total_seconds() > 0:
        v["transaction_timeout"] = datetime.timedelta(minutes=10)


def _fix_add_partitions_to_txn(v: dict, version: int, rng: random.Random, pools: Pools) -> None:
    _fix_producer_ids(v, version, rng, pools)
    if version >= 4 and not v.get("transactions"):
        # an empty batch: Kafka 4.4 never answers it (KafkaApis answers once every transaction has its
        # result); pinned by tests/differential/test_txn_fuzzed.py
        v["transactions"] = [{"transactional_id": rng.choice(pools.transactional_ids), "producer_id": -1,
                              "producer_epoch": -1, "verify_only": rng.random() < 0.5, "topics": []}]


def _existing_partitions(name: Any, partitions: list, rng: random.Random, pools: Pools) -> list:
    """A share-group offset API's partitions of topic `name`: those of a topic that exists only from its
    partitions, and at least one. Kafka 4.4 never answers a DescribeShareGroupOffsets naming a partition
    that does not exist, fails a negative one or a topic with none (UNKNOWN_SERVER_ERROR), and an
    AlterShareGroupOffsets of a negative partition fails but keeps the group, whose first DeleteGroups
    then fails too: pinned by tests/differential/test_share_fuzzed.py."""
    if name not in pools.topics:
        return partitions
    count = pools.partitions.get(name, 1)
    return [p % count for p in partitions] or [rng.randrange(count)]


def _share_group(v: dict, rng: random.Random, pools: Pools) -> None:
    """The requests that make share groups (ShareGroupHeartbeat, AlterShareGroupOffsets) name only the share
    groups' names, which DeleteGroups never names: Kafka 4.4 fails the DeleteGroups of a share group whose
    subscribed partitions' state is still being initialized (UNKNOWN_SERVER_ERROR; the group stays, the
    next one deletes it: pinned by tests/differential/test_share_fuzzed.py). The other share-group APIs,
    and OffsetCommit, JoinGroup and OffsetDelete, name any group."""
    v["group_id"] = rng.choice(pools.share_groups + pools.share_groups + ("",))


def _any_group(v: dict, rng: random.Random, pools: Pools) -> None:
    """Requests that make no share group: sometimes a share group's name (the other APIs' groups stay
    apart from the share groups, so that DeleteGroups never names a share group)."""
    if rng.random() < 0.3:
        v["group_id"] = rng.choice(pools.share_groups)


def _fix_share_heartbeat(v: dict, version: int, rng: random.Random, pools: Pools) -> None:
    """No joins (epoch 0): Kafka 4.4 assigns a new member's partitions only once their share-partition
    state is initialized, asynchronously, bumping the group epoch meanwhile, so member epochs and
    assignments would differ in time. A member's life is compared by tests/differential/test_share_groups.py,
    waiting for Kafka."""
    _share_group(v, rng, pools)
    if v["member_epoch"] == 0:
        v["member_epoch"] = rng.choice([-1, 1, 5])


def _fix_share_session(v: dict, version: int, rng: random.Random, pools: Pools) -> None:
    _any_group(v, rng, pools)


def _fix_share_fetch(v: dict, version: int, rng: random.Random, pools: Pools) -> None:
    """ShareFetch reads no share-partition state: Kafka 4.4 reads a partition's state when it is first
    fetched, asynchronously, and answers UNKNOWN_SERVER_ERROR for one whose state it cannot read (any group's
    partition that no member was assigned nor AlterShareGroupOffsets set, or one whose state
    DeleteShareGroupOffsets deleted while its broker still holds it) at a moment that depends on that read.
    So no share group is named, and MaxRecords or MaxBytes is 0 (SharePartitionManager then reads nothing;
    the share groups' own tests fetch records, waiting for Kafka). Also left out, pinned by
    tests/differential/test_share_fuzzed.py: a new session (epoch 0) naming a partition twice, and an acquire
    mode other than 0 and 1 (Kafka 4.4: UNKNOWN_SERVER_ERROR)."""
    v[rng.choice(["max_records", "max_bytes"])] = 0
    if "share_acquire_mode" in v:
        v["share_acquire_mode"] = rng.choice([0, 1])
    if v["share_session_epoch"] == 0:
        seen: set = set()
        for t in v["topics"]:
            t["partitions"] = [p for p in t["partitions"]
                               if not ((t["topic_id"], p["partition_index"]) in seen
                                       or seen.add((t["topic_id"], p["partition_index"])))]


def _fix_share_describe(v: dict, version: int, rng: random.Random, pools: Pools) -> None:
    v["group_ids"] = [rng.choice(pools.share_groups) if rng.random() < 0.5 else g for g in v["group_ids"]]


def _fix_offset_commit(v: dict, version: int, rng: random.Random, pools: Pools) -> None:
    _any_group(v, rng, pools)


def _fix_join_any(v: dict, version: int, rng: random.Random, pools: Pools) -> None:
    _fix_join(v, version, rng, pools)
    _any_group(v, rng, pools)


def _fix_describe_share_offsets(v: dict, version: int, rng: random.Random, pools: Pools) -> None:
    for g in v["groups"]:
        if not g["group_id"]:  # the empty group id: UNKNOWN_SERVER_ERROR in Kafka 4.4 (pinned)
            g["group_id"] = rng.choice(pools.groups)
        elif rng.random() < 0.5:
            g["group_id"] = rng.choice(pools.share_groups)
        for t in g.get("topics") or ():
            t["partitions"] = _existing_partitions(t["topic_name"], t["partitions"], rng, pools)


def _fix_alter_share_offsets(v: dict, version: int, rng: random.Random, pools: Pools) -> None:
    _share_group(v, rng, pools)
    for t in v["topics"]:
        for p in t["partitions"]:
            p["partition_index"] = abs(p["partition_index"])  # negative: UNKNOWN_SERVER_ERROR (pinned)


FIXES: dict[int, Callable[[dict, int, random.Random, Pools], None]] = {
    0: _fix_produce, 1: _fix_fetch, 2: _fix_list_offsets, 3: _fix_metadata, 11: _fix_join_any, 19: _validate_only,
    20: _fix_delete_topics, 21: _fix_timeouts, 23: _fix_replica, 33: _fix_alter_configs, 37: _validate_only,
    43: _fix_elect_leaders, 44: _validate_only, 49: _validate_only, 51: _fix_scram, 68: _fix_heartbeat_848,
    75: _fix_describe_topic_partitions, 88: _fix_streams_heartbeat,
    8: _fix_offset_commit, 47: _fix_offset_commit, 76: _fix_share_heartbeat, 77: _fix_share_describe,
    78: _fix_share_fetch, 79: _fix_share_session, 90: _fix_describe_share_offsets,
    91: _fix_alter_share_offsets, 92: _fix_share_session,
    22: _fix_producer_ids, 24: _fix_add_partitions_to_txn, 25: _fix_producer_ids, 26: _fix_producer_ids,
    28: _fix_producer_ids,
}


def generate(api_key: int, version: int, rng: random.Random, pools: Pools) -> dict[str, Any]:
    values = values_for(request_class(api_key, version), rng, pools)
    fix = FIXES.get(api_key)
    if fix is not None:
        fix(values, version, rng, pools)
    return values


def requests(apis: dict[int, tuple[int, int]], count: int, seed: int, pools: Pools
             ) -> Iterator[tuple[int, int, dict[str, Any]]]:
    """`count` requests (api key, version, values) spread over `apis` ({key: (min, max)}): round-robin over
    the APIs so that every one gets its share, the version drawn in its range."""
    rng = random.Random(seed)
    keys = sorted(apis)
    for i in range(count):
        key = keys[i % len(keys)]
        low, high = apis[key]
        version = rng.randint(low, high)
        yield key, version, generate(key, version, rng, pools)


def build(api_key: int, version: int, values: dict[str, Any], ids: dict[str, uuid.UUID]) -> Any:
    return codec.build(request_class(api_key, version), resolve(values, ids))
