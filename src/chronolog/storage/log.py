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

import contextlib
import logging
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from chronolog.config import TopicConfig
from chronolog.diskio import describe, disk_log, free_bytes
from chronolog.errors import (
    CorruptMessageError,
    InvalidRecordError,
    KafkaError,
    KafkaStorageErrorError,
    RecordListTooLargeError,
    UnsupportedVersionError,
)
from chronolog.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    LegacyBatch,
    RecordBatch,
    TimestampType,
    iter_batches,
    set_base_offset,
    set_max_timestamp,
    set_partition_leader_epoch,
    upconvert_to_v2,
)
from chronolog.records.batch import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
)
from chronolog.records.control import ControlType, EndTxnMarker, build_control_batch
from chronolog.storage import loader, time_lookup
from chronolog.storage.basics import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    LEADER_EPOCH,
    MAX_TIMESTAMP,
    FoundTimestamp,
    now_ms,
    parse_log_dir_name,
)
from chronolog.storage.local_log import (
    LocalLog,
)
from chronolog.storage.producers import (
    ProducerInfo,
    ProducerStates,
    increment_sequence,
    snapshot_path,
)
from chronolog.storage.readonly import ReadOnlyFiles
from chronolog.storage.retention import DelayedDeletions, ExpiredArrivals, LogRetention
from chronolog.storage.segment import (
    LogSegment,
)
from chronolog.storage.txnindex import AbortedTxn
from chronolog.storage.validator import BatchHeader, merge_legacy, recompress, topic_codec, validate_batch

if TYPE_CHECKING:
    from chronolog.storage.remote.remote_log import RemoteLog

log = logging.getLogger(__name__)

PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms (KIP-854)
WRITE_RETRY_MS = 5000  # chronolog.log.dir.write.retry.ms: how often a partition whose write failed tries again


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


TimestampAndOffset = FoundTimestamp


class PartitionLog(LocalLog, LogRetention):
    """A partition's segments. Every public method takes the log's lock."""

    def __init__(self, directory: Path, config: TopicConfig, *, writable: bool = True,
                 time_index_style: str = "batch_last", clock: Callable[[], int] = now_ms) -> None:
        self.dir = Path(directory)
        # The one clock (ms) every time rule reads when no `now` is passed: segment creation (time rolling
        # of segments without timestamps), truncation, DeleteRecords, flush.ms, producer expiry, as Kafka's
        # `Time`; tests inject theirs. The delayed removal of `.deleted` files reads it too: a timer only
        # wakes `delete_due_files`, which decides by this clock.
        self.clock = clock
        self._deletions = DelayedDeletions(clock)  # `.deleted` files waiting for file.delete.delay.ms
        try:
            self.topic, self.partition = parse_log_dir_name(self.dir.name)
        except ValueError:
            if writable:
                raise
            self.topic, self.partition = self.dir.name, 0  # a loose copy of a partition dir
        self.name = f"{self.topic}-{self.partition}"
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

    # -- opening ------------------------------------------------------------------------------------
    @classmethod
    def open(cls, directory: Path, config: TopicConfig | None = None, *, recover: bool = True,
             recovery_point: int = 0, log_start_offset: int = 0, now: int | None = None,
             producer_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS,
             clock: Callable[[], int] = now_ms) -> PartitionLog:
        """Open or create a partition directory (`storage.loader`, Kafka's `LogLoader`). With `recover`,
        segments from the recovery point on are validated: a torn tail is truncated, later segments
        dropped, indexes rebuilt. Then the idempotent producers' state is loaded."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        plog = cls(directory, config or TopicConfig(), clock=clock)
        plog.producer_expiration_ms = producer_expiration_ms
        loader.load(plog, recover=recover, recovery_point=recovery_point, log_start_offset=log_start_offset,
                    now=plog.clock() if now is None else now)
        return plog

    @classmethod
    def open_readonly(cls, directory: Path, config: TopicConfig | None = None,
                      time_index_style: str = "batch_last", *, files: ReadOnlyFiles | None = None,
                      caches: time_lookup.LogCaches | None = None) -> PartitionLog:
        """Read a directory that must not change (a copy of a Kafka log dir, a read-only mount): nothing
        is written; indexes that are missing are rebuilt in memory. With `files` the directory is read
        through that object (`storage.readonly`), e.g. from an object store; `directory` then only names it.
        `caches`: those of the logs' owner (default: those of logs opened on their own)."""
        return loader.open_readonly(cls, directory, config, time_index_style, files, caches)

    # The lookup caches this log shares with the other logs of its owner: the log manager sets its own.
    caches: time_lookup.LogCaches = time_lookup.STANDALONE

    _files: ReadOnlyFiles | None = None  # where a read-only log's files come from, if not `dir`
    # The partition's tiered segments (`storage.remote.RemoteLog`, KIP-405), set by the log manager when the
    # topic has remote.storage.enable: reads below the first local segment and retention go through it.
    remote: RemoteLog | None = None
    _readonly_producers_loaded = False

    def _ensure_producers(self) -> None:
        if not self.writable and not self._readonly_producers_loaded:
            self._readonly_producers_loaded = True
            loader.load_producers_readonly(self)

    def producer_snapshot_files(self) -> list[tuple[str, bytes]]:
        """(name, bytes) of each `<offset>.snapshot` file of the partition, oldest first, unparsed: for
        tools that check them (`chronolog check`)."""
        return loader.producer_snapshot_files(self)

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
    def high_watermark(self) -> int:
        return self._next_offset  # a single replica: everything appended is committed

    @property
    def local_log_start_offset(self) -> int:
        """`UnifiedLog.localLogStartOffset`: the log start offset, or with tiered segments (KIP-405) the
        first local segment's base offset when that is later."""
        if self.remote is None:
            return self.log_start_offset
        return max(self.log_start_offset, self.segments[0].base_offset)

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
            h = BatchHeader.read(view)
            if h.magic == 2 and h.batch_length + LOG_OVERHEAD == len(view):
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
            buf, batches = merge_legacy(batches)
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
            codec_of_topic = topic_codec(cfg.compression_type)
            if any(b.magic == 2 for b in batches) and len(batches) > 1 and origin_client:
                raise InvalidRecordError("a produce request may carry only one v2 record batch per partition")
            for batch in batches:
                converted = isinstance(batch, LegacyBatch)
                if converted:
                    batch.validate()
                    data = bytearray(upconvert_to_v2(batch, offset))
                    batch = RecordBatch(data)
                else:
                    # A request's only batch is patched in the request's own copy; others get theirs.
                    data = buf if len(batches) == 1 else bytearray(batch.raw)
                raw = batch.raw
                lo, batch_max, n_records = validate_batch(raw, BatchHeader.read(raw), cfg, now,
                                                          origin_client=origin_client, partition=self.name,
                                                          converted=converted)
                idempotent = batch.producer_id >= 0 and not batch.is_control
                if idempotent and origin_client:
                    retry = self._retried(batch.producer_id, batch.producer_epoch, batch.base_sequence,
                                          batch.last_offset_delta)
                    if retry is not None:
                        return retry  # the only batch (a client sends one per partition)
                    self.producers.check_transactional(batch.producer_id, batch.is_transactional)
                # A control batch (a coordinator's transaction marker) is kept as it is: recompressing it
                # through build_batch would also drop its control bit.
                codec = batch.compression if codec_of_topic is None or batch.is_control else codec_of_topic
                if codec != batch.compression:
                    data = recompress(batch, codec)
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

    def _append_one_v2(self, buf: memoryview, h: BatchHeader, now: int, origin_client: bool) -> AppendInfo | None:
        """`append` for what producers send: one v2 batch whose codec the topic keeps. The general loop's
        checks (`validate_batch`), with the header unpacked once; the caller's bytes are written
        as they are behind a patched copy of the 61-byte header (a copy of the whole batch only when the
        max timestamp must change, which the CRC covers, or when it is so small that one copy and one
        pwrite cost less than a two-part pwritev). `h` is its unpacked header. None when the topic
        recompresses (the general loop does that)."""
        attributes = h.attributes
        with self.lock:
            if self._closed:
                raise KafkaError("log is closed")
            cfg = self.config
            codec_of_topic = topic_codec(cfg.compression_type)
            if codec_of_topic is not None and codec_of_topic != attributes & COMPRESSION_MASK:
                return None
            lo, batch_max, n_records = validate_batch(buf, h, cfg, now, origin_client=origin_client,
                                                      partition=self.name)
            log_append = cfg.log_append_time
            idempotent = h.producer_id >= 0 and not attributes & CONTROL_MASK
            if idempotent and origin_client:
                retry = self._retried(h.producer_id, h.producer_epoch, h.base_sequence, h.last_offset_delta)
                if retry is not None:
                    return retry
                self.producers.check_transactional(h.producer_id, bool(attributes & TRANSACTIONAL_MASK))
            offset = self._next_offset
            wrong_max = h.max_timestamp != batch_max or attributes & TIMESTAMP_TYPE_MASK
            if log_append or wrong_max or len(buf) < _COPY_BELOW:
                data = bytearray(buf)  # a copy: the CRC covers the max timestamp (patch, re-checksum), or small
                head = None
                if log_append:
                    set_max_timestamp(data, 0, TimestampType.LOG_APPEND_TIME, now)
                    batch_max = now
                elif wrong_max:
                    set_max_timestamp(data, 0, TimestampType.CREATE_TIME, batch_max)
                _BASE_AND_EPOCH.pack_into(data, 0, offset, h.batch_length, LEADER_EPOCH)
            else:
                data = buf
                head = bytearray(buf[:HEADER_SIZE])  # base offset and leader epoch are outside the CRC
                _BASE_AND_EPOCH.pack_into(head, 0, offset, h.batch_length, LEADER_EPOCH)
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
                self.producers.update(h.producer_id, h.producer_epoch, h.base_sequence, offset, last, batch_max,
                                      bool(attributes & TRANSACTIONAL_MASK))
            self._unflushed_messages += n_records
            if self._unflushed_messages >= cfg.flush_messages:
                self._flushed()
            return AppendInfo(offset, last, max_ts, offset_of_max, now if log_append else -1,
                              self.log_start_offset, n_records)

    def _check_retention_on_arrival(self, max_ts: int, now: int) -> None:
        """Records that time retention deletes at its next check are named in a warning now, not found
        missing later (`storage.retention.ExpiredArrivals`)."""
        cfg = self.config
        if 0 <= cfg.retention_ms < now - max_ts and max_ts >= 0 and cfg.deletes \
                and not cfg.log_append_time:
            self._expired_arrivals.note(self.topic, self.partition, max_ts, now, cfg.retention_ms)

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

    # -- time ---------------------------------------------------------------------------------------
    def offset_for_timestamp(self, timestamp: int) -> FoundTimestamp | None:
        """`UnifiedLog.fetchOffsetByTimestamp`: the first record with timestamp >= target, found in the
        first segment whose largest timestamp is >= target; the specials -1 latest, -2 earliest,
        -3 max timestamp, -4 earliest local, -5 latest tiered. None when nothing qualifies (ListOffsets
        answers -1/-1). With tiered segments the lookup reads them first (`RemoteLog.find_offset`)."""
        remote = self.remote
        if remote is not None and timestamp not in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP, LATEST_TIMESTAMP):
            found = self._offset_for_timestamp_tiered(remote, timestamp)
            if found is not False:
                return found
        with self.lock:
            if timestamp >= 0:  # a time (the specials below are negative)
                return time_lookup.find_offset(self, timestamp)
            if timestamp == EARLIEST_TIMESTAMP:
                return FoundTimestamp(-1, self.log_start_offset, LEADER_EPOCH)
            if timestamp == EARLIEST_LOCAL_TIMESTAMP:
                return FoundTimestamp(-1, self.local_log_start_offset, LEADER_EPOCH)
            if timestamp == LATEST_TIMESTAMP:
                return FoundTimestamp(-1, self._next_offset, LEADER_EPOCH)
            if timestamp == MAX_TIMESTAMP:
                return time_lookup.max_timestamp_entry(self)
            if timestamp == LATEST_TIERED_TIMESTAMP:
                return None  # no tiered segments: Kafka answers -1 / -1
            raise UnsupportedVersionError(f"unsupported special timestamp {timestamp}")

    def _offset_for_timestamp_tiered(self, remote: RemoteLog, timestamp: int) -> FoundTimestamp | None | bool:
        """The lookups a tiered log answers from its tiered segments (outside the log's lock: the tier may
        be slow); False for those the local segments answer alone."""
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return remote.latest_tiered()
        if timestamp == MAX_TIMESTAMP:
            tiered = remote.max_timestamp_entry()
            with self.lock:
                local = time_lookup.max_timestamp_entry(self)
            if tiered is None or (local is not None and local.timestamp > tiered.timestamp):
                return local
            return tiered
        if timestamp < 0:
            return False
        if self.log_start_offset >= self.local_log_start_offset:
            return False
        found = remote.find_offset(timestamp, self.log_start_offset)
        return found if found is not None else False

    # -- truncation (retention and DeleteRecords: `storage.retention.LogRetention`, a base class) ----
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
            loader.load_producers(self, self.clock())  # `ProducerStateManager.truncateAndReload`

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
        self._deletions.stop()

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
            self._deletions.stop()
            shutil.rmtree(self.dir, ignore_errors=True)


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


_BASE_AND_EPOCH = struct.Struct(">qii")  # baseOffset, batchLength (rewritten as is), partitionLeaderEpoch
# Below this size a producer's batch is copied and patched for one pwrite: about 1 us cheaper than a pwritev
# of a patched header and the rest at 1 KiB; from about 4 KiB the copy costs more.
_COPY_BELOW = 2048
