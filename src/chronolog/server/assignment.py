"""What the members of a consumer group (KIP-848) are given: the server-side assignors of
`group.consumer.assignors` (Kafka's org.apache.kafka.coordinator.group.assignor: `uniform`, `range`), the set
algebra of assignments the reconciliation uses, and the topics a subscription's regular expression names."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Protocol

Assignment = dict[str, frozenset[int]]  # topic name -> partitions


class Subscriber(Protocol):
    """What an assignor reads of a member (server.consumer_group.ConsumerMember)."""

    subscribed: tuple[str, ...]
    assigned: Assignment


def range_assign(members: dict[str, Subscriber], sizes: dict[str, int]) -> dict[str, Assignment]:
    """RangeAssignor: per topic, its subscribers in member-id order get contiguous ranges; the first
    (partitions % subscribers) get one more. Co-partitioned topics land on the same members."""
    out: dict[str, dict[str, set[int]]] = {m: {} for m in members}
    for topic, count in sorted(sizes.items()):
        subs = sorted(m for m, x in members.items() if topic in x.subscribed)
        if not subs:
            continue
        quota, extra = divmod(count, len(subs))
        start = 0
        for i, m in enumerate(subs):
            n = quota + (1 if i < extra else 0)
            if n:
                out[m][topic] = set(range(start, start + n))
            start += n
    return {m: {t: frozenset(p) for t, p in a.items()} for m, a in out.items()}


def uniform_assign(members: dict[str, Subscriber], sizes: dict[str, int]) -> dict[str, Assignment]:
    """UniformAssignor: balanced (member counts differ by at most one among members with the same
    subscription) and sticky (a member keeps what it holds while that stays balanced)."""
    counts = {m: 0 for m in members}
    owner: dict[tuple[str, int], str] = {}
    partitions = [(t, p) for t, n in sorted(sizes.items()) for p in range(n)
                  if any(t in x.subscribed for x in members.values())]
    total_subs = {m: sum(sizes.get(t, 0) for t in x.subscribed) for m, x in members.items()}
    quota = {m: -(-sum(1 for t, _p in partitions if t in members[m].subscribed)
                   // max(1, sum(1 for x in members.values() if set(x.subscribed) & set(members[m].subscribed))))
             for m in members} if members else {}
    # Sticky pass: keep current owners up to the quota.
    for (t, p) in partitions:
        for m, x in members.items():
            held = t in x.assigned and p in x.assigned[t]
            if held and t in x.subscribed and counts[m] < quota[m] and (t, p) not in owner:
                owner[(t, p)] = m
                counts[m] += 1
    # The rest go to the least loaded subscriber (ties: fewest subscribed partitions, then member id).
    for (t, p) in partitions:
        if (t, p) in owner:
            continue
        subs = [m for m, x in members.items() if t in x.subscribed]
        m = min(subs, key=lambda m: (counts[m], total_subs[m], m))
        owner[(t, p)] = m
        counts[m] += 1
    out: dict[str, dict[str, set[int]]] = {m: {} for m in members}
    for (t, p), m in owner.items():
        out[m].setdefault(t, set()).add(p)
    return {m: {t: frozenset(ps) for t, ps in a.items()} for m, a in out.items()}


ASSIGNORS = {"uniform": uniform_assign, "range": range_assign}


def minus(a: Assignment, b: Assignment) -> Assignment:
    out = {t: ps - b.get(t, frozenset()) for t, ps in a.items()}
    return {t: ps for t, ps in out.items() if ps}


def inter(a: Assignment, b: Assignment) -> Assignment:
    out = {t: ps & b.get(t, frozenset()) for t, ps in a.items()}
    return {t: ps for t, ps in out.items() if ps}


def union(a: Assignment, b: Assignment) -> Assignment:
    out = dict(a)
    for t, ps in b.items():
        out[t] = out.get(t, frozenset()) | ps
    return {t: ps for t, ps in out.items() if ps}


@functools.lru_cache(maxsize=256)
def topic_regex(regex: str):
    """A subscription regex compiled as Kafka compiles it: RE2 syntax (GroupMetadataManager uses RE2/J, KIP-848:
    no lookaround or backreferences; `\\pL`, `[[:alpha:]]`, `\\z` are fine), matched against the whole name.
    Python's `re` stands in where the google-re2 binding is not installed. Raises ValueError when invalid."""
    try:
        import re2
    except ImportError:  # pragma: no cover (a dependency; kept working without it)
        try:
            return re.compile(regex)
        except re.error as exc:
            raise ValueError(str(exc)) from None
    options = re2.Options()
    options.log_errors = False  # an invalid regex is the client's error, answered, not logged by RE2
    try:
        return re2.compile(regex, options)
    except re2.error as exc:
        raise ValueError(exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes)
                         else str(exc)) from None


def regex_matches(regex: str | None, topics: Iterable[str]) -> set[str]:
    """The topics a member's regex subscribes it to: every topic whose whole name matches, internal ones
    (`__consumer_offsets`) included, as Kafka's TopicRegexResolver matches every topic of the metadata image."""
    if not regex:
        return set()
    try:
        pattern = topic_regex(regex)
    except ValueError:
        return set()
    return {t for t in topics if pattern.fullmatch(t)}
