"""Share groups (KIP-932, "queues for Kafka"): membership, assignment, share sessions and the
share-partitions of every group, for one broker.

Kafka splits this between the group coordinator (`GroupMetadataManager.shareGroupHeartbeat`, the
`SimpleAssignor`), the broker's `SharePartitionManager` (share sessions, fetch and acknowledge) and the
share coordinator (durable state). One chronolog broker keeps them in one object, `ShareGroups`, hung on
the broker state; protocol/share_groups.py translates the wire.

Membership: a member joins with epoch 0 and the topics it subscribes to; every change (join, leave,
subscription, a topic's partition count) bumps the group epoch and computes a new target assignment with
the simple assignor, where several members may share a partition. A share group needs no revocation (a
partition's records are shared, not owned), so each member takes its target on its next heartbeat. A member
silent for the session timeout is removed and its acquired records are released.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from chronolog.errors import ErrorCode
from chronolog.protocol.group_configs import duration_ms
from chronolog.server.share_partition import Batch, SharePartition
from chronolog.server.share_state import ShareStateStore

log = logging.getLogger(__name__)

Assignment = dict[str, frozenset[int]]
LEAVE_EPOCH = -1
EMPTY, STABLE = "Empty", "Stable"

# GroupConfig's names and Kafka 4.4's bounds (GroupCoordinatorConfig, ShareGroupConfig): name -> (broker
# config giving the default, its min config or value, its max config or value)
GROUP_INT_CONFIGS: dict[str, tuple[str | None, Any, Any, int]] = {
    "consumer.session.timeout.ms": (None, 45000, 60000, 45000),
    "consumer.heartbeat.interval.ms": (None, 5000, 15000, 5000),
    "share.session.timeout.ms": ("group.share.session.timeout.ms", 45000, 60000, 45000),
    "share.heartbeat.interval.ms": ("group.share.heartbeat.interval.ms", 5000, 15000, 5000),
    "share.record.lock.duration.ms": ("group.share.record.lock.duration.ms", "group.share.min.record.lock.duration.ms",
                                      "group.share.max.record.lock.duration.ms", 30000),
    "share.delivery.count.limit": ("group.share.delivery.count.limit", 2, 10, 5),
    "share.partition.max.record.locks": ("group.share.partition.max.record.locks", 100, 10000, 2000),
}
GROUP_STRING_CONFIGS: dict[str, str] = {"share.auto.offset.reset": "latest",
                                        "share.isolation.level": "read_uncommitted"}


class ShareError(Exception):
    def __init__(self, code: int, message: str | None = None) -> None:
        super().__init__(message or "")
        self.code = code
        self.message = message


@dataclass
class ShareMember:
    member_id: str
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed: tuple[str, ...]
    epoch: int = 0
    assigned: Assignment = field(default_factory=dict)
    last_seen: float = field(default_factory=time.monotonic)


@dataclass
class ShareGroup:
    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    partitions: dict[tuple[str, int], SharePartition] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)  # subscribed topics' partition counts at the last target
    # made by a member's join or AlterShareGroupOffsets (Kafka's group coordinator knows it), not only by a
    # ShareFetch of a group id it does not know (whose state chronolog keeps, unlisted)
    listed: bool = True

    @property
    def state(self) -> str:
        return STABLE if self.members else EMPTY

    def subscribed(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed}


@dataclass
class ShareSession:
    """ShareSessionCache's entry: the partitions a member fetches, and the epoch its next request carries.
    A partition is (topic name, or ("", id) for a topic id the broker does not know; index), mapped to
    whether the next response must name it (CachedSharePartition.requiresUpdateInResponse)."""
    partitions: dict[tuple[Any, int], bool] = field(default_factory=dict)
    epoch: int = 1
    owner: Any = None  # the connection that opened it: its close ends the session, as in Kafka 4.4


def simple_assign(members: dict[str, ShareMember], sizes: dict[str, int]) -> dict[str, Assignment]:
    """SimpleAssignor (SimpleHomogeneousAssignmentBuilder's rules): every partition of a subscribed topic
    goes to ceil(members / partitions) members, members' counts differ by at most one, and a member keeps
    what it holds while that stays balanced."""
    ids = sorted(members)
    partitions = [(t, p) for t, n in sorted(sizes.items()) for p in range(n)
                  if any(t in members[m].subscribed for m in ids)]
    if not ids or not partitions:
        return {m: {} for m in ids}
    sharing = -(-len(ids) // len(partitions))
    precise = sharing * len(partitions) / len(ids)
    desired = {m: int(-(-precise * (i + 1) // 1)) - int(-(-precise * i // 1)) for i, m in enumerate(ids)}
    holders: dict[tuple[str, int], list[str]] = {tp: [] for tp in partitions}
    held: dict[str, list[tuple[str, int]]] = {m: [] for m in ids}
    for m in ids:  # stickiness first, within the sharing and the member's desired count
        for t, ps in sorted(members[m].assigned.items()):
            for p in sorted(ps):
                tp = (t, p)
                if tp in holders and t in members[m].subscribed and len(holders[tp]) < sharing \
                        and len(held[m]) < desired[m]:
                    holders[tp].append(m)
                    held[m].append(tp)
    for tp in partitions:  # then the partitions short of members, to the members short of partitions
        while len(holders[tp]) < sharing:
            free = [m for m in ids if len(held[m]) < desired[m] and m not in holders[tp]
                    and tp[0] in members[m].subscribed]
            if not free and not holders[tp]:  # never leave a partition with no member
                free = [m for m in ids if tp[0] in members[m].subscribed]
            if not free:
                break
            m = min(free, key=lambda x: (len(held[x]), x))
            holders[tp].append(m)
            held[m].append(tp)
    out: dict[str, dict[str, set[int]]] = {m: {} for m in ids}
    for m, tps in held.items():
        for t, p in tps:
            out[m].setdefault(t, set()).add(p)
    return {m: {t: frozenset(ps) for t, ps in a.items()} for m, a in out.items()}


class ShareGroups:
    def __init__(self, data_dir: Any, config: Any, logs: Any) -> None:
        self.config = config
        self.logs = logs
        self.store = ShareStateStore(data_dir)
        self.groups: dict[str, ShareGroup] = {}
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self.configs = self.store.load_configs()
        for group_id, parts in self.store.load().items():
            group = self.groups[group_id] = ShareGroup(group_id)
            for key, snap in parts.items():
                group.partitions[key] = SharePartition.from_snapshot(snap)
        self._released: asyncio.Event | None = None
        self._reaper: asyncio.Task | None = None

    # -- configs ---------------------------------------------------------------------------------------------
    def group_config(self, group_id: str, name: str) -> Any:
        value = self.configs.get(group_id, {}).get(name)
        if name in GROUP_INT_CONFIGS:
            broker_name, _, _, default = GROUP_INT_CONFIGS[name]
            if value is not None:
                return int(value)
            return int(self.config[broker_name]) if broker_name else default
        return value if value is not None else GROUP_STRING_CONFIGS[name]

    def set_configs(self, group_id: str, configs: dict[str, str]) -> None:
        if configs:
            self.configs[group_id] = dict(configs)
        else:
            self.configs.pop(group_id, None)
        self.store.save_configs(self.configs)

    # -- membership ------------------------------------------------------------------------------------------
    def _released_event(self) -> asyncio.Event:
        if self._released is None:
            self._released = asyncio.Event()
        return self._released

    def notify(self) -> None:
        """Records became available again: wake the ShareFetch long polls."""
        if self._released is not None:
            self._released.set()
            self._released = asyncio.Event()

    def _start_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            try:
                self._reaper = asyncio.get_running_loop().create_task(self._reap())
            except RuntimeError:
                pass

    async def _reap(self) -> None:
        while self.groups:
            await asyncio.sleep(1.0)
            self.expire(time.monotonic())

    def close(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()

    def expire(self, now: float) -> None:
        """Members silent for their session timeout leave (GroupMetadataManager's session timer); locks that
        ran out free their records."""
        for group in list(self.groups.values()):
            timeout = self.group_config(group.group_id, "share.session.timeout.ms") / 1000.0
            for member in list(group.members.values()):
                if now - member.last_seen > timeout:
                    log.info("share group %s: member %s left (session timeout)", group.group_id, member.member_id)
                    self._leave(group, member.member_id, timed_out=True)
            self.expire_locks(group, now)

    def expire_locks(self, group: ShareGroup, now: float) -> None:
        limit = self.group_config(group.group_id, "share.delivery.count.limit")
        changed = False
        for key, sp in group.partitions.items():
            if sp.expire(now, limit):
                self._persist(group, key)
                changed = True
        if changed:
            self.notify()

    def heartbeat(self, group_id: str, member_id: str, epoch: int, *, rack_id: str | None,
                  subscribed: list[str] | None, client_id: str, client_host: str, topics: dict[str, int],
                  other_group: bool) -> dict:
        """GroupMetadataManager.shareGroupHeartbeat, answered as ShareGroupHeartbeatResponse values; the
        request is checked first as throwIfShareGroupHeartbeatRequestIsInvalid does."""
        if not group_id:
            raise ShareError(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
        if not member_id:
            raise ShareError(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
        if rack_id is not None and not rack_id:
            raise ShareError(ErrorCode.INVALID_REQUEST, "RackId can't be empty.")
        if epoch == 0 and not subscribed:
            raise ShareError(ErrorCode.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
        if epoch < LEAVE_EPOCH:
            raise ShareError(ErrorCode.INVALID_REQUEST, f"MemberEpoch is invalid: {epoch}")
        group = self.groups.get(group_id)
        if group is not None and not group.listed and epoch != 0:
            group = None
        if other_group:
            raise ShareError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
        if group is None and epoch == LEAVE_EPOCH:
            raise ShareError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        if group is None and epoch != 0:
            # (a group whose state files outlived a restart is known: chronolog does not keep memberships,
            # so its members are told UNKNOWN_MEMBER_ID below and join again)
            raise ShareError(ErrorCode.GROUP_ID_NOT_FOUND, f"Share group {group_id} not found.")
        if epoch == LEAVE_EPOCH:
            if member_id not in group.members:
                raise ShareError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group "
                                 f"{group_id}.")
            self._leave(group, member_id)
            return {"member_id": member_id, "member_epoch": LEAVE_EPOCH, "heartbeat_interval": 0, "assignment": None}
        if group is None:
            group = self.groups[group_id] = ShareGroup(group_id)
        group.listed = True
        member = group.members.get(member_id)
        bump = False
        if member is None:
            if epoch != 0:
                raise ShareError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group "
                                 f"{group_id}.")
            if len(group.members) >= int(self.config["group.share.max.size"]):
                raise ShareError(ErrorCode.GROUP_MAX_SIZE_REACHED, f"The share group has reached its maximum "
                                 f"capacity of {self.config['group.share.max.size']} members.")
            member = group.members[member_id] = ShareMember(member_id, rack_id, client_id, client_host,
                                                            tuple(sorted(set(subscribed or ()))))
            bump = True
        elif epoch not in (0, member.epoch):
            raise ShareError(ErrorCode.FENCED_MEMBER_EPOCH, f"The share group member has a smaller member epoch "
                             f"({epoch}) than the one known by the group coordinator ({member.epoch}). The "
                             "member must abandon all its partitions and rejoin.")
        member.last_seen = time.monotonic()
        if rack_id is not None:
            member.rack_id = rack_id
        if subscribed is not None and tuple(sorted(set(subscribed))) != member.subscribed:
            member.subscribed = tuple(sorted(set(subscribed)))
            bump = True
        sizes = {t: topics[t] for t in group.subscribed() if t in topics}
        if sizes != group.sizes:
            group.sizes = sizes
            bump = True
        if bump:  # one bump of the group epoch a heartbeat, whatever changed (GroupMetadataManager)
            group.epoch += 1
        before = member.assigned
        if group.assignment_epoch != group.epoch:
            self._new_target(group)
        self._start_reaper()
        changed = epoch == 0 or member.assigned != before
        return {"member_id": member_id, "member_epoch": member.epoch,
                "heartbeat_interval": self.group_config(group_id, "share.heartbeat.interval.ms"),
                "assignment": member.assigned if changed else None}

    def _new_target(self, group: ShareGroup) -> None:
        target = simple_assign(group.members, group.sizes)
        for mid, member in group.members.items():
            member.assigned = target.get(mid, {})
            member.epoch = group.epoch
        group.assignment_epoch = group.epoch

    def _leave(self, group: ShareGroup, member_id: str, *, timed_out: bool = False) -> None:
        """A member leaves: its acquired records go back. Its share session stays until it closes it (a
        leaving client acknowledges what it holds with a final ShareAcknowledge after its last heartbeat),
        or until the member timed out."""
        group.members.pop(member_id, None)
        if timed_out:
            self.sessions.pop((group.group_id, member_id), None)
        group.epoch += 1
        self._new_target(group)
        self.release_member(group, member_id)

    def release_member(self, group: ShareGroup, member_id: str) -> None:
        limit = self.group_config(group.group_id, "share.delivery.count.limit")
        changed = False
        for key, sp in group.partitions.items():
            if sp.release_member(member_id, limit):
                self._persist(group, key)
                changed = True
        if changed:
            self.notify()

    def open_session(self, group_id: str, member_id: str) -> ShareSession:
        """A ShareFetch with epoch 0: a new session replaces the member's old one, whose records go back."""
        if (group_id, member_id) in self.sessions and group_id in self.groups:
            self.release_member(self.groups[group_id], member_id)
        session = self.sessions[(group_id, member_id)] = ShareSession()
        return session

    def is_member(self, group_id: str, member_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and member_id in group.members

    # -- share-partitions ---------------------------------------------------------------------------------
    def partition(self, group_id: str, topic: str, index: int, *, create: bool = True) -> SharePartition | None:
        """SharePartition.maybeInitialize: a share-partition with no state starts where
        share.auto.offset.reset says (latest: the log end; earliest: the log start; by_duration: the first
        record at most that old)."""
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = ShareGroup(group_id, listed=False)
        sp = group.partitions.get((topic, index))
        plog = self.logs.get_log(topic, index)
        if sp is None:
            if not create:
                return None
            sp = group.partitions[(topic, index)] = SharePartition(self._reset_offset(group_id, plog))
            self._persist(group, (topic, index))
        if plog.log_start_offset > sp.start:
            sp.move_start(plog.log_start_offset)
            self._persist(group, (topic, index))
        return sp

    def _reset_offset(self, group_id: str, plog: Any) -> int:
        reset = self.group_config(group_id, "share.auto.offset.reset")
        if reset == "earliest":
            return plog.log_start_offset
        if reset.startswith("by_duration:"):
            found = plog.offset_for_timestamp(int(time.time() * 1000) - duration_ms(reset[12:]))
            return found.offset if found is not None else plog.log_end_offset
        return plog.log_end_offset

    def _persist(self, group: ShareGroup, key: tuple[str, int]) -> None:
        sp = group.partitions.get(key)
        live = {k: p.snapshot() for k, p in group.partitions.items()} if self.store._lines.get(
            group.group_id, 0) > 1000 else None
        self.store.write(group.group_id, key[0], key[1], sp.snapshot() if sp is not None else None, live)

    def acquire(self, group_id: str, member_id: str, topic: str, index: int, *, max_records: int,
                max_bytes: int, strict: bool) -> tuple[list[tuple[int, int, int]], bytes]:
        """SharePartition.acquire over a read of the log: the acquired ranges and the batches holding them."""
        sp = self.partition(group_id, topic, index)
        plog = self.logs.get_log(topic, index)
        group = self.groups[group_id]
        now = time.monotonic()
        if sp.expire(now, self.group_config(group_id, "share.delivery.count.limit")):
            self._persist(group, (topic, index))
        committed = self.group_config(group_id, "share.isolation.level") == "read_committed"
        upper = plog.last_stable_offset if committed else plog.high_watermark
        first = sp.first_acquirable()
        if first >= upper:
            return [], b""
        piece = plog.read(first, max(max_bytes, 1), max_offset=upper if committed else None, min_one_message=True)
        if piece is None:
            return [], b""
        data = piece.read_bytes()
        batches, spans = _batches(data, upper, plog.aborted_ranges(first, upper) if committed else [])
        lock_s = self.group_config(group_id, "share.record.lock.duration.ms") / 1000.0
        acquired = sp.acquire(member_id, batches, max_records=max_records, lock_s=lock_s, now=now, strict=strict,
                              max_in_flight=self.group_config(group_id, "share.partition.max.record.locks"))
        if not acquired:
            if sp.start != first:
                self._persist(group, (topic, index))
            return [], b""
        keep = [spans[i] for i, b in enumerate(batches)
                if any(a <= b.last and b.base <= z for a, z, _ in acquired)]
        return acquired, b"".join(data[a:z] for a, z in keep)

    def acknowledge(self, group_id: str, member_id: str, topic: str, index: int,
                    batches: list[tuple[int, int, list[int]]]) -> None:
        """SharePartition.acknowledge, durable before it returns (raises AckError)."""
        group = self.groups.get(group_id)
        sp = group.partitions.get((topic, index)) if group is not None else None
        if sp is None:
            from chronolog.server.share_partition import AckError
            raise AckError(ErrorCode.INVALID_RECORD_STATE, "no records of this partition are in flight")
        limit = self.group_config(group_id, "share.delivery.count.limit")
        lock_s = self.group_config(group_id, "share.record.lock.duration.ms") / 1000.0
        sp.acknowledge(member_id, batches, limit=limit, lock_s=lock_s, now=time.monotonic())
        self._persist(group, (topic, index))
        self.notify()

    def next_deadline(self, group_id: str, keys: list[tuple[str, int]]) -> float | None:
        group = self.groups.get(group_id)
        if group is None:
            return None
        found = [d for k in keys if (sp := group.partitions.get(k)) is not None
                 and (d := sp.next_deadline()) is not None]
        return min(found, default=None)

    async def wait(self, timeout: float, data_waiters: Any) -> None:
        """Until records arrive, are released, or `timeout` seconds pass."""
        if timeout <= 0:
            return
        released = asyncio.ensure_future(self._released_event().wait())
        waits = [released]
        if data_waiters is not None:
            waits.append(asyncio.ensure_future(data_waiters.wait(timeout)))
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    # -- admin ----------------------------------------------------------------------------------------------
    def known(self, group_id: str) -> ShareGroup | None:
        """The share group as the group coordinator knows it (None: no such share group)."""
        group = self.groups.get(group_id)
        return group if group is not None and group.listed else None

    def offsets(self, group_id: str) -> dict[tuple[str, int], SharePartition]:
        group = self.groups.get(group_id)
        return dict(group.partitions) if group is not None else {}

    def altered_group(self, group_id: str) -> ShareGroup:
        """The group AlterShareGroupOffsets changes: made if absent (epoch 1, Empty), as Kafka does once the
        request names a topic that exists, even with no partition of it to alter."""
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = ShareGroup(group_id, epoch=1, assignment_epoch=1)
        group.listed = True
        return group

    def alter_offset(self, group_id: str, topic: str, index: int, offset: int) -> None:
        """AlterShareGroupOffsets: a new start offset for an empty group's share-partition."""
        group = self.altered_group(group_id)
        group.partitions[(topic, index)] = SharePartition(offset)
        self._persist(group, (topic, index))

    def delete_offsets(self, group_id: str, topic: str) -> None:
        group = self.groups.get(group_id)
        if group is None:
            return
        for key in [k for k in group.partitions if k[0] == topic]:
            del group.partitions[key]
            self.store.write(group_id, key[0], key[1], None)

    def delete_group(self, group_id: str) -> int:
        group = self.known(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP
        del self.groups[group_id]
        self.store.delete_group(group_id)
        return 0

    def list_groups(self) -> list[dict]:
        return [{"group_id": g.group_id, "protocol_type": "share", "group_state": g.state, "group_type": "share"}
                for g in self.groups.values() if g.listed]


# -- batch headers ------------------------------------------------------------------------------------------
def _batches(data: bytes, upper: int, aborted: list[tuple[int, int, int]]) -> tuple[list[Batch], list[tuple[int, int]]]:
    """The v2 batch headers of a log read (offset 0: base offset; 8: length; 21: attributes; 23: last offset
    delta; 43: producer id), below `upper`; transactional batches of an aborted transaction marked."""
    out: list[Batch] = []
    spans: list[tuple[int, int]] = []
    pos = 0
    view = memoryview(data)
    while pos + 61 <= len(data):
        base = int.from_bytes(view[pos:pos + 8], "big", signed=True)
        length = int.from_bytes(view[pos + 8:pos + 12], "big", signed=True)
        end = pos + 12 + length
        if end > len(data) or base >= upper:
            break
        attributes = int.from_bytes(view[pos + 21:pos + 23], "big")
        last = base + int.from_bytes(view[pos + 23:pos + 27], "big", signed=True)
        producer = int.from_bytes(view[pos + 43:pos + 51], "big", signed=True)
        control = bool(attributes & 0x20)
        transactional = bool(attributes & 0x10)
        is_aborted = transactional and not control and any(
            pid == producer and first <= base < stop for pid, first, stop in aborted)
        out.append(Batch(base, min(last, upper - 1), control, is_aborted))
        spans.append((pos, end))
        pos = end
    return out, spans
