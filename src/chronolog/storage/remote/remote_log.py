"""One partition's tiered segments (Kafka's `RemoteLogManager` per-partition state, its `RLMCopyTask` and
`RLMExpirationTask`, and the reads `RemoteLogManager.read` / `findOffsetByTimestamp` serve), in the tier
at `<topic>-<partition>/`, laid out as a Kafka partition directory (`.log`, `.index`, `.timeindex`,
`.txnindex`, `.snapshot`) so any reader of a data dir reads it, plus one metadata record per segment.

The local log (`PartitionLog`) holds this object as `remote` and asks it: to read offsets below its first
local segment, to look up times and the specials in tiered segments, and which local segments may go
(only those whose copy is listed: `highest_offset`). The whole log's start offset is the local log's
`log_start_offset`; this object moves it when retention deletes tiered segments.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from chronolog.storage.basics import LEADER_EPOCH, FoundTimestamp
from chronolog.storage.producers import SNAPSHOT_SUFFIX
from chronolog.storage.remote.metadata import (
    COPY_FINISHED,
    DELETE_STARTED,
    LEADER_EPOCH_SUFFIX,
    RemoteSegment,
    base_of_metadata,
    metadata_name,
)
from chronolog.storage.remote.reading import RemoteCaches, TieredSegment, TierFiles
from chronolog.storage.remote.tier import Tier, TierError
from chronolog.storage.segment import LOG_SUFFIX, segment_name

if TYPE_CHECKING:
    from chronolog.storage.log import PartitionLog

log = logging.getLogger("chronolog.storage.remote")

# Tiered segments a partition keeps open (their two indexes in memory, as `TieredSegment` objects) between
# reads; beyond it the others are dropped and reopened from the bounded index cache when next read.
MAX_OPEN_SEGMENTS = 16


class RemoteLog:
    """The tiered part of one partition. Its list changes only under `_lock`; readers take a snapshot
    (`view`), a read-only `PartitionLog` of the listed segments, rebuilt when the list changes."""

    def __init__(self, plog: PartitionLog, tier: Tier, caches: RemoteCaches) -> None:
        self.plog = plog
        self.tier = tier
        self.caches = caches
        self.directory = plog.dir.name  # `<topic>-<partition>`, as in the data dir
        self.segments: list[RemoteSegment] = []
        self._lock = threading.RLock()
        self._view: PartitionLog | None = None
        self.closed = False
        self._busy = threading.Lock()  # one copy or deletion in the tier at a time (the task's, or `delete_all`)
        self.pending_start: int | None = None  # set while the tier could not be listed (the task retries)

    # -- state --------------------------------------------------------------------------------------
    @property
    def highest_offset(self) -> int:
        """`UnifiedLog.highestOffsetInRemoteStorage`: the last offset of the listed segments, -1 for none."""
        segs = self.segments
        return segs[-1].end_offset if segs else -1

    @property
    def start_offset(self) -> int | None:
        segs = self.segments
        return segs[0].base_offset if segs else None

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def copy_enabled(self) -> bool:
        cfg = self.plog.config
        return cfg.remote_storage_enable and not cfg.remote_log_copy_disable

    def load(self, checkpointed_start: int) -> None:
        """List the tier's records (`RemoteLogMetadataManager` on start): finished copies are listed, half
        done deletions finished, files of copies a crash interrupted (no record) removed unless the local
        log still holds the segment (the copier writes them again). Then the whole log's start offset is
        the checkpointed one, or the first listed segment's base when that is later."""
        names = self.tier.list(self.directory)
        found: dict[int, RemoteSegment] = {}
        for name in names:
            base = base_of_metadata(name)
            if base is None:
                continue
            raw = self.tier.read(f"{self.directory}/{name}")
            if raw is None:
                continue
            try:
                meta = RemoteSegment.from_json(raw)
            except (ValueError, TypeError) as exc:
                log.warning("%s: unreadable tier record %s (%s): its segment is not listed", self.directory,
                            name, exc)
                continue
            if meta.state == DELETE_STARTED:
                self._delete_files(meta)
            elif meta.state == COPY_FINISHED:
                found[base] = meta
        listed = sorted(found.values(), key=lambda m: m.base_offset)
        kept: list[RemoteSegment] = []
        for meta in listed:  # never two records over the same offsets
            if kept and meta.base_offset <= kept[-1].end_offset:
                log.warning("%s: tier record %s overlaps %s: not listed", self.directory, meta.name, kept[-1].name)
                continue
            kept.append(meta)
        local_bases = {seg.base_offset for seg in self.plog.segments}
        owned = {n for m in kept for n in m.files} | {m.name for m in kept}
        for name in names:
            stem = name.split(".", 1)[0]
            if name in owned or not stem.isdigit() or name == "partition.metadata":
                continue
            if name.endswith(SNAPSHOT_SUFFIX):
                continue  # a snapshot is named by the offset after its segment: kept with the records
            if int(stem) not in local_bases:
                with contextlib.suppress(TierError):
                    self.tier.delete(f"{self.directory}/{name}")
        with self._lock:
            self.segments = kept
            self._view = None
        plog = self.plog
        with plog.lock:
            if kept:
                local_first = plog.segments[0].base_offset
                start = max(checkpointed_start, kept[0].base_offset)
                if start < local_first and kept[-1].end_offset + 1 >= local_first:
                    plog.log_start_offset = start
            else:
                plog.log_start_offset = max(plog.log_start_offset, plog.segments[0].base_offset)

    def view(self) -> PartitionLog | None:
        """The listed segments as a read-only log (None when none is listed)."""
        view = self._view
        if view is not None:
            return view
        with self._lock:
            if self._view is not None:
                return self._view
            if not self.segments:
                return None
            from chronolog.storage.log import PartitionLog
            plog = self.plog
            directory = Path(self.tier.location) / self.directory
            files = TierFiles(self.tier, self.directory, self.segments, self.caches)
            view = PartitionLog(directory, plog.config, writable=False, time_index_style=plog.time_index_style)
            view.caches = plog.caches
            view._files = files
            view._readonly_producers_loaded = True
            kwargs = {"index_interval_bytes": plog.config.index_interval_bytes,
                      "max_index_size": plog.config.segment_index_bytes, "time_index_style": plog.time_index_style,
                      "lock": view.lock}
            view.segments = [TieredSegment(files, directory, meta, **kwargs) for meta in self.segments]
            for seg, nxt in zip(view.segments, view.segments[1:], strict=False):
                seg._offset_limit_after = nxt.base_offset
            view._tiered_args = (files, directory, kwargs)
            view._next_offset = self.segments[-1].end_offset + 1
            view.log_start_offset = self.segments[0].base_offset
            self._view = view
            return view

    def _changed(self) -> None:
        self._view = None

    def _opened_view(self) -> PartitionLog | None:
        """`view`, with the segments opened by earlier reads dropped beyond `MAX_OPEN_SEGMENTS` (a reader
        still using one keeps its object; the next read opens a fresh one from the index cache). Raises
        while the tier could not be listed: what it holds is not known (KAFKA_STORAGE_ERROR to a client)."""
        if self.pending_start is not None:
            raise TierError(f"{self.directory}: the tier {self.tier.location} is not listed yet (unreachable)")
        view = self.view()
        if view is None:
            return None
        opened = [i for i, seg in enumerate(view.segments) if seg.__dict__.get("_pending", True) is None]
        if len(opened) > MAX_OPEN_SEGMENTS:
            files, directory, kwargs = view._tiered_args
            with view.lock:
                for i in opened:
                    old = view.segments[i]
                    fresh = TieredSegment(files, directory, old.meta, **kwargs)
                    fresh._offset_limit_after = old._offset_limit_after
                    view.segments[i] = fresh
        return view

    # -- reads --------------------------------------------------------------------------------------
    def read(self, start_offset: int, max_bytes: int, max_offset: int | None, min_one_message: bool):
        """Whole batches of the tiered segment holding `start_offset` (`RemoteLogManager.read`)."""
        view = self._opened_view()
        if view is None or start_offset >= view._next_offset:
            return None
        view.log_start_offset = max(self.segments[0].base_offset if self.segments else 0,
                                    min(self.plog.log_start_offset, start_offset))
        limit = view._next_offset if max_offset is None else min(max_offset, view._next_offset)
        return view.read(start_offset, max_bytes, max_offset=limit, min_one_message=min_one_message)

    def read_batches(self, start_offset: int, end_offset: int):
        view = self._opened_view()
        if view is None:
            return iter(())
        return view.read_batches(max(start_offset, view.log_start_offset), end_offset)

    def aborted_txns(self, start_offset: int, upper_bound_offset: int) -> list:
        view = self._opened_view()
        if view is None or start_offset >= view._next_offset:
            return []
        return view.aborted_txns(max(start_offset, view.log_start_offset), upper_bound_offset)

    def find_offset(self, timestamp: int, log_start_offset: int) -> FoundTimestamp | None:
        """`RemoteLogManager.findOffsetByTimestamp`: the first tiered record at or after `timestamp` from
        the log start offset, through the segment's remote time index (cached) and one range of its `.log`."""
        from chronolog.storage import time_lookup
        view = self._opened_view()
        if view is None:
            return None
        view.log_start_offset = max(view.segments[0].base_offset, log_start_offset)
        if not any(s.meta.max_timestamp >= timestamp for s in view.segments):
            return None
        for seg in view.segments:
            if seg.meta.end_offset < view.log_start_offset or seg.meta.max_timestamp < timestamp:
                continue
            found = seg.find_offset_by_timestamp(timestamp, view.log_start_offset, tables=view.caches.time_tables,
                                                 key=time_lookup._tables_key(view))
            if found is not None:
                return found
        return None

    def max_timestamp_entry(self) -> FoundTimestamp | None:
        view = self._opened_view()
        if view is None:
            return None
        from chronolog.storage import time_lookup
        return time_lookup.max_timestamp_entry(view)

    def latest_tiered(self) -> FoundTimestamp:
        """ListOffsets -5 (KIP-1005): the last tiered offset, timestamp -1; -1 when nothing is tiered."""
        highest = self.highest_offset
        return FoundTimestamp(-1, highest, LEADER_EPOCH if highest >= 0 else -1)

    # -- the copy (RLMCopyTask) ---------------------------------------------------------------------
    def copy_once(self) -> int:
        """Copy every closed segment past the tiered ones and below the last stable offset, oldest first,
        one at a time (`RLMCopyTask.copyLogSegmentsToRemote`); returns how many were copied."""
        copied = 0
        while not self.closed and self.copy_enabled:
            with self._busy:
                job = None if self.closed else self._next_copy()
                if job is None:
                    break
                try:
                    self._copy(*job)
                finally:
                    for _name, (fd, _size) in job[1].items():
                        os.close(fd)
            copied += 1
        return copied

    def _next_copy(self) -> tuple[RemoteSegment, dict[str, tuple[int, int]]] | None:
        """The next segment to copy with its files opened under the log's lock (so a deletion renaming them
        meanwhile cannot pull them away), or None."""
        plog = self.plog
        with plog.lock:
            if plog._closed:
                return None
            after = self.highest_offset
            lso = plog.last_stable_offset
            segs = plog.segments
            for i, seg in enumerate(segs[:-1]):
                end = segs[i + 1].base_offset - 1
                if end <= after:
                    continue
                if seg.base_offset <= after or end + 1 > lso:
                    return None  # overlaps what is tiered (never: same boundaries), or not stable yet
                names = [p for p in seg.files() if p.exists()]
                snap = plog.dir / segment_name(end + 1, SNAPSHOT_SUFFIX)
                if snap.exists():
                    names.append(snap)
                opened: dict[str, tuple[int, int]] = {}
                try:
                    for path in names:
                        fd = os.open(path, os.O_RDONLY)
                        opened[path.name] = (fd, seg.size if path.name.endswith(LOG_SUFFIX) else os.fstat(fd).st_size)
                except OSError:
                    for fd, _size in opened.values():
                        os.close(fd)
                    raise
                meta = RemoteSegment(seg.base_offset, end, seg.max_timestamp_so_far, seg.offset_of_max_timestamp_so_far,
                                     seg.size, 0, segment_id=uuid.uuid4().hex, created_ms=plog.clock(),
                                     leader_epochs={str(LEADER_EPOCH): seg.base_offset})
                return meta, opened
            return None

    def _copy(self, meta: RemoteSegment, opened: dict[str, tuple[int, int]]) -> None:
        """Every file first, the `.log` last, a check of what the tier lists, then the record: until the
        record is written the segment is not listed, and a copy interrupted here is made again."""
        d = self.directory
        log_name = segment_name(meta.base_offset, LOG_SUFFIX)
        sizes: dict[str, int] = {}
        crc = 0
        epochs = f"{meta.base_offset:020d}{LEADER_EPOCH_SUFFIX}"
        epoch_data = f"0\n1\n{LEADER_EPOCH} {meta.base_offset}\n".encode()  # LeaderEpochCheckpointFile
        if not self.segments:
            self._write_partition_metadata()
        self.tier.put_bytes(f"{d}/{epochs}", epoch_data)
        sizes[epochs] = len(epoch_data)
        for name in sorted(opened, key=lambda n: n == log_name):
            fd, size = opened[name]
            with os.fdopen(os.dup(fd), "rb") as src:
                value = self.tier.put_file(f"{d}/{name}", src, size)
            sizes[name] = size
            if name == log_name:
                crc = value
        listed = self.tier.list(d)
        wrong = {n: (s, listed.get(n)) for n, s in sizes.items() if listed.get(n) != s}
        if wrong:
            raise TierError(f"{d}: copy of segment {meta.base_offset} not verified: {wrong}")
        done = RemoteSegment(meta.base_offset, meta.end_offset, meta.max_timestamp, meta.offset_of_max_timestamp,
                             meta.size, crc, sizes, meta.segment_id, meta.created_ms, COPY_FINISHED, meta.leader_epochs)
        self.tier.put_bytes(f"{d}/{done.name}", done.to_json())
        with self._lock:
            self.segments = [*self.segments, done]
            self._changed()
        log.info("%s: copied segment %d-%d (%d bytes) to the tier", d, done.base_offset, done.end_offset, done.size)

    def _write_partition_metadata(self) -> None:
        path = self.plog.dir / "partition.metadata"
        with contextlib.suppress(OSError):
            self.tier.put_bytes(f"{self.directory}/partition.metadata", path.read_bytes())

    # -- retention of the whole log (RLMExpirationTask) ---------------------------------------------
    def expire_once(self, now: int) -> int:
        """Delete tiered segments, oldest first, below the log start offset or breaching retention.bytes
        (measured over the whole log) or retention.ms (their largest timestamp); stops at the first that
        stays. The log start offset moves past each one before its files go."""
        with self._busy:
            return 0 if self.closed else self._expire(now)

    def _expire(self, now: int) -> int:
        plog = self.plog
        cfg = plog.config
        deletable: list[RemoteSegment] = []
        with plog.lock:
            local_only = sum(s.size for s in plog.segments if s.base_offset > self.highest_offset)
            breach = self.size + local_only - cfg.retention_bytes if cfg.retention_bytes >= 0 and cfg.deletes else 0
            for meta in self.segments:
                if meta.end_offset < plog.log_start_offset:
                    deletable.append(meta)
                    continue
                if not cfg.deletes:
                    break
                if cfg.retention_ms >= 0 and now - (meta.max_timestamp if meta.max_timestamp >= 0
                                                    else meta.created_ms) > cfg.retention_ms:
                    deletable.append(meta)
                    breach -= meta.size
                    continue
                if breach > 0 and breach - meta.size >= 0:
                    deletable.append(meta)
                    breach -= meta.size
                    continue
                break
            if not deletable:
                return 0
            plog.log_start_offset = max(plog.log_start_offset, deletable[-1].end_offset + 1)
            with self._lock:
                gone = {m.base_offset for m in deletable}
                self.segments = [m for m in self.segments if m.base_offset not in gone]
                self._changed()
        for meta in deletable:
            log.info("%s: deleting tiered segment %d-%d (largest timestamp %d); log start offset %d",
                     self.directory, meta.base_offset, meta.end_offset, meta.max_timestamp, plog.log_start_offset)
            marked = RemoteSegment(meta.base_offset, meta.end_offset, meta.max_timestamp, meta.offset_of_max_timestamp,
                                   meta.size, meta.log_crc32, meta.files, meta.segment_id, meta.created_ms,
                                   DELETE_STARTED, meta.leader_epochs)
            self.tier.put_bytes(f"{self.directory}/{marked.name}", marked.to_json())
            self._delete_files(meta)
        return len(deletable)

    def _delete_files(self, meta: RemoteSegment) -> None:
        """The `.log` first (readers of the tier stop listing the segment), the record last."""
        d = self.directory
        log_name = segment_name(meta.base_offset, LOG_SUFFIX)
        for name in sorted(meta.files, key=lambda n: n != log_name):
            self.tier.delete(f"{d}/{name}")
        self.tier.delete(f"{d}/{metadata_name(meta.base_offset)}")
        self.caches.ranges.forget(self.tier, f"{d}/{meta.base_offset:020d}")
        self.caches.indexes.forget(self.tier, f"{d}/{meta.base_offset:020d}")

    def delete_all(self) -> None:
        """The topic is deleted, or its tiering turned off with remote.log.delete.on.disable."""
        self.closed = True
        with self._busy:  # after the copy in progress, if any
            with self._lock:
                self.segments = []
                self._changed()
            self.tier.delete_dir(self.directory)
        self.caches.ranges.forget(self.tier, f"{self.directory}/")
        self.caches.indexes.forget(self.tier, f"{self.directory}/")

    # -- local retention (UnifiedLog.deleteOldSegments with remote storage) -------------------------
    def delete_local_segments(self, now: int) -> int:
        """Local segments go by `local.retention.ms` / `local.retention.bytes` (-2: the retention.* value)
        only once their copy is listed (`isSegmentEligibleForDeletion`), or when below the log start offset;
        the active segment is rolled when it breaches local.retention.ms, so that it can be copied. With
        remote.log.copy.disable the local log keeps the whole retention, as Kafka's falls back to."""
        plog = self.plog
        cfg = plog.config
        deleted = plog._delete_segments(lambda s, n: n is not None and n.base_offset <= plog.log_start_offset,
                                        now, "log start offset", move_start=False)
        if not cfg.deletes:
            return deleted
        if not self.copy_enabled:
            return deleted + plog.delete_old_local(now, move_start=True)
        local_ms = cfg.retention_ms if cfg.local_retention_ms == -2 else cfg.local_retention_ms
        local_bytes = cfg.retention_bytes if cfg.local_retention_bytes == -2 else cfg.local_retention_bytes

        def tiered(nxt) -> bool:
            return nxt is not None and nxt.base_offset - 1 <= self.highest_offset

        if local_bytes >= 0:
            state = {"diff": plog.size - local_bytes}

            def breached(seg, nxt) -> bool:
                if state["diff"] > 0 and state["diff"] - seg.size >= 0 and tiered(nxt):
                    state["diff"] -= seg.size
                    return True
                return False
            deleted += plog._delete_segments(breached, now, "local.retention.bytes", move_start=False,
                                             limit=local_bytes)
        if local_ms >= 0:
            deleted += plog._delete_segments(lambda s, n: now - s.largest_timestamp > local_ms and tiered(n), now,
                                             "local.retention.ms", move_start=False, limit=local_ms)
            with plog.lock:
                active = plog.active
                if active.size > 0 and now - active.largest_timestamp > local_ms and not plog._closed:
                    log.info("%s: rolling the active segment to make it eligible for deletion", self.directory)
                    plog.roll()
        return deleted
