"""The classic consumer-group coordinator (Kafka's `GroupCoordinator`/`GroupMetadata`), for one broker.

States: Empty -> PreparingRebalance -> CompletingRebalance -> Stable (and Dead after deletion). A join
starts a rebalance; it completes when every known member has rejoined or the rebalance timeout passed
(members that did not rejoin are removed); the leader gets the members' metadata, SyncGroup hands out its
assignments. Members that stop heartbeating for their session timeout are removed.

Committed offsets are durable: an append-only file of length-prefixed, CRC-checked JSON records, fsynced
before a commit is acknowledged; a torn tail is truncated on load, and the file is compacted on start. A
commit that could not be written (a full disk) is cut off again and answered NOT_COORDINATOR, as Kafka's
`GroupMetadataManager.storeOffsets` answers a KAFKA_STORAGE_ERROR of the offsets topic: the client looks the
coordinator up again and retries.
Transactional offset commits (TxnOffsetCommit, KIP-98/447) are records of the same file that carry the
producer id ("pid"): pending until a marker record for that producer ({"pid", "commit"}) applies them
(commit) or drops them (abort), as Kafka's offsets log holds them as transactional records until the
coordinator's marker; pending ones survive a restart and compaction, and the transaction coordinator
completes or aborts their transaction after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import struct
import time
import uuid
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from chronolog.config import BrokerConfig
from chronolog.diskio import describe, disk_log, free_bytes, pwrite_all, write_atomic
from chronolog.errors import ErrorCode, KafkaStorageErrorError
from chronolog.server.consumer_group import ConsumerGroups

log = logging.getLogger(__name__)

EMPTY, PREPARING, COMPLETING, STABLE, DEAD = "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"
OFFSETS_FILE = "offsets.log"


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    last_heartbeat: float = field(default_factory=time.monotonic)
    join_future: asyncio.Future | None = None
    sync_future: asyncio.Future | None = None


@dataclass
class Group:
    group_id: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    rebalance_task: asyncio.Task | None = None
    new_group: bool = True


def subscribed_topics(metadata: bytes) -> set[str]:
    """Topics in a consumer protocol subscription (ConsumerProtocolSubscription: version, topics, ...)."""
    try:
        pos = 2
        (count,) = struct.unpack_from(">i", metadata, pos)
        pos += 4
        topics = set()
        for _ in range(max(count, 0)):
            (n,) = struct.unpack_from(">h", metadata, pos)
            pos += 2
            topics.add(metadata[pos:pos + n].decode())
            pos += n
        return topics
    except (struct.error, UnicodeDecodeError):
        return set()


class OffsetStore:
    """Committed offsets: (group, topic, partition) -> (offset, leader epoch, metadata), durable."""

    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)
        self.path = self.dir / OFFSETS_FILE
        self.offsets: dict[tuple[str, str, int], tuple[int, int, str | None]] = {}
        self._fd = -1
        self._size = 0            # bytes of whole records: every write goes there
        self._tail_dirty = False  # bytes of a failed write may follow `_size`: cut them before the next
        self._failure: OSError | None = None
        # producer id -> (group, topic, partition) -> (offset, leader epoch, metadata): TxnOffsetCommit
        # offsets waiting for their transaction's end.
        self.pending: dict[int, dict[tuple[str, str, int], tuple[int, int, str | None]]] = {}

    def load(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        data = self.path.read_bytes() if self.path.exists() else b""
        pos = 0
        while pos + 8 <= len(data):
            length, crc = struct.unpack_from(">II", data, pos)
            body = data[pos + 8:pos + 8 + length]
            if len(body) < length or zlib.crc32(body) != crc:
                log.warning("%s: truncating a torn or corrupt tail at byte %d", self.path, pos)
                break
            self._apply(json.loads(body))
            pos += 8 + length
        # Compact: rewrite the live state (pending transactional offsets too), atomically. On a full disk the
        # file stays as it is (its good part).
        live = b"".join(self._frame({"g": g, "t": t, "p": p, "o": o, "e": e, "m": m})
                        for (g, t, p), (o, e, m) in self.offsets.items())
        live += b"".join(self._frame({"g": g, "t": t, "p": p, "o": o, "e": e, "m": m, "pid": pid})
                         for pid, entries in self.pending.items() for (g, t, p), (o, e, m) in entries.items())
        try:
            write_atomic(self.path, live, tmp=self.path.with_suffix(".tmp"))
            self._size = len(live)
        except OSError as exc:
            log.warning("%s not compacted: %s", self.path, describe(exc))
            self._size = pos
            self._tail_dirty = pos < len(data)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)

    @staticmethod
    def _frame(record: dict) -> bytes:
        body = json.dumps(record, separators=(",", ":")).encode()
        return struct.pack(">II", len(body), zlib.crc32(body)) + body

    def _apply(self, rec: dict) -> None:
        pid = rec.get("pid")
        if pid is not None:
            if "commit" in rec:  # a transaction's end: its pending offsets apply or vanish
                entries = self.pending.pop(pid, {})
                if rec["commit"]:
                    self.offsets.update(entries)
            else:
                self.pending.setdefault(pid, {})[(rec["g"], rec["t"], rec["p"])] = (rec["o"], rec.get("e", -1),
                                                                                     rec.get("m"))
            return
        key = (rec["g"], rec["t"], rec["p"])
        if rec.get("o") is None:
            self.offsets.pop(key, None)
        else:
            self.offsets[key] = (rec["o"], rec.get("e", -1), rec.get("m"))

    def write(self, records: list[dict]) -> None:
        """Append and fsync the records, then apply them. On an I/O error nothing is applied, the file is cut
        back to its last whole record and KafkaStorageErrorError is raised (one ERROR line per incident)."""
        if not records:
            return
        data = b"".join(self._frame(r) for r in records)
        try:
            if self._tail_dirty:
                os.ftruncate(self._fd, self._size)
                self._tail_dirty = False
            pwrite_all(self._fd, data, self._size, self.path)
            os.fsync(self._fd)
        except OSError as exc:
            self._tail_dirty = True
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._size)
                self._tail_dirty = False
            if self._failure is None:
                disk_log.error("group offsets not written to %s: %s; %d bytes free; commits get NOT_COORDINATOR",
                               exc.filename or self.path, describe(exc), free_bytes(self.dir))
            self._failure = exc
            raise KafkaStorageErrorError(f"offsets not written: {describe(exc)}") from exc
        self._size += len(data)
        if self._failure is not None:
            disk_log.info("group offsets written again to %s", self.path)
            self._failure = None
        for r in records:
            self._apply(r)

    def close(self) -> None:
        if self._fd >= 0:
            if self._tail_dirty:  # a failed record's bytes: cut them (else the next load stops at them)
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, self._size)
            os.close(self._fd)
            self._fd = -1


class GroupCoordinator:
    def __init__(self, state_dir: Path, broker_config: BrokerConfig) -> None:
        self.config = broker_config
        self.store = OffsetStore(state_dir)
        self.groups: dict[str, Group] = {}  # classic groups; `consumer` holds the KIP-848 ones (one id, one type)
        self.consumer = ConsumerGroups(self)
        self._reaper: asyncio.Task | None = None

    async def start(self) -> None:
        self.store.load()
        for g, _t, _p in self.store.offsets:
            self.groups.setdefault(g, Group(g, new_group=False))
        self._reaper = asyncio.create_task(self._expire_members())

    async def stop(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
        for group in self.groups.values():
            if group.rebalance_task is not None:
                group.rebalance_task.cancel()
        self.store.close()

    # -- membership ---------------------------------------------------------------------------------
    def group(self, group_id: str) -> Group:
        return self.groups.setdefault(group_id, Group(group_id))

    async def join(self, group_id: str, member_id: str, instance_id: str | None, client_id: str, client_host: str,
                   session_timeout: int, rebalance_timeout: int, protocol_type: str,
                   protocols: list[tuple[str, bytes]], require_known_member: bool,
                   topics: dict[str, int] | None = None) -> dict:
        """`topics`: partition counts, for a classic member joining a consumer group."""
        if not group_id:
            return {"error_code": ErrorCode.INVALID_GROUP_ID}
        if not (self.config["group.min.session.timeout.ms"] <= session_timeout
                <= self.config["group.max.session.timeout.ms"]):
            return {"error_code": ErrorCode.INVALID_SESSION_TIMEOUT, "member_id": member_id}
        if self.consumer.has_members(group_id):  # Kafka: classicGroupJoinToConsumerGroup, any migration policy
            return self.consumer.classic_join(group_id, member_id, instance_id, client_id, client_host,
                                              session_timeout, rebalance_timeout, protocol_type, protocols,
                                              require_known_member, topics)
        self.consumer.give_way(group_id)  # an empty consumer group becomes a classic one
        group = self.group(group_id)
        if group.state == DEAD:
            return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE, "member_id": member_id}
        if group.members and ((group.protocol_type is not None and group.protocol_type != protocol_type)
                              or not self._common_protocol(group, protocols)):
            return {"error_code": ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "member_id": member_id}
        if not member_id:
            member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if require_known_member:
                # KIP-394: hand out the id first; the member joins again with it.
                group.members.setdefault(member_id, Member(member_id, instance_id, client_id, client_host,
                                                           session_timeout, rebalance_timeout, protocol_type,
                                                           protocols))
                group.members[member_id].join_future = None
                return {"error_code": ErrorCode.MEMBER_ID_REQUIRED, "member_id": member_id}
        elif member_id not in group.members:
            return {"error_code": ErrorCode.UNKNOWN_MEMBER_ID, "member_id": member_id}
        member = group.members.get(member_id)
        if member is None:
            member = Member(member_id, instance_id, client_id, client_host, session_timeout, rebalance_timeout,
                            protocol_type, protocols)
            group.members[member_id] = member
        member.protocols, member.protocol_type = protocols, protocol_type
        member.session_timeout_ms, member.rebalance_timeout_ms = session_timeout, rebalance_timeout
        member.last_heartbeat = time.monotonic()
        group.protocol_type = protocol_type
        loop = asyncio.get_running_loop()
        future = member.join_future = loop.create_future()
        self._prepare_rebalance(group)
        self._maybe_complete_join(group)
        return await future

    def _common_protocol(self, group: Group, protocols: list[tuple[str, bytes]]) -> str | None:
        names = [n for n, _ in protocols]
        for name in names:
            if all(name in [n for n, _ in m.protocols] for m in group.members.values() if m.protocols):
                return name
        return None

    def _prepare_rebalance(self, group: Group) -> None:
        if group.state == PREPARING:
            return
        for m in group.members.values():
            if m.sync_future is not None and not m.sync_future.done():
                m.sync_future.set_result({"error_code": ErrorCode.REBALANCE_IN_PROGRESS})
        was_new = group.state == EMPTY
        group.state = PREPARING
        timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0) / 1000.0
        delay = self.config["group.initial.rebalance.delay.ms"] / 1000.0 if was_new else 0.0
        group.rebalance_task = asyncio.create_task(self._rebalance_deadline(group, timeout, delay))

    async def _rebalance_deadline(self, group: Group, timeout: float, delay: float) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            if delay:
                await asyncio.sleep(delay)
                group.new_group = False
                self._maybe_complete_join(group)
                if group.state != PREPARING:
                    return
            await asyncio.sleep(max(0.0, timeout - delay))
            if group.state == PREPARING:
                for mid in [mid for mid, m in group.members.items() if m.join_future is None
                            or m.join_future.done()]:
                    del group.members[mid]  # did not rejoin in time
                self._complete_join(group)

    def _maybe_complete_join(self, group: Group) -> None:
        if group.state != PREPARING:
            return
        if group.new_group and self.config["group.initial.rebalance.delay.ms"] > 0:
            return  # the initial delay lets more members arrive first
        if all(m.join_future is not None and not m.join_future.done() for m in group.members.values()):
            if group.rebalance_task is not None and group.rebalance_task is not asyncio.current_task():
                group.rebalance_task.cancel()
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        joined = {mid: m for mid, m in group.members.items() if m.join_future is not None and not m.join_future.done()}
        group.members = joined
        if not joined:
            group.state, group.leader, group.protocol_name = EMPTY, None, None
            group.generation += 1
            return
        group.generation += 1
        group.state = COMPLETING
        if group.leader not in joined:
            group.leader = next(iter(joined))
        leader = joined[group.leader]
        group.protocol_name = self._common_protocol(group, leader.protocols) or leader.protocols[0][0]
        for mid, m in joined.items():
            members = [{"member_id": x.member_id, "group_instance_id": x.group_instance_id,
                        "metadata": dict(x.protocols).get(group.protocol_name, b"")}
                       for x in joined.values()] if mid == group.leader else []
            m.join_future.set_result({"error_code": 0, "generation_id": group.generation,
                                      "protocol_type": group.protocol_type, "protocol_name": group.protocol_name,
                                      "leader": group.leader, "member_id": mid, "members": members,
                                      "skip_assignment": False})
            m.join_future = None
            m.last_heartbeat = time.monotonic()

    async def sync(self, group_id: str, generation: int, member_id: str,
                   assignments: dict[str, bytes]) -> dict:
        if group_id in self.consumer.groups:
            return self.consumer.classic_sync(group_id, generation, member_id)
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            return {"error_code": ErrorCode.UNKNOWN_MEMBER_ID}
        if generation != group.generation:
            return {"error_code": ErrorCode.ILLEGAL_GENERATION}
        if group.state == PREPARING:
            return {"error_code": ErrorCode.REBALANCE_IN_PROGRESS}
        member = group.members[member_id]
        member.last_heartbeat = time.monotonic()
        if group.state == STABLE:
            return {"error_code": 0, "assignment": member.assignment, "protocol_type": group.protocol_type,
                    "protocol_name": group.protocol_name}
        future = member.sync_future = asyncio.get_running_loop().create_future()
        if member_id == group.leader:
            for mid, m in group.members.items():
                m.assignment = assignments.get(mid, b"")
            group.state = STABLE
            now = time.monotonic()
            for m in group.members.values():
                if m.sync_future is not None and not m.sync_future.done():
                    m.sync_future.set_result({"error_code": 0, "assignment": m.assignment,
                                              "protocol_type": group.protocol_type,
                                              "protocol_name": group.protocol_name})
                    m.last_heartbeat = now  # its session restarts with the answer (propagateAssignment)
        return await future

    def heartbeat(self, group_id: str, generation: int, member_id: str) -> int:
        if group_id in self.consumer.groups:
            return self.consumer.classic_heartbeat(group_id, generation, member_id)
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        group.members[member_id].last_heartbeat = time.monotonic()
        if group.state == PREPARING:
            return ErrorCode.REBALANCE_IN_PROGRESS
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        return 0

    def leave(self, group_id: str, member_ids: list[str]) -> list[int]:
        if group_id in self.consumer.groups:
            return [self.consumer.classic_leave(group_id, mid) for mid in member_ids]
        group = self.groups.get(group_id)
        results = []
        for mid in member_ids:
            if group is None or mid not in group.members:
                results.append(ErrorCode.UNKNOWN_MEMBER_ID)
                continue
            self._remove_member(group, mid)
            results.append(0)
        return results

    def _remove_member(self, group: Group, member_id: str) -> None:
        member = group.members.pop(member_id, None)
        if member is not None and member.join_future is not None and not member.join_future.done():
            member.join_future.set_result({"error_code": ErrorCode.UNKNOWN_MEMBER_ID, "member_id": member_id})
        if member is not None and member.sync_future is not None and not member.sync_future.done():
            # Its SyncGroup is answered, not left pending: a pending answer holds the member's connection,
            # whose requests are answered in order, until the client gives up on it.
            member.sync_future.set_result({"error_code": ErrorCode.UNKNOWN_MEMBER_ID})
        if not group.members:
            if group.rebalance_task is not None:
                group.rebalance_task.cancel()
            group.state, group.leader = EMPTY, None
            group.generation += 1
        elif group.state in (STABLE, COMPLETING):
            self._prepare_rebalance(group)
        else:
            self._maybe_complete_join(group)

    async def _expire_members(self) -> None:
        while True:
            await asyncio.sleep(0.25)
            now = time.monotonic()
            self.consumer.expire(now)
            self.expire_members(now)

    def expire_members(self, now: float) -> None:
        """Remove classic members silent for their session timeout (monotonic `now`). A member waiting for
        its JoinGroup or SyncGroup answer is not expired (`ClassicGroupMember.hasSatisfiedHeartbeat`: "members
        that are awaiting a rebalance automatically satisfy expected heartbeats"): it cannot heartbeat then,
        and a follower waits in SyncGroup for as long as its leader takes to assign."""
        for group in list(self.groups.values()):
            for mid, m in list(group.members.items()):
                waiting = any(f is not None and not f.done() for f in (m.join_future, m.sync_future))
                if not waiting and now - m.last_heartbeat > m.session_timeout_ms / 1000.0:
                    log.info("group %s: member %s expired", group.group_id, mid)
                    self._remove_member(group, mid)

    # -- offsets ------------------------------------------------------------------------------------
    def commit(self, group_id: str, generation: int, member_id: str,
               offsets: list[tuple[str, int, int, int, str | None]], api_version: int = 9) -> int:
        """Member commits need the current generation; simple commits (generation -1, no member id, as
        kafka-consumer-groups.sh and our reset-offsets send) need a group without active members."""
        if group_id in self.consumer.groups:  # a KIP-848 group: member epochs instead of generations
            error = self.consumer.validate_commit(group_id, member_id, generation, api_version)
            if error:
                return error
            return self._store_commit(group_id, offsets)
        group = self.group(group_id)
        if generation < 0 and not member_id:
            if group.members:
                return ErrorCode.UNKNOWN_MEMBER_ID
        else:
            if member_id not in group.members:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if generation != group.generation:
                return ErrorCode.ILLEGAL_GENERATION
            if group.state == COMPLETING:
                return ErrorCode.REBALANCE_IN_PROGRESS
            group.members[member_id].last_heartbeat = time.monotonic()
        return self._store_commit(group_id, offsets)

    def _store_commit(self, group_id: str, offsets: list[tuple[str, int, int, int, str | None]]) -> int:
        try:
            self.store.write([{"g": group_id, "t": t, "p": p, "o": o, "e": e, "m": m} for t, p, o, e, m in offsets])
        except KafkaStorageErrorError:
            return ErrorCode.NOT_COORDINATOR  # GroupMetadataManager.storeOffsets: KAFKA_STORAGE_ERROR -> NOT_COORDINATOR
        return 0

    # -- transactional offsets (TxnOffsetCommit) ---------------------------------------------------------
    def txn_commit(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                   producer_id: int, offsets: list[tuple[str, int, int, int, str | None]]) -> int:
        """GroupCoordinator.handleTxnCommitOffsets with KIP-447's checks: a member id or generation, when
        given, must be the group's current ones. The offsets stay pending until the transaction ends."""
        group = self.groups.get(group_id)
        if group is not None and group.state == DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if member_id:
            if group is None or member_id not in group.members:
                return ErrorCode.UNKNOWN_MEMBER_ID
            member = group.members[member_id]
            if instance_id is not None and member.group_instance_id is not None and \
                    member.group_instance_id != instance_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if generation >= 0 and (group is None or generation != group.generation):
            return ErrorCode.ILLEGAL_GENERATION
        if group is None:
            self.group(group_id).new_group = False
        try:
            self.store.write([{"g": group_id, "t": t, "p": p, "o": o, "e": e, "m": m, "pid": producer_id}
                              for t, p, o, e, m in offsets])
        except KafkaStorageErrorError:
            return ErrorCode.NOT_COORDINATOR  # as commit_offsets: the client finds the coordinator again and retries
        return 0

    def complete_transaction(self, producer_id: int, commit: bool) -> None:
        """The transaction marker for the offsets: pending offsets of `producer_id` applied or dropped."""
        if producer_id in self.store.pending:
            self.store.write([{"pid": producer_id, "commit": bool(commit)}])

    def has_pending(self, group_id: str, topic: str, partition: int) -> bool:
        """OffsetFetch with require_stable (KIP-447): is a transactional commit of this partition open?"""
        key = (group_id, topic, partition)
        return any(key in entries for entries in self.store.pending.values())

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None):
        if partitions is None:
            return {(t, p): v for (g, t, p), v in self.store.offsets.items() if g == group_id}
        return {(t, p): self.store.offsets.get((group_id, t, p), (-1, -1, None)) for t, p in partitions}

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        group = self.groups.get(group_id)
        subscribed = self.consumer.subscribed_topics(group_id)
        if group is not None:
            for m in group.members.values():
                for _name, meta in m.protocols:
                    subscribed |= subscribed_topics(meta)
        out, records = {}, []
        for t, p in partitions:
            if t in subscribed:
                out[(t, p)] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                out[(t, p)] = 0
                records.append({"g": group_id, "t": t, "p": p, "o": None})
        self.store.write(records)
        return out

    def delete_group(self, group_id: str) -> int:
        group = self.groups.get(group_id)
        if group is None:
            error = self.consumer.delete(group_id)
            if error is None:
                return ErrorCode.GROUP_ID_NOT_FOUND
            if not error:
                self.store.write([{"g": group_id, "t": t, "p": p, "o": None}
                                  for (g, t, p) in list(self.store.offsets) if g == group_id])
            return error
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP
        self.store.write([{"g": group_id, "t": t, "p": p, "o": None}
                          for (g, t, p) in list(self.store.offsets) if g == group_id])
        del self.groups[group_id]
        return 0

    def describe(self, group_id: str) -> dict:
        group = self.groups.get(group_id)
        if group is None:
            return {"error_code": 0, "group_id": group_id, "group_state": DEAD, "protocol_type": "",
                    "protocol_data": "", "members": []}
        return {"error_code": 0, "group_id": group_id, "group_state": group.state,
                "protocol_type": group.protocol_type or "", "protocol_data": group.protocol_name or "",
                "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                             "client_id": m.client_id, "client_host": m.client_host,
                             "member_metadata": dict(m.protocols).get(group.protocol_name or "", b""),
                             "member_assignment": m.assignment} for m in group.members.values()],
                "authorized_operations": -2147483648}

    def list_groups(self) -> list[dict]:
        return [{"group_id": g.group_id, "protocol_type": g.protocol_type or "consumer", "group_state": g.state,
                 "group_type": "classic"} for g in self.groups.values()] + self.consumer.list_groups()
