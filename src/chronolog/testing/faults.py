"""Programmable faults for a broker under test: what a real cluster does to clients and a mock cannot show.

Modelled on librdkafka's mock cluster (`rd_kafka_mock_push_request_errors`: the next N requests of an API
answered with an error code) and on Toxiproxy (latency, closed and refused connections), but served over the
real protocol, so every client's own retries, backoffs and metadata refreshes run. A `Faults` is attached to
a `Broker` only by `chronolog.testing` (`Broker.faults`, None in production); the broker then hands every
parsed request to `Faults.respond`, which applies the rules and calls the real handler for what is left.

Rules, checked in this order for each request:
- latency: the request waits `ms` before it is served (every matching request, or the next N);
- close: the connection is closed instead of answering (the client sees a disconnect);
- errors: the request is answered with an error code and not executed. For the partitioned APIs (Produce,
  Fetch, ListOffsets, OffsetCommit, TxnOffsetCommit, OffsetForLeaderEpoch) the code goes on each partition
  (their responses carry no other) and a rule scoped to a topic or partition answers only those partitions;
  the others are served. Each matching request uses up one of the rule's N;
- paused partitions: a Produce to one waits until it is resumed or the request's own timeout passes, then
  answers REQUEST_TIMED_OUT (Kafka's `DelayedProduce` expiring); a Fetch gets no records from it;
- clock: records appended to a `message.timestamp.type=LogAppendTime` topic are stamped with the broker's
  clock moved by `clock_offset_ms`.

Every method may be called from any thread (the test's, the admin API's on the broker's loop).

A rule that never fired is usually one the client's settings rule out (an OffsetCommit fault for a client
that commits in its transactions, through TxnOffsetCommit): `unhit()` says why for each, from the requests
seen since the last `clear()`; the pytest plugin turns that into a `FaultNotHitWarning` after the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import inspect
import itertools
import logging
import threading
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode as KioErrorCode

from chronolog.errors import ErrorCode, KafkaError
from chronolog.protocol import codec
from chronolog.protocol.registry import RequestContext
from chronolog.storage.basics import now_ms

log = logging.getLogger(__name__)

# org.apache.kafka.common.protocol.ApiKeys names, for the APIs a test may want to disturb.
API_KEYS: dict[str, int] = {
    "Produce": 0, "Fetch": 1, "ListOffsets": 2, "Metadata": 3, "OffsetCommit": 8, "OffsetFetch": 9,
    "FindCoordinator": 10, "JoinGroup": 11, "Heartbeat": 12, "LeaveGroup": 13, "SyncGroup": 14,
    "DescribeGroups": 15, "ListGroups": 16, "SaslHandshake": 17, "ApiVersions": 18, "CreateTopics": 19,
    "DeleteTopics": 20, "DeleteRecords": 21, "InitProducerId": 22, "OffsetForLeaderEpoch": 23,
    "AddPartitionsToTxn": 24, "AddOffsetsToTxn": 25, "EndTxn": 26, "TxnOffsetCommit": 28,
    "DescribeAcls": 29, "DescribeConfigs": 32, "AlterConfigs": 33, "DescribeLogDirs": 35,
    "SaslAuthenticate": 36, "CreatePartitions": 37, "DeleteGroups": 42, "IncrementalAlterConfigs": 44,
    "OffsetDelete": 47,
    # share groups (KIP-932): errors go in the responses' top-level error_code
    "ShareGroupHeartbeat": 76, "ShareFetch": 78, "ShareAcknowledge": 79,
}
API_NAMES = {key: name for name, key in API_KEYS.items()}


@dataclasses.dataclass(frozen=True)
class _Partitioned:
    """Where an API keeps its topics and partitions, in the request (kio objects) and in the response
    values the handlers return, and the neutral fields of an errored partition."""

    req_topics: str
    req_name: str
    req_partitions: str
    req_index: str
    resp_topics: str
    resp_name: str
    resp_partitions: str
    resp_index: str
    neutral: dict
    top: dict


PARTITIONED: dict[int, _Partitioned] = {
    0: _Partitioned("topic_data", "name", "partition_data", "index", "responses", "name", "partition_responses",
                    "index", {"base_offset": -1, "log_append_time": -1, "log_start_offset": -1,
                              "record_errors": [], "error_message": None}, {"throttle_time": 0}),
    1: _Partitioned("topics", "topic", "partitions", "partition", "responses", "topic", "partitions",
                    "partition_index", {"high_watermark": -1, "last_stable_offset": -1, "log_start_offset": -1,
                                        "aborted_transactions": None, "preferred_read_replica": -1,
                                        "records": b""}, {"throttle_time": 0, "error_code": 0, "session_id": 0}),
    2: _Partitioned("topics", "name", "partitions", "partition_index", "topics", "name", "partitions",
                    "partition_index", {"timestamp": -1, "offset": -1, "leader_epoch": -1, "old_style_offsets": []},
                    {"throttle_time": 0}),
    8: _Partitioned("topics", "name", "partitions", "partition_index", "topics", "name", "partitions",
                    "partition_index", {}, {"throttle_time": 0}),
    # TxnOffsetCommit: per-partition codes only, like OffsetCommit (topics by id from v6, KIP-1319)
    28: _Partitioned("topics", "name", "partitions", "partition_index", "topics", "name", "partitions",
                     "partition_index", {}, {"throttle_time": 0}),
    23: _Partitioned("topics", "topic", "partitions", "partition", "topics", "topic", "partitions", "partition",
                     {"leader_epoch": -1, "end_offset": -1}, {"throttle_time": 0}),
}
PRODUCE, FETCH, METADATA = 0, 1, 3
OFFSET_COMMIT, TXN_OFFSET_COMMIT = 8, 28
# An API a client uses instead of another under some setting: what to fault instead, and why it went unseen.
INSTEAD = {OFFSET_COMMIT: (TXN_OFFSET_COMMIT, "the client commits its offsets in transactions "
                                              "(send_offsets_to_transaction)"),
           TXN_OFFSET_COMMIT: (OFFSET_COMMIT, "the client commits its offsets outside transactions")}


class FaultNotHitWarning(UserWarning):
    """A programmed fault never fired during the test (so the test did not exercise what it meant to)."""


class ResponseDropped(ConnectionResetError):
    """A `close` rule: the server closes the connection instead of answering (quietly, as a reset)."""


def api_key_of(api: str | int) -> int:
    """An API by Kafka's name (`Produce`, `FindCoordinator`) or number."""
    if isinstance(api, int) or (isinstance(api, str) and api.strip().lstrip("-").isdigit()):
        key = int(api)
        if key in API_NAMES:
            return key
        raise ValueError(f"unknown API key {key}")
    for name, key in API_KEYS.items():
        if name.lower() == str(api).strip().lower():
            return key
    raise ValueError(f"unknown API {api!r}; expected one of {', '.join(API_KEYS)} or an API key number")


def error_code_of(error: str | int) -> int:
    """An error code by Kafka's name (`NOT_LEADER_OR_FOLLOWER`, any case) or number."""
    if isinstance(error, int) or (isinstance(error, str) and error.strip().lstrip("-").isdigit()):
        code = int(error)
        try:
            KioErrorCode(code)
        except ValueError:
            raise ValueError(f"unknown error code {code}") from None
        return code
    try:
        return int(KioErrorCode[str(error).strip().lower()].value)
    except KeyError:
        raise ValueError(f"unknown error {error!r}; expected a Kafka error name such as "
                         "NOT_LEADER_OR_FOLLOWER or its code") from None


def error_name(code: int) -> str:
    return KioErrorCode(code).name.upper()


def _errorable(api_key: int) -> bool:
    """Can a request of this API be answered with an error code? (its response has a place for one)"""
    if api_key in PARTITIONED or api_key in (METADATA, 9, 10, 15, 19, 20, 42):
        return True
    try:
        version = max(v for v in range(0, 20) if _has_schema(api_key, v))
    except ValueError:
        return False
    return any(f.name == "error_code" for f in dataclasses.fields(codec.response_schema(api_key, version)))


def _has_schema(api_key: int, version: int) -> bool:
    try:
        codec.response_schema(api_key, version)
        return True
    except Exception:
        return False


@dataclasses.dataclass
class Rule:
    """One programmed fault. `remaining` None: until removed."""

    id: int
    action: str  # "error", "latency" or "close"
    api: int | None  # None: every API
    remaining: int | None
    error: int = 0
    latency_ms: int = 0
    topic: str | None = None
    partition: int | None = None
    client_id: str | None = None
    hits: int = 0

    def describe(self) -> dict:
        out = {"id": self.id, "action": self.action, "api": API_NAMES.get(self.api, self.api),
               "remaining": self.remaining, "hits": self.hits, "topic": self.topic, "partition": self.partition,
               "client_id": self.client_id}
        if self.action == "error":
            out["error"] = error_name(self.error)
        if self.action == "latency":
            out["ms"] = self.latency_ms
        return out

    def matches_request(self, api_key: int, client_id: str | None) -> bool:
        if self.remaining is not None and self.remaining <= 0:
            return False
        if self.api is not None and self.api != api_key:
            return False
        return self.client_id is None or self.client_id == client_id

    def matches_partition(self, topic: str, partition: int) -> bool:
        return ((self.topic is None or self.topic == topic)
                and (self.partition is None or self.partition == partition))

    @property
    def scoped(self) -> bool:
        return self.topic is not None or self.partition is not None


class Faults:
    """The faults programmed into one running broker (see the module docstring)."""

    def __init__(self, broker: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.broker = broker
        self.loop = loop
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._rules: list[Rule] = []
        self._paused: dict[tuple[str, int], asyncio.Event] = {}
        self._clock_offset_ms = 0
        self._refusing: asyncio.TimerHandle | None = None
        self._refused = False
        # What reached the broker since the last clear(), for unhit(): requests per API, client ids per API,
        # and the topic partitions named per partitioned API.
        self._seen: dict[int, int] = {}
        self._seen_clients: dict[int, set[str]] = {}
        self._seen_partitions: dict[int, set[tuple[str, int]]] = {}
        broker.faults = self

    # -- programming -------------------------------------------------------------------------------
    def push_errors(self, api: str | int, error: str | int, count: int = 1, *, topic: str | None = None,
                    partition: int | None = None, client_id: str | None = None) -> Rule:
        """Answer the next `count` requests of `api` (for that topic/partition or client id) with `error`."""
        key = api_key_of(api)
        if not _errorable(key):
            raise ValueError(f"{API_NAMES[key]} responses carry no error code to inject")
        code = error_code_of(error)
        if code == 0:
            raise ValueError("error 0 is NONE: there is nothing to inject")
        if partition is not None and topic is None:
            raise ValueError("partition needs topic")
        if (topic is not None) and key not in PARTITIONED and key != METADATA:
            raise ValueError(f"{API_NAMES[key]} requests name no topic partitions: topic/partition cannot apply")
        return self._add(Rule(0, "error", key, _count(count), error=code, topic=topic,
                              partition=None if partition is None else int(partition), client_id=client_id))

    def add_latency(self, api: str | int | None, ms: int, count: int | None = None, *,
                    client_id: str | None = None) -> Rule:
        """Serve requests of `api` (None: every API) `ms` late; the next `count` of them, or until removed."""
        if int(ms) < 0:
            raise ValueError(f"latency must be >= 0 ms, not {ms}")
        return self._add(Rule(0, "latency", None if api is None else api_key_of(api),
                              None if count is None else _count(count), latency_ms=int(ms), client_id=client_id))

    def close_on(self, api: str | int | None, count: int = 1, *, client_id: str | None = None) -> Rule:
        """Close the connection of each of the next `count` requests of `api` instead of answering it."""
        return self._add(Rule(0, "close", None if api is None else api_key_of(api), _count(count),
                              client_id=client_id))

    def remove(self, rule: Rule | int) -> bool:
        rule_id = rule.id if isinstance(rule, Rule) else int(rule)
        with self._lock:
            before = len(self._rules)
            self._rules = [r for r in self._rules if r.id != rule_id]
            removed = len(self._rules) != before
        self._changed()
        return removed

    def rules(self) -> list[Rule]:
        with self._lock:
            return list(self._rules)

    def clear(self) -> None:
        """No rules, no paused partitions, the clock back, connections accepted again; what was seen forgotten."""
        with self._lock:
            self._rules.clear()
            self._seen, self._seen_clients, self._seen_partitions = {}, {}, {}
        for topic, partition in list(self._paused):
            self.resume(topic, partition)
        self._clock_offset_ms = 0
        if self._refused:
            self.accept_connections()
        self._changed()

    # -- partitions and clock ------------------------------------------------------------------------
    def pause(self, topic: str, partition: int = 0) -> None:
        """Produce to the partition waits and times out; Fetch gets nothing from it, until `resume`."""
        self.broker.state.log_manager.get_log(topic, int(partition))  # an unknown partition is refused here
        with self._lock:
            self._paused.setdefault((topic, int(partition)), asyncio.Event())
        self._changed()

    def resume(self, topic: str, partition: int = 0) -> None:
        with self._lock:
            event = self._paused.pop((topic, int(partition)), None)
        if event is not None:
            self.loop.call_soon_threadsafe(event.set)
        self._changed()

    def paused(self) -> list[tuple[str, int]]:
        with self._lock:
            return sorted(self._paused)

    @property
    def clock_offset_ms(self) -> int:
        return self._clock_offset_ms

    def move_clock(self, ms: int) -> int:
        """Move the clock that stamps LogAppendTime records by `ms` (negative: into the past); the new offset."""
        self._clock_offset_ms += int(ms)
        self._changed()
        return self._clock_offset_ms

    def set_clock_offset(self, ms: int) -> None:
        self._clock_offset_ms = int(ms)
        self._changed()

    # -- connections -------------------------------------------------------------------------------
    def drop_connections(self) -> int:
        """Close every open client connection now (as a broker restart or a network cut would)."""
        return self._in_loop(self._drop)

    def refuse_connections(self, seconds: float | None = None, *, drop_existing: bool = True) -> None:
        """Stop listening (new connections are refused by the OS) for `seconds`, or until
        `accept_connections`; open connections are closed too unless `drop_existing` is False."""
        if seconds is not None and float(seconds) < 0:
            raise ValueError(f"seconds must be >= 0, not {seconds}")
        self._in_loop(functools.partial(self._refuse, None if seconds is None else float(seconds), drop_existing))

    def accept_connections(self) -> None:
        self._in_loop(self._accept)

    @property
    def refusing(self) -> bool:
        return self._refused

    def unhit(self) -> list[str]:
        """One line for each rule that has not fired since it was programmed, with the likely reason, from the
        requests the broker got since the last `clear()` (only those that came while a rule was programmed)."""
        with self._lock:
            rules = [r for r in self._rules if r.hits == 0]
            seen = dict(self._seen)
            clients = {k: set(v) for k, v in self._seen_clients.items()}
            partitions = {k: set(v) for k, v in self._seen_partitions.items()}
        return [f"{_rule_text(r)} never fired: {_why_unhit(r, seen, clients, partitions)}" for r in rules]

    def state(self) -> dict:
        """Everything programmed, as JSON-ready values (the admin API's GET answer), with `unhit()`'s lines."""
        return {"rules": [r.describe() for r in self.rules()],
                "paused": [{"topic": t, "partition": p} for t, p in self.paused()],
                "clock_offset_ms": self._clock_offset_ms, "refusing_connections": self._refused,
                "unhit": self.unhit()}

    # -- internals: programming ------------------------------------------------------------------
    def _add(self, rule: Rule) -> Rule:
        with self._lock:
            rule.id = next(self._ids)
            self._rules.append(rule)
        self._changed()
        return rule

    def _changed(self) -> None:
        """A connection's repeated Fetch is answered without the handler (Broker._planned_fetch): while
        anything is programmed, every request comes here instead."""
        busy = bool(self._rules or self._paused or self._clock_offset_ms)
        if busy:
            self.broker.plan_fetches = False
        else:
            self.broker.__dict__.pop("plan_fetches", None)

    def _in_loop(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` (a function, or one returning a coroutine) on the broker's loop and wait for it. The
        admin API calls these methods from a worker thread, never from the loop itself."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            raise RuntimeError("Faults methods block: call them from another thread (asyncio.to_thread)")

        async def call() -> Any:
            result = fn()
            return await result if inspect.isawaitable(result) else result
        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(30)

    def _drop(self) -> int:
        closed = 0
        for frames in list(self.broker._readers):
            if frames.transport is not None and not frames.transport.is_closing():
                frames.transport.close()
                closed += 1
        log.info("faults: closed %d client connections", closed)
        return closed

    def _refuse(self, seconds: float | None, drop_existing: bool) -> None:
        if self._refusing is not None:
            self._refusing.cancel()
            self._refusing = None
        if not self._refused:
            for listener in self.broker.listeners:
                if listener.server is not None:
                    listener.server.close()
            self._refused = True
        if drop_existing:
            self._drop()
        if seconds is not None:
            self._refusing = self.loop.call_later(seconds, lambda: self.loop.create_task(self._accept()))
        log.info("faults: refusing connections%s", f" for {seconds} s" if seconds is not None else "")

    async def _accept(self) -> None:
        """Listen again on the same ports (asyncio sets SO_REUSEADDR), as Broker.start does."""
        from chronolog.server.frames import FrameReader

        if self._refusing is not None:
            self._refusing.cancel()
            self._refusing = None
        if not self._refused:
            return
        loop = self.loop
        for listener in self.broker.listeners:
            serve = functools.partial(self.broker._serve_connection, listener)
            listener.server = await loop.create_server(lambda serve=serve: FrameReader(loop, serve),
                                                       listener.spec.host or None, listener.port)
        self._refused = False
        log.info("faults: accepting connections again")

    # -- internals: serving ----------------------------------------------------------------------------
    async def respond(self, handler: Any, body: Any, ctx: RequestContext) -> bytes | codec.ResponseParts | None:
        """Broker._respond's last step, with the programmed faults applied (see the module docstring)."""
        api_key = ctx.api_key
        self._note(api_key, ctx, body)
        delay, close, errors = self._match(api_key, ctx.client_id)
        if delay:
            await asyncio.sleep(delay / 1000.0)
        if close is not None:
            log.info("faults: closing the connection of %s v%d (rule %d)", API_NAMES.get(api_key, api_key),
                     ctx.api_version, close.id)
            raise ResponseDropped(f"faults: rule {close.id} closes the connection")
        values = await self._values(handler, body, ctx, errors)
        if values is None:
            return None
        return codec.encode_values(api_key, ctx.api_version, ctx.correlation_id, values)

    def _note(self, api_key: int, ctx: RequestContext, body: Any) -> None:
        """Count the request for unhit() (only while a rule is programmed: the rest is not asked about)."""
        if not self._rules:
            return
        shape = PARTITIONED.get(api_key)
        named: list[tuple[str, int]] = []
        if shape is not None and api_key != FETCH:  # a fetch session's requests may name no partition
            with contextlib.suppress(Exception):
                named = [(_topic_name(t, shape, ctx), int(getattr(p, shape.req_index)))
                         for t in getattr(body, shape.req_topics) for p in getattr(t, shape.req_partitions)]
        with self._lock:
            self._seen[api_key] = self._seen.get(api_key, 0) + 1
            if ctx.client_id is not None:
                ids = self._seen_clients.setdefault(api_key, set())
                if len(ids) < 100:
                    ids.add(ctx.client_id)
            if named:
                tps = self._seen_partitions.setdefault(api_key, set())
                if len(tps) < 10_000:
                    tps.update(named)

    def _match(self, api_key: int, client_id: str | None) -> tuple[int, Rule | None, list[Rule]]:
        """Latency to add, a close rule that fires, and the error rules that may fire (for the partitioned
        APIs, only if one of the request's partitions matches: decided and counted in `_values`)."""
        delay, close, errors = 0, None, []
        with self._lock:
            for rule in self._rules:
                if not rule.matches_request(api_key, client_id):
                    continue
                if rule.action == "latency":
                    delay += rule.latency_ms
                    self._use(rule)
                elif rule.action == "close" and close is None:
                    close = rule
                    self._use(rule)
                elif rule.action == "error":
                    errors.append(rule)
        return delay, close, errors

    @staticmethod
    def _use(rule: Rule) -> None:
        rule.hits += 1
        if rule.remaining is not None:
            rule.remaining -= 1

    def _take(self, rule: Rule) -> bool:
        """Count one use of an error rule, unless another request used up its last one meanwhile."""
        with self._lock:
            if rule.remaining is not None and rule.remaining <= 0:
                return False
            self._use(rule)
            return True

    async def _values(self, handler: Any, body: Any, ctx: RequestContext, errors: list[Rule]) -> dict | None:
        api_key = ctx.api_key
        shape = PARTITIONED.get(api_key)
        if shape is None:
            # Metadata has no error of its own: its errors go on the topics of the real answer.
            whole = next((r for r in errors if api_key != METADATA and not r.scoped and self._take(r)), None)
            if whole is not None:
                log.info("faults: answering %s with %s (rule %d)", API_NAMES.get(api_key, api_key),
                         error_name(whole.error), whole.id)
                return _error_values(api_key, ctx.api_version, body, whole.error)
            values = await _call(handler, body, ctx)
            if api_key == METADATA and values is not None and errors:
                self._metadata_errors(values, errors)
            return values
        return await self._partitioned(handler, body, ctx, shape, errors)

    def _metadata_errors(self, values: dict, errors: list[Rule]) -> None:
        """Metadata is answered as usual, with the rule's error on its topic (or on every topic)."""
        for rule in errors:
            hit = [t for t in values.get("topics", []) if rule.topic is None or t.get("name") == rule.topic]
            if hit and self._take(rule):
                for topic in hit:
                    topic["error_code"] = rule.error
                    if rule.partition is not None:
                        for p in topic.get("partitions", []):
                            if p.get("partition_index") == rule.partition:
                                p["error_code"] = rule.error
                        topic["error_code"] = 0

    async def _partitioned(self, handler: Any, body: Any, ctx: RequestContext, shape: _Partitioned,
                           errors: list[Rule]) -> dict | None:
        api_key = ctx.api_key
        ids = {}  # name -> topic id, for requests that name topics by id (Produce v13, Fetch v13+)
        wanted = [(_topic_name(t, shape, ctx, ids), int(getattr(p, shape.req_index)))
                  for t in getattr(body, shape.req_topics) for p in getattr(t, shape.req_partitions)]
        failed: dict[tuple[str, int], int] = {}
        for rule in errors:
            hit = [tp for tp in wanted if tp not in failed and rule.matches_partition(*tp)]
            if hit and self._take(rule):
                log.info("faults: answering %s for %s with %s (rule %d)", API_NAMES[api_key],
                         ", ".join(f"{t}-{p}" for t, p in hit), error_name(rule.error), rule.id)
                failed.update(dict.fromkeys(hit, rule.error))
        empty: set[tuple[str, int]] = set()
        if self._paused and api_key in (PRODUCE, FETCH):
            held = [tp for tp in wanted if tp not in failed and tp in self._paused]
            if held and api_key == PRODUCE:
                await self._wait_resumed(held, _produce_timeout_ms(body) / 1000.0)
                for tp in held:
                    if tp in self._paused:  # Kafka's DelayedProduce expiring: REQUEST_TIMED_OUT
                        failed[tp] = ErrorCode.REQUEST_TIMED_OUT
            elif held:
                empty.update(held)
        skip = set(failed) | empty
        left = [tp for tp in wanted if tp not in skip]
        if api_key == FETCH and not left and empty:  # nothing to serve: a long poll that finds nothing
            await self._wait_resumed(sorted(empty), _ms(body.max_wait) / 1000.0)
        if api_key == PRODUCE and self._clock_offset_ms:
            ctx = _clocked(ctx, self._clock_offset_ms)
        if not skip:
            return await _call(handler, body, ctx)
        values: dict | None = None
        if left:
            values = await _call(handler, _without(body, shape, skip, ctx), ctx)
        if api_key == PRODUCE and int(body.acks) == 0:
            return None
        if values is None:
            values = {**shape.top, shape.resp_topics: []}
        topics = values.setdefault(shape.resp_topics, [])
        for (topic, partition) in [tp for tp in wanted if tp in skip]:
            entry = {shape.resp_index: partition, "error_code": failed.get((topic, partition), 0), **shape.neutral}
            if (topic, partition) in empty:
                entry.update(_marks(ctx, topic, partition))
            if api_key == PRODUCE:
                entry["error_message"] = f"{error_name(entry['error_code'])} (injected by chronolog.testing)"
            into = next((t for t in topics if t[shape.resp_name] == topic), None)
            if into is None:
                into = {shape.resp_name: topic, "topic_id": ids.get(topic), shape.resp_partitions: []}
                topics.append(into)
            into[shape.resp_partitions].append(entry)
        return values

    async def _wait_resumed(self, partitions: list[tuple[str, int]], timeout: float) -> None:
        events = [e for e in (self._paused.get(tp) for tp in partitions) if e is not None]  # (resumed meanwhile)
        if not events or timeout <= 0:
            return
        waits = [asyncio.ensure_future(e.wait()) for e in events]
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.ALL_COMPLETED)
        finally:
            for w in waits:
                w.cancel()


def _rule_text(rule: Rule) -> str:
    """`rule 3 (OffsetCommit: NOT_COORDINATOR on orders-0, client app-1)`."""
    what = {"error": error_name(rule.error) if rule.error else "error", "latency": f"+{rule.latency_ms} ms",
            "close": "close the connection"}[rule.action]
    where = ""
    if rule.topic is not None:
        where = f" on {rule.topic}" + (f"-{rule.partition}" if rule.partition is not None else "")
    who = f", client {rule.client_id}" if rule.client_id is not None else ""
    return f"rule {rule.id} ({API_NAMES.get(rule.api, 'every API') if rule.api is not None else 'every API'}: " \
           f"{what}{where}{who})"


def _why_unhit(rule: Rule, seen: dict[int, int], clients: dict[int, set[str]],
               partitions: dict[int, set[tuple[str, int]]]) -> str:
    """Why the requests the broker got did not match the rule, and what would have."""
    apis = list(seen) if rule.api is None else [rule.api]
    name = API_NAMES.get(rule.api, rule.api) if rule.api is not None else "any"
    count = sum(seen.get(a, 0) for a in apis)
    if count == 0:
        reason = f"the broker got no {name} request"
        other = INSTEAD.get(rule.api) if rule.api is not None else None
        if other is not None and seen.get(other[0]):
            reason += (f", but {seen[other[0]]} {API_NAMES[other[0]]}: {other[1]}; "
                       f"push the fault for {API_NAMES[other[0]]} instead")
        return reason
    if rule.client_id is not None and not any(rule.client_id in clients.get(a, ()) for a in apis):
        ids = sorted(set().union(*(clients.get(a, set()) for a in apis)))
        return f"{count} {name} requests, none from client id {rule.client_id!r} (they came from {ids[:5]})"
    if rule.scoped:
        named = set().union(*(partitions.get(a, set()) for a in apis))
        if named and not any(rule.matches_partition(*tp) for tp in named):
            topics = sorted({t for t, _ in named})
            return f"{count} {name} requests, none for {rule.topic}" + \
                (f"-{rule.partition}" if rule.partition is not None else "") + f" (they named {topics[:5]})"
    return f"{count} {name} requests came, none matched it"


def _count(count: int | None) -> int:
    if count is None or int(count) < 1:
        raise ValueError(f"count must be >= 1, not {count}")
    return int(count)


def _produce_timeout_ms(body: Any) -> int:
    timeout = getattr(body, "timeout_ms", None)
    return int(timeout) if timeout is not None else _ms(getattr(body, "timeout", 0))


def _ms(value: Any) -> int:
    if value is None:
        return 0
    if hasattr(value, "total_seconds"):
        return int(value.total_seconds() * 1000)
    return int(value)


async def _call(handler: Any, body: Any, ctx: RequestContext) -> dict | None:
    """As Broker._respond calls a handler: a KafkaError escaping it closes the connection."""
    try:
        result = handler.fn(body, ctx)
        if inspect.isawaitable(result):
            result = await result
    except KafkaError as exc:
        log.warning("API %d v%d failed: %s", ctx.api_key, ctx.api_version, exc)
        raise ConnectionError(str(exc)) from None
    return result


def _topic_name(topic: Any, shape: _Partitioned, ctx: RequestContext, ids: dict | None = None) -> str:
    """A request topic's name; for one named by id (KIP-516) the name the id has now (`ids` learns it), or
    the id itself when it names no topic."""
    name = getattr(topic, shape.req_name, None)
    topic_id = getattr(topic, "topic_id", None)
    if name is None and topic_id is not None:
        name = ctx.state.topic_name(topic_id) or str(topic_id)
        if ids is not None:
            ids[name] = topic_id
    return name


def _without(body: Any, shape: _Partitioned, skip: set[tuple[str, int]], ctx: RequestContext) -> Any:
    """The request minus the partitions answered here."""
    topics = []
    for t in getattr(body, shape.req_topics):
        name = _topic_name(t, shape, ctx)
        parts = tuple(p for p in getattr(t, shape.req_partitions) if (name, int(getattr(p, shape.req_index))) not in skip)
        if parts:
            topics.append(_replace(t, **{shape.req_partitions: parts}))
    return _replace(body, **{shape.req_topics: tuple(topics)})


def _replace(obj: Any, **changes: Any) -> Any:
    """A copy with `changes`: kio requests are dataclasses, Produce's own reader gives named tuples."""
    return obj._replace(**changes) if hasattr(obj, "_replace") else dataclasses.replace(obj, **changes)


def _marks(ctx: RequestContext, topic: str, partition: int) -> dict:
    """A paused partition's fetch answer: no records, but its true high watermark and start."""
    with contextlib.suppress(Exception):
        plog = ctx.state.log_manager.get_log(topic, partition)
        hw = plog.high_watermark
        return {"high_watermark": hw, "last_stable_offset": hw, "log_start_offset": plog.log_start_offset}
    return {}


def _error_values(api_key: int, version: int, body: Any, code: int) -> dict:
    """A whole request answered with `code`, as Kafka's `AbstractRequest.getErrorResponse` builds it for
    each API: where the response lists what the request named, each item carries the code."""
    if api_key == 10:  # FindCoordinator: one coordinator per key from v4 (KIP-699)
        keys = getattr(body, "coordinator_keys", None) or ()
        return {"error_code": code, "node_id": -1, "host": "", "port": -1,
                "coordinators": [{"key": k, "node_id": -1, "host": "", "port": -1, "error_code": code}
                                 for k in keys]}
    if api_key == 9 and version >= 8:  # OffsetFetch by groups
        return {"groups": [{"group_id": g.group_id, "topics": [], "error_code": code} for g in body.groups]}
    if api_key == 15:  # DescribeGroups
        return {"groups": [{"group_id": g, "error_code": code, "group_state": "", "protocol_type": "",
                            "protocol_data": "", "members": []} for g in body.groups]}
    if api_key == 42:  # DeleteGroups
        return {"results": [{"group_id": g, "error_code": code} for g in body.groups_names]}
    if api_key == 19:  # CreateTopics
        return {"topics": [{"name": t.name, "error_code": code, "num_partitions": -1, "replication_factor": -1}
                           for t in body.topics]}
    if api_key == 20:  # DeleteTopics
        return {"responses": [{"name": t.name if hasattr(t, "name") else t, "error_code": code}
                              for t in (getattr(body, "topics", None) or getattr(body, "topic_names", ()))]}
    return {"error_code": code}


class _ClockedContext(RequestContext):
    """A Produce's context whose logs stamp LogAppendTime with the moved clock."""

    clock_offset_ms = 0

    @property
    def log_manager(self) -> Any:
        return _ClockedLogs(self.state.log_manager, self.clock_offset_ms)


def _clocked(ctx: RequestContext, offset_ms: int) -> RequestContext:
    clocked = _ClockedContext(**{f.name: getattr(ctx, f.name) for f in dataclasses.fields(ctx)})
    clocked.clock_offset_ms = offset_ms
    return clocked


class _ClockedLogs:
    def __init__(self, logs: Any, offset_ms: int) -> None:
        self._logs = logs
        self._offset_ms = offset_ms

    def get_log(self, topic: str, partition: int, *args: Any, **kwargs: Any) -> Any:
        plog = self._logs.get_log(topic, partition, *args, **kwargs)
        return _ClockedLog(plog, self._offset_ms) if plog.config.log_append_time else plog

    def __getattr__(self, name: str) -> Any:
        return getattr(self._logs, name)


class _ClockedLog:
    def __init__(self, plog: Any, offset_ms: int) -> None:
        self._plog = plog
        self._offset_ms = offset_ms

    def append(self, records: Any, *, now: int | None = None, **kwargs: Any) -> Any:
        return self._plog.append(records, now=(now_ms() if now is None else now) + self._offset_ms, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._plog, name)

