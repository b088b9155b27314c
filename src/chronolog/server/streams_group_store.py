"""How streams groups (KIP-1071) are kept in `__consumer_offsets` and restored after a restart.

A chronolog form, not Kafka's seven streams record types (StreamsGroupMetadata, -Topology, -MemberMetadata,
-TargetAssignment..., key types 15-21): one record per group, key version `STREAMS_GROUP_STATE` (1071, the
KIP; records.group_records) with the group id, its value a version (0) and the group as JSON: epochs, the
topology, each member's identity, epochs and tasks (assigned and pending revocation), the target assignment.
A tombstone deletes the group. `__consumer_offsets` is compacted, so only a group's last state stays. Kafka's
coordinator skips record types it does not know (`UnknownRecordTypeException`, logged and ignored), so a
Kafka broker reading these logs ignores them. As for consumer groups (server/consumer_group_store.py) a
change is written, fsynced, before it is answered, by one writer thread in the order the changes were made;
heartbeat times are not written (members' session timers start again when the group is loaded).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import time

from chronolog.errors import ErrorCode, KafkaError, KafkaStorageErrorError
from chronolog.records import group_records as gr
from chronolog.server.streams_group import KINDS, StreamsGroup, StreamsMember
from chronolog.server.streams_topology import Tasks, Topology

log = logging.getLogger(__name__)
VALUE_VERSION = 0


def _tasks_json(tasks: Tasks) -> dict[str, list[int]]:
    return {sid: sorted(ps) for sid, ps in sorted(tasks.items()) if ps}


def _tasks(data: dict[str, list[int]]) -> Tasks:
    return {sid: frozenset(ps) for sid, ps in data.items() if ps}


def encode(group: StreamsGroup) -> bytes:
    """The group's record value: version 0, then the group as JSON."""
    members = [{"member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                "client_id": m.client_id, "client_host": m.client_host, "process_id": m.process_id,
                "user_endpoint": list(m.user_endpoint) if m.user_endpoint else None,
                "client_tags": m.client_tags, "topology_epoch": m.topology_epoch,
                "rebalance_timeout_ms": m.rebalance_timeout_ms, "epoch": -2 if m.static_left else m.epoch,
                "previous_epoch": m.previous_epoch,
                "assigned": {k: _tasks_json(m.assigned[k]) for k in KINDS},
                "revoking": {k: _tasks_json(m.revoking[k]) for k in KINDS},
                "task_epochs": sorted([sid, p, e] for (sid, p), e in m.task_epochs.items())}
               for m in group.members.values()]
    body = {"epoch": group.epoch, "assignment_epoch": group.assignment_epoch,
            "topology": group.topology.to_json() if group.topology is not None else None,
            "endpoint_epoch": group.endpoint_epoch, "members": members,
            "target": {mid: {k: _tasks_json(t[k]) for k in KINDS} for mid, t in sorted(group.target.items())}}
    return VALUE_VERSION.to_bytes(2, "big") + json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def decode(group_id: str, value: bytes, now: float) -> StreamsGroup:
    version = int.from_bytes(value[:2], "big")
    if version != VALUE_VERSION:
        raise ValueError(f"unknown streams group state version {version}")
    body = json.loads(bytes(value[2:]))
    group = StreamsGroup(group_id, epoch=body["epoch"], assignment_epoch=body["assignment_epoch"],
                         topology=Topology.from_json(body["topology"]) if body["topology"] else None,
                         endpoint_epoch=body.get("endpoint_epoch", 0))
    for d in body["members"]:
        m = StreamsMember(d["member_id"], instance_id=d["instance_id"], rack_id=d["rack_id"],
                          client_id=d["client_id"], client_host=d["client_host"], process_id=d["process_id"],
                          user_endpoint=tuple(d["user_endpoint"]) if d["user_endpoint"] else None,
                          client_tags=dict(d["client_tags"]), topology_epoch=d["topology_epoch"],
                          rebalance_timeout_ms=d["rebalance_timeout_ms"], epoch=d["epoch"],
                          previous_epoch=d["previous_epoch"], last_heartbeat=now)
        if m.epoch == -2:  # a static member's temporary leave: its instance comes back and reconciles from 0
            m.static_left, m.epoch = True, 0
        m.assigned = {k: _tasks(d["assigned"].get(k, {})) for k in KINDS}
        m.revoking = {k: _tasks(d["revoking"].get(k, {})) for k in KINDS}
        if any(m.revoking[k] for k in KINDS):
            m.revoke_deadline = now + m.rebalance_timeout_ms / 1000.0
        m.task_epochs = {(sid, p): e for sid, p, e in d["task_epochs"]}
        group.members[m.member_id] = m
    group.target = {mid: {k: _tasks(t.get(k, {})) for k in KINDS} for mid, t in body["target"].items()}
    return group


class StreamsGroupStore:
    """Writes each changed group's record in `__consumer_offsets` (the coordinator's OffsetStore) from one
    thread, and replays them at start."""

    def __init__(self, offsets) -> None:
        self.offsets = offsets
        self.written: dict[str, bytes] = {}
        self._writer = concurrent.futures.ThreadPoolExecutor(max_workers=1,
                                                             thread_name_prefix="chronolog-streams-group-state")
        self._closed = False

    def _submit(self, group_id: str, group: StreamsGroup | None) -> concurrent.futures.Future | None:
        value = encode(group) if group is not None else None
        before = self.written.get(group_id)
        if value == before:
            return None
        if self._closed:
            raise KafkaStorageErrorError("the group coordinator is stopping")
        if value is None:
            self.written.pop(group_id, None)
        else:
            self.written[group_id] = value
        key = gr.streams_group_key(group_id)
        return self._writer.submit(self.offsets.write_records, group_id, [(key, value)])

    @staticmethod
    def _failed(group_id: str, exc: Exception) -> dict:
        log.warning("streams group %s: state not written: %s", group_id, exc)
        return {"error_code": ErrorCode.NOT_COORDINATOR,
                "error_message": f"The coordinator could not write the group's state: {exc}"}

    def durable(self, group_id: str, group: StreamsGroup | None) -> dict | None:
        try:
            future = self._submit(group_id, group)
            if future is not None:
                future.result()
        except KafkaError as exc:
            self.written.pop(group_id, None)
            return self._failed(group_id, exc)
        return None

    async def durable_async(self, group_id: str, group: StreamsGroup | None) -> dict | None:
        try:
            future = self._submit(group_id, group)
            if future is not None:
                await asyncio.wrap_future(future)
        except KafkaError as exc:
            self.written.pop(group_id, None)  # the next change writes the whole group again
            return self._failed(group_id, exc)
        return None

    def close(self) -> None:
        self._closed = True
        self._writer.shutdown(wait=True)

    def replay(self, records: dict[str, bytes]) -> dict[str, StreamsGroup]:
        now = time.monotonic()
        groups = {}
        for gid, value in records.items():
            try:
                groups[gid] = decode(gid, value, now)
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("streams group %s: its record does not replay (%s); the group starts empty", gid, exc)
                continue
            self.written[gid] = bytes(value)
            log.info("loaded streams group %s (epoch %d) with %d members", gid, groups[gid].epoch,
                     len(groups[gid].members))
        return groups
