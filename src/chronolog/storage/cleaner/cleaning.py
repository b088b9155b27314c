"""The cleaning of one log (Kafka's `Cleaner`: `doClean`, `buildOffsetMap`, `cleanSegments`, `cleanInto`,
`groupSegmentsBySize`), then each group's swap through the log's own `replace_segments`.

One pass over a log:
1. The dirty part runs from the cleaner checkpoint (or the log start) up to the first uncleanable offset
   (storage.cleaner.manager).
2. An offset map (key hash -> last offset) is built over the dirty part, bounded by
   `log.cleaner.dedupe.buffer.size`; a dirty part with more keys is cleaned in several passes.
3. The segments from the log start to the end of the map are grouped (`segment.bytes`, index sizes,
   32-bit relative offsets) and each group is copied into one `<base>.log.cleaned` (with its `.index`,
   `.timeindex` and `.txnindex`), keeping of each key only its last record, offsets and timestamps
   unchanged. Tombstones and the markers of transactions left empty get a delete horizon (KIP-534:
   `delete.retention.ms` after the first cleaning that meets them) and go at the first cleaning after
   it; records of aborted transactions go at once (storage.cleaner.transactions).
4. The swap: the log's own `replace_segments` (storage.local_log): `.cleaned` -> `.swap` (the `.log` last:
   its rename commits the swap), the old segments -> `.deleted`, `.swap` -> final names; the next open
   finishes an interrupted swap, or undoes one that had not committed.

The per-batch work runs in C (records/_clean.c: `map_chunk`, `filter_chunk`) where the offset map is the
C one; it hands every batch it does not take (transactional, control, legacy, malformed, one that needs a
delete horizon or must stay as an empty batch) back to the Python code below, batch by batch.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from chronolog.errors import KafkaError
from chronolog.records import RecordBatch, TimestampType, build_batch, iter_batches
from chronolog.records.batch_builder import build_empty_batch, splice_batch
from chronolog.records.compression import compress
from chronolog.storage.cleaner.files import (
    LOG_SUFFIX,
    CleanedSegment,
    CleanerStats,
    DestsAhead,
    SegmentReader,
    Throttler,
    submit,
)
from chronolog.storage.cleaner.manager import LogToClean
from chronolog.storage.cleaner.offset_map import (
    BUDGET,
    END,
    FULL,
    PYTHON,
    OffsetMap,
    kept_records,
    map_records,
    new_offset_map,
    note_memory,
)
from chronolog.storage.cleaner.transactions import CleanedTransactionMetadata
from chronolog.storage.local_log import SegmentsChangedError

if TYPE_CHECKING:
    from chronolog.storage.log import PartitionLog

log = logging.getLogger("chronolog.storage.cleaner")

# Test seam: called with the name of each step of a swap (`cleaned`, `swap:<file>`, `deleted:<base>`,
# `final:<file>`), so that tests can raise or die there.
STEP_HOOK: Callable[[str], None] | None = None


def _step(name: str) -> None:
    if STEP_HOOK is not None:
        STEP_HOOK(name)


class CleaningAbortedError(Exception):
    """The cleaning of a log stopped (shutdown, the log changed under it): nothing was swapped."""


_RETAIN_EMPTY, _DELETE, _DELETE_EMPTY = "retain_empty", "delete", "delete_empty"


class Cleaner:
    """Cleans one log at a time (Kafka's `Cleaner`). `should_stop` is polled between batches (shutdown)."""

    def __init__(self, dedupe_buffer_size: int = 134217728, load_factor: float = 0.9,
                 max_io_bytes_per_second: float = 1.7976931348623157e308, *,
                 should_stop: Callable[[], bool] = lambda: False,
                 sleep: Callable[[float], object] = time.sleep, native: bool | None = None) -> None:
        self.offset_map = new_offset_map(dedupe_buffer_size, load_factor, native)
        self.native = not isinstance(self.offset_map, OffsetMap)
        self.throttler = Throttler(max_io_bytes_per_second, sleep)
        self.should_stop = should_stop

    def _budget(self) -> int:
        """Bytes the C walk reads between two throttle checks: 10 ms at the I/O limit (unlimited when off)."""
        rate = self.throttler.rate
        return 1 << 62 if rate >= 1e300 else max(int(rate / 100), 1)

    def _check_done(self, plog: PartitionLog) -> None:
        if self.should_stop() or plog._closed:
            raise CleaningAbortedError(f"cleaning of {plog.topic}-{plog.partition} stopped")

    def clean(self, ltc: LogToClean, now: int) -> tuple[int, CleanerStats]:
        """Clean `ltc.log` up to the end of the offset map; returns the offset the next cleaning starts at
        (the new cleaner checkpoint) and statistics (`Cleaner.doClean`)."""
        plog = ltc.log
        stats = CleanerStats()
        started = time.monotonic()
        with plog.lock:
            if any(seg.corrupt_ranges for seg in plog.segments[:-1]):
                raise KafkaError(f"{plog.topic}-{plog.partition} has corrupt ranges; not cleaned")
            plog._ensure_producers()
            sizes = {s.base_offset: s.size for s in plog.segments}
            segs = [s for s in plog.segments if s.base_offset < ltc.first_uncleanable and s is not plog.active]
            active_producers = {pid: ((e.batches[-1].last_offset if e.batches else None), e.epoch)
                                for pid, e in plog.producers.producers.items()}
            nexts = {s.base_offset: (plog.segments[i + 1].base_offset if i + 1 < len(plog.segments)
                                     else plog.log_end_offset) for i, s in enumerate(plog.segments)}
        readers = {s.base_offset: SegmentReader(s) for s in segs}
        swaps: list[_Swap] = []  # started, not yet joined: at most two (one swapping, the next syncing)
        # the next groups' `.cleaned` files, made on another thread meanwhile (a file's creation cost up to
        # 0.3 ms on ext4 with many files deleted lately): the first two groups' as they are if the map
        # covers the whole cleanable range, then each group's while the one before is copied
        cfg = plog.config
        made = DestsAhead(plog)
        for group in group_segments(segs, cfg.segment_bytes, cfg.segment_index_bytes, ltc.first_uncleanable,
                                    nexts)[:2]:
            made.make(group[0].base_offset)
        try:
            map_started = time.monotonic()
            end = self._build_offset_map(plog, readers, segs, ltc.first_dirty, ltc.first_uncleanable, nexts, stats)
            stats.map_seconds = time.monotonic() - map_started
            groups = group_segments([s for s in segs if s.base_offset < end], cfg.segment_bytes,
                                    cfg.segment_index_bytes, ltc.first_uncleanable, nexts)
            txn = CleanedTransactionMetadata()
            for i, group in enumerate(groups):
                self._check_done(plog)
                dest = made.take(group[0].base_offset)
                if i + 1 < len(groups):
                    made.make(groups[i + 1][0].base_offset)
                dest = self._copy_group(plog, group, readers, nexts, txn, active_producers,
                                        ltc.first_uncleanable, now, stats, dest)
                try:
                    while len(swaps) >= 2:
                        self._wait_swap(swaps.pop(0), stats)
                except BaseException:
                    dest.discard()
                    raise
                swaps.append(_Swap(plog, group, dest, sizes, swaps[-1] if swaps else None))
                stats.groups += 1
                stats.segments += len(group)
            while swaps:
                self._wait_swap(swaps.pop(0), stats)
        finally:
            made.drop()
            for swap in swaps:  # a failure meanwhile: the swaps under way end first, their errors logged
                try:
                    swap.join()
                except _PreviousSwapFailed:
                    pass
                except BaseException as exc:  # noqa: BLE001 - the first error is the one raised
                    log.warning("%s-%d: the swap of cleaned segment %d failed too: %s", plog.topic, plog.partition,
                                swap.dest.base, exc)
            for reader in readers.values():
                reader.close()
            self.offset_map.clear()
        stats.seconds = time.monotonic() - started
        return end, stats

    def _build_offset_map(self, plog: PartitionLog, readers: dict, segs: list, start: int, end: int,
                          nexts: dict, stats: CleanerStats) -> int:
        """`Cleaner.buildOffsetMap`: keys of the dirty part, skipping aborted transactions; stops when the
        map is full. Returns the offset after the last one mapped."""
        omap = self.offset_map
        omap.clear()
        dirty = [s for s in segs if nexts[s.base_offset] > start and s.base_offset < end]
        txn = CleanedTransactionMetadata()
        txn.add_aborted(plog.aborted_txns(start, end))
        full = False
        for seg in dirty:
            reader = readers[seg.base_offset]
            if self.native:
                full = self._map_segment_native(plog, reader, txn, start, end, stats)
                if full:
                    break
                continue
            for _pos, batch in reader.batches(0):
                self._check_done(plog)
                if batch.last_offset < start:
                    continue
                if batch.base_offset >= end:
                    break
                if self._map_batch(batch, txn, start, stats):
                    full = True
                    break
            if full:
                break
        note_memory(omap)
        if full:
            return omap.latest_offset + 1
        return omap.latest_offset + 1 if omap.latest_offset >= 0 else start

    def _map_batch(self, batch, txn: CleanedTransactionMetadata, start: int, stats: CleanerStats) -> bool:
        """One batch into the map; True when the map filled in it."""
        omap = self.offset_map
        stats.map_bytes_read += batch.size_in_bytes
        self.throttler.maybe_throttle(batch.size_in_bytes)
        if not isinstance(batch, RecordBatch):
            return False  # v0/v1 message sets are kept as they are
        if batch.is_control or txn.on_batch(batch):
            if batch.is_control:
                txn.on_control_batch(batch)
            omap.latest_offset = max(omap.latest_offset, batch.last_offset)
            return False
        body = batch.records_section()
        got = omap.map_body(body, batch.records_count, batch.base_offset, start)
        if got is None:  # one C leaves to the Python walk (its error, or a timestamp beyond 64 bits)
            got = map_records(omap, body, batch.records_count, batch.base_offset, start)
        full, mapped = got
        stats.map_records += mapped
        if full:
            return True
        omap.latest_offset = max(omap.latest_offset, batch.last_offset)
        return False

    def _map_segment_native(self, plog: PartitionLog, reader: SegmentReader, txn: CleanedTransactionMetadata,
                            start: int, end: int, stats: CleanerStats) -> bool:
        """`_build_offset_map`'s loop over one segment with the common batches in C (`map_chunk`); True when
        the map filled."""
        omap = self.offset_map
        budget = self._budget()
        full = [False]

        def handle(chunk: bytes, _reaches_end: bool) -> int:
            off = 0
            while True:
                self._check_done(plog)
                off, status, nbytes, records, last = omap.map_chunk(chunk, off, start, end, budget)
                if nbytes:
                    stats.map_bytes_read += nbytes
                    stats.map_records += records
                    self.throttler.maybe_throttle(nbytes)
                if last >= 0:
                    txn.consume_up_to(last)  # what `on_batch` does for a plain batch
                if status == FULL:
                    full[0] = True
                    return -1
                if status == END:
                    return -1
                if status == PYTHON:
                    batch = next(iter_batches(chunk, off))
                    off += batch.size_in_bytes
                    if batch.last_offset < start:
                        continue
                    if batch.base_offset >= end:
                        return -1
                    if self._map_batch(batch, txn, start, stats):
                        full[0] = True
                        return -1
                    continue
                if status == BUDGET:
                    continue
                return off

        reader.walk(handle)
        return full[0]

    def _copy_group(self, plog: PartitionLog, group: list, readers: dict, nexts: dict,
                    txn: CleanedTransactionMetadata, active_producers: dict, upper_bound: int, now: int,
                    stats: CleanerStats, dest: CleanedSegment) -> CleanedSegment:
        """`Cleaner.cleanSegments`' `cleanInto` loop: one group into `dest`, its `.cleaned` segment, written
        but not yet synced (`_Swap` does that, then the swap)."""
        cfg = plog.config
        txn.cleaned_index = dest.aborted
        try:
            for seg in group:
                txn.add_aborted(plog.aborted_txns(seg.base_offset, nexts[seg.base_offset]))
                reader = readers[seg.base_offset]
                if self.native:
                    self._copy_segment_native(plog, reader, dest, txn, active_producers, upper_bound, now, cfg,
                                              stats, seg is group[-1])
                    continue
                for batch, is_last in _with_next(reader.batches(0)):
                    self._check_done(plog)
                    self._copy_batch(batch, dest, txn, active_producers, upper_bound, now, cfg, stats,
                                     is_last and seg is group[-1])
        except BaseException:
            dest.discard()
            raise
        return dest

    @staticmethod
    def _wait_swap(swapping: _Swap | None, stats: CleanerStats) -> None:
        """Waits for the previous group's sync and swap (its error raised here); the wait is what the
        cleaning spends on them beyond the copy they overlapped (`sync_seconds`)."""
        if swapping is not None:
            waited = time.monotonic()
            swapping.join()
            stats.sync_seconds += time.monotonic() - waited

    def _copy_batch(self, batch, dest: CleanedSegment, txn: CleanedTransactionMetadata, active_producers: dict,
                    upper_bound: int, now: int, cfg, stats: CleanerStats, last_of_group: bool) -> None:
        stats.bytes_read += batch.size_in_bytes
        self.throttler.maybe_throttle(batch.size_in_bytes)
        out = self._filter_batch(batch, txn, active_producers, upper_bound, now, cfg, stats, last_of_group)
        if out is not None:
            data, max_ts = out
            dest.append(data, batch.last_offset, max_ts)
            stats.bytes_written += len(data)
            self.throttler.maybe_throttle(len(data))

    def _copy_segment_native(self, plog: PartitionLog, reader: SegmentReader, dest: CleanedSegment,
                             txn: CleanedTransactionMetadata, active_producers: dict, upper_bound: int, now: int,
                             cfg, stats: CleanerStats, last_of_group: bool) -> None:
        """`_clean_group`'s loop over one segment with the common batches in C (`filter_chunk`: judged,
        copied or spliced, and indexed as `CleanedSegment.append` does)."""
        omap = self.offset_map
        budget = self._budget()
        last_offsets = {pid: last for pid, (last, _epoch) in active_producers.items()}

        def handle(chunk: bytes, reaches_end: bool) -> int:
            tail = last_of_group and reaches_end
            off = 0
            while True:
                self._check_done(plog)
                (off, status, nread, out, read, kept, last, points, size, since, max_ts,
                 max_ts_offset) = omap.filter_chunk(chunk, off, tail, upper_bound, now, last_offsets, dest.base,
                                                    dest.size, dest.since_entry, dest.max_ts.timestamp,
                                                    dest.max_ts.offset, dest.interval, budget)
                if nread:
                    stats.bytes_read += nread
                    stats.records_read += read
                    stats.records_retained += kept
                    self.throttler.maybe_throttle(nread)
                    txn.consume_up_to(last)  # what `on_batch` does for a plain batch
                if out:
                    dest.append_native(out, points, size, since, max_ts, max_ts_offset)
                    stats.bytes_written += len(out)
                    self.throttler.maybe_throttle(len(out))
                if status == PYTHON:
                    batch = next(iter_batches(chunk, off))
                    off += batch.size_in_bytes
                    is_last = tail and next(iter_batches(chunk, off), None) is None
                    self._copy_batch(batch, dest, txn, active_producers, upper_bound, now, cfg, stats, is_last)
                    continue
                if status == BUDGET:
                    continue
                return off

        reader.walk(handle)

    def _filter_batch(self, batch, txn: CleanedTransactionMetadata, active_producers: dict, upper_bound: int,
                      now: int, cfg, stats: CleanerStats, last_of_group: bool) -> tuple[bytes, int] | None:
        """`MemoryRecords.filterTo` with the cleaner's `RecordFilter`: the bytes to keep of one batch (the
        batch itself when nothing changes) and their max timestamp, or None."""
        if not isinstance(batch, RecordBatch):
            return bytes(batch.raw), getattr(batch, "max_timestamp", -1)
        can_discard = txn.on_control_batch(batch) if batch.is_control else txn.on_batch(batch)
        horizon = batch.delete_horizon_ms
        if batch.is_control:
            discard_records = can_discard and horizon is not None and horizon <= now
        else:
            discard_records = can_discard
        last = active_producers.get(batch.producer_id)
        last_of_producer = last is not None and (
            batch.last_offset == last[0] if last[0] is not None
            else batch.is_control and batch.producer_epoch == last[1])
        if batch.producer_id >= 0 and last_of_producer:
            retention = _RETAIN_EMPTY
        elif batch.next_offset == upper_bound or last_of_group:
            # Kafka keeps the round's last batch; chronolog also each group's, so that the swap covers the
            # offsets of every segment it replaces (what `recover_swaps` relies on after a crash).
            retention = _RETAIN_EMPTY
        elif discard_records:
            retention = _DELETE
        else:
            retention = _DELETE_EMPTY
        if retention == _DELETE:
            stats.records_read += batch.records_count
            return None
        omap = self.offset_map
        if not batch.is_control and not discard_records:
            fast = self._filter_by_spans(batch, horizon, now, stats)
            if fast is _NOTHING_KEPT:
                return _empty_batch(batch) if retention == _RETAIN_EMPTY else None
            if fast is not None:
                return fast
        kept = []
        tombstones = False
        changed = False
        for record in batch.records():
            stats.records_read += 1
            if discard_records:
                keep = False
            elif batch.is_control:
                keep = True
            elif record.offset > omap.latest_offset:
                keep = True
            elif record.key is None:
                keep = False
            else:
                retain_deletes = horizon is None or now < horizon
                keep = record.offset >= omap.get(record.key) and (record.value is not None or retain_deletes)
            if keep:
                kept.append(record)
                tombstones = tombstones or (record.value is None and not batch.is_control)
            else:
                changed = True
        stats.records_retained += len(kept)
        if kept:
            needs_horizon = (tombstones or (can_discard and batch.is_control)) and horizon is None
            if not changed and not needs_horizon:
                return bytes(batch.raw), batch.max_timestamp
            new_horizon = now + cfg.delete_retention_ms if needs_horizon else horizon
            log_append = batch.timestamp_type == TimestampType.LOG_APPEND_TIME
            data = build_batch(kept, base_offset=batch.base_offset, compression=batch.compression,
                               timestamp_type=batch.timestamp_type, producer_id=batch.producer_id,
                               producer_epoch=batch.producer_epoch, base_sequence=batch.base_sequence,
                               partition_leader_epoch=batch.partition_leader_epoch,
                               is_transactional=batch.is_transactional, is_control=batch.is_control,
                               max_timestamp=batch.max_timestamp if log_append else None,
                               last_offset_delta=batch.last_offset_delta, delete_horizon_ms=new_horizon)
            return data, RecordBatch(data).max_timestamp
        if retention == _RETAIN_EMPTY:
            return _empty_batch(batch)
        return None


    def _filter_by_spans(self, batch: RecordBatch, horizon: int | None, now: int, stats: CleanerStats
                         ) -> tuple[bytes, int] | None:
        """The data-batch case of `_filter_batch` without decoding records: each record judged from its key's
        bytes, the kept ones copied byte for byte (`splice_batch`). None when the batch needs the slow path:
        nothing kept (an empty batch may have to stay) or a tombstone that needs its delete horizon set."""
        body = batch.records_section()
        retain_deletes = horizon is None or now < horizon
        got = self.offset_map.kept_spans(body, batch.records_count, batch.base_offset, retain_deletes)
        if got is None:  # one C leaves to the Python walk (its error, or a timestamp beyond 64 bits)
            got = kept_records(self.offset_map, body, batch.records_count, batch.base_offset, retain_deletes)
        total, kept, tombstones = got
        if tombstones and horizon is None:
            return None  # decided again, record by record, by the general path
        stats.records_read += total
        stats.records_retained += len(kept)
        if not kept:
            return _NOTHING_KEPT
        if len(kept) == total:
            return bytes(batch.raw), batch.max_timestamp
        data = splice_batch(batch, body, kept, compress)
        return data, RecordBatch(data).max_timestamp


_NOTHING_KEPT = (b"", -1)


def _empty_batch(batch: RecordBatch) -> tuple[bytes, int]:
    data = build_empty_batch(base_offset=batch.base_offset, last_offset_delta=batch.last_offset_delta,
                             max_timestamp=batch.max_timestamp, timestamp_type=batch.timestamp_type,
                             producer_id=batch.producer_id, producer_epoch=batch.producer_epoch,
                             base_sequence=batch.base_sequence, partition_leader_epoch=batch.partition_leader_epoch,
                             is_transactional=batch.is_transactional, is_control=batch.is_control)
    return data, batch.max_timestamp


def _with_next(it: Iterator[tuple[int, object]]) -> Iterator[tuple[object, bool]]:
    """Each batch with whether it is the last one."""
    prev = None
    for _pos, batch in it:
        if prev is not None:
            yield prev, False
        prev = batch
    if prev is not None:
        yield prev, True


def group_segments(segs: list, max_size: int, max_index_size: int, first_uncleanable: int, nexts: dict
                   ) -> list[list]:
    """`Cleaner.groupSegmentsBySize`: consecutive segments whose total log size stays within `segment.bytes`,
    each index within `segment.index.bytes`, and offsets within 32 bits of the group's base."""
    groups: list[list] = []
    rest = list(segs)
    while rest:
        group = [rest.pop(0)]
        size = group[0].size
        index_size = group[0].offset_index.entries * 8
        time_size = group[0].time_index.entries * 12
        while rest:
            nxt = rest[0]
            last_offset = (rest[1].base_offset - 1) if len(rest) > 1 else first_uncleanable - 1
            if not (size + nxt.size <= max_size and index_size + nxt.offset_index.entries * 8 <= max_index_size
                    and time_size + (nxt.time_index.entries + 1) * 12 <= max_index_size
                    and (nxt.size == 0 or last_offset - group[0].base_offset <= 0x7FFFFFFF)):
                break
            group.append(rest.pop(0))
            size += nxt.size
            index_size += nxt.offset_index.entries * 8
            time_size += nxt.time_index.entries * 12
        groups.append(group)
    return groups


# -- the swap ------------------------------------------------------------------------------------------
class _PreviousSwapFailed(Exception):
    """A group's swap did not start because the previous group's failed (that one's error is raised)."""


class _Swap:
    """The end of `Cleaner.cleanSegments` for one group, on a thread of the cleaner's (`submit`) while the
    cleaner copies the next group: the `.cleaned` files synced (`cleaned.flush()`), the group's modification
    time (`cleaned.setLastModified`), then `swap_in` (`replaceSegments`), the same steps in the same order
    as one after the other. The syncs may run while the previous group's swap ends (they touch only this
    group's new files); `swap_in` waits for that swap, and does not run if it failed, so swaps stay in
    offset order. The cleaner joins every one before `clean` returns."""

    def __init__(self, plog: PartitionLog, group: list, dest: CleanedSegment, sizes: dict[int, int],
                 previous: _Swap | None) -> None:
        self.plog, self.group, self.dest, self.sizes, self.previous = plog, group, dest, sizes, previous
        self.error: BaseException | None = None
        self.failed = False
        self._done = threading.Event()
        if submit("swap", self._run) is None:
            threading.Thread(target=self._run, name=f"cleaner-swap-{plog.topic}-{plog.partition}",
                             daemon=True).start()

    def _run(self) -> None:
        try:
            self.run()
        finally:
            self._done.set()

    def run(self) -> None:
        try:
            try:
                self.dest.finish()
                # the group's last modification time, which retention falls back to when no record carries
                # a timestamp
                with contextlib.suppress(OSError):
                    mtime = max(os.stat(seg.log_path).st_mtime for seg in self.group)
                    os.utime(self.dest.paths[LOG_SUFFIX], (mtime, mtime))
                _step("cleaned")
                if self.previous is not None:
                    self.previous._done.wait()  # its outcome, not its error (the cleaner raises that)
                    if self.previous.failed:
                        raise _PreviousSwapFailed(f"the swap before that of {self.dest.base} failed")
            except BaseException:
                self.dest.discard()
                raise
            self.previous = None
            swap_in(self.plog, self.dest, self.group, self.sizes)
        except BaseException as exc:  # noqa: BLE001 - raised again in the cleaner's thread by `join`
            self.error = exc
            self.failed = True

    def join(self, timeout: float | None = None) -> None:
        self._done.wait(timeout)
        if self.error is not None:
            error, self.error = self.error, None
            raise error


def swap_in(plog: PartitionLog, dest: CleanedSegment, old: list, sizes: dict[int, int]) -> None:
    """`LocalLog.replaceSegments` (`PartitionLog.replace_segments`, storage.local_log): `dest` takes the
    place of `old`, each step named to `STEP_HOOK`; aborts with nothing swapped when a replaced segment
    changed since the cleaning began."""
    try:
        plog.replace_segments(dest.base, old, sizes, step=_step)
    except SegmentsChangedError as exc:
        raise CleaningAbortedError(str(exc)) from exc

