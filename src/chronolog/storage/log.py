"""One partition: a directory `<topic>-<partition>` of segments (Kafka's `UnifiedLog` + `LocalLog`).

Appends are validated as `LogValidator` does (CRC, sizes, KIP-32 timestamp bounds), get offsets
assigned by patching batch headers in place, and go to the active segment, which rolls on size, time
(first batch's max timestamp + `segment.ms` - jitter), full indexes or offset overflow. Retention deletes
whole segments oldest-first and stops at the first one that must stay.

Transactions (KIP-98): a producer's transactional batches open its transaction, the coordinator's marker
(`append_control`) ends it; the oldest open transaction bounds the last stable offset, and each aborted
one is recorded in the `.txnindex` of the segment that holds its ABORT marker (storage.txnindex).
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import itertools
import logging
import os
import random
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from chronolog.config import TopicConfig
from chronolog.diskio import describe, disk_log, free_bytes
from chronolog.errors import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaError,
    KafkaStorageErrorError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    RecordListTooLargeError,
    UnsupportedVersionError,
)
from chronolog.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    CompressionType,
    LegacyBatch,
    Record,
    RecordBatch,
    TimestampType,
    build_batch,
    crc32c,
    iter_batches,
    merge_to_v2,
    set_base_offset,
    set_max_timestamp,
    set_partition_leader_epoch,
    upconvert_to_v2,
)
from chronolog.records.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    scan_batch_timestamps,
)
from chronolog.records.batch import HEADER as BATCH_HEADER
from chronolog.records.control import ControlType, EndTxnMarker, build_control_batch, marker_of
from chronolog.storage.basics import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    LEADER_EPOCH,
    MAX_TIMESTAMP,
    FoundTimestamp,
    now_ms,
    parse_log_dir_name,
)
from chronolog.storage.index import IndexCorruptError
from chronolog.storage.local_log import (
    CLEANED_SUFFIX,
    SWAP_SUFFIX,
    LocalLog,
    SwapResolvedFiles,
    has_interrupted_swap,
    recover_swaps,
)
from chronolog.storage.minima import MINIMA_SUFFIX
from chronolog.storage.producers import (
    SNAPSHOT_SUFFIX,
    CorruptSnapshotError,
    ProducerInfo,
    ProducerStates,
    delete_snapshot,
    increment_sequence,
    snapshot_offsets,
    snapshot_path,
)
from chronolog.storage.readonly import FilesSegment, ReadOnlyFiles, segment_bases
from chronolog.storage.retention import ExpiredArrivals, log_deletions
from chronolog.storage.segment import (
    DELETED_SUFFIX,
    LOG_SUFFIX,
    TIME_TABLES,
    LogSegment,
    offsets_named,
    segment_name,
)
from chronolog.storage.txnindex import READ_COMMITTED, AbortedFilter, AbortedTxn, check_isolation

log = logging.getLogger(__name__)

PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms (KIP-854)
WRITE_RETRY_MS = 5000  # chronolog.log.dir.write.retry.ms: how often a partition whose write failed tries again
_LOG_TOKENS = itertools.count()


@dataclass(frozen=True)
class AppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    log_start_offset: int
    records_count: int
    duplicate: bool = False  # a producer's retry: nothing was written, the offsets are its first write's


@dataclass(frozen=True)
class ReadSlice:
    """Bytes of whole batches in one segment file, for `os.sendfile` or one `pread`."""

    file_path: Path
    position: int
    size: int
    first_offset: int
    _segment: LogSegment
    _after: int = -1  # the next segment's base offset, or the log end offset, when the slice was made

    def fileno(self) -> int:
        return self._segment._fd

    def read_bytes(self) -> bytes:
        """The bytes, read with one `pread` (short only if the segment was deleted meanwhile)."""
        return self._segment.pread(self.position, self.size)

    @property
    def next_offset(self) -> int:
        """The offset just past the slice's last batch: the base offset of the batch that follows it in
        the segment, else the next segment's base offset (or the log end offset). The upper bound a
        read_committed fetch collects aborted transactions to (`LogSegment.fetchUpperBoundOffset`, which
        Kafka takes from the offset index and may overshoot; this is exact)."""
        end = self.position + self.size
        if end + 8 <= self._segment.size:
            head = self._segment.pread(end, 8)
            if len(head) == 8:
                return int.from_bytes(head, "big", signed=True)
        return self._after


TimestampAndOffset = FoundTimestamp


class PartitionLog(LocalLog):
    """A partition's segments. Every public method takes the log's lock."""

    def __init__(self, directory: Path, config: TopicConfig, *, writable: bool = True,
                 time_index_style: str = "batch_last", clock: Callable[[], int] = now_ms) -> None:
        self.dir = Path(directory)
        # The one clock (ms) every time rule reads when no `now` is passed: segment creation (time rolling
        # of segments without timestamps), truncation, DeleteRecords, flush.ms, producer expiry, as Kafka's
        # `Time`; tests inject theirs. The delayed removal of `.deleted` files reads it too: a timer only
        # wakes `delete_due_files`, which decides by this clock.
        self.clock = clock
        self._due_deletions: list[tuple[int, list[Path]]] = []  # (due ms on `clock`, `.deleted` files)
        self._deletion_lock = threading.Lock()
        self._deletion_timer: threading.Timer | None = None
        try:
            self.topic, self.partition = parse_log_dir_name(self.dir.name)
        except ValueError:
            if writable:
                raise
            self.topic, self.partition = self.dir.name, 0  # a loose copy of a partition dir
        self.config = config
        self.writable = writable
        self.time_index_style = time_index_style
        self.lock = threading.RLock()
        self.segments: list[LogSegment] = []
        self.log_start_offset = 0
        self.recovery_point = 0
        self._next_offset = 0
        self._unflushed_messages = 0
        self._last_flush_ms = clock()
        self._segment_created_ms: dict[int, int] = {}
        self._jitter = 0
        self._closed = False
        self._segments_version = 0  # bumped whenever the segment list or an inactive segment changes
        self.producers = ProducerStates()  # idempotent producers (storage.producers); loaded by `open`
        self._guard = _WriteGuard(self)  # see `_writing`
        self.producer_expiration_ms = PRODUCER_ID_EXPIRATION_MS
        self._expired_arrivals = ExpiredArrivals()
        self._txn_rebuild_from: int | None = None  # recovery: segments from here get their .txnindex rebuilt

    # -- opening ------------------------------------------------------------------------------------
    @classmethod
    def open(cls, directory: Path, config: TopicConfig | None = None, *, recover: bool = True,
             recovery_point: int = 0, log_start_offset: int = 0, now: int | None = None,
             producer_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS,
             clock: Callable[[], int] = now_ms) -> PartitionLog:
        """Open or create a partition directory. With `recover`, segments from the recovery point on are
        validated: a torn tail is truncated, later segments dropped, indexes rebuilt (`LogLoader`). Then
        the idempotent producers' state is loaded (`_load_producers`)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        plog = cls(directory, config or TopicConfig(), clock=clock)
        plog.producer_expiration_ms = producer_expiration_ms
        # Under the log's lock, as all segment work is: another thread's open-file cache eviction closes a
        # segment's descriptors only when it can take that lock, so none is pulled from under the load.
        with plog.lock:
            plog._load(recover=recover, recovery_point=recovery_point)
            plog.log_start_offset = max(log_start_offset, plog.segments[0].base_offset)
            plog._load_producers(plog.clock() if now is None else now)
        # LogLoader: after a clean stop everything is durable (recovery point = LEO); after recovery the
        # checkpoint stays, so data that was only in the page cache is validated again after another crash.
        plog.recovery_point = min(max(recovery_point, plog.log_start_offset), plog._next_offset) if recover \
            else plog._next_offset
        return plog

    @classmethod
    def open_readonly(cls, directory: Path, config: TopicConfig | None = None,
                      time_index_style: str = "batch_last", *, files: ReadOnlyFiles | None = None) -> PartitionLog:
        """Read a directory that must not change (a copy of a Kafka log dir, a read-only mount): nothing
        is written; indexes that are missing are rebuilt in memory. With `files` the directory is read
        through that object (`storage.readonly`), e.g. from an object store; `directory` then only names it."""
        plog = cls(Path(directory), config or TopicConfig(), writable=False, time_index_style=time_index_style)
        if files is None and has_interrupted_swap(plog.dir):
            files = SwapResolvedFiles(plog.dir)  # read as the broker's next start will finish the swap
        plog._files = files
        bases = plog._segment_bases() if files is None else segment_bases(files)
        if not bases:
            raise OffsetOutOfRangeError(f"no segments in {directory}")
        kwargs = {"index_interval_bytes": plog.config.index_interval_bytes,
                  "max_index_size": plog.config.segment_index_bytes, "time_index_style": time_index_style,
                  "lock": plog.lock}
        with plog.lock:  # as in `open`: no other thread's eviction closes a file of a segment being opened
            for base in bases:
                plog.segments.append(LogSegment(plog.dir, base, writable=False, **kwargs) if files is None
                                     else FilesSegment(files, plog.dir, base, **kwargs))
        for seg, nxt in zip(plog.segments, plog.segments[1:], strict=False):
            seg.is_last = False
            seg._offset_limit_after = nxt.base_offset
        plog._next_offset = plog.segments[-1].next_offset_guess
        plog.log_start_offset = plog.segments[0].base_offset
        return plog

    _files: ReadOnlyFiles | None = None  # where a read-only log's files come from, if not `dir`
    _snapshots_at_load: list[int] | None = None  # snapshot offsets `_load` listed, for `_load_producers`
    _readonly_producers_loaded = False

    def _load_producers_readonly(self) -> None:
        """A read-only log's producers (for its LSO), when first needed: the newest snapshot file that parses
        and lies in (log start, log end], then the batches after it, as `_load_producers` but deleting and
        writing nothing; without a snapshot the whole log is read. Kafka's own snapshots carry the open
        transactions too, so a copy of a Kafka log dir gets its LSO the same way."""
        states = ProducerStates()
        start = self.log_start_offset
        for name, data in reversed(self.producer_snapshot_files()):
            offset = int(name[:-len(SNAPSHOT_SUFFIX)])
            if not self.log_start_offset < offset <= self._next_offset:
                continue
            try:
                entries = ProducerStates.from_bytes(data)
            except CorruptSnapshotError as exc:
                log.warning("%s: producer snapshot %s is not usable (%s)", self.dir, name, exc)
                continue
            states._reset(entries)
            start = offset
            break
        self._replay_producers(states, start)
        self.producers = states

    def _ensure_producers(self) -> None:
        if not self.writable and not self._readonly_producers_loaded:
            self._readonly_producers_loaded = True
            self._load_producers_readonly()

    def producer_snapshot_files(self) -> list[tuple[str, bytes]]:
        """(name, bytes) of each `<offset>.snapshot` file of the partition, oldest first, unparsed: for
        tools that check them (`chronolog check`)."""
        if self._files is not None:
            offsets, read = offsets_named(self._files.names(), SNAPSHOT_SUFFIX), self._files.read
        else:
            offsets, read = snapshot_offsets(self.dir), lambda n: (self.dir / n).read_bytes()
        return [(n, read(n) or b"") for n in (segment_name(o, SNAPSHOT_SUFFIX) for o in offsets)]

    def _segment_bases(self) -> list[int]:
        return offsets_named((entry.name for entry in self.dir.iterdir()), LOG_SUFFIX)

    def _new_segment(self, base: int, *, check_indexes: bool = True) -> LogSegment:
        seg = LogSegment(self.dir, base, index_interval_bytes=self.config.index_interval_bytes,
                         max_index_size=self.config.segment_index_bytes, time_index_style=self.time_index_style,
                         rebuild_missing=False, lock=self.lock, check_indexes=check_indexes)
        self._segment_created_ms[base] = self.clock()
        return seg

    def _load(self, recover: bool, recovery_point: int) -> None:
        # One listing of the directory serves every decision below (a start opens thousands of partitions:
        # a listing or a stat more per partition is seconds more).
        names = os.listdir(self.dir)
        if any(n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX)) for n in names):
            recover_swaps(self.dir)  # a clean interrupted by a crash: finished or undone (LogLoader)
            names = os.listdir(self.dir)
        kept = []
        for name in names:
            # Leftovers of deletions and of interrupted index swaps go first (`LogLoader.removeTempFiles`).
            if name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX, MINIMA_SUFFIX + ".tmp", SNAPSHOT_SUFFIX + ".tmp")):
                (self.dir / name).unlink(missing_ok=True)
            else:
                kept.append(name)
        bases = offsets_named(kept, LOG_SUFFIX)
        known = set(bases)
        for name in kept:
            # A sidecar whose segment is gone (deleted by a broker that does not know it) goes too.
            if name.endswith(MINIMA_SUFFIX) and (not name[:-len(MINIMA_SUFFIX)].isdigit()
                                                 or int(name[:-len(MINIMA_SUFFIX)]) not in known):
                (self.dir / name).unlink(missing_ok=True)
        present = set(kept)
        for base in bases:
            for suffix in (".index", ".timeindex"):
                if segment_name(base, suffix) not in present:
                    log.info("%s: missing %s, rebuilding", self.dir, segment_name(base, suffix))
        self._snapshots_at_load = offsets_named(kept, SNAPSHOT_SUFFIX)
        for i, base in enumerate(bases):
            # The segments from the one holding the recovery point on (LogLoader.recoverLog:
            # `segments.values(recoveryPoint, Long.MAX_VALUE)`), so the last one always; the ones before
            # it were flushed before the checkpoint was written and are only sanity-checked.
            needs_recovery = recover and (base >= recovery_point or i + 1 == len(bases)
                                          or bases[i + 1] > recovery_point)
            # A segment about to be recovered rebuilds its indexes anyway: its index files are not checked
            # first (LogLoader.loadSegmentFiles checks only after a clean shutdown or below the recovery
            # point; a crashed active segment's preallocated index would fail the check and be rebuilt twice).
            seg = self._new_segment(base, check_indexes=not needs_recovery)
            if i + 1 < len(bases):
                seg.is_last = False
                seg._offset_limit_after = bases[i + 1]
            self.segments.append(seg)
            if needs_recovery or seg.needs_rebuild:
                # Unlike LogLoader, corruption does not end the log: only the last segment's torn tail is
                # truncated; invalid bytes elsewhere become corrupt ranges that reads step over.
                seg.recover()
                # `LogSegment.recover` resets the transaction index and rebuilds it from the producers'
                # state at the segment's start: done for all of them in `_load_producers`.
                self._rebuild_txn_index_from(base)
                # Recovery read the whole segment: its minima are rebuilt too (an inactive segment's
                # sidecar is written by on_become_inactive below).
                seg.start_minima(rebuild=True)
            elif not self._txn_index_sane(seg):
                self._rebuild_txn_index_from(base)
        if not self.segments:
            self.segments.append(self._new_segment(0))
        for seg in self.segments[:-1]:
            seg.on_become_inactive(loading=True)
        # The active segment tracks minima from here on: rebuilt by recovery above, else from its sidecar
        # (written at the last clean close); without one it stays untracked and readers scan it.
        self.active.resume_minima()
        self.active.make_active()
        self._next_offset = self.active.next_offset_guess
        if self.active.size == 0 and len(self.segments) > 1:
            self._next_offset = max(self._next_offset, self.active.base_offset)
        self._jitter = self._new_jitter()

    def _rebuild_txn_index_from(self, base: int) -> None:
        if self._txn_rebuild_from is None or base < self._txn_rebuild_from:
            self._txn_rebuild_from = base

    def _txn_index_sane(self, seg: LogSegment) -> bool:
        """`TransactionIndex.sanityCheck` at load; a failing index is rebuilt (LogLoader)."""
        try:
            seg.txn_index.sanity_check()
        except IndexCorruptError as exc:
            log.warning("%s; rebuilding it", exc)
            return False
        return True

    def _new_jitter(self) -> int:
        """`LogConfig.randomSegmentJitter`: uniform in [0, min(segment.jitter.ms, segment.ms))."""
        bound = min(self.config.segment_jitter_ms, self.config.segment_ms)
        return random.randrange(bound) if bound > 0 else 0

    def _load_producers(self, now: int) -> None:
        """The producers' state as of the log end: the newest snapshot at or below it, then the batches
        after it (`LogLoader` / `UnifiedLog.rebuildProducerState`), markers included, so open transactions
        and the LSO come back. With no snapshot the log is read from its start, as Kafka does after an
        unclean stop: a transaction open since an older segment must not be missed. Producers idle for
        `producer.id.expiration.ms` are left out.

        Segments that recovery read again get their `.txnindex` rewritten from the ABORT markers in them
        (`LogSegment.recover`), which needs the open transactions at the first one's start: a replay from
        the newest snapshot at or below it. Kafka deletes the newer snapshots for that; they stay valid
        (recovery only cuts a torn tail, and snapshots past the new end are deleted), so they are kept."""
        rebuild = self._txn_rebuild_from
        self._txn_rebuild_from = None
        loaded = self.producers.load_snapshot(self.dir, self.log_start_offset, self._next_offset, now,
                                              self.producer_expiration_ms, offsets=self._snapshots_at_load)
        self._snapshots_at_load = None  # the first load may have deleted some
        if loaded is None:
            loaded = self.log_start_offset
        if rebuild is not None and loaded > rebuild:
            earlier = ProducerStates()
            start = earlier.load_snapshot(self.dir, self.log_start_offset, rebuild, now, self.producer_expiration_ms,
                                          delete_outside=False)
            self._replay_producers(earlier, self.log_start_offset if start is None else start, rebuild)
            rebuild = None
        self._replay_producers(self.producers, loaded, rebuild)
        self.producers.expire(now, self.producer_expiration_ms)

    def _replay_producers(self, states: ProducerStates, start: int, rebuild_txn_from: int | None = None) -> None:
        """Update `states` with every batch from offset `start` to the log end; segments based at or after
        `rebuild_txn_from` get their `.txnindex` rewritten from the ABORT markers met (`LogSegment.recover`
        with `updateProducerState`)."""
        if rebuild_txn_from is not None:
            for seg in self.segments:
                if seg.base_offset >= rebuild_txn_from:
                    seg.txn_index.reset()
        for i in range(self._segment_for(max(start, self.segments[0].base_offset)), len(self.segments)):
            seg = self.segments[i]
            rebuild = rebuild_txn_from is not None and seg.base_offset >= rebuild_txn_from
            pos = seg.offset_index.lookup(start).position if start > seg.base_offset else 0
            for pid, epoch, seq, base, last, ts, attributes, position in seg.producer_batches(pos, start):
                if not attributes & CONTROL_MASK:
                    states.update(pid, epoch, seq, base, last, ts, bool(attributes & TRANSACTIONAL_MASK))
                    continue
                marker = self._marker_at(seg, position)
                if marker is None:
                    continue
                done = states.apply_marker(pid, epoch, marker.coordinator_epoch, base, ts, marker.is_commit)
                if done is not None and rebuild and done[0].is_aborted:
                    txn, lso = done
                    seg.txn_index.append(AbortedTxn(pid, txn.first_offset, txn.last_offset, lso))

    def _marker_at(self, seg: LogSegment, position: int) -> EndTxnMarker | None:
        """The transaction marker of the control batch at `position`; None for another control type, an
        empty control batch or one that cannot be read (logged: the replay goes on)."""
        for _pos, batch in seg.batches_from(position):
            try:
                return marker_of(batch)
            except KafkaError as exc:
                log.warning("%s-%d: control batch at offset %d unreadable: %s", self.topic, self.partition,
                            batch.base_offset, exc)
                return None
        return None

    def _retried(self, producer_id: int, epoch: int, base_sequence: int, last_offset_delta: int
                 ) -> AppendInfo | None:
        """A client's batch that its producer already wrote (`UnifiedLog.analyzeAndValidateProducerState`):
        the first write's offsets, and nothing is appended. A fenced epoch or a gap in the sequence raises
        (`ProducerStates.duplicate_of`). Called under the lock, so the check and the append are one step."""
        first = self.producers.duplicate_of(producer_id, epoch, base_sequence,
                                            increment_sequence(base_sequence, last_offset_delta))
        if first is None:
            return None
        return AppendInfo(first, first + last_offset_delta, -1, -1, -1, self.log_start_offset, 0, duplicate=True)

    def producer_duplicate(self, producer_id: int, epoch: int, base_sequence: int, last_offset_delta: int
                           ) -> int | None:
        """The first offset a producer's batch was already written at (a retry), else None; raises as
        `append` would (for tools and tests: `append` checks this itself)."""
        with self.lock:
            retry = self._retried(producer_id, epoch, base_sequence, last_offset_delta)
            return None if retry is None else retry.first_offset

    def expire_producers(self, now: int | None = None) -> int:
        """Forget producers idle for `producer.id.expiration.ms` (the log manager calls this every
        `producer.id.expiration.check.interval.ms`)."""
        with self.lock:
            return self.producers.expire(self.clock() if now is None else now, self.producer_expiration_ms)

    def _snapshot_producers(self, *, sync: bool = False) -> None:
        """A snapshot at the log end, unless one is there already or the log is empty
        (`ProducerStateManager.takeSnapshot`). A snapshot that cannot be written is logged and skipped:
        it only makes the next start replay more of the log, and must not stop a roll or a close."""
        if not self.writable or self._next_offset <= self.log_start_offset:
            return
        if snapshot_path(self.dir, self._next_offset).exists():
            return
        try:
            self.producers.write_snapshot(self.dir, self._next_offset, sync=sync)
        except OSError as exc:  # a warning: the incident's one ERROR line is the failed append's
            log.warning("%s-%d: producer snapshot at offset %d not written: %s", self.topic, self.partition,
                        self._next_offset, exc)

    # -- properties ---------------------------------------------------------------------------------
    @property
    def active(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self._next_offset

    @property
    def high_watermark(self) -> int:
        return self._next_offset  # a single replica: everything appended is committed

    @property
    def local_log_start_offset(self) -> int:
        return self.log_start_offset

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)

    def update_config(self, config: TopicConfig) -> None:
        with self.lock:
            self.config = config
            for seg in self.segments:
                seg.index_interval_bytes = config.index_interval_bytes

    # -- append -------------------------------------------------------------------------------------
    def append(self, records: bytes | bytearray | memoryview, *, now: int | None = None,
               origin_client: bool = True) -> AppendInfo:
        """Validate, assign offsets and append (`UnifiedLog.appendAsLeader` + `LogValidator`). There is no
        follower append (`appendAsFollower`, which keeps the leader's offsets): a single node has no leader
        to follow. `origin_client` False is a coordinator's own write (`AppendOrigin.COORDINATOR`): control
        batches allowed, no client-only checks."""
        if not self.writable:
            raise KafkaError("log is read-only")
        now = self.clock() if now is None else now
        view = memoryview(records).cast("B")
        if not len(view):  # UnifiedLog.append: no valid bytes, nothing appended, offsets unknown (-1)
            return AppendInfo(-1, -1, -1, -1, -1, self.log_start_offset, 0)
        if len(view) >= HEADER_SIZE:
            h = BATCH_HEADER.unpack_from(view, 0)
            if h[3] == 2 and h[1] + LOG_OVERHEAD == len(view):
                info = self._append_one_v2(view, h, now, origin_client)
                if info is not None:
                    return info
        buf = bytearray(records)
        batches = list(iter_batches(buf))
        consumed = sum(b.size_in_bytes for b in batches)
        if not batches or consumed != len(buf):
            raise CorruptMessageError(f"produce payload of {len(buf)} bytes holds {consumed} bytes of "
                                      "complete batches")
        if len(batches) > 1 and all(isinstance(b, LegacyBatch) for b in batches):
            # LogValidator: a compressed legacy wrapper must come alone; uncompressed legacy messages are
            # converted together into one v2 batch.
            if any(b.compression != CompressionType.NONE for b in batches):
                raise InvalidRecordError("Compressed outer record has more than one batch")
            for b in batches:
                b.validate()
            buf = bytearray(merge_to_v2(batches))
            batches = [RecordBatch(buf)]
        with self.lock:
            if self._closed:
                raise KafkaError("log is closed")
            out = bytearray()
            offset = self._next_offset
            first = offset
            max_ts, offset_of_max = -1, -1
            min_ts: int | None = None  # smallest record timestamp appended, for the segment's minima sidecar
            count = 0
            producer_batches = []  # (id, epoch, first seq, first offset, last offset, max timestamp, transactional)
            cfg = self.config
            log_append = cfg.log_append_time
            topic_codec = _topic_codec(cfg.compression_type)
            if any(b.magic == 2 for b in batches) and len(batches) > 1 and origin_client:
                raise InvalidRecordError("a produce request may carry only one v2 record batch per partition")
            for batch in batches:
                if origin_client and not isinstance(batch, LegacyBatch) and batch.base_offset != 0:
                    raise InvalidRecordError(_base_offset_message(self.topic, self.partition, batch.base_offset))
                if isinstance(batch, LegacyBatch):
                    batch.validate()
                    data = bytearray(upconvert_to_v2(batch, offset))
                    batch = RecordBatch(data)
                else:
                    batch.validate()
                    _check_offset_range(batch.last_offset_delta, batch.records_count)
                    # A request's only batch is patched in the request's own copy; others get theirs.
                    data = buf if len(batches) == 1 else bytearray(batch.raw)
                if batch.size_in_bytes > cfg.max_message_bytes:
                    raise MessageTooLargeError(f"batch of {batch.size_in_bytes} bytes exceeds max.message.bytes "
                                               f"{cfg.max_message_bytes}")
                if batch.is_control and origin_client:
                    raise InvalidRecordError("clients may not write control batches")
                if origin_client and batch.magic == 2 and batch.producer_id >= 0 and batch.base_sequence < 0:
                    raise InvalidRecordError(f"invalid sequence number {batch.base_sequence} in a batch of producer "
                                             f"{batch.producer_id}")
                if cfg.compacted and not batch.is_control:
                    self._check_keys(batch)
                lo, batch_max, n_records = batch.scan_timestamps()
                self._validate_timestamps(batch, lo, batch_max, now)
                idempotent = batch.magic == 2 and batch.producer_id >= 0 and not batch.is_control
                if idempotent and origin_client:
                    retry = self._retried(batch.producer_id, batch.producer_epoch, batch.base_sequence,
                                          batch.last_offset_delta)
                    if retry is not None:
                        return retry  # the only batch (a client sends one per partition)
                    self.producers.check_transactional(batch.producer_id, batch.is_transactional)
                # A control batch (a coordinator's transaction marker) is kept as it is: recompressing it
                # through build_batch would also drop its control bit.
                codec = batch.compression if topic_codec is None or batch.is_control else topic_codec
                if codec != batch.compression:
                    # A codec change is the one case that recompresses (LogValidator).
                    data = bytearray(build_batch(
                        [Record(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records()],
                        base_offset=batch.base_offset, compression=codec, timestamp_type=batch.timestamp_type,
                        producer_id=batch.producer_id, producer_epoch=batch.producer_epoch,
                        base_sequence=batch.base_sequence, is_transactional=batch.is_transactional))
                set_base_offset(data, 0, offset)
                set_partition_leader_epoch(data, 0, LEADER_EPOCH)
                if log_append:
                    set_max_timestamp(data, 0, TimestampType.LOG_APPEND_TIME, now)
                    batch_max = now
                else:
                    # `batch` still describes `data`'s header unless it was rebuilt above.
                    header = batch if data is buf else RecordBatch(data)
                    if header.max_timestamp != batch_max or header.timestamp_type != TimestampType.CREATE_TIME:
                        set_max_timestamp(data, 0, TimestampType.CREATE_TIME, batch_max)
                last = offset + n_records - 1
                if idempotent:
                    producer_batches.append((batch.producer_id, batch.producer_epoch, batch.base_sequence, offset,
                                             last, batch_max, batch.is_transactional))
                low = batch_max if log_append else lo
                min_ts = low if min_ts is None or low < min_ts else min_ts
                if batch_max > max_ts:
                    max_ts, offset_of_max = batch_max, last  # batch last offset (KAFKA-16310)
                out += data
                offset = last + 1
                count += n_records
            if len(out) > cfg.segment_bytes:
                raise RecordListTooLargeError(f"{len(out)} bytes exceed segment.bytes {cfg.segment_bytes}")
            with self._writing():
                self._maybe_roll(len(out), max_ts, offset - 1, now)
                self._append_active(count, offset - 1, max_ts, offset_of_max, out, min_ts)
            self._next_offset = offset
            self._check_retention_on_arrival(max_ts, now)
            for producer in producer_batches:
                self.producers.update(*producer)
            self._unflushed_messages += count
            if self._unflushed_messages >= cfg.flush_messages:
                self._flushed()
            return AppendInfo(first, offset - 1, max_ts, offset_of_max, now if log_append else -1,
                              self.log_start_offset, count)

    def _append_one_v2(self, buf: memoryview, h: tuple, now: int, origin_client: bool) -> AppendInfo | None:
        """`append` for what producers send: one v2 batch whose codec the topic keeps. The same checks in
        the same order as the general loop, with the header unpacked once; the caller's bytes are written
        as they are behind a patched copy of the 61-byte header (a copy of the whole batch only when the
        max timestamp must change, which the CRC covers, or when it is so small that one copy and one
        pwrite cost less than a two-part pwritev). `h` is its unpacked header. None when the topic
        recompresses (the general loop does that)."""
        attributes = h[5]
        with self.lock:
            if self._closed:
                raise KafkaError("log is closed")
            cfg = self.config
            topic_codec = _topic_codec(cfg.compression_type)
            if topic_codec is not None and topic_codec != attributes & COMPRESSION_MASK:
                return None
            # DefaultRecordBatch.ensureValid, then LogValidator.validateBatch
            computed = crc32c(buf[ATTRIBUTES_OFFSET:])
            if computed != h[4]:
                raise CorruptMessageError(f"batch at offset {h[0]}: CRC mismatch (stored {h[4]}, computed "
                                          f"{computed})")
            if h[12] < 0 or h[6] < 0:
                raise InvalidRecordError(f"batch at offset {h[0]}: negative record count or delta")
            _check_offset_range(h[6], h[12])
            if len(buf) > cfg.max_message_bytes:
                raise MessageTooLargeError(f"batch of {len(buf)} bytes exceeds max.message.bytes "
                                           f"{cfg.max_message_bytes}")
            if origin_client and h[0] != 0:  # UnifiedLog.analyzeAndValidateRecords (v2 only)
                raise InvalidRecordError(_base_offset_message(self.topic, self.partition, h[0]))
            if attributes & CONTROL_MASK and origin_client:
                raise InvalidRecordError("clients may not write control batches")
            if origin_client and h[9] >= 0 and h[11] < 0:  # LogValidator.validateBatch
                raise InvalidRecordError(f"invalid sequence number {h[11]} in a batch of producer {h[9]}")
            if cfg.compacted and not attributes & CONTROL_MASK:
                self._check_keys(RecordBatch(buf))
            lo, batch_max, n_records = scan_batch_timestamps(buf, h)
            log_append = cfg.log_append_time
            self._validate_timestamps(buf, lo, batch_max, now, attributes)
            idempotent = h[9] >= 0 and not attributes & CONTROL_MASK
            if idempotent and origin_client:
                retry = self._retried(h[9], h[10], h[11], h[6])
                if retry is not None:
                    return retry
                self.producers.check_transactional(h[9], bool(attributes & TRANSACTIONAL_MASK))
            offset = self._next_offset
            wrong_max = h[8] != batch_max or attributes & TIMESTAMP_TYPE_MASK
            if log_append or wrong_max or len(buf) < _COPY_BELOW:
                data = bytearray(buf)  # a copy: the CRC covers the max timestamp (patch, re-checksum), or small
                head = None
                if log_append:
                    set_max_timestamp(data, 0, TimestampType.LOG_APPEND_TIME, now)
                    batch_max = now
                elif wrong_max:
                    set_max_timestamp(data, 0, TimestampType.CREATE_TIME, batch_max)
                _BASE_AND_EPOCH.pack_into(data, 0, offset, h[1], LEADER_EPOCH)
            else:
                data = buf
                head = bytearray(buf[:HEADER_SIZE])  # base offset and leader epoch are outside the CRC
                _BASE_AND_EPOCH.pack_into(head, 0, offset, h[1], LEADER_EPOCH)
            last = offset + n_records - 1
            max_ts, offset_of_max = (batch_max, last) if batch_max > -1 else (-1, -1)
            if len(buf) > cfg.segment_bytes:
                raise RecordListTooLargeError(f"{len(buf)} bytes exceed segment.bytes {cfg.segment_bytes}")
            with self._writing():
                self._maybe_roll(len(buf), max_ts, last, now)
                self._append_active(n_records, last, max_ts, offset_of_max, data, batch_max if log_append else lo,
                                    head=head)
            self._next_offset = last + 1
            self._check_retention_on_arrival(max_ts, now)
            if idempotent:
                self.producers.update(h[9], h[10], h[11], offset, last, batch_max,
                                      bool(attributes & TRANSACTIONAL_MASK))
            self._unflushed_messages += n_records
            if self._unflushed_messages >= cfg.flush_messages:
                self._flushed()
            return AppendInfo(offset, last, max_ts, offset_of_max, now if log_append else -1,
                              self.log_start_offset, n_records)

    def _check_keys(self, batch: RecordBatch) -> None:
        """`LogValidator.validateKey`: the cleaner keeps records by key, so a compacted topic refuses one
        without (INVALID_RECORD, the whole batch)."""
        for record in batch.records():
            if record.key is None:
                raise InvalidRecordError(f"Compacted topic cannot accept message without key in topic partition "
                                         f"{self.topic}-{self.partition}.")

    def _check_retention_on_arrival(self, max_ts: int, now: int) -> None:
        """Records that time retention deletes at its next check are named in a warning now, not found
        missing later (`storage.retention.ExpiredArrivals`)."""
        cfg = self.config
        if 0 <= cfg.retention_ms < now - max_ts and max_ts >= 0 and cfg.deletes \
                and not cfg.log_append_time:
            self._expired_arrivals.note(self.topic, self.partition, max_ts, now, cfg.retention_ms)

    def _validate_timestamps(self, batch, lo: int, batch_max: int, now: int, attributes: int | None = None) -> None:
        """LogValidator.validateTimestamp for a client's batch, with its record errors (KIP-467). The
        batch's smallest and largest timestamps decide whether any record is out of bounds (bounds are
        inclusive; -1, no timestamp, bypasses them); only then are the records walked to name each one.
        A producer may not set the LogAppendTime bit: on a LogAppendTime topic every record is refused, on a
        CreateTime topic those without a timestamp (Kafka reads a LogAppendTime batch's records as stamped
        with its max timestamp, so it is that value that is checked). `batch`: a RecordBatch or the bytes
        of one v2 batch (then `attributes` is its header's)."""
        cfg = self.config
        if attributes is None:
            attributes = batch.attributes if batch.magic == 2 else 0
        producer_lat = bool(attributes & TIMESTAMP_TYPE_MASK)
        before, after = cfg.message_timestamp_before_max_ms, cfg.message_timestamp_after_max_ms

        def out_of_bounds(ts: int) -> bool:
            return ts != -1 and (now - ts > before or ts - now > after)

        if cfg.log_append_time:
            if not producer_lat:
                return
        elif not producer_lat and not out_of_bounds(lo) and not out_of_bounds(batch_max) and \
                not (lo == -1 and batch_max != -1):
            return
        if not isinstance(batch, RecordBatch):
            batch = RecordBatch(bytearray(batch))
        errors: list[tuple[int, str]] = []
        for index, rec in enumerate(batch.records()):
            ts = batch.max_timestamp if producer_lat else rec.timestamp
            if not cfg.log_append_time and ts != -1:
                if out_of_bounds(ts):
                    errors.append((index, f"Timestamp {ts} of message with offset {rec.offset} is out of range. "
                                          f"The timestamp should be within [{now - before}, {now + after}]"))
            elif producer_lat:
                errors.append((index, f"Invalid timestamp type in message with offset {rec.offset}. Producer "
                                      "should not set timestamp type to LogAppendTime."))
        if errors:
            exc = InvalidTimestampError("One or more records have been rejected due to invalid timestamp")
            exc.record_errors = tuple(errors)
            raise exc

    # -- I/O errors (docs/reliability.md, "Disk full and I/O errors") --------------------------------
    _failure: OSError | None = None  # the write failure of the current incident; None: writes are healthy
    _retry_at = 0.0                   # monotonic time from which the next append may try the disk again
    write_retry_ms = WRITE_RETRY_MS

    _guard: _WriteGuard

    def _writing(self) -> _WriteGuard:
        """Around every write an append makes (`with self._writing():`). An `OSError` inside becomes
        KAFKA_STORAGE_ERROR (Kafka's answer when `LogDirFailureChannel` took the log dir offline), logged
        once per incident; the writer has already cut its file back, so nothing of the failed append stays
        or is acknowledged. Until `write_retry_ms` has passed appends are refused without touching the disk;
        then one tries again, and the first that succeeds ends the incident with an INFO line. Reads never
        stop."""
        return self._guard

    def _refuse_while_failing(self) -> None:
        if time.monotonic() < self._retry_at:
            raise KafkaStorageErrorError(f"{self.topic}-{self.partition}: writes are failing "
                                         f"({describe(self._failure)}); retried every {self.write_retry_ms} ms")

    def _writes_resumed(self) -> None:
        disk_log.info("%s-%d: writes resumed at offset %d (%d bytes free in %s)", self.topic, self.partition,
                      self._next_offset, free_bytes(self.dir), self.dir.parent)
        self._failure = None

    def write_failed(self, exc: OSError) -> KafkaStorageErrorError:
        """Start or continue an incident (see `_writing`): one ERROR line when it starts."""
        first = self._failure is None
        self._failure = exc
        self._retry_at = time.monotonic() + self.write_retry_ms / 1000.0
        where = exc.filename or self.dir
        message = (f"{self.topic}-{self.partition}: write to {where} failed: {describe(exc)}; "
                   f"{free_bytes(self.dir)} bytes free in {self.dir.parent}")
        if first:
            disk_log.error("%s. Appends get KAFKA_STORAGE_ERROR and try again every %d ms; reads go on", message,
                           self.write_retry_ms)
        # The client is told what failed, not where the broker keeps its files.
        return KafkaStorageErrorError(f"{self.topic}-{self.partition}: write failed ({describe(exc)})")

    def _append_active(self, count: int, *args, **kwargs) -> None:
        """`LogSegment.append` to the active segment and, when `flush.messages` is reached, the fsync, before
        anything is acknowledged: if the fsync fails the append is taken back too."""
        seg = self.active
        mark = seg.write_mark()
        seg.append(*args, **kwargs)
        if self._unflushed_messages + count >= self.config.flush_messages:
            try:
                self._fsync_unflushed()
            except BaseException:
                with contextlib.suppress(OSError):  # (a cut that failed is made by the next append or the close)
                    seg.undo_to(mark)
                raise
    # -- transactions -------------------------------------------------------------------------------
    def append_control(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, *,
                       now: int | None = None) -> AppendInfo:
        """Write a transaction's COMMIT or ABORT marker for this partition (`UnifiedLog.appendAsLeader`
        with origin COORDINATOR of `MemoryRecords.withEndTransactionMarker`): the producer's open
        transaction ends, an aborted one goes into the active segment's `.txnindex` with the LSO just
        after it, and the LSO moves on. A marker below the producer's epoch is INVALID_PRODUCER_EPOCH, below
        the last marker's coordinator epoch TRANSACTION_COORDINATOR_FENCED; nothing is written then. A
        marker for a producer with no open transaction here is written and changes only its epochs, as in
        Kafka."""
        if not self.writable:
            raise KafkaError("log is read-only")
        now = self.clock() if now is None else now
        with self.lock:
            if self._closed:
                raise KafkaError("log is closed")
            self.producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
            offset = self._next_offset
            marker = EndTxnMarker(ControlType.COMMIT if commit else ControlType.ABORT, coordinator_epoch)
            data = build_control_batch(producer_id, producer_epoch, marker, now, base_offset=offset,
                                       partition_leader_epoch=LEADER_EPOCH)
            if self.config.log_append_time:
                data = bytearray(data)
                set_max_timestamp(data, 0, TimestampType.LOG_APPEND_TIME, now)
            done = self.producers.completed_by_marker(producer_id, offset, commit)
            # A failed write (the marker's or its abort's `.txnindex` entry): KAFKA_STORAGE_ERROR, both cut back,
            # the coordinator retries. Never a marker without its entry: read_committed readers would see the
            # aborted records until the segment was recovered.
            with self._writing():
                self._maybe_roll(len(data), now, offset, now)
                segment = self.active
                mark = segment.write_mark()
                self._append_active(1, offset, now, offset, data, now)
                if done is not None and done[0].is_aborted:
                    try:
                        segment.txn_index.append(AbortedTxn(producer_id, done[0].first_offset, offset, done[1]))
                    except BaseException:
                        with contextlib.suppress(OSError):  # (a cut that failed is made by the next append)
                            segment.undo_to(mark)
                        raise
            self._next_offset = offset + 1
            self.producers.apply_marker(producer_id, producer_epoch, coordinator_epoch, offset, now, commit)
            self._unflushed_messages += 1
            if self._unflushed_messages >= self.config.flush_messages:
                self._flushed()
            return AppendInfo(offset, offset, now, offset, now if self.config.log_append_time else -1,
                              self.log_start_offset, 1)

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction, not below the log start offset
        (`UnifiedLog.maybeIncrementFirstUnstableOffset`); None when none is open."""
        with self.lock:
            self._ensure_producers()
            first = self.producers.first_undecided_offset()
            return None if first is None else max(first, self.log_start_offset)

    @property
    def last_stable_offset(self) -> int:
        """`UnifiedLog.lastStableOffset`: the first unstable offset when it is below the high watermark, else
        the high watermark. read_committed readers see nothing at or past it."""
        with self.lock:
            first = self.first_unstable_offset
            hw = self.high_watermark
            return first if first is not None and first < hw else hw

    def aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions overlapping [start_offset,
        upper_bound_offset): what a read_committed fetch returns, so the consumer drops those producers'
        records from each first offset up to their ABORT marker."""
        return [(t.producer_id, t.first_offset) for t in self.aborted_txns(start_offset, upper_bound_offset)]

    def aborted_txns(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [start_offset, upper_bound_offset) as whole `.txnindex`
        entries, from the segment holding `start_offset` on until an entry's last stable offset reaches the
        bound (`LocalLog.collectAbortedTransactions`)."""
        with self.lock:
            found: list[AbortedTxn] = []
            for seg in self.segments[self._segment_for(start_offset):]:
                txns, complete = seg.txn_index.collect(start_offset, upper_bound_offset)
                found.extend(txns)
                if complete:
                    break
            return found

    def aborted_ranges(self, start_offset: int, upper_bound_offset: int) -> list[tuple[int, int, int]]:
        """(producer id, first offset, last offset) of each aborted transaction overlapping the range: an
        offline read_committed reader drops that producer's transactional batches with first <= base
        offset < last (the last is the ABORT marker's offset), and every control batch."""
        return [(t.producer_id, t.first_offset, t.last_offset)
                for t in self.aborted_txns(start_offset, upper_bound_offset)]

    def ongoing_transactions(self) -> list[tuple[int, int, int]]:
        """(producer id, producer epoch, first offset) of each open transaction, oldest first."""
        with self.lock:
            self._ensure_producers()
            states = self.producers
            return sorted(((pid, states.producers[pid].epoch, first) for pid, first in states.ongoing.items()),
                          key=lambda t: t[2])

    def producer_entries(self) -> list[ProducerInfo]:
        """The partition's producers as DescribeProducers (KIP-664) reports them; also `producers()`."""
        with self.lock:
            self._ensure_producers()
            return self.producers()

    def append_raw_for_test(self, data: bytes) -> None:
        """Write bytes without validation (to build fixtures such as torn tails)."""
        with self.lock:
            os.pwrite(self.active._fd, data, self.active.size)
            self.active.size += len(data)

    def _maybe_roll(self, size: int, max_ts: int, last_offset: int, now: int) -> None:
        cfg = self.config
        seg = self.active
        if seg.should_roll(segment_bytes=cfg.segment_bytes, segment_ms=cfg.segment_ms, jitter_ms=self._jitter,
                           max_timestamp=max_ts, last_offset=last_offset, messages_size=size, now_ms=now,
                           created_ms=self._segment_created_ms.get(seg.base_offset, now)):
            self.roll()

    def roll(self) -> LogSegment:
        """Close the active segment for appends and start a new one at the log end offset."""
        with self.lock:
            if self.active.size == 0 and self.active.base_offset == self._next_offset:
                return self.active
            self.active.on_become_inactive()  # also writes its minima sidecar
            self.active.flush()
            self._snapshot_producers()  # at the new segment's base offset, as Kafka's roll does
            seg = self._new_segment_or_nothing(self._next_offset)
            self.active.is_last = False
            self.active._offset_limit_after = seg.base_offset
            self.segments.append(seg)
            self._segments_version += 1
            self._jitter = self._new_jitter()
            return seg

    def _new_segment_or_nothing(self, base: int) -> LogSegment:
        """A new segment for a roll, tracking its minima; when its files cannot be made, those it made are
        removed (a later roll starts afresh) and the error goes on. The old active segment stays last: its
        indexes are trimmed, so the next append tries the roll again."""
        names = [self.dir / segment_name(base, s) for s in (LOG_SUFFIX, ".index", ".timeindex")]
        existed = [p.exists() for p in names]
        seg = None
        try:
            seg = self._new_segment(base)
            seg.start_minima()
            return seg
        except BaseException:
            if seg is not None:
                seg.close_for_delete()
            for path, was in zip(names, existed, strict=True):
                if not was:
                    with contextlib.suppress(OSError):
                        path.unlink()
            raise

    # -- reads --------------------------------------------------------------------------------------
    def _segment_for(self, offset: int) -> int:
        lo, hi = 0, len(self.segments) - 1
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if self.segments[mid].base_offset <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def read(self, start_offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_message: bool = True) -> ReadSlice | None:
        """Whole batches from the first one holding `start_offset`, up to `max_bytes` (at least one batch
        with `min_one_message`, as KIP-74). None at the log end. Found from batch headers and the offset
        index (`LogSegment.fetch_range`), so serving a fetch never parses records nor reads the bytes
        twice; segments with corrupt ranges take the batch-parsing path, which steps over them."""
        with self.lock:
            if start_offset < self.log_start_offset or start_offset > self._next_offset:
                raise OffsetOutOfRangeError(f"offset {start_offset} is outside [{self.log_start_offset}, "
                                            f"{self._next_offset}] for {self.topic}-{self.partition}")
            limit = self._next_offset if max_offset is None else min(max_offset, self._next_offset)
            if start_offset >= limit:
                return None
            for i in range(self._segment_for(start_offset), len(self.segments)):
                seg = self.segments[i]
                whole = limit >= (self.segments[i + 1].base_offset if i + 1 < len(self.segments)
                                  else self._next_offset)
                found = seg.fetch_range(start_offset, max_bytes, None if whole else limit, min_one_message)
                if found is False:
                    return self._read_parsing(seg, start_offset, max_bytes, limit, min_one_message)
                if found is None:
                    continue  # no batch at or after `start_offset` here: the next segment has it
                pos, size, first = found
                after = self.segments[i + 1].base_offset if i + 1 < len(self.segments) else self._next_offset
                return ReadSlice(seg.log_path, pos, size, first, seg, after) if size else None
            return None

    def _read_parsing(self, seg: LogSegment, start_offset: int, max_bytes: int, limit: int,
                      min_one_message: bool) -> ReadSlice | None:
        """`read` through parsed batches, for segments whose corrupt ranges must be stepped over."""
        for i in range(self.segments.index(seg), len(self.segments)):
            seg = self.segments[i]
            found = seg.translate_offset(start_offset)
            if found is None:
                continue
            pos, first_batch = found
            size = 0
            for _p, batch in seg.batches_from(pos):
                if _p != pos + size:
                    break  # a corrupt range lies between: one slice must be contiguous bytes
                if batch.base_offset >= limit and size > 0:
                    break
                if size + batch.size_in_bytes > max_bytes and (size > 0 or not min_one_message):
                    break
                size += batch.size_in_bytes
            if size == 0:
                return None
            after = self.segments[i + 1].base_offset if i + 1 < len(self.segments) else self._next_offset
            return ReadSlice(seg.log_path, pos, size, first_batch.base_offset, seg, after)
        return None

    def read_records(self, start_offset: int, end_offset: int | None = None, *,
                     isolation: str = "read_uncommitted") -> Iterator[Record]:
        """Records with start_offset <= offset < end_offset (tools and tests; decodes everything), as a
        Kafka consumer with this `isolation.level` returns them: control batches are never records;
        read_committed stops at the last stable offset and drops aborted transactions' records."""
        start = max(start_offset, self.log_start_offset)
        for batch in self.read_data_batches(start, end_offset, isolation=isolation):
            for rec in batch.records():
                if start <= rec.offset and (end_offset is None or rec.offset < end_offset):
                    yield rec

    def read_data_batches(self, start_offset: int, end_offset: int | None = None, *,
                          isolation: str = "read_uncommitted") -> Iterator:
        """`read_batches` as a consumer sees them: no control batches, and under read_committed nothing
        from the last stable offset on and no batch of an aborted transaction (the `.txnindex` entries
        overlapping the range, `aborted_txns`)."""
        check_isolation(isolation)
        start = max(start_offset, self.log_start_offset)
        end = self._next_offset if end_offset is None else min(end_offset, self._next_offset)
        dropped = AbortedFilter([])
        if isolation == READ_COMMITTED:
            end = min(end, self.last_stable_offset)
            if start < end:
                dropped = AbortedFilter(self.aborted_txns(start, end))
        for batch in self.read_batches(start, end):
            if isinstance(batch, RecordBatch):
                if batch.is_control:
                    continue
                if dropped and batch.is_transactional and dropped.is_aborted(batch.producer_id, batch.base_offset):
                    continue
            yield batch

    def read_batches(self, start_offset: int, end_offset: int | None = None) -> Iterator:
        """Batches overlapping [start_offset, end_offset), in offset order, straight from the files."""
        with self.lock:
            end = self._next_offset if end_offset is None else min(end_offset, self._next_offset)
            start = max(start_offset, self.log_start_offset)
            segments = list(self.segments)
        for i in range(len(segments)):
            seg = segments[i]
            nxt = segments[i + 1].base_offset if i + 1 < len(segments) else None
            if nxt is not None and nxt <= start:
                continue
            if seg.base_offset >= end:
                break
            found = seg.translate_offset(start)
            if found is None:
                continue
            # Where the range ends inside this segment, the offset index bounds the bytes to read (a reader
            # from an object store fetches the range, not the rest of the segment).
            stop = seg.offset_index.position_after(end - 1) if nxt is None or end < nxt else None
            for _pos, batch in seg.batches_from(found[0], stop):
                if batch.base_offset >= end:
                    return
                yield batch

    def corrupt_ranges(self) -> list:
        """Corrupt byte ranges found so far (by recovery or by reads), oldest segment first."""
        with self.lock:
            return [r for seg in self.segments for r in seg.corrupt_ranges]

    # -- time ---------------------------------------------------------------------------------------
    def offset_for_timestamp(self, timestamp: int) -> FoundTimestamp | None:
        """`UnifiedLog.fetchOffsetByTimestamp`: the first record with timestamp >= target, found in the
        first segment whose largest timestamp is >= target; the specials -1 latest, -2 earliest,
        -3 max timestamp, -4 earliest local. None when nothing qualifies (ListOffsets answers -1/-1)."""
        with self.lock:
            if timestamp == EARLIEST_TIMESTAMP:
                return FoundTimestamp(-1, self.log_start_offset, LEADER_EPOCH)
            if timestamp == EARLIEST_LOCAL_TIMESTAMP:
                return FoundTimestamp(-1, self.local_log_start_offset, LEADER_EPOCH)
            if timestamp == LATEST_TIMESTAMP:
                return FoundTimestamp(-1, self._next_offset, LEADER_EPOCH)
            if timestamp == MAX_TIMESTAMP:
                return self._max_timestamp_entry()
            if timestamp < 0:
                # Includes -5 LATEST_TIERED and -6 EARLIEST_PENDING_UPLOAD: they need ListOffsets v9/v11, above
                # what chronolog speaks, so Kafka's version gate (ReplicaManager) answers UNSUPPORTED_VERSION.
                raise UnsupportedVersionError(f"unsupported special timestamp {timestamp}")
            seg = self._first_segment_reaching(timestamp)
            if seg is None:
                return None
            found = seg.find_offset_by_timestamp(timestamp, self.log_start_offset, tables=TIME_TABLES,
                                                 key=self._time_tables_key())
            if found is None:
                # A read-only copy's time index may name a batch that fails its CRC (recovery would have
                # dropped it from the index), and on a compacted topic the segment's largest timestamp may
                # be an empty batch's, whose records the cleaner removed: the answer is then in a later
                # segment (Kafka answers none there).
                for later in self.segments[self.segments.index(seg) + 1:]:
                    if later.max_timestamp_so_far >= timestamp:
                        found = later.find_offset_by_timestamp(timestamp, self.log_start_offset,
                                                               tables=TIME_TABLES, key=self._time_tables_key())
                        if found is not None:
                            break
            return found

    def _time_tables_key(self) -> tuple[int, int]:
        """This log's bytes as the shared per-batch timestamp tables know them: a token of this object
        and the segment version, which every truncation, deletion and roll bumps."""
        token = getattr(self, "_time_tables_token", None)
        if token is None:
            token = self._time_tables_token = next(_LOG_TOKENS)
        return token, self._segments_version

    def _first_segment_reaching(self, timestamp: int) -> LogSegment | None:
        """First segment whose largest timestamp is >= target (Kafka's linear `find`), found by bisecting
        the running maximum of the inactive segments' largest timestamps, cached until they change."""
        inactive = self.segments[:-1]
        key = self._segments_version
        if getattr(self, "_prefix_key", None) != key:
            prefix, running = [], -1
            for seg in inactive:
                if seg.max_timestamp_so_far >= 0:
                    running = max(running, seg.largest_timestamp)
                prefix.append(running)
            self._prefix, self._prefix_key = prefix, key
        i = bisect.bisect_left(self._prefix, timestamp)
        if i < len(inactive):
            return inactive[i]
        active = self.segments[-1]
        if active.max_timestamp_so_far >= 0 and active.largest_timestamp >= timestamp:
            return active
        return None

    def _max_timestamp_entry(self) -> FoundTimestamp | None:
        best = None
        for seg in self.segments:
            if seg.max_timestamp_so_far >= 0 and (best is None or seg.max_timestamp_so_far > best.max_timestamp_so_far):
                best = seg
        if best is None:
            # No record has a timestamp: UnifiedLog's maxBy(maxTimestampSoFar) takes the first segment (its
            # max is -1), whose first batch of max timestamp -1 answers its first record, timestamp -1; an
            # empty log has no batch, so no answer (-1/-1).
            for seg in self.segments:
                found = seg.find_offset_by_timestamp(-1, self.log_start_offset)
                if found is not None:
                    return found
            return None
        target = best.max_timestamp_so_far
        found = best.find_offset_by_timestamp(target, self.log_start_offset, tables=TIME_TABLES,
                                              key=self._time_tables_key())
        return found if found is not None else FoundTimestamp(target, best.offset_of_max_timestamp_so_far,
                                                              LEADER_EPOCH)

    # -- retention, deletion, truncation -----------------------------------------------------------
    def delete_old_segments(self, now: int | None = None) -> int:
        """`UnifiedLog.deleteOldSegments` in Kafka's order (KAFKA-12177): segments below the log start offset
        first, then retention.bytes (measured after them), then retention.ms; without the delete policy only
        the first, so DeleteRecords frees space on a compacted topic too."""
        now = self.clock() if now is None else now
        cfg = self.config
        deleted = self._delete_segments(lambda s, n: n is not None and n.base_offset <= self.log_start_offset,
                                        now, "log start offset")
        if not cfg.deletes:
            return deleted
        if cfg.retention_bytes >= 0:
            diff = self.size - cfg.retention_bytes
            if diff > 0:
                state = {"diff": diff}

                def breached(seg: LogSegment, _nxt: LogSegment | None) -> bool:
                    if state["diff"] - seg.size >= 0:
                        state["diff"] -= seg.size
                        return True
                    return False
                deleted += self._delete_segments(breached, now, "retention.bytes")
        if cfg.retention_ms >= 0:
            deleted += self._delete_segments(lambda s, n: now - s.largest_timestamp > cfg.retention_ms, now,
                                             "retention.ms")
        return deleted

    def _delete_segments(self, predicate, now: int, reason: str) -> int:
        with self.lock:
            deletable = []
            for i, seg in enumerate(self.segments):
                nxt = self.segments[i + 1] if i + 1 < len(self.segments) else None
                upper = nxt.base_offset if nxt is not None else self._next_offset
                last_and_empty = nxt is None and seg.size == 0
                if self.high_watermark >= upper and not last_and_empty and predicate(seg, nxt):
                    deletable.append(seg)
                else:
                    if (reason == "retention.ms" and seg.max_timestamp_so_far > now
                            and now - seg.largest_timestamp <= self.config.retention_ms):
                        log.warning("%s-%d: retention is blocked by segment %s whose largest timestamp %d is "
                                    "in the future (now %d)", self.topic, self.partition, seg.log_path.name,
                                    seg.max_timestamp_so_far, now)
                    break
            if not deletable:
                return 0
            log_deletions(f"[UnifiedLog partition={self.topic}-{self.partition}, dir={self.dir.parent}] ", reason,
                          deletable, retention_ms=self.config.retention_ms,
                          retention_bytes=self.config.retention_bytes, size_before=self.size,
                          log_start_offset=self.log_start_offset)
            if len(deletable) == len(self.segments):
                self.roll()
            for seg in deletable:
                self.segments.remove(seg)
                self._schedule_delete(seg)
                delete_snapshot(self.dir, seg.base_offset)  # the snapshot taken when it was rolled in
            self._segments_version += 1
            self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
            log.info("%s-%d: deleted %d segment(s) by %s; log start offset %d", self.topic, self.partition,
                     len(deletable), reason, self.log_start_offset)
            return len(deletable)

    def _schedule_delete(self, seg: LogSegment) -> None:
        """Rename to `.deleted` now and remove after `file.delete.delay.ms` (`LocalLog.deleteSegmentFiles`)."""
        seg.close_for_delete()
        renamed = []
        for path in seg.files():
            if path.exists():
                target = path.with_name(path.name + DELETED_SUFFIX)
                os.replace(path, target)
                renamed.append(target)

        self.remove_after_delay(renamed)

    def remove_after_delay(self, paths: list[Path]) -> None:
        """Remove renamed `.deleted` files once `file.delete.delay.ms` has passed on the log's clock
        (Kafka schedules `LocalLog.deleteSegmentFiles` on its `Scheduler`, whose time tests mock). Files
        still waiting when the broker stops are removed when the log is next loaded, as in Kafka."""
        delay = self.config.file_delete_delay_ms
        if delay <= 0:
            _unlink_all(paths)
            return
        with self._deletion_lock:
            self._due_deletions.append((self.clock() + delay, list(paths)))
        self._arm_deletion_timer(delay)

    def delete_due_files(self, now: int | None = None) -> int:
        """Remove the `.deleted` files whose delay has passed at `now` (default: the log's clock); returns
        how many files were removed. The timer calls it; tests call it after moving their clock."""
        now = self.clock() if now is None else now
        with self._deletion_lock:
            due = [paths for at, paths in self._due_deletions if at <= now]
            self._due_deletions = [(at, paths) for at, paths in self._due_deletions if at > now]
        for paths in due:
            _unlink_all(paths)
        return sum(len(paths) for paths in due)

    def _arm_deletion_timer(self, delay_ms: int) -> None:
        with self._deletion_lock:
            if self._deletion_timer is not None or self._closed:
                return  # the armed timer re-arms itself for what is still waiting
            timer = threading.Timer(max(delay_ms, 1) / 1000.0, self._on_deletion_timer)
            timer.daemon = True
            self._deletion_timer = timer
        timer.start()

    def _on_deletion_timer(self) -> None:
        with self._deletion_lock:
            self._deletion_timer = None
        self.delete_due_files()
        with self._deletion_lock:
            if not self._due_deletions:
                return
            wait = min(at for at, _ in self._due_deletions) - self.clock()
        self._arm_deletion_timer(wait)

    def _cancel_deletion_timer(self) -> None:
        with self._deletion_lock:
            timer, self._deletion_timer = self._deletion_timer, None
        if timer is not None:
            timer.cancel()

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: raise the log start offset (`UnifiedLog.deleteRecordsOnLeader`)."""
        with self.lock:
            if not self.config.deletes:  # ReplicaManager.deleteRecordsOnLocalLog
                raise PolicyViolationError(f"Records of partition {self.topic}-{self.partition} can not be "
                                           "deleted due to the configured policy")
            if offset == -1:
                offset = self.high_watermark
            if offset > self.high_watermark or offset < 0:
                raise OffsetOutOfRangeError(f"cannot delete before {offset}: high watermark {self.high_watermark}")
            if offset > self.log_start_offset:
                self.log_start_offset = offset
                self._delete_segments(lambda s, n: n is not None and n.base_offset <= offset, self.clock(),
                                      "delete records")
            return self.log_start_offset

    def truncate_to(self, offset: int) -> None:
        """Remove everything at and after `offset` (`LocalLog.truncateTo`): segments based above it go, the
        one left active drops every batch whose last offset is >= `offset` (so a cut inside a batch removes
        the whole batch), and the log end offset becomes `offset`, as in Kafka."""
        with self.lock:
            if offset >= self._next_offset:
                return
            while len(self.segments) > 1 and self.segments[-1].base_offset > offset:
                seg = self.segments.pop()
                self._schedule_delete(seg)
            self.active.is_last = True
            self.active.resume_minima()  # an inactive segment becoming active takes its sidecar as a tracker
            self.active.drop_minima_file()
            self.active.truncate_to(offset)
            self.active.truncate_minima()
            self.active.make_active()
            self._segments_version += 1
            if self.active.size == 0:
                self._segment_created_ms[self.active.base_offset] = self.clock()  # LogSegment.truncateTo
            self._next_offset = max(offset, self.active.base_offset)
            self.log_start_offset = min(self.log_start_offset, self._next_offset)
            self.recovery_point = min(self.recovery_point, self._next_offset)
            self._load_producers(self.clock())  # `ProducerStateManager.truncateAndReload`

    # -- flush and close ----------------------------------------------------------------------------
    def flush(self) -> None:
        with self.lock:
            self._fsync_unflushed()
            self._flushed()

    def _fsync_unflushed(self) -> None:
        for seg in self.segments:
            if seg.base_offset >= self._segment_base_of(self.recovery_point) or seg is self.active:
                seg.flush()

    def _flushed(self) -> None:
        self.recovery_point = self._next_offset
        self._unflushed_messages = 0
        self._last_flush_ms = self.clock()

    def _segment_base_of(self, offset: int) -> int:
        return self.segments[self._segment_for(offset)].base_offset

    def maybe_flush(self, now: int | None = None) -> None:
        now = self.clock() if now is None else now
        if self._unflushed_messages and now - self._last_flush_ms >= self.config.flush_ms:
            self.flush()

    def close(self, *, sync: bool = True) -> None:
        """Flush, snapshot the producers at the log end and close every segment (`UnifiedLog.flush(true)`
        then `close`, as `LogManager.shutdown` runs them).

        With `sync` False nothing is fsynced here and the recovery point stays where the last flush left it:
        the caller (the manager's clean stop) makes the whole data dir durable with one `syncfs` and then
        calls `closed_durably`; if that sync fails, the checkpoint keeps the old recovery point and the next
        start recovers from it."""
        with self.lock:
            if self._closed:
                return
            if self.writable:
                if sync:
                    try:
                        self.flush()
                    except OSError as exc:
                        # The stop goes on (every file is still closed); the caller leaves out the clean-shutdown
                        # marker, so the next start recovers from the last checkpointed recovery point.
                        self.closed_cleanly = False
                        disk_log.error("%s-%d: flush at close failed: %s; the next start recovers the log",
                                       self.topic, self.partition, describe(exc))
                self._snapshot_producers(sync=sync)  # at the log end, as Kafka's close does
            for seg in self.segments:
                try:
                    seg.close(sync=sync)
                except OSError as exc:
                    self.closed_cleanly = False
                    disk_log.error("%s-%d: closing %s failed: %s; the next start recovers the log", self.topic,
                                   self.partition, seg.log_path.name, describe(exc))
                    seg.close_for_delete()  # the descriptors at least
            self._closed = True
        self._cancel_deletion_timer()

    closed_cleanly = True  # False once `close` could not flush or trim everything

    def closed_durably(self) -> None:
        """After `close(sync=False)` and a successful sync of the file system by the caller: every byte
        of the log is on disk, so the recovery point is the log end (what the flush at close would have
        made it). Nothing changes for a log whose close failed."""
        with self.lock:
            if self._closed and self.closed_cleanly and self.writable:
                self._flushed()

    def delete(self) -> None:
        """Remove the partition's files (DeleteTopics)."""
        import shutil
        with self.lock:
            for seg in self.segments:
                seg.close_for_delete()
            self._closed = True
            self._cancel_deletion_timer()
            shutil.rmtree(self.dir, ignore_errors=True)


def _unlink_all(paths: list[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


class _WriteGuard:
    """`PartitionLog._writing`: one object per log, cheaper than a generator context manager per append."""

    __slots__ = ("log",)

    def __init__(self, plog: PartitionLog) -> None:
        self.log = plog

    def __enter__(self) -> None:
        if self.log._failure is not None:
            self.log._refuse_while_failing()

    def __exit__(self, kind, exc, tb) -> bool:
        if exc is None:
            if self.log._failure is not None:
                self.log._writes_resumed()
        elif isinstance(exc, OSError):
            raise self.log.write_failed(exc) from exc
        return False


@functools.lru_cache(maxsize=16)
def _topic_codec(name: str) -> CompressionType | None:
    """The codec a topic's `compression.type` imposes; None for `producer` (keep the producer's)."""
    return None if name == "producer" else CompressionType.from_name(name)


_BASE_AND_EPOCH = struct.Struct(">qii")  # baseOffset, batchLength (rewritten as is), partitionLeaderEpoch
# Below this size a producer's batch is copied and patched for one pwrite: about 1 us cheaper than a pwritev
# of a patched header and the rest at 1 KiB; from about 4 KiB the copy costs more.
_COPY_BELOW = 2048


def _base_offset_message(topic: str, partition: int, base_offset: int) -> str:
    return f"The baseOffset of the record batch in the append to {topic}-{partition} should be 0, but it is {base_offset}"


def _check_offset_range(last_offset_delta: int, count: int) -> None:
    """`LogValidator.validateBatch`: a v2 batch's offset range must match its record count."""
    if last_offset_delta + 1 != count:
        raise InvalidRecordError(f"Inconsistent batch offset range [0, {last_offset_delta}] and count of "
                                 f"records {count}")
