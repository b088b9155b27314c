"""Committed offsets and group metadata in the internal compacted topic `__consumer_offsets`, as Kafka's
`GroupMetadataManager` keeps them.

A group's records go to partition `abs(hashCode(group)) % offsets.topic.num.partitions`
(`GroupMetadataManager.partitionFor`), written through our own PartitionLog in Kafka's schemas
(records.group_records): OffsetCommit records on every commit, GroupMetadata records when a rebalance
completes, a KIP-848 group's ConsumerGroup* records as it changes (server/consumer_group_store.py makes them;
they are kept here as read and replayed there at start), null values (tombstones) for deleted offsets and groups; the log cleaner compacts the topic like
any `cleanup.policy=compact` topic. Transactional offset commits (TxnOffsetCommit) are transactional batches
of the producer; they become the group's offsets when the COMMIT marker is appended to the partition and
vanish with an ABORT marker, as in Kafka. On start the partitions are read from their start: the last
record of each key wins, markers settle the transactional ones, an open transaction's stay pending.

The topic is created on the first FindCoordinator(GROUP) as in Kafka (or the first write of any group), with
Kafka's internal-topic configs (`GroupCoordinator.offsetsTopicConfigs`: cleanup.policy=compact,
segment.bytes=offsets.topic.segment.bytes) and `flush.messages=1`: a commit is fsynced before it is
acknowledged (one node, no replica to keep it). A broker that never sees a group opens no file for it (a
start of an empty data dir stays quick). Commits are written from worker threads and applied on the event
loop once durable (`write_commit` / `apply_commit`); every write to a partition is ordered by its lock.

The JSON file of earlier versions (`offsets.log` in the coordinator's state dir) is migrated once: its
offsets are written as commit records, its pending transactional offsets as transactional batches, and the
file is renamed `offsets.log.migrated`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from chronolog.config import BrokerConfig
from chronolog.errors import KafkaError, KafkaStorageErrorError, TopicAlreadyExistsError
from chronolog.records.batch import SimpleRecord
from chronolog.records.batch_builder import build_batch
from chronolog.records.control import marker_of
from chronolog.records.group_records import (
    CONSUMER_OFFSETS_TOPIC,
    CommitEvent,
    ConsumerGroupKey,
    ConsumerGroupMemberKey,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    commit_events,
    group_metadata_key,
    group_metadata_value,
    offset_commit_key,
    offset_commit_value,
    partition_for,
    read_group_metadata_value,
    read_key,
    read_offset_commit_value,
    streams_group_of,
)

log = logging.getLogger(__name__)

LEGACY_FILE = "offsets.log"
COORDINATOR_EPOCH = 0  # the coordinator epoch of markers (our one transaction coordinator)

Key = tuple[str, str, int]           # group, topic, partition
Committed = tuple[int, int, str | None]  # offset, leader epoch, metadata


def _now() -> int:
    return int(time.time() * 1000)


class OffsetStore:
    """(group, topic, partition) -> (offset, leader epoch, metadata), durable in `__consumer_offsets`.

    Writes raise KafkaStorageErrorError when the log could not take them (a full disk); nothing is applied
    then, and the coordinator answers NOT_COORDINATOR as Kafka's `GroupMetadataManager.storeOffsets` does."""

    def __init__(self, logs: Any, config: BrokerConfig, legacy_dir: Path | None = None,
                 clock: Callable[[], int] = _now, owns_logs: bool = False) -> None:
        self.logs = logs
        self._owns_logs = owns_logs
        self.config = config
        self.legacy_dir = None if legacy_dir is None else Path(legacy_dir)
        self.clock = clock
        self.num_partitions = int(config["offsets.topic.num.partitions"])
        self.offsets: dict[Key, Committed] = {}
        self.commit_times: dict[Key, int] = {}  # the commit timestamp of each offset (offsets.retention.minutes)
        self.groups: dict[str, GroupMetadataValue] = {}
        # KIP-848 groups' records as read at start (group -> key -> value), replayed by ConsumerGroupStore
        self.consumer_records: dict[str, dict[bytes, bytes]] = {}
        self.streams_records: dict[str, bytes] = {}  # streams groups' state records (server/streams_group_store.py)
        # producer id -> (group, topic, partition) -> offset: TxnOffsetCommit offsets awaiting their marker.
        self.pending: dict[int, dict[Key, Committed]] = {}
        self._pending_times: dict[int, dict[Key, int]] = {}
        # Commits are written from worker threads (OffsetStore.write_commit) and applied on the event loop
        # afterwards: every append takes its partition's lock and a sequence number in log order, and an
        # offset is applied only if no later write of its key was applied first, so memory always holds what
        # the log holds last, whatever order the threads finish in.
        self._locks: dict[int, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._seq = itertools.count(1)
        self._key_seq: dict[Key, int] = {}
        self._ready = False  # the topic exists and num_partitions is its count
        # Partitions that could not be opened at start (an I/O error, a full disk): their groups are not
        # loaded, so they have no coordinator until the next start (`GroupCoordinator.offline`).
        self.offline: set[int] = set()

    # -- topic ----------------------------------------------------------------------------------------------
    def partition_for(self, group: str) -> int:
        return partition_for(group, self.num_partitions)

    @property
    def ready(self) -> bool:
        return self._ready

    def exists(self) -> bool:
        return self.logs.has_topic(CONSUMER_OFFSETS_TOPIC)

    def ensure_topic(self) -> None:
        """Creates the topic if needed (the first group write, or a Metadata request naming it)."""
        if self._ready:
            return
        if self.exists():
            self.num_partitions = self.logs.topics()[CONSUMER_OFFSETS_TOPIC]
            self._ready = True
            return
        try:
            self.logs.create_topic(CONSUMER_OFFSETS_TOPIC, self.num_partitions, {
                "cleanup.policy": "compact", "compression.type": "producer", "flush.messages": "1",
                "segment.bytes": str(self.config["offsets.topic.segment.bytes"])})
        except TopicAlreadyExistsError:
            self.num_partitions = self.logs.topics()[CONSUMER_OFFSETS_TOPIC]
            self._ready = True
            return
        except OSError as exc:
            raise KafkaStorageErrorError(f"{CONSUMER_OFFSETS_TOPIC} not created: {exc}") from exc
        self._ready = True
        log.info("created %s with %d partitions", CONSUMER_OFFSETS_TOPIC, self.num_partitions)

    def _lock(self, partition: int) -> threading.Lock:
        with self._locks_guard:
            lock = self._locks.get(partition)
            if lock is None:
                lock = self._locks[partition] = threading.Lock()
            return lock

    def _append(self, group: str, records: list[SimpleRecord], now: int, producer_id: int = -1,
                producer_epoch: int = -1) -> int:
        """Appends (durable on return) and answers the write's sequence number (its place in log order)."""
        self.ensure_topic()
        partition = self.partition_for(group)
        plog = self._log(partition)
        data = build_batch(records, producer_id=producer_id, producer_epoch=producer_epoch,
                           base_sequence=0 if producer_id >= 0 else -1, is_transactional=producer_id >= 0)
        with self._lock(partition):
            try:
                plog.append(data, now=now, origin_client=False)
            except OSError as exc:
                raise KafkaStorageErrorError(f"offsets not written: {exc}") from exc
            return next(self._seq)

    def _set(self, k: Key, entry: Committed, ts: int, seq: int) -> None:
        if self._key_seq.get(k, 0) > seq:
            return  # a later write of this key was applied already
        self._key_seq[k] = seq
        self.offsets[k] = entry
        self.commit_times[k] = ts

    def _drop(self, k: Key, seq: int) -> None:
        """A tombstone of `k` written (not transactional): its offset goes, and so does every open
        transaction's pending offset of `k` (OffsetMetadataManager.replay of a tombstone)."""
        self._drop_pending(k)
        if self._key_seq.get(k, 0) > seq:
            return
        self._key_seq[k] = seq
        self.offsets.pop(k, None)
        self.commit_times.pop(k, None)

    def _drop_pending(self, k: Key) -> None:
        for pid, entries in self.pending.items():
            if entries.pop(k, None) is not None:
                self._pending_times.get(pid, {}).pop(k, None)

    def _has_pending(self, k: Key) -> bool:
        return any(k in entries for entries in self.pending.values())

    def _pending_of(self, group: str) -> list[Key]:
        """The keys of `group` some open transaction holds a pending offset of."""
        return list(dict.fromkeys(k for entries in self.pending.values() for k in entries if k[0] == group))

    def _log(self, partition: int) -> Any:
        """An offsets partition. Its writes are tried again at once after a failure (no pause between
        tries as for client appends): the coordinator is its only writer and each try is one small commit
        the client retries after NOT_COORDINATOR anyway, as the earlier offsets file did."""
        plog = self.logs.get_log(CONSUMER_OFFSETS_TOPIC, partition)
        plog.write_retry_ms = 0
        return plog

    # -- loading --------------------------------------------------------------------------------------------
    def load(self) -> None:
        """GroupMetadataManager.loadGroupsAndOffsets for every partition, then the one-time migration."""
        if self.exists():
            self.ensure_topic()
            records = 0
            for p in range(self.num_partitions):
                try:
                    records += self._load_partition(p)
                except KafkaStorageErrorError as exc:
                    self.offline.add(p)
                    log.error("%s; its groups have no coordinator until the next start", exc)
            log.info("loaded %d offsets of %d groups from %d records of %s", len(self.offsets),
                     len({g for g, _, _ in self.offsets} | set(self.groups)), records, CONSUMER_OFFSETS_TOPIC)
        self._migrate()

    def _load_partition(self, p: int) -> int:
        plog = self.logs.get_log(CONSUMER_OFFSETS_TOPIC, p)
        count = 0
        for batch in plog.read_batches(plog.log_start_offset):
            if getattr(batch, "is_control", False):
                marker = marker_of(batch)
                if marker is not None:
                    self._settle(batch.producer_id, marker.is_commit, {p})
                continue
            pid = batch.producer_id if getattr(batch, "is_transactional", False) else -1
            for rec in batch.records():
                count += 1
                try:
                    self._apply_record(rec.key, rec.value, pid)
                except (KafkaError, struct.error) as exc:
                    log.warning("%s-%d: skipping an unreadable record at offset %d: %s", CONSUMER_OFFSETS_TOPIC, p,
                                rec.offset, exc)
        return count

    def _apply_record(self, key_bytes: bytes | None, value: bytes | None, pid: int) -> None:
        if key_bytes is None:
            return
        key = read_key(key_bytes)
        if isinstance(key, OffsetCommitKey):
            k = (key.group, key.topic, key.partition)
            if value is None:
                if pid >= 0:
                    self.pending.get(pid, {}).pop(k, None)
                else:
                    self._drop_pending(k)
                    self.offsets.pop(k, None)
                    self.commit_times.pop(k, None)
                return
            v = read_offset_commit_value(value)
            entry = (v.offset, v.leader_epoch, v.metadata)
            if pid >= 0:
                self.pending.setdefault(pid, {})[k] = entry
                self._pending_times.setdefault(pid, {})[k] = v.commit_timestamp
            else:
                self.offsets[k] = entry
                self.commit_times[k] = v.commit_timestamp
        elif isinstance(key, GroupMetadataKey):
            if value is None:
                self.groups.pop(key.group, None)
            else:
                self.groups[key.group] = read_group_metadata_value(value)
        elif isinstance(key, ConsumerGroupKey | ConsumerGroupMemberKey):
            if value is None:
                records = self.consumer_records.get(key.group)
                if records is not None:
                    records.pop(bytes(key_bytes), None)
                    if not records:
                        del self.consumer_records[key.group]
            else:
                self.consumer_records.setdefault(key.group, {})[bytes(key_bytes)] = bytes(value)
        elif key is None and (streams := streams_group_of(key_bytes)) is not None:  # KIP-1071 streams groups
            if value is None:
                self.streams_records.pop(streams, None)
            else:
                self.streams_records[streams] = bytes(value)
        # other key versions (share-group records) are not kept by this coordinator

    def _settle(self, pid: int, commit: bool, partitions: set[int] | None, seq: int = 0) -> None:
        """A marker for `pid` in these offsets partitions (None: all): its pending offsets there are applied
        (COMMIT) or dropped (ABORT), GroupMetadataManager.handleTxnCompletion."""
        entries = self.pending.get(pid)
        if not entries:
            self.pending.pop(pid, None)  # (its offsets were all deleted meanwhile)
            self._pending_times.pop(pid, None)
            return
        times = self._pending_times.get(pid, {})
        for k in [k for k in entries if partitions is None or self.partition_for(k[0]) in partitions]:
            entry = entries.pop(k)
            ts = times.pop(k, -1)
            if commit:
                self._set(k, entry, ts, seq)
        if not entries:
            self.pending.pop(pid, None)
            self._pending_times.pop(pid, None)

    # -- writes ---------------------------------------------------------------------------------------------
    def commit(self, group: str, offsets: Iterable[tuple[str, int, int, int, str | None]]) -> None:
        """One batch of OffsetCommit records, appended (and fsynced) before the offsets apply."""
        items = list(offsets)
        written = self.write_commit(group, items)
        if written is not None:
            self.apply_commit(group, items, *written)

    def write_commit(self, group: str, items: list[tuple[str, int, int, int, str | None]]) -> tuple[int, int] | None:
        """The commit's records appended and durable: may run in a worker thread (it touches no offset in
        memory). (sequence number, commit time) for `apply_commit`, None when there was nothing to write."""
        if not items:
            return None
        now = self.clock()
        seq = self._append(group, [SimpleRecord(now, offset_commit_key(group, t, p),
                                                offset_commit_value(OffsetCommitValue(o, m or "", now, e)))
                                   for t, p, o, e, m in items], now)
        return seq, now

    def apply_commit(self, group: str, items: list[tuple[str, int, int, int, str | None]], seq: int, now: int) -> None:
        """A written commit's offsets in memory (on the event loop, after `write_commit` returned)."""
        for t, p, o, e, m in items:  # a null metadata is stored as "" (OffsetAndMetadata.NO_METADATA)
            self._set((group, t, p), (o, e, m or ""), now, seq)

    def txn_commit(self, group: str, producer_id: int, producer_epoch: int,
                   offsets: Iterable[tuple[str, int, int, int, str | None]]) -> None:
        """TxnOffsetCommit: a transactional batch of the producer; pending until its marker."""
        items = list(offsets)
        if not items:
            return
        now = self.clock()
        self._append(group, [SimpleRecord(now, offset_commit_key(group, t, p),
                                          offset_commit_value(OffsetCommitValue(o, m or "", now, e)))
                             for t, p, o, e, m in items], now, producer_id, max(producer_epoch, 0))
        for t, p, o, e, m in items:
            self.pending.setdefault(producer_id, {})[(group, t, p)] = (o, e, m or "")
            self._pending_times.setdefault(producer_id, {})[(group, t, p)] = now

    def delete_offsets(self, group: str, partitions: Iterable[tuple[str, int]]) -> None:
        """Tombstones (`newOffsetCommitTombstoneRecord`) for offsets that exist or that an open transaction
        holds pending (OffsetMetadataManager.deleteOffsets): those go too."""
        gone = [(t, p) for t, p in partitions if (group, t, p) in self.offsets or self._has_pending((group, t, p))]
        if not gone:
            return
        now = self.clock()
        seq = self._append(group, [SimpleRecord(now, offset_commit_key(group, t, p), None) for t, p in gone], now)
        for t, p in gone:
            self._drop((group, t, p), seq)

    def store_group(self, group: str, value: GroupMetadataValue | None, classic: bool = True) -> None:
        """A GroupMetadata record (None: the group's tombstone, written with tombstones of its offsets, as
        GroupMetadataManager.cleanupGroupMetadata does for a deleted group, and of the offsets open
        transactions hold pending, OffsetMetadataManager.deleteAllOffsets; a consumer group, `classic` False,
        has its own tombstones and gets those of its offsets only)."""
        now = self.clock()
        if value is None:
            keys = list(dict.fromkeys([k for k in self.offsets if k[0] == group] + self._pending_of(group)))
            if group not in self.groups and not keys:
                return
            records = [SimpleRecord(now, offset_commit_key(g, t, p), None) for g, t, p in keys]
            if classic or group in self.groups:
                records.append(SimpleRecord(now, group_metadata_key(group), None))
            if not records:
                return
            seq = self._append(group, records, now)
            for k in keys:
                self._drop(k, seq)
            self.groups.pop(group, None)
            return
        self._append(group, [SimpleRecord(now, group_metadata_key(group), group_metadata_value(value))], now)
        self.groups[group] = value

    def write_records(self, group: str, records: list[tuple[bytes, bytes | None]]) -> None:
        """A KIP-848 group's records (key, value or None for a tombstone) as one batch, durable on return."""
        if not records:
            return
        now = self.clock()
        self._append(group, [SimpleRecord(now, k, v) for k, v in records], now)

    def drop_group_metadata(self, group: str) -> None:
        """The classic GroupMetadata tombstone alone (an empty classic group becoming a consumer group,
        GroupMetadataManager.maybeDeleteEmptyClassicGroup); its offsets stay."""
        if group not in self.groups:
            return
        now = self.clock()
        self._append(group, [SimpleRecord(now, group_metadata_key(group), None)], now)
        self.groups.pop(group, None)

    def write_markers(self, producer_id: int, producer_epoch: int, commit: bool, partitions: set[int] | None) -> None:
        """The transaction's markers in the offsets partitions it added (None: those holding its pending
        offsets), then its pending offsets settle. A marker that could not be written raises
        (KafkaStorageErrorError) and nothing is applied: the transaction coordinator completes again later."""
        entries = self.pending.get(producer_id, {})
        if partitions is None:
            partitions = {self.partition_for(g) for g, _, _ in entries}
        if not self.exists():
            partitions = set()
        now = self.clock()
        seq = 0
        for p in sorted(partitions):
            plog = self._log(p)
            with self._lock(p):
                try:
                    plog.append_control(producer_id, producer_epoch, commit, COORDINATOR_EPOCH, now=now)
                except OSError as exc:
                    raise KafkaStorageErrorError(f"marker not written: {exc}") from exc
                seq = next(self._seq)
        self._settle(producer_id, commit, None, seq or next(self._seq))

    def expire(self, now: int, retention_ms: int, active: Callable[[str], bool]) -> int:
        """offsets.retention.minutes (GroupMetadataManager.cleanupGroupMetadata with KIP-211): offsets of a
        group without members whose last commit is older than the retention get tombstones, but for those an
        open transaction holds pending (OffsetMetadataManager.cleanupExpiredOffsets). The number expired."""
        by_group: dict[str, list[tuple[str, int]]] = {}
        for (g, t, p), ts in self.commit_times.items():
            if ts >= 0 and ts + retention_ms <= now and not active(g) and not self._has_pending((g, t, p)):
                by_group.setdefault(g, []).append((t, p))
        expired = 0
        for g, tps in by_group.items():
            try:
                self.delete_offsets(g, tps)
                expired += len(tps)
            except KafkaStorageErrorError as exc:
                log.warning("offsets of group %s not expired: %s", g, exc)
        if expired:
            log.info("expired %d offsets (offsets.retention.minutes)", expired)
        return expired

    def close(self) -> None:
        """Shuts the log manager down when the store made it (a coordinator on its own); the broker's is
        the broker's to close."""
        if self._owns_logs:
            self._owns_logs = False
            self.logs.shutdown()

    # -- history --------------------------------------------------------------------------------------------
    def history(self, group: str) -> Iterator[CommitEvent]:
        """Every commit record of the group still in the topic, oldest first (read_committed: aborted
        transactional commits are left out)."""
        if not self.exists():
            return
        plog = self.logs.get_log(CONSUMER_OFFSETS_TOPIC, self.partition_for(group))
        yield from commit_events(plog.read_records(plog.log_start_offset, isolation="read_committed"), group)

    # -- migration ------------------------------------------------------------------------------------------
    def _migrate(self) -> None:
        if self.legacy_dir is None:
            return
        path = self.legacy_dir / LEGACY_FILE
        if not path.exists():
            return
        offsets, pending = read_legacy_file(path)
        for group in sorted({g for g, _, _ in offsets}):
            self.commit(group, [(t, p, o, e, m) for (g, t, p), (o, e, m) in sorted(offsets.items()) if g == group])
        for pid, entries in pending.items():
            for group in sorted({g for g, _, _ in entries}):
                # the epoch is not in the old file: 0, at or below the producer's; its marker is higher
                self.txn_commit(group, pid, 0, [(t, p, o, e, m) for (g, t, p), (o, e, m) in entries.items()
                                                if g == group])
        target = path.with_name(LEGACY_FILE + ".migrated")
        os.replace(path, target)
        log.info("migrated %d committed offsets and %d pending transactional ones from %s to %s (the old "
                 "file is now %s)", len(offsets), sum(len(v) for v in pending.values()), path,
                 CONSUMER_OFFSETS_TOPIC, target.name)


def read_legacy_file(path: Path) -> tuple[dict[Key, Committed], dict[int, dict[Key, Committed]]]:
    """The length-prefixed, CRC-checked JSON records of the old store, replayed (a torn tail ends it)."""
    data = path.read_bytes()
    offsets: dict[Key, Committed] = {}
    pending: dict[int, dict[Key, Committed]] = {}
    pos = 0
    while pos + 8 <= len(data):
        length, crc = struct.unpack_from(">II", data, pos)
        body = data[pos + 8:pos + 8 + length]
        if len(body) < length or zlib.crc32(body) != crc:
            log.warning("%s: ignoring a torn or corrupt tail at byte %d", path, pos)
            break
        with contextlib.suppress(ValueError):
            _apply_legacy(json.loads(body), offsets, pending)
        pos += 8 + length
    return offsets, pending


def _apply_legacy(rec: dict, offsets: dict, pending: dict) -> None:
    pid = rec.get("pid")
    if pid is not None:
        if "commit" in rec:
            entries = pending.pop(pid, {})
            if rec["commit"]:
                offsets.update(entries)
        else:
            pending.setdefault(pid, {})[(rec["g"], rec["t"], rec["p"])] = (rec["o"], rec.get("e", -1), rec.get("m"))
        return
    key = (rec["g"], rec["t"], rec["p"])
    if rec.get("o") is None:
        offsets.pop(key, None)
    else:
        offsets[key] = (rec["o"], rec.get("e", -1), rec.get("m"))
