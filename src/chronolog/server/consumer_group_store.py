"""How KIP-848 consumer groups are kept in `__consumer_offsets` and restored after a restart (the persistence
half of Kafka's `GroupMetadataManager` and the coordinator runtime that writes its records).

A group's state is durable as Kafka keeps it (records.group_records, key types 3-8): after every operation the
group's records are compared with what was last written and the changed ones (and tombstones for a member gone,
or every record of a deleted group) are appended, fsynced, before the answer goes out
(`GroupCoordinatorShard.replay` order: tombstones of current assignments, target assignments, the assignment
epoch, member subscriptions, the topic metadata and the group epoch; then subscriptions, topic metadata, group
epoch, targets, assignment epoch, current assignments). At start the records are replayed (`replay`): members
keep their ids, epochs and partitions, and their session timers start again (`GroupMetadataManager.onLoaded`),
so a member heartbeating with its epoch after a restart goes on as if nothing happened. Heartbeat times are not
written (soft state, as in Kafka). The group and member state machine is server/consumer_group.py's.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import logging
import struct
import time
import uuid
from collections.abc import Callable

from chronolog.errors import ErrorCode, KafkaError, KafkaStorageErrorError
from chronolog.records import group_records as gr
from chronolog.server.assignment import Assignment, regex_matches
from chronolog.server.consumer_group import STATIC_LEAVE_EPOCH, ConsumerGroup, ConsumerMember

log = logging.getLogger(__name__)

# The order of a group's records in one write: tombstones first, then the records (GroupMetadataManager's
# removeMember / ConsumerGroup.createGroupTombstoneRecords, and consumerGroupHeartbeat's record order).
_TOMBSTONE_ORDER = (gr.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, gr.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
                    gr.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, gr.CONSUMER_GROUP_MEMBER_METADATA,
                    gr.CONSUMER_GROUP_PARTITION_METADATA, gr.CONSUMER_GROUP_METADATA)


def topic_uuid_of(raw: str) -> uuid.UUID:
    """A topic id as the log manager keeps it (Kafka's url-safe base64 `Uuid.toString`) as a UUID."""
    return uuid.UUID(bytes=base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))


def member_state(group: ConsumerGroup, m: ConsumerMember) -> int:
    """MemberState as CurrentAssignmentBuilder leaves it: revoking, waiting for partitions others still
    hold, or stable."""
    if m.revoking:
        return gr.MEMBER_UNREVOKED_PARTITIONS
    if m.epoch == group.assignment_epoch and m.assigned != group.target.get(m.member_id, {}):
        return gr.MEMBER_UNRELEASED_PARTITIONS
    return gr.MEMBER_STABLE


class ConsumerGroupStore:
    """The consumer groups' records: written by one thread in the order the changes were made, and replayed at
    start. `offsets` is the coordinator's OffsetStore (`__consumer_offsets` and the log manager's topic ids)."""

    def __init__(self, offsets) -> None:
        self.offsets = offsets
        self.written: dict[str, dict[bytes, bytes]] = {}  # group -> its records as last written (key -> value)
        self._ids: dict[str, uuid.UUID] = {}  # the log manager's topic id strings -> UUIDs
        self._encoded: dict[str, dict[tuple, tuple]] = {}  # group -> (kind, member) -> (inputs, key, value)
        # One thread writes every group's state, in the order the changes were made (its queue is FIFO).
        self._writer = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="chronolog-group-state")
        self._last_write: dict[str, concurrent.futures.Future] = {}
        self._closed = False

    def _topic_id(self, name: str) -> uuid.UUID | None:
        logs = self.offsets.logs
        try:
            raw = logs.topic_id(name)
        except KeyError:
            return None  # not (or no longer) a topic: its partitions are left out, as Kafka's metadata image does
        tid = self._ids.get(raw)
        if tid is None:
            tid = self._ids[raw] = topic_uuid_of(raw)
        return tid

    def _partitions(self, assignment: Assignment) -> gr.TopicPartitions:
        out = []
        for topic in sorted(assignment):
            tid = self._topic_id(topic)
            if tid is not None:
                out.append((tid, tuple(sorted(assignment[topic]))))
        return tuple(out)

    def _image(self, group: ConsumerGroup) -> list[tuple[bytes, bytes]]:
        """The group's records (GroupCoordinatorRecordHelpers), in the order Kafka writes them. Each record's
        bytes are kept with the values they were made from and made again only when one changed: a steady
        heartbeat of a large group re-encodes nothing (assignments are compared by identity first, and the
        coordinator replaces an assignment's dict rather than changing it)."""
        gid = group.group_id
        old = self._encoded.get(gid, {})
        new: dict[tuple, tuple] = {}

        def record(kind: int, member_id: str | None, inputs: tuple, make: Callable[[], bytes]) -> tuple[bytes, bytes]:
            hit = old.get((kind, member_id))
            if hit is not None and hit[0] == inputs:
                new[(kind, member_id)] = hit
                return hit[1], hit[2]
            key = (gr.consumer_group_key(kind, gid) if member_id is None
                   else gr.consumer_member_key(kind, gid, member_id))
            entry = new[(kind, member_id)] = (inputs, key, make())
            return entry[1], entry[2]

        out = []
        for m in group.members.values():
            protocols = None if m.classic_protocols is None else tuple(tuple(p) for p in m.classic_protocols)
            inputs = (m.instance_id, m.rack_id, m.client_id, m.client_host, m.names, m.regex, m.rebalance_timeout_ms,
                      m.assignor, protocols, m.session_timeout_ms)
            out.append(record(gr.CONSUMER_GROUP_MEMBER_METADATA, m.member_id, inputs, lambda m=m, p=protocols:
                              gr.member_metadata_value(gr.ConsumerGroupMemberValue(
                                  m.instance_id, m.rack_id, m.client_id, m.client_host, m.names, m.regex,
                                  m.rebalance_timeout_ms, m.assignor,
                                  None if p is None else gr.ClassicMemberMetadata(m.session_timeout_ms or 0, p)))))
        sizes = tuple(sorted(group.topic_sizes.items()))
        out.append(record(gr.CONSUMER_GROUP_PARTITION_METADATA, None, (sizes,), lambda: gr.partition_metadata_value(
            [gr.TopicMetadata(tid, name, count) for name, count in sizes
             if (tid := self._topic_id(name)) is not None])))
        out.append(record(gr.CONSUMER_GROUP_METADATA, None, (group.epoch,),
                          lambda: gr.consumer_group_metadata_value(group.epoch)))
        for mid, target in group.target.items():
            out.append(record(gr.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, mid, (target,),
                              lambda t=target: gr.target_assignment_member_value(self._partitions(t))))
        out.append(record(gr.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, None, (group.assignment_epoch,),
                          lambda: gr.target_assignment_metadata_value(group.assignment_epoch)))
        for m in group.members.values():
            # a static member's temporary leave is its epoch -2 (consumerGroupStaticMemberGroupLeave)
            epoch = STATIC_LEAVE_EPOCH if m.static_left else m.epoch
            state = member_state(group, m)
            out.append(record(gr.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, m.member_id,
                              (epoch, m.previous_epoch, state, m.assigned, m.revoking),
                              lambda m=m, e=epoch, st=state: gr.current_assignment_value(gr.CurrentMemberAssignment(
                                  e, m.previous_epoch, st, self._partitions(m.assigned),
                                  self._partitions(m.revoking)))))
        self._encoded[gid] = new
        return out

    def _submit(self, group_id: str, group: ConsumerGroup | None) -> tuple[concurrent.futures.Future, list] | None:
        """What changed in the group since its last write (tombstones for what is gone: a member, or the whole
        group once deleted), handed to the one writer thread of group state: its queue keeps the log in the
        order the changes were made. The baseline moves on at once (the next change is diffed against this
        one); a write that fails puts its keys back as unwritten (`_failed`). None when nothing changed."""
        image = self._image(group) if group is not None else []
        if group is None:
            self._encoded.pop(group_id, None)
        before = self.written.get(group_id, {})
        now = dict(image)
        gone = sorted((k for k in before if k not in now), key=lambda k: _TOMBSTONE_ORDER.index(gr.key_version(k)))
        changed = [(k, v) for k, v in image if before.get(k) != v]
        if not gone and not changed:
            return None
        records = [(k, None) for k in gone] + changed
        if self._closed:  # the coordinator is stopping: Kafka's unloaded coordinator answers NOT_COORDINATOR
            raise KafkaStorageErrorError("the group coordinator is stopping")
        if now:
            self.written[group_id] = now
        else:
            self.written.pop(group_id, None)
        future = self._writer.submit(self.offsets.write_records, group_id, records)
        self._last_write[group_id] = future
        return future, records

    def _failed(self, group_id: str, records: list) -> None:
        """A write that did not happen: its keys count as unwritten (b"" equals no value), so the group's next
        write carries them again, as records or as tombstones."""
        baseline = self.written.setdefault(group_id, {})
        for k, _v in records:
            baseline[k] = b""

    def _settled(self, group_id: str, future: concurrent.futures.Future) -> None:
        if self._last_write.get(group_id) is future:
            del self._last_write[group_id]

    def persist(self, group_id: str, group: ConsumerGroup | None) -> None:
        """The group's changes written, durable before it returns (the event loop waits: for the rare
        callers that cannot await, `persist_async` is the heartbeat's way). Raises KafkaStorageErrorError
        (or another KafkaError) when it could not."""
        submitted = self._submit(group_id, group)
        if submitted is None:
            pending = self._last_write.get(group_id)
            if pending is not None:
                pending.result()  # what this answer rests on is durable too
            return
        future, records = submitted
        try:
            future.result()
        except KafkaError:
            self._failed(group_id, records)
            raise
        finally:
            self._settled(group_id, future)

    async def persist_async(self, group_id: str, group: ConsumerGroup | None) -> None:
        """`persist` with the event loop free while the writer thread appends and fsyncs."""
        submitted = self._submit(group_id, group)
        if submitted is None:
            pending = self._last_write.get(group_id)
            if pending is not None:
                await asyncio.wrap_future(pending)
            return
        future, records = submitted
        try:
            await asyncio.wrap_future(future)
        except KafkaError:
            self._failed(group_id, records)
            raise
        finally:
            self._settled(group_id, future)

    def close(self) -> None:
        """Waits for the writes still queued (a stop: they are answered or logged before the logs close)."""
        self._closed = True
        self._writer.shutdown(wait=True)

    @staticmethod
    def _store_failed(group_id: str, exc: Exception) -> dict:
        """The answer to a change that could not be written: NOT_COORDINATOR, as Kafka answers a failed write
        of the coordinator's records (the client finds the coordinator again and retries)."""
        log.warning("consumer group %s: state not written: %s", group_id, exc)
        return {"error_code": ErrorCode.NOT_COORDINATOR,
                "error_message": f"The coordinator could not write the group's state: {exc}"}

    def durable(self, group_id: str, group: ConsumerGroup | None) -> dict | None:
        """persist(); on a failure the error answer (`_store_failed`), else None."""
        try:
            self.persist(group_id, group)
        except KafkaError as exc:
            return self._store_failed(group_id, exc)
        return None

    async def durable_async(self, group_id: str, group: ConsumerGroup | None) -> dict | None:
        """persist_async(); on a failure the error answer (`_store_failed`), else None."""
        try:
            await self.persist_async(group_id, group)
        except KafkaError as exc:
            return self._store_failed(group_id, exc)
        return None

    def replay(self, records: dict[str, dict[bytes, bytes]], assignor: str) -> dict[str, ConsumerGroup]:
        """GroupMetadataManager.replay of the group records read at start, then `onLoaded`: every member's
        session timer (and a revoking member's rebalance timer) starts now. `assignor`: a group's own when
        none of its members names one (the first configured). The groups that replay, by id."""
        logs = self.offsets.logs
        names: dict[uuid.UUID, str] = {}
        for name in logs.topics():
            tid = self._topic_id(name)
            if tid is not None:
                names[tid] = name
        now = time.monotonic()
        groups: dict[str, ConsumerGroup] = {}

        def assignment(tps: gr.TopicPartitions) -> Assignment:
            return {names[tid]: frozenset(ps) for tid, ps in tps if tid in names and ps}

        for gid, recs in records.items():
            try:
                group = self._replay_group(gid, recs, assignment, assignor, now)
            except (KafkaError, struct.error, ValueError) as exc:
                log.warning("consumer group %s: its records do not replay (%s); the group starts empty", gid, exc)
                continue
            groups[gid] = group
            self.written[gid] = dict(recs)
            log.info("loaded consumer group %s (epoch %d) with %d members", gid, group.epoch, len(group.members))
        return groups

    def _replay_group(self, gid: str, recs: dict[bytes, bytes], assignment, assignor: str,
                      now: float) -> ConsumerGroup:
        group = ConsumerGroup(gid, assignor=assignor)
        current: dict[str, gr.CurrentMemberAssignment] = {}
        for key, value in recs.items():
            k = gr.read_key(key)
            if isinstance(k, gr.ConsumerGroupKey):
                if k.kind == gr.CONSUMER_GROUP_METADATA:
                    group.epoch = gr.read_epoch_value(value)
                elif k.kind == gr.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
                    group.assignment_epoch = gr.read_epoch_value(value)
                else:
                    group.topic_sizes = {t.name: t.num_partitions for t in gr.read_partition_metadata_value(value)}
            elif isinstance(k, gr.ConsumerGroupMemberKey):
                if k.kind == gr.CONSUMER_GROUP_MEMBER_METADATA:
                    v = gr.read_member_metadata_value(value)
                    m = ConsumerMember(k.member_id, v.instance_id, v.rack_id, v.client_id, v.client_host, (),
                                       v.server_assignor, v.rebalance_timeout_ms, names=v.subscribed_topic_names,
                                       regex=v.subscribed_topic_regex, last_heartbeat=now)
                    if v.classic is not None:
                        m.classic_protocols = [(n, bytes(b)) for n, b in v.classic.protocols]
                        m.session_timeout_ms = v.classic.session_timeout_ms
                    group.members[k.member_id] = m
                elif k.kind == gr.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
                    group.target[k.member_id] = assignment(gr.read_target_assignment_member_value(value))
                else:
                    current[k.member_id] = gr.read_current_assignment_value(value)
        topics = self.offsets.logs.topics()
        for mid, m in group.members.items():
            m.subscribed = tuple(sorted(set(m.names) | regex_matches(m.regex, topics)))
            c = current.get(mid)
            if c is None:
                continue
            m.epoch, m.previous_epoch = c.member_epoch, c.previous_member_epoch
            if c.member_epoch == STATIC_LEAVE_EPOCH:
                # its instance comes back under a new member id and reconciles from epoch 0, as in Kafka
                m.static_left, m.epoch = True, 0
            m.assigned, m.revoking = assignment(c.assigned), assignment(c.pending_revocation)
            if m.revoking:
                m.revoke_deadline = now + m.rebalance_timeout_ms / 1000.0
            m.stamp()  # the records keep no assignment epochs: what a member holds counts as of its epoch
        chosen = [m.assignor for m in group.members.values() if m.assignor]
        if chosen:
            group.assignor = max(sorted(set(chosen)), key=chosen.count)
        return group
