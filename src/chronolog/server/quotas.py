"""Enforcing client quotas the way Kafka's `ClientQuotaManager`, `ClientRequestQuotaManager` and
`ControllerMutationQuotaManager` do since KIP-219: each request is recorded against the quota that applies
to its user and client id (security.quotas), the answer goes out at once carrying `throttle_time_ms`, and the
connection is then muted for that long (the next request is not read). Clients back off by the same time.

    producer_byte_rate        Produce request bytes per second
    consumer_byte_rate        Fetch response bytes per second; a throttled Fetch is answered empty and its
                              bytes unrecorded (`FetchContext.getThrottledResponse`)
    request_percentage        handler time as a percentage of one thread (KIP-124); ApiVersions and the SASL
                              requests are exempt; throttling bounded by one quota window
    controller_mutation_rate  partitions created or deleted per second by CreateTopics, CreatePartitions and
                              DeleteTopics, as a token bucket (KIP-599). Strict for CreateTopics v6+,
                              DeleteTopics v5+, CreatePartitions v3+: once the bucket is below zero each further
                              topic is refused with THROTTLING_QUOTA_EXCEEDED (the handlers ask `take_mutations`);
                              permissive for older versions: served, then throttled

Rates are Kafka's `Rate` over `quota.window.num` samples of `quota.window.size.seconds`, so throttle time is
`(rate - quota) / quota * window` as `QuotaUtils.throttleTime` computes it."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from chronolog.errors import ErrorCode, KafkaError
from chronolog.protocol import (
    client_quotas,  # noqa: F401  (registers DescribeClientQuotas / AlterClientQuotas)
    codec,
)
from chronolog.security.quotas import (
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    KEYS,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    Applied,
    QuotaStore,
)

log = logging.getLogger(__name__)

EXEMPT_FROM_REQUEST_QUOTA = frozenset({17, 18, 36})  # SaslHandshake, ApiVersions, SaslAuthenticate
MUTATING_APIS = frozenset({19, 20, 37})  # CreateTopics, DeleteTopics, CreatePartitions
STRICT_FROM = {19: 6, 20: 5, 37: 3}  # the versions that can carry THROTTLING_QUOTA_EXCEEDED (KIP-599)


class Rate:
    """Kafka's `Rate` over a `SampledStat` as of Kafka 3.8 (apache/kafka#15889, "Fix rate metric spikes"):
    `samples` windows of `window_ms`, each starting at its first event; a sample is kept while its last event
    is within `samples * window_ms` (one that started before that span but overlaps it still counts, so the
    measured span may exceed it), in a ring of `samples + 1`. A young measurement is spread over at least
    `samples - 1` full windows plus the current fraction, so a fresh client is not throttled by its first
    burst. The span is thus 10-11 windows with Kafka's defaults, and so is the allowance a throttled
    client gets per cycle."""

    def __init__(self, samples: int, window_ms: float) -> None:
        self.samples, self.window_ms = samples, window_ms
        self._ring: list[list[float]] = []  # [start_ms, last_event_ms, value]
        self._current = 0

    def _purge(self, now_ms: float) -> None:
        horizon = self.samples * self.window_ms
        for sample in self._ring:
            if now_ms - sample[1] >= horizon:
                sample[:] = [now_ms, now_ms, 0.0]

    def record(self, value: float, now_ms: float) -> None:
        if not self._ring:
            self._ring.append([now_ms, now_ms, 0.0])
        sample = self._ring[self._current]
        if now_ms - sample[0] >= self.window_ms:  # complete: the next slot of the ring starts here
            self._current = (self._current + 1) % (self.samples + 1)
            if self._current == len(self._ring):
                self._ring.append([now_ms, now_ms, 0.0])
            else:
                self._ring[self._current][:] = [now_ms, now_ms, 0.0]
            sample = self._ring[self._current]
        sample[1] = now_ms
        sample[2] += value

    def window_size_ms(self, now_ms: float) -> float:
        self._purge(now_ms)
        oldest = min((s[0] for s in self._ring), default=now_ms)
        elapsed = now_ms - oldest
        full = int(elapsed // self.window_ms)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(elapsed, 1.0)

    def per_second(self, now_ms: float) -> float:
        size = self.window_size_ms(now_ms)
        return sum(s[2] for s in self._ring) / (size / 1000.0)

    def throttle_ms(self, bound: float, now_ms: float) -> int:
        """0 within the bound, else `QuotaUtils.throttleTime`."""
        rate = self.per_second(now_ms)
        if rate <= bound:
            return 0
        return round((rate - bound) / bound * self.window_size_ms(now_ms))


class TokenBucket:
    """KIP-599's bucket: `rate` tokens a second up to a burst of rate * samples * window; a request may take
    it below zero and is throttled until it is back at zero."""

    def __init__(self, samples: int, window_ms: float) -> None:
        self.samples, self.window_ms = samples, window_ms
        self.tokens: float | None = None
        self._last_ms = 0.0

    def record(self, value: float, rate: float, now_ms: float) -> int:
        self.deficit_ms(rate, now_ms)
        self.tokens -= value
        return self.deficit_ms(rate, now_ms)

    def deficit_ms(self, rate: float, now_ms: float) -> int:
        """Refill to `now_ms`; the time until the bucket is back at zero (0: not below zero)."""
        burst = rate * self.samples * self.window_ms / 1000.0
        if self.tokens is None:
            self.tokens = burst
        else:
            self.tokens = min(burst, self.tokens + (now_ms - self._last_ms) / 1000.0 * rate)
        self._last_ms = now_ms
        return 0 if self.tokens >= 0 else round(-self.tokens / rate * 1000.0)


@dataclass(frozen=True)
class ConnectionQuotas:
    """The quotas that apply to one connection's principal and client id, resolved once and kept on the
    connection until the quota file's generation changes (Kafka's `ClientQuotaManager` keeps its sensors
    per user and client id the same way, and rebuilds them on a quota change)."""

    generation: int
    principal: str
    client_id: str
    applied: dict[str, Applied]  # only the keys that apply
    client_id_bytes: bytes = field(init=False)  # as a request header carries it, for `fetch_free`

    def __post_init__(self) -> None:
        object.__setattr__(self, "client_id_bytes", self.client_id.encode("utf-8"))

    @property
    def fetch_free(self) -> bool:
        """Nothing to record for a Fetch: the connection may stay on the planned path."""
        return CONSUMER_BYTE_RATE not in self.applied and REQUEST_PERCENTAGE not in self.applied


class QuotaManager:
    """One per broker. `before` and `account` run around each handled request; `mute` after its answer."""

    def __init__(self, store: QuotaStore, samples: int, window_s: int) -> None:
        self.store = store
        self.samples, self.window_ms = samples, window_s * 1000.0
        self._rates: dict[tuple[str, str, str], Rate] = {}
        self._buckets: dict[tuple[str, str], TokenBucket] = {}

    def active(self) -> bool:
        """Is any quota configured? (one stat of the quota file)"""
        return bool(self.store.all())

    def quotas_for(self, ctx: Any) -> ConnectionQuotas:
        """The quotas of `ctx`'s principal and client id: one stat of the quota file, and resolved again
        only when it changed or the connection's principal (re-authentication) or client id did."""
        generation = self.store.generation
        principal, client_id = ctx.principal, ctx.client_id or ""
        conn = ctx.connection
        cached = conn.quotas if conn is not None else None
        if (cached is not None and cached.generation == generation and cached.principal == principal
                and cached.client_id == client_id):
            return cached
        user = principal.split(":", 1)[1] if ":" in principal else principal
        applied = {}
        if self.store.all():
            for key in KEYS:
                found = self.store.resolve(user, client_id, key)
                if found is not None:
                    applied[key] = found
        cached = ConnectionQuotas(generation, principal, client_id, applied)
        if conn is not None:
            conn.quotas = cached
        return cached

    def fetch_free(self, conn: Any, frame: bytes) -> bool:
        """May this Fetch `frame` skip quota accounting (the planned path)? Only when the connection's
        quotas were resolved for the frame's client id under the current quota file (one stat) and none
        bounds a Fetch; otherwise it takes the full path, which resolves them again."""
        cached = conn.quotas
        if cached is None or not cached.fetch_free or cached.generation != self.store.generation:
            return False
        size = int.from_bytes(frame[8:10], "big", signed=True)  # the header's client id (nullable string)
        return (frame[10:10 + size] if size >= 0 else b"") == cached.client_id_bytes

    def _rate(self, key: str, applied: Applied) -> Rate:
        """The rate shared by everyone `applied` is shared by (its user and/or client id)."""
        rate = self._rates.get((key, applied.user, applied.client_id))
        if rate is None:
            rate = self._rates[(key, applied.user, applied.client_id)] = Rate(self.samples, self.window_ms)
        return rate

    def before(self, api_key: int, ctx: Any) -> Any:
        """What `account` needs from before the handler ran: the thread time, and for the topic-mutating
        APIs the partition counts (their difference afterwards is the number of mutations)."""
        quotas = self.quotas_for(ctx)
        permissive = api_key in MUTATING_APIS and ctx.api_version < STRICT_FROM[api_key]
        topics = ctx.log_manager.topics() if permissive and CONTROLLER_MUTATION_RATE in quotas.applied else None
        # the thread's clock is a system call: read only where a request quota will use it
        cpu = time.thread_time() if REQUEST_PERCENTAGE in quotas.applied else 0.0
        return cpu, topics, quotas

    def account(self, api_key: int, ctx: Any, frame: bytes, result: dict | None, started: Any) -> None:
        """Record this request against its quotas, put the largest throttle time in the answer's
        `throttle_time` and remember it on the connection for `mute`."""
        cpu_started, topics_before, quotas = started
        applied = quotas.applied
        if not applied:
            return
        now = time.monotonic() * 1000.0
        throttle = 0
        if api_key == codec.PRODUCE_KEY:
            throttle = max(throttle, self._bytes(applied.get(PRODUCER_BYTE_RATE), PRODUCER_BYTE_RATE, len(frame), now))
        elif api_key == codec.FETCH_KEY and result is not None and CONSUMER_BYTE_RATE in applied:
            size = _fetch_bytes(result)
            fetch_throttle = self._bytes(applied[CONSUMER_BYTE_RATE], CONSUMER_BYTE_RATE, size, now)
            if fetch_throttle:  # answered empty: its bytes are unrecorded (ClientQuotaManager.unrecordQuotaSensor)
                self._rate(CONSUMER_BYTE_RATE, applied[CONSUMER_BYTE_RATE]).record(-size, now)
                _empty_fetch(result)
            throttle = max(throttle, fetch_throttle)
        if api_key not in EXEMPT_FROM_REQUEST_QUOTA and REQUEST_PERCENTAGE in applied:
            limit = applied[REQUEST_PERCENTAGE]
            rate = self._rate(REQUEST_PERCENTAGE, limit)
            rate.record((time.thread_time() - cpu_started) * 100.0, now)  # seconds -> percent of a second
            throttle = max(throttle, min(rate.throttle_ms(limit.limit, now), int(self.window_ms)))
        if api_key in MUTATING_APIS and CONTROLLER_MUTATION_RATE in applied:
            limit = applied[CONTROLLER_MUTATION_RATE]
            bucket = self._bucket(limit)
            if topics_before is not None:  # permissive: what the request did, recorded afterwards
                after = ctx.log_manager.topics()
                mutations = sum(abs(after.get(n, 0) - topics_before.get(n, 0))
                                for n in set(after) | set(topics_before))
                throttle = max(throttle, bucket.record(mutations, limit.limit, now))
            else:  # strict: the handler recorded each topic (take_mutations)
                throttle = max(throttle, bucket.deficit_ms(limit.limit, now))
        if throttle and ctx.connection is not None:
            ctx.connection.throttle_ms = throttle
        if throttle and result is not None and "throttle_time" in result:
            result["throttle_time"] = throttle

    def _bucket(self, applied: Any) -> TokenBucket:
        return self._buckets.setdefault((applied.user, applied.client_id), TokenBucket(self.samples, self.window_ms))

    def take_mutations(self, ctx: Any, partitions: int) -> None:
        """A strict request (STRICT_FROM) about to create or delete `partitions` partitions of one topic:
        THROTTLING_QUOTA_EXCEEDED when the bucket is already below zero, else they are recorded
        (`StrictControllerMutationQuota.record`). Older versions are recorded by `account` instead."""
        if ctx.api_version < STRICT_FROM.get(ctx.api_key, 1 << 15):
            return
        applied = self.quotas_for(ctx).applied.get(CONTROLLER_MUTATION_RATE)
        if applied is None:
            return
        bucket = self._bucket(applied)
        now = time.monotonic() * 1000.0
        if bucket.deficit_ms(applied.limit, now):
            raise KafkaError("The throttling quota has been exceeded.", code=ErrorCode.THROTTLING_QUOTA_EXCEEDED)
        bucket.record(partitions, applied.limit, now)

    def _bytes(self, applied: Applied | None, key: str, size: int, now: float) -> int:
        if applied is None:
            return 0
        rate = self._rate(key, applied)
        rate.record(size, now)
        return rate.throttle_ms(applied.limit, now)

    @staticmethod
    async def mute(conn: Any) -> None:
        """KIP-219: the channel stays muted for the throttle time after the answer was sent."""
        throttle, conn.throttle_ms = conn.throttle_ms, 0
        if throttle > 0:
            await asyncio.sleep(throttle / 1000.0)


def _fetch_bytes(result: dict) -> int:
    total = 0
    for topic in result.get("responses") or ():
        for p in topic.get("partitions") or ():
            records = p.get("records")
            if isinstance(records, codec.FileRegion):
                total += records.size
            elif records:
                total += len(records)
    return total


def _empty_fetch(result: dict) -> None:
    """A throttled Fetch carries no data (its file regions are released)."""
    for topic in result.get("responses") or ():
        for p in topic.get("partitions") or ():
            if isinstance(p.get("records"), codec.FileRegion):
                p["records"].close()
    result["responses"] = []
