"""A streams group's topology (KIP-1071) as the broker keeps and configures it, and its task assignor.

The topology is what a Kafka Streams member sends when it joins (StreamsGroupHeartbeat's `Topology`): its
subtopologies with their source topics (names and regexes), the repartition topics they write and read and
the changelog topics of their state stores. `configure` resolves it against the topics that exist, as Kafka's
`InternalTopicManager.configureTopics` does: the partition counts of repartition topics (from the
subtopologies that write them, and copartition groups), the tasks of each subtopology (its largest source
topic), the changelog topics' counts (one partition per task), the internal topics still to create, and the
statuses (`MISSING_SOURCE_TOPICS`, `INCORRECTLY_PARTITIONED_TOPICS`, `MISSING_INTERNAL_TOPICS`) Kafka answers
while the topology cannot run; `summarize_topics` names the internal topics the broker cannot create as
Kafka's status details do.

`sticky_assign` is Kafka's `StickyTaskAssignor` (org.apache.kafka.coordinator.group.streams.assignor) in its
essentials: active tasks stay with the member (or else the process) that had them while it is under its
share, the rest go to the least loaded members; standby tasks go to other processes than the active one.
Tasks are `dict[subtopology id, frozenset[partition]]`, the shape of server.assignment's set algebra.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from chronolog.server.assignment import regex_matches

Tasks = dict[str, frozenset[int]]  # subtopology id -> task partitions

# StreamsGroupHeartbeatResponse.Status codes
STALE_TOPOLOGY, MISSING_SOURCE_TOPICS, INCORRECTLY_PARTITIONED_TOPICS = 0, 1, 2
MISSING_INTERNAL_TOPICS, SHUTDOWN_APPLICATION, ASSIGNMENT_DELAYED = 3, 4, 5


class InvalidTopology(ValueError):
    """STREAMS_INVALID_TOPOLOGY: the topology a member sent does not hold together."""


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: int = 0  # 0: derived (repartition topics) or one per task (changelogs)
    replication_factor: int = 0
    configs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Subtopology:
    id: str
    source_topics: tuple[str, ...] = ()
    source_regex: tuple[str, ...] = ()
    repartition_sinks: tuple[str, ...] = ()
    repartition_sources: tuple[TopicInfo, ...] = ()
    changelogs: tuple[TopicInfo, ...] = ()
    copartition_groups: tuple[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]], ...] = ()


@dataclass(frozen=True)
class Topology:
    epoch: int
    subtopologies: tuple[Subtopology, ...]

    def to_json(self) -> dict:
        return {"epoch": self.epoch, "subtopologies": [
            {"id": s.id, "source_topics": list(s.source_topics), "source_regex": list(s.source_regex),
             "repartition_sinks": list(s.repartition_sinks),
             "repartition_sources": [_info_json(t) for t in s.repartition_sources],
             "changelogs": [_info_json(t) for t in s.changelogs],
             "copartition_groups": [[list(a), list(b), list(c)] for a, b, c in s.copartition_groups]}
            for s in self.subtopologies]}

    @classmethod
    def from_json(cls, data: dict) -> Topology:
        return cls(int(data["epoch"]), tuple(
            Subtopology(s["id"], tuple(s["source_topics"]), tuple(s["source_regex"]), tuple(s["repartition_sinks"]),
                        tuple(_info(t) for t in s["repartition_sources"]), tuple(_info(t) for t in s["changelogs"]),
                        tuple((tuple(a), tuple(b), tuple(c)) for a, b, c in s["copartition_groups"]))
            for s in data["subtopologies"]))


def _info_json(t: TopicInfo) -> dict:
    return {"name": t.name, "partitions": t.partitions, "replication_factor": t.replication_factor,
            "configs": [list(kv) for kv in t.configs]}


def _info(d: dict) -> TopicInfo:
    return TopicInfo(d["name"], int(d["partitions"]), int(d["replication_factor"]),
                     tuple((k, v) for k, v in d["configs"]))


def topology_of(wire: Any) -> Topology:
    """The heartbeat's Topology as a `Topology`, checked as `StreamsGroupHeartbeatRequest` validation and
    `TopologyValidator` (throwIfStreamsGroupHeartbeatRequestIsInvalid) check it. Raises InvalidTopology."""
    subs = []
    seen: set[str] = set()
    for s in wire.subtopologies:
        # an empty id is taken, as Kafka 4.4 takes it (wire fuzzer seed 27); one named twice Kafka fails
        # (UNKNOWN_SERVER_ERROR: its map of subtopologies throws)
        if s.subtopology_id in seen:
            raise InvalidTopology(f"Duplicate subtopology ID {s.subtopology_id}.")
        seen.add(s.subtopology_id)

        def infos(items) -> tuple[TopicInfo, ...]:
            out = []
            for t in items:
                if int(t.partitions) < 0:
                    raise InvalidTopology(f"Number of partitions of internal topic {t.name} must be non-negative.")
                out.append(TopicInfo(t.name, int(t.partitions), int(t.replication_factor),
                                     tuple((kv.key, kv.value) for kv in t.topic_configs)))
            return tuple(out)

        subs.append(Subtopology(
            s.subtopology_id, tuple(s.source_topics), tuple(s.source_topic_regex), tuple(s.repartition_sink_topics),
            infos(s.repartition_source_topics), infos(s.state_changelog_topics),
            tuple((tuple(int(i) for i in g.source_topics), tuple(int(i) for i in g.source_topic_regex),
                   tuple(int(i) for i in g.repartition_source_topics)) for g in s.copartition_groups)))
    topology = Topology(int(wire.epoch), tuple(subs))
    internal = {t.name for s in topology.subtopologies for t in (*s.repartition_sources, *s.changelogs)}
    for s in topology.subtopologies:
        # a repartition sink that no subtopology reads is not refused: Kafka 4.4 lets the member join (wire
        # fuzzer seed 11)
        clash = set(s.source_topics) & internal
        if clash:
            raise InvalidTopology(f"Source topics {sorted(clash)} of subtopology {s.id} are internal topics.")
    return topology


@dataclass
class Configured:
    """ConfiguredTopology: tasks per subtopology (None while the topology cannot run), the internal topics to
    create (name -> (partitions, configs)), and the statuses to answer."""

    tasks: dict[str, int] | None
    sources: dict[str, tuple[str, ...]] = field(default_factory=dict)  # subtopology -> every topic it reads
    to_create: dict[str, tuple[int, dict[str, str]]] = field(default_factory=dict)
    status: list[tuple[int, str]] = field(default_factory=list)


def configure(topology: Topology | None, topics: dict[str, int]) -> Configured:
    """InternalTopicManager.configureTopics against `topics` (name -> partition count)."""
    if topology is None:
        return Configured(None)
    resolved = {s.id: tuple(sorted(set(s.source_topics) | set().union(*(regex_matches(r, topics)
                                                                          for r in s.source_regex))))
                for s in topology.subtopologies}
    missing = sorted({t for s in topology.subtopologies for t in s.source_topics if t not in topics})
    empty_regex = [r for s in topology.subtopologies for r in s.source_regex if not regex_matches(r, topics)]
    if missing or empty_regex:
        detail = f"Source topics {', '.join(missing)} are missing." if missing else \
            f"Source topic regexes {', '.join(empty_regex)} match no topic."
        return Configured(None, status=[(MISSING_SOURCE_TOPICS, detail)])
    # Repartition topics: a count the topology names, the existing topic's, else the largest source of the
    # subtopologies writing it (RepartitionTopics), to a fixpoint across chains of repartitions.
    counts: dict[str, int] = {}
    for s in topology.subtopologies:
        for t in s.repartition_sources:
            if t.partitions > 0:
                counts[t.name] = t.partitions
            elif t.name in topics:
                counts[t.name] = topics[t.name]
    changed = True
    while changed:
        changed = False
        for s in topology.subtopologies:
            for t in s.repartition_sources:
                if t.name in counts:
                    continue
                writers = [w for w in topology.subtopologies if t.name in w.repartition_sinks]
                upstream = [x.name for w in writers for x in w.repartition_sources]
                if not writers or any(r not in counts for r in upstream):
                    continue
                sizes = [topics[x] for w in writers for x in resolved[w.id]] + [counts[r] for r in upstream]
                if sizes:
                    counts[t.name], changed = max(sizes), True
    status: list[tuple[int, str]] = []
    for s in topology.subtopologies:  # copartition groups: one count (CopartitionedTopicsEnforcer)
        for src_idx, _regex_idx, rep_idx in s.copartition_groups:
            external = [s.source_topics[i] for i in src_idx if i < len(s.source_topics)]
            repart = [s.repartition_sources[i].name for i in rep_idx if i < len(s.repartition_sources)]
            known = {topics[t] for t in external}
            if len(known) > 1:
                status.append((INCORRECTLY_PARTITIONED_TOPICS, f"Following topics are not copartitioned: "
                               f"{sorted(external)}"))
                continue
            target = max(known) if known else max((counts.get(t, 0) for t in repart), default=0)
            for t in repart:
                fixed = next(x for x in s.repartition_sources if x.name == t).partitions > 0
                if not fixed and t not in topics and target:
                    counts[t] = target
    unknown = sorted(t.name for s in topology.subtopologies for t in s.repartition_sources if t.name not in counts)
    if unknown:
        status.append((INCORRECTLY_PARTITIONED_TOPICS, f"Unable to compute the partition count of repartition "
                       f"topics {', '.join(unknown)}."))
    if status:
        return Configured(None, status=status)
    tasks: dict[str, int] = {}
    sources: dict[str, tuple[str, ...]] = {}
    to_create: dict[str, tuple[int, dict[str, str]]] = {}
    for s in topology.subtopologies:
        reads = resolved[s.id] + tuple(t.name for t in s.repartition_sources)
        sources[s.id] = reads
        tasks[s.id] = max([topics[t] for t in resolved[s.id]] + [counts[t.name] for t in s.repartition_sources],
                          default=0)
        for t in s.repartition_sources:
            to_create.setdefault(t.name, (counts[t.name], dict(t.configs)))
        for t in s.changelogs:
            to_create.setdefault(t.name, (t.partitions or tasks[s.id], dict(t.configs)))
    wrong = sorted(name for name, (n, _c) in to_create.items() if name in topics and topics[name] != n)
    if wrong:
        return Configured(None, sources, status=[(INCORRECTLY_PARTITIONED_TOPICS, f"Internal topics "
                                                  f"{', '.join(wrong)} have the wrong number of partitions.")])
    return Configured(tasks, sources, {n: v for n, v in to_create.items() if n not in topics})


# -- internal topics: their creation checked and their names listed as Kafka does -------------------------
def java_hash_order(names: list[str]) -> list[str]:
    """`names` in the order a java.util.HashSet of them iterates (buckets of String.hashCode spread, a table of
    16 doubling past 3/4 full; one bucket in insertion order): the order Kafka lists topics in a status."""
    table = 16
    while len(names) > table * 3 // 4:
        table *= 2

    def bucket(name: str) -> int:
        h, units = 0, name.encode("utf-16-be")  # Java's chars: UTF-16 code units
        for i in range(0, len(units), 2):
            h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (table - 1)

    return sorted(names, key=bucket)


def summarize_topics(names: list[str]) -> str:
    """InternalTopicManager.summarizeTopics: the first three, and how many more."""
    ordered = java_hash_order(names)
    more = f" and {len(ordered) - 3} additional topics" if len(ordered) > 3 else ""
    return ", ".join(ordered[:3]) + more


# -- the sticky task assignor -------------------------------------------------------------------------------
@dataclass
class AssignorMember:
    member_id: str
    process_id: str
    active: Tasks  # what it had (its current or previous target), for stickiness
    standby: Tasks


def _all_tasks(tasks: dict[str, int]) -> list[tuple[str, int]]:
    return [(sid, p) for sid in sorted(tasks) for p in range(tasks[sid])]


def sticky_assign(members: Iterable[AssignorMember], tasks: dict[str, int],
                  num_standby: int = 0) -> dict[str, tuple[Tasks, Tasks]]:
    """StickyTaskAssignor: member id -> (active tasks, standby tasks)."""
    members = sorted(members, key=lambda m: m.member_id)
    out_active: dict[str, set[tuple[str, int]]] = {m.member_id: set() for m in members}
    out_standby: dict[str, set[tuple[str, int]]] = {m.member_id: set() for m in members}
    if not members:
        return {}
    every = _all_tasks(tasks)
    quota = math.ceil(len(every) / len(members)) if every else 0
    by_id = {m.member_id: m for m in members}
    prev_owner: dict[tuple[str, int], str] = {}
    prev_process: dict[tuple[str, int], str] = {}
    for m in members:
        for sid, ps in m.active.items():
            for p in ps:
                prev_owner.setdefault((sid, p), m.member_id)
                prev_process.setdefault((sid, p), m.process_id)
    left = []
    for task in every:  # 1: a task stays with its member while that member is under its share
        owner = prev_owner.get(task)
        if owner is not None and task[0] in tasks and len(out_active[owner]) < quota:
            out_active[owner].add(task)
        else:
            left.append(task)
    for task in left:  # 2: its process if it has a member under its share, else the least loaded member
        process = prev_process.get(task)
        same = [m.member_id for m in members if m.process_id == process and len(out_active[m.member_id]) < quota]
        pool = same or [m.member_id for m in members]
        chosen = min(pool, key=lambda mid: (len(out_active[mid]), mid))
        out_active[chosen].add(task)
    if num_standby > 0:
        active_process = {t: by_id[mid].process_id for mid, ts in out_active.items() for t in ts}
        prev_standby = {(sid, p): m.member_id for m in members for sid, ps in m.standby.items() for p in ps}
        for task in every:
            for _ in range(num_standby):
                taken = {by_id[mid].process_id for mid, ts in out_standby.items() if task in ts}
                pool = [m.member_id for m in members if m.process_id != active_process.get(task)
                        and m.process_id not in taken]
                if not pool:
                    break  # fewer processes than replicas: Kafka assigns what it can
                had = prev_standby.get(task)
                chosen = had if had in pool else min(
                    pool, key=lambda mid: (len(out_active[mid]) + len(out_standby[mid]), mid))
                out_standby[chosen].add(task)
    return {mid: (_tasks(out_active[mid]), _tasks(out_standby[mid])) for mid in out_active}


def _tasks(items: Iterable[tuple[str, int]]) -> Tasks:
    out: dict[str, set[int]] = {}
    for sid, p in items:
        out.setdefault(sid, set()).add(p)
    return {sid: frozenset(ps) for sid, ps in out.items()}
