"""Streams groups (KIP-1071, `group.protocol=streams`) as kafka-streams-groups.sh describes them
(StreamsGroupCommand), with lag in records and in record time; and the one lookup of a group of any type
that `chronolog groups describe`, `chronolog lag` and the console's group page share.

librdkafka's admin client has no streams-group calls: StreamsGroupDescribe (89, v0) goes over the tools'
plain connection, as timetravel/share_groups.py sends ShareGroupDescribe. A streams group commits offsets as a
consumer group does, so its offsets come from OffsetFetch (librdkafka's list_consumer_group_offsets) and its
lag from `groups.lag_row`. A member's active task `subtopology:partition` reads that partition of each of
the subtopology's source and repartition-source topics: that is who owns a committed partition.
"""

from __future__ import annotations

from typing import Any

from chronolog.errors import ChronologError
from chronolog.timetravel.groups import GroupNotFoundError, committed_offsets, describe_group, lag_row
from chronolog.timetravel.share_groups import (
    ShareGroupClient,
    ShareGroupNotFoundError,
    _state,
    describe_share_group,
    share_client,
)

STREAMS_GROUP_DESCRIBE = 89
KINDS = ("active", "standby", "warmup")  # the task kinds of an assignment (StreamsGroupDescribe's Assignment)


class StreamsGroupNotFoundError(ChronologError):
    """No streams group of that id (GROUP_ID_NOT_FOUND from StreamsGroupDescribe)."""


class StreamsGroupClient(ShareGroupClient):
    """StreamsGroupDescribe over the share-group client's plain connections (ListGroups and FindCoordinator
    are the same requests)."""

    serves = "streams groups (API {api} v{lo}-{hi}); Kafka 4.2 or later with streams.version 1 does"

    def describe(self, group: str) -> Any:
        """StreamsGroupDescribe v0's group entry; `StreamsGroupNotFoundError` when it is not a streams group."""
        return self._described(group, STREAMS_GROUP_DESCRIBE, 0, "streams", StreamsGroupNotFoundError)


def streams_client(source: Any) -> StreamsGroupClient:
    """A streams-group client on the source's bootstrap servers; one line for TLS or SASL settings."""
    return share_client(source, StreamsGroupClient)


def _tasks(assignment: Any) -> dict[str, dict[str, list[int]]]:
    return {k: {t.subtopology_id: sorted(int(p) for p in t.partitions)
                for t in getattr(assignment, f"{k}_tasks") if t.partitions} for k in KINDS}


def tasks_text(tasks: dict[str, list[int]]) -> str:
    """`{"0": [0, 1, 2]}` -> `0:[0,1,2]`, kafka-streams-groups' form of a member's tasks of one kind."""
    return " ".join(f"{sid}:[{','.join(map(str, ps))}]" for sid, ps in sorted(tasks.items()))


def describe_streams_group(source: Any, group: str, client: StreamsGroupClient | None = None) -> dict:
    """A streams group's state, epochs, subtopologies, members with their tasks (active, standby, warm-up,
    and the target assignment), and per committed partition the offset, log end, lag in records and in
    record time, with the member whose active task reads it."""
    own = client is None
    client = client or streams_client(source)
    try:
        described = client.describe(group)
    finally:
        if own:
            client.close()
    subtopologies = []
    topics_of: dict[str, list[str]] = {}
    for s in (described.topology.subtopologies or ()) if described.topology else ():
        names = [*s.source_topics, *(t.name for t in s.repartition_source_topics)]
        topics_of[s.subtopology_id] = names
        subtopologies.append({"id": s.subtopology_id, "source_topics": list(s.source_topics),
                              "repartition_source_topics": [t.name for t in s.repartition_source_topics],
                              "repartition_sink_topics": list(s.repartition_sink_topics),
                              "changelog_topics": [t.name for t in s.state_changelog_topics]})
    members = []
    owner: dict[tuple[str, int], str] = {}
    for m in described.members:
        tasks, target = _tasks(m.assignment), _tasks(m.target_assignment)
        reads = sorted((t, p) for sid, ps in tasks["active"].items() for t in topics_of.get(sid, ()) for p in ps)
        for tp in reads:
            owner[tp] = m.member_id
        members.append({"member_id": m.member_id, "member_epoch": int(m.member_epoch), "process_id": m.process_id,
                        "client_id": m.client_id, "host": m.client_host, "instance_id": m.instance_id,
                        **tasks, "target": target, "partitions": [f"{t}-{p}" for t, p in reads]})
    committed_at = dict(committed_offsets(source, group))
    for key in owner:  # an active task that has not committed yet: "-", as for consumer groups
        committed_at.setdefault(key, -1)
    rows = [{**lag_row(source, t, p, o if o >= 0 else None), "member": owner.get((t, p))}
            for (t, p), o in sorted(committed_at.items())]
    return {"group": group, "type": "streams", "state": _state(described.group_state),
            "group_epoch": int(described.group_epoch), "assignment_epoch": int(described.assignment_epoch),
            "topology_epoch": int(described.topology.epoch) if described.topology else None,
            "subtopologies": subtopologies, "members": members, "partitions": rows}


def _other(source: Any, group: str, kind: type[ShareGroupClient], describe: Any, missing: type[Exception]) -> dict | None:
    try:
        client = share_client(source, kind)
    except ChronologError:  # a SASL mechanism these requests do not speak (GSSAPI, OAUTHBEARER)
        return None
    try:
        return describe(source, group, client)
    except missing:
        return None
    finally:
        client.close()


def describe_any_group(source: Any, group: str) -> dict:
    """A consumer group as `describe_group` gives it, or else a streams group, or else a share group; the
    answer's `type` says which (absent for a consumer group). A streams group is asked for when the consumer
    group lookup finds nothing or a DEAD group: DescribeGroups answers DEAD for a group of another type
    while OffsetFetch still returns its offsets."""
    try:
        info = describe_group(source, group)
    except GroupNotFoundError as exc:
        info, missing = None, exc
    if info is not None and (info["state"] != "DEAD" or info["members"]):
        return info
    found = _other(source, group, StreamsGroupClient, describe_streams_group, StreamsGroupNotFoundError)
    if found is None and info is None:
        found = _other(source, group, ShareGroupClient, describe_share_group, ShareGroupNotFoundError)
    if found is not None:
        return found
    if info is None:
        raise missing
    return info
