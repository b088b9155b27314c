"""The sink's own Produce path: record batches built from a task's Arrow columns (`records.encode`) and
sent in Produce requests (`protocol.produce_client`) over one plain TCP connection per leader.

It exists for speed: librdkafka's `produce()` takes one Python call per record, and the columns had to
become Python objects first. It honours the producer settings in `NATIVE_SETTINGS` the way librdkafka
does; a query given any other `kafka.*` setting (TLS, SASL, idempotence, a partitioner ...) is written
by librdkafka, so no setting is ever ignored.

Delivery is at-least-once, as librdkafka's without idempotence: one request in flight per connection
(so a retry never reorders a partition's batches), retriable errors (Kafka's RetriableException codes:
NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, REQUEST_TIMED_OUT, UNKNOWN_TOPIC_OR_PARTITION,
NOT_ENOUGH_REPLICAS, ..., and a lost connection) refresh the leaders and are retried after
`retry.backoff.ms`, doubling to `retry.backoff.max.ms`, at most `retries` times and within
`delivery.timeout.ms`. A batch whose answer was lost may be written twice, as with librdkafka.

A Python worker runs one task after another (each micro-batch of a stream is new tasks): a producer that
finished its task without an error is kept for the next task of the same process with the same broker and
settings (`native_producer` / `keep_producer`), with its connections (ApiVersions already asked) and the
partitions' leaders, as librdkafka keeps a producer's. Leaders are asked again after an error, for a
partition not known yet, and once they are older than librdkafka's topic.metadata.refresh.interval.ms
(300000); a kept connection the broker closed while idle is noticed before it is used.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from chronolog.errors import ChronologError, ErrorCode
from chronolog.protocol import fetch_client as fc
from chronolog.protocol import produce_client as pc
from chronolog.records.compression import CompressionType
from chronolog.timetravel.connection import Connection, ConnectionLost, servers

# librdkafka's names (and aliases) of the settings this path honours, with librdkafka's defaults
# (CONFIGURATION.md). Settings about the local queue and batching delay need no code here: the task's
# rows are all at hand, and they are sent at once.
_ALIASES = {"request.required.acks": "acks", "message.send.max.retries": "retries",
            "message.timeout.ms": "delivery.timeout.ms", "compression.codec": "compression.type",
            "queue.buffering.max.ms": "linger.ms"}
NATIVE_SETTINGS = frozenset({"acks", "retries", "retry.backoff.ms", "retry.backoff.max.ms", "delivery.timeout.ms",
                             "request.timeout.ms", "socket.timeout.ms", "compression.type", "client.id",
                             "batch.size", "message.max.bytes", "linger.ms", "enable.idempotence",
                             "security.protocol", "partitioner", *_ALIASES})
# values other than these keep librdkafka
_ONLY = {"enable.idempotence": {"false"}, "security.protocol": {"plaintext"}, "partitioner": {"consistent_random"}}

RETRIABLE = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE,
                       ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NETWORK_EXCEPTION,
                       ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                       ErrorCode.KAFKA_STORAGE_ERROR})


def unsupported_settings(producer: Mapping[str, str]) -> list[str]:
    """The producer settings this path cannot honour (empty: it can write the query)."""
    out = []
    for key, value in producer.items():
        name = _ALIASES.get(key, key)
        if key not in NATIVE_SETTINGS:
            out.append(key)
        elif name in _ONLY and str(value).strip().lower() not in _ONLY[name]:
            out.append(f"{key}={value}")
    return sorted(out)


def _int(settings: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    raw = settings.get(name)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ChronologError(f"kafka.{name}: {raw!r} is not an integer") from None
    if not lo <= value <= hi:
        raise ChronologError(f"kafka.{name}: {value} is out of range {lo}..{hi}")
    return value


@dataclass(frozen=True)
class NativeSettings:
    """librdkafka's meaning of each setting, checked once per task."""

    acks: int = -1
    retries: int = 2147483647
    backoff_ms: int = 100
    backoff_max_ms: int = 1000
    delivery_timeout_ms: int = 300000
    request_timeout_ms: int = 30000
    socket_timeout_ms: int = 60000
    codec: int = CompressionType.NONE
    client_id: str = "rdkafka"
    batch_size: int = 1000000
    max_request: int = 1000000

    @classmethod
    def of(cls, producer: Mapping[str, str]) -> NativeSettings:
        s = {_ALIASES.get(k, k): v for k, v in producer.items()}
        acks_raw = str(s.get("acks", "-1")).strip().lower()
        acks = -1 if acks_raw == "all" else _int({"acks": acks_raw}, "acks", -1, -1, 1000)
        codec_raw = str(s.get("compression.type", "none")).strip().lower()
        try:
            codec = CompressionType.from_name(codec_raw)
        except Exception:
            raise ChronologError(f"kafka.compression.type: {codec_raw!r} is not one of none, gzip, snappy, lz4, "
                                 "zstd") from None
        return cls(acks=acks, retries=_int(s, "retries", 2147483647, 0, 2147483647),
                   backoff_ms=_int(s, "retry.backoff.ms", 100, 1, 300000),
                   backoff_max_ms=_int(s, "retry.backoff.max.ms", 1000, 1, 300000),
                   delivery_timeout_ms=_int(s, "delivery.timeout.ms", 300000, 0, 2147483647),
                   request_timeout_ms=_int(s, "request.timeout.ms", 30000, 1, 900000),
                   socket_timeout_ms=_int(s, "socket.timeout.ms", 60000, 10, 300000),
                   codec=codec, client_id=str(s.get("client.id", "rdkafka")),
                   batch_size=_int(s, "batch.size", 1000000, 1, 2147483647),
                   max_request=_int(s, "message.max.bytes", 1000000, 1000, 1000000000))


# librdkafka's topic.metadata.refresh.interval.ms default: leaders known for longer are asked again
LEADERS_MAX_AGE_S = 300.0


class NativeProducer:
    """Sends ready batches to their partitions' leaders; one task at a time."""

    def __init__(self, bootstrap: str, settings: NativeSettings) -> None:
        self.servers = servers(bootstrap)
        self.bootstrap = bootstrap
        self.settings = settings
        self.timeout = settings.socket_timeout_ms / 1000
        self._conns: dict[tuple[str, int], Connection] = {}
        self._leaders: dict[tuple[str, int], tuple[str, int]] = {}
        self._asked: dict[str, float] = {}  # topic -> time.monotonic() of its last Metadata answer
        self.pid = os.getpid()
        self.retried = 0  # retriable failures met so far (tests wait on it)
        self.requests = 0
        self.topic_errors: dict[str, str] = {}

    def _conn(self, where: tuple[str, int]) -> Connection:
        conn = self._conns.get(where)
        if conn is not None and not conn.alive():  # closed by the broker while it was idle
            self._drop(where)
            conn = None
        if conn is None:
            conn = self._conns[where] = Connection(*where, self.timeout, self.settings.client_id)
        return conn

    def _drop(self, where: tuple[str, int]) -> None:
        conn = self._conns.pop(where, None)
        if conn is not None:
            conn.close()

    def _refresh(self, topic: str) -> None:
        """Leaders of the topic's partitions from the first bootstrap server that answers; a partition
        without a leader is left out (its batches wait for the next refresh)."""
        last: Exception | None = None
        for where in self.servers:
            try:
                conn = self._conn(where)
                version = fc.pick(conn.versions, fc.METADATA, fc.METADATA_MIN, fc.METADATA_MAX)
                if version is None:
                    raise ChronologError(f"{conn.where} answers no Metadata version from {fc.METADATA_MIN} on")
                md = conn.call([fc.metadata_request(version, conn.next_id(), self.settings.client_id, topic)],
                               lambda frame, cid, v=version: fc.read_metadata(v, frame, cid, topic))
            except ConnectionLost as exc:
                self._drop(where)
                last = exc
                continue
            self._asked[topic] = time.monotonic()
            if md.topic_error:
                self.topic_errors[topic] = f"topic {topic!r}: {ErrorCode(md.topic_error).name}"
            else:
                self.topic_errors.pop(topic, None)
            for p, found in md.partitions.items():
                if not found.error_code and found.leader in md.brokers:
                    self._leaders[(topic, p)] = md.brokers[found.leader]
                else:
                    self._leaders.pop((topic, p), None)
            return
        raise ConnectionLost(str(last))

    def send(self, batches: Mapping[tuple[str, int], list[bytes]]) -> int:
        """Every batch to its partition, in order per partition. Returns the number of requests sent."""
        s = self.settings
        pending = {tp: deque(bs) for tp, bs in batches.items() if bs}
        deadline = time.monotonic() + s.delivery_timeout_ms / 1000
        failures = 0
        now = time.monotonic()
        stale = {t for t, p in pending if (t, p) not in self._leaders
                 or now - self._asked.get(t, -LEADERS_MAX_AGE_S) >= LEADERS_MAX_AGE_S}
        last_error = ""
        while pending:
            for topic in sorted(stale):
                try:
                    self._refresh(topic)
                except ConnectionLost as exc:
                    last_error = str(exc)
            stale = set()
            by_leader: dict[tuple[str, int], list[tuple[str, int]]] = {}
            for tp in pending:
                where = self._leaders.get(tp)
                if where is None:
                    stale.add(tp[0])
                    last_error = self.topic_errors.get(tp[0], f"{tp[0]}-{tp[1]} has no leader")
                else:
                    by_leader.setdefault(where, []).append(tp)
            retry = bool(stale)
            for where, tps in by_leader.items():
                chosen: dict[str, dict[int, bytes]] = {}
                size = 0
                for tp in tps:  # the head batch of each partition, up to message.max.bytes per request
                    head = pending[tp][0]
                    if size and size + len(head) > s.max_request:
                        break
                    chosen.setdefault(tp[0], {})[tp[1]] = head
                    size += len(head)
                try:
                    answers = self._produce(where, chosen)
                except ConnectionLost as exc:
                    self._drop(where)
                    stale.update(chosen)
                    retry, last_error = True, str(exc)
                    continue
                for topic, parts in chosen.items():
                    for partition in parts:
                        tp = (topic, partition)
                        answer = answers.get(tp) if answers is not None else pc.PartitionAnswer(0, -1, None)
                        code = answer.error_code if answer is not None else ErrorCode.UNKNOWN_SERVER_ERROR
                        if code == 0:
                            pending[tp].popleft()
                            if not pending[tp]:
                                del pending[tp]
                        elif code in RETRIABLE:
                            stale.add(topic)
                            retry, last_error = True, f"{topic}-{partition}: {ErrorCode(code).name}"
                        else:
                            name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
                            detail = f" ({answer.message})" if answer is not None and answer.message else ""
                            raise ChronologError(f"write failed: {topic}-{partition}: {name}{detail}: "
                                                 f"{sum(len(q) for q in pending.values())} batch(es) not written")
            if retry and pending:
                failures += 1
                self.retried += 1
                if failures > s.retries or time.monotonic() >= deadline:
                    raise ChronologError(f"write failed after {failures} attempt(s): {last_error}: "
                                         f"{sum(len(q) for q in pending.values())} batch(es) not written")
                pause = min(s.backoff_ms * 2 ** min(failures - 1, 20), s.backoff_max_ms) / 1000
                time.sleep(max(0.0, min(pause, deadline - time.monotonic())))
        return self.requests

    def _produce(self, where: tuple[str, int], chosen: dict[str, dict[int, bytes]]):
        conn = self._conn(where)
        version = fc.pick(conn.versions, pc.PRODUCE, pc.PRODUCE_MIN, pc.PRODUCE_MAX)
        if version is None:
            raise ChronologError(f"{conn.where} answers no Produce version from {pc.PRODUCE_MIN} to "
                                 f"{pc.PRODUCE_MAX}")
        s = self.settings
        pieces = pc.produce_request(version, conn.next_id(), s.client_id, s.acks, s.request_timeout_ms, chosen)
        self.requests += 1
        if s.acks == 0:  # no answer comes (KafkaApis.handleProduceRequest)
            conn.send(pieces)
            return None
        return conn.call(pieces, lambda frame, cid: pc.read_produce(version, frame, cid))

    def close(self) -> None:
        for where in list(self._conns):
            self._drop(where)


# Producers kept between tasks of this process: (pid, bootstrap, settings) -> idle producers
_IDLE: dict[tuple, list[NativeProducer]] = {}
_IDLE_LOCK = threading.Lock()


def native_producer(bootstrap: str, settings: NativeSettings) -> NativeProducer:
    """An idle producer kept by an earlier task of this process for this broker and these settings, or a
    new one. Give it back with `keep_producer` when its task succeeded; close it otherwise."""
    with _IDLE_LOCK:
        idle = _IDLE.get((os.getpid(), bootstrap, settings))
        if idle:
            return idle.pop()
    return NativeProducer(bootstrap, settings)


def keep_producer(producer: NativeProducer) -> None:
    """Keep a producer whose task succeeded for the next task (a process made by fork does not use its
    parent's: the pid is part of the key)."""
    with _IDLE_LOCK:
        _IDLE.setdefault((producer.pid, producer.bootstrap, producer.settings), []).append(producer)


def close_idle_producers() -> None:
    """Close every kept producer of this process (tests; a worker's exit closes them anyway)."""
    with _IDLE_LOCK:
        idle = [p for key, ps in _IDLE.items() if key[0] == os.getpid() for p in ps]
        for key in [k for k in _IDLE if k[0] == os.getpid()]:
            del _IDLE[key]
    for p in idle:
        p.close()
