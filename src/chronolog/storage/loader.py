"""Opening a partition directory (Kafka's `LogLoader`): finish or undo a swap a crash interrupted, drop
leftover files, open the segments, recover those from the recovery point on (truncate a torn tail,
rebuild indexes and minima), and replay the idempotent producers' state from the newest snapshot; and
the read-only open of a directory that must not change."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from chronolog.config import TopicConfig
from chronolog.errors import KafkaError, OffsetOutOfRangeError
from chronolog.native import load_native
from chronolog.records.batch import CONTROL_MASK, TRANSACTIONAL_MASK
from chronolog.records.control import EndTxnMarker, marker_of
from chronolog.storage.index import IndexCorruptError
from chronolog.storage.local_log import (
    CLEANED_SUFFIX,
    SWAP_SUFFIX,
    SwapResolvedFiles,
    has_interrupted_swap,
    recover_swaps,
)
from chronolog.storage.minima import MINIMA_SUFFIX
from chronolog.storage.producers import (
    SNAPSHOT_SUFFIX,
    CorruptSnapshotError,
    ProducerStates,
    snapshot_offsets,
)
from chronolog.storage.readonly import FilesSegment, ReadOnlyFiles, segment_bases
from chronolog.storage.segment import DELETED_SUFFIX, LOG_SUFFIX, LogSegment, offsets_named, segment_name
from chronolog.storage.txnindex import AbortedTxn

if TYPE_CHECKING:
    from chronolog.storage.log import PartitionLog
    from chronolog.storage.time_lookup import LogCaches

log = logging.getLogger("chronolog.storage.log")

L = TypeVar("L", bound="PartitionLog")


def load(plog: PartitionLog, *, recover: bool, recovery_point: int, log_start_offset: int, now: int) -> None:
    """`LogLoader.load` for a writable log just made (`PartitionLog.open`): segments, then producers; the
    recovery point as `LogLoader` leaves it."""
    # Under the log's lock, as all segment work is: another thread's open-file cache eviction closes a
    # segment's descriptors only when it can take that lock, so none is pulled from under the load.
    with plog.lock:
        rebuild_from, snapshots = _load_segments(plog, recover, recovery_point)
        plog.log_start_offset = max(log_start_offset, plog.segments[0].base_offset)
        load_producers(plog, now, rebuild_txn_from=rebuild_from, snapshots=snapshots)
    # LogLoader: after a clean stop everything is durable (recovery point = LEO); after recovery the
    # checkpoint stays, so data that was only in the page cache is validated again after another crash.
    plog.recovery_point = min(max(recovery_point, plog.log_start_offset), plog._next_offset) if recover \
        else plog._next_offset


def open_readonly(cls: type[L], directory: Path, config: TopicConfig | None, time_index_style: str,
                  files: ReadOnlyFiles | None, caches: LogCaches | None = None) -> L:
    """`PartitionLog.open_readonly`: nothing is written; an interrupted swap is read as the next writable
    open will finish it (`SwapResolvedFiles`)."""
    plog = cls(Path(directory), config or TopicConfig(), writable=False, time_index_style=time_index_style)
    if caches is not None:
        plog.caches = caches
    if files is None and has_interrupted_swap(plog.dir):
        files = SwapResolvedFiles(plog.dir)  # read as the broker's next start will finish the swap
    plog._files = files
    bases = offsets_named(os.listdir(plog.dir), LOG_SUFFIX) if files is None else segment_bases(files)
    if not bases:
        raise OffsetOutOfRangeError(f"no segments in {directory}")
    kwargs = {"index_interval_bytes": plog.config.index_interval_bytes,
              "max_index_size": plog.config.segment_index_bytes, "time_index_style": time_index_style,
              "lock": plog.lock}
    with plog.lock:  # as in `open`: no other thread's eviction closes a file of a segment being opened
        for base in bases:
            plog.segments.append(LogSegment(plog.dir, base, writable=False, **kwargs) if files is None
                                 else FilesSegment(files, plog.dir, base, **kwargs))
            plog.segments[-1].reader_minima = plog.caches.reader_minima
    for seg, nxt in zip(plog.segments, plog.segments[1:], strict=False):
        seg.is_last = False
        seg._offset_limit_after = nxt.base_offset
    plog._next_offset = plog.segments[-1].next_offset_guess
    plog.log_start_offset = plog.segments[0].base_offset
    return plog


def _load_segments(plog: PartitionLog, recover: bool, recovery_point: int) -> tuple[int | None, list[int]]:
    """The segments, recovered from the recovery point on. Returns the base offset from which segments
    need their `.txnindex` rebuilt (None: none) and the snapshot offsets found."""
    directory = plog.dir
    # One listing of the directory serves every decision below (a start opens thousands of partitions:
    # a listing or a stat more per partition is seconds more).
    names = os.listdir(directory)
    if any(n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX)) for n in names):
        recover_swaps(directory)  # a clean interrupted by a crash: finished or undone (LogLoader)
        names = os.listdir(directory)
    kept = []
    for name in names:
        # Leftovers of deletions and of interrupted index swaps go first (`LogLoader.removeTempFiles`).
        if name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX, MINIMA_SUFFIX + ".tmp",
                          SNAPSHOT_SUFFIX + ".tmp")):
            (directory / name).unlink(missing_ok=True)
        else:
            kept.append(name)
    bases = offsets_named(kept, LOG_SUFFIX)
    known = set(bases)
    for name in kept:
        # A sidecar whose segment is gone (deleted by a broker that does not know it) goes too.
        if name.endswith(MINIMA_SUFFIX) and (not name[:-len(MINIMA_SUFFIX)].isdigit()
                                             or int(name[:-len(MINIMA_SUFFIX)]) not in known):
            (directory / name).unlink(missing_ok=True)
    present = set(kept)
    for base in bases:
        for suffix in (".index", ".timeindex"):
            if segment_name(base, suffix) not in present:
                log.info("%s: missing %s, rebuilding", directory, segment_name(base, suffix))
    rebuild_from: int | None = None
    for i, base in enumerate(bases):
        # The segments from the one holding the recovery point on (LogLoader.recoverLog:
        # `segments.values(recoveryPoint, Long.MAX_VALUE)`), so the last one always; the ones before
        # it were flushed before the checkpoint was written and are only sanity-checked.
        needs_recovery = recover and (base >= recovery_point or i + 1 == len(bases)
                                      or bases[i + 1] > recovery_point)
        # A segment about to be recovered rebuilds its indexes anyway: its index files are not checked
        # first (LogLoader.loadSegmentFiles checks only after a clean shutdown or below the recovery
        # point; a crashed active segment's preallocated index would fail the check and be rebuilt twice).
        seg = plog._new_segment(base, check_indexes=not needs_recovery)
        if i + 1 < len(bases):
            seg.is_last = False
            seg._offset_limit_after = bases[i + 1]
        plog.segments.append(seg)
        if needs_recovery or seg.needs_rebuild:
            # Unlike LogLoader, corruption does not end the log: only the last segment's torn tail is
            # truncated; invalid bytes elsewhere become corrupt ranges that reads step over.
            seg.recover()
            # `LogSegment.recover` resets the transaction index and rebuilds it from the producers'
            # state at the segment's start: done for all of them in `load_producers`.
            rebuild_from = base if rebuild_from is None else min(rebuild_from, base)
            # Recovery read the whole segment: its minima are rebuilt too (an inactive segment's
            # sidecar is written by on_become_inactive below).
            seg.start_minima(rebuild=True)
        elif not _txn_index_sane(seg):
            rebuild_from = base if rebuild_from is None else min(rebuild_from, base)
    if not plog.segments:
        plog.segments.append(plog._new_segment(0))
    for seg in plog.segments[:-1]:
        seg.on_become_inactive(loading=True)
    # The active segment tracks minima from here on: rebuilt by recovery above, else from its sidecar
    # (written at the last clean close); without one it stays untracked and readers scan it.
    plog.active.resume_minima()
    plog.active.make_active()
    plog._next_offset = plog.active.next_offset_guess
    if plog.active.size == 0 and len(plog.segments) > 1:
        plog._next_offset = max(plog._next_offset, plog.active.base_offset)
    plog._jitter = plog._new_jitter()
    return rebuild_from, offsets_named(kept, SNAPSHOT_SUFFIX)


def _txn_index_sane(seg: LogSegment) -> bool:
    """`TransactionIndex.sanityCheck` at load; a failing index is rebuilt (LogLoader)."""
    try:
        seg.txn_index.sanity_check()
    except IndexCorruptError as exc:
        log.warning("%s; rebuilding it", exc)
        return False
    return True


def load_producers(plog: PartitionLog, now: int, *, rebuild_txn_from: int | None = None,
                   snapshots: list[int] | None = None) -> None:
    """The producers' state as of the log end: the newest snapshot at or below it, then the batches
    after it (`LogLoader` / `UnifiedLog.rebuildProducerState`), markers included, so open transactions
    and the LSO come back. With no snapshot the log is read from its start, as Kafka does after an
    unclean stop: a transaction open since an older segment must not be missed. Producers idle for
    `producer.id.expiration.ms` are left out. `snapshots`: the snapshot offsets the directory listing at
    load found (None: list them).

    Segments from `rebuild_txn_from` on, which recovery read again, get their `.txnindex` rewritten from
    the ABORT markers in them (`LogSegment.recover`), which needs the open transactions at the first
    one's start: a replay from the newest snapshot at or below it. Kafka deletes the newer snapshots for
    that; they stay valid (recovery only cuts a torn tail, and snapshots past the new end are deleted), so
    they are kept."""
    rebuild = rebuild_txn_from
    loaded = plog.producers.load_snapshot(plog.dir, plog.log_start_offset, plog._next_offset, now,
                                          plog.producer_expiration_ms, offsets=snapshots)
    if loaded is None:
        loaded = plog.log_start_offset
    if rebuild is not None and loaded > rebuild:
        earlier = ProducerStates()
        start = earlier.load_snapshot(plog.dir, plog.log_start_offset, rebuild, now, plog.producer_expiration_ms,
                                      delete_outside=False)
        replay_producers(plog, earlier, plog.log_start_offset if start is None else start, rebuild)
        rebuild = None
    replay_producers(plog, plog.producers, loaded, rebuild)
    plog.producers.expire(now, plog.producer_expiration_ms)


def load_producers_readonly(plog: PartitionLog) -> None:
    """A read-only log's producers (for its LSO), when first needed: the newest snapshot file that parses
    and lies in (log start, log end], then the batches after it, as `load_producers` but deleting and
    writing nothing; without a snapshot the whole log is read. Kafka's own snapshots carry the open
    transactions too, so a copy of a Kafka log dir gets its LSO the same way."""
    states = ProducerStates()
    start = plog.log_start_offset
    for name, data in reversed(producer_snapshot_files(plog)):
        offset = int(name[:-len(SNAPSHOT_SUFFIX)])
        if not plog.log_start_offset < offset <= plog._next_offset:
            continue
        try:
            entries = ProducerStates.from_bytes(data)
        except CorruptSnapshotError as exc:
            log.warning("%s: producer snapshot %s is not usable (%s)", plog.dir, name, exc)
            continue
        states._reset(entries)
        start = offset
        break
    replay_producers(plog, states, start)
    plog.producers = states


def producer_snapshot_files(plog: PartitionLog) -> list[tuple[str, bytes]]:
    """(name, bytes) of each `<offset>.snapshot` file of the partition, oldest first, unparsed."""
    files = plog._files
    if files is not None:
        offsets, read = offsets_named(files.names(), SNAPSHOT_SUFFIX), files.read
    else:
        offsets, read = snapshot_offsets(plog.dir), lambda n: (plog.dir / n).read_bytes()
    return [(n, read(n) or b"") for n in (segment_name(o, SNAPSHOT_SUFFIX) for o in offsets)]


def replay_producers(plog: PartitionLog, states: ProducerStates, start: int,
                     rebuild_txn_from: int | None = None) -> None:
    """Update `states` with every batch from offset `start` to the log end; segments based at or after
    `rebuild_txn_from` get their `.txnindex` rewritten from the ABORT markers met (`LogSegment.recover`
    with `updateProducerState`)."""
    if rebuild_txn_from is not None:
        for seg in plog.segments:
            if seg.base_offset >= rebuild_txn_from:
                seg.txn_index.reset()
    for i in range(plog._segment_for(max(start, plog.segments[0].base_offset)), len(plog.segments)):
        seg = plog.segments[i]
        rebuild = rebuild_txn_from is not None and seg.base_offset >= rebuild_txn_from
        pos = seg.offset_index.lookup(start).position if start > seg.base_offset else 0
        for pid, epoch, seq, base, last, ts, attributes, position in producer_batches(seg, pos, start):
            if not attributes & CONTROL_MASK:
                states.update(pid, epoch, seq, base, last, ts, bool(attributes & TRANSACTIONAL_MASK))
                continue
            marker = _marker_at(plog, seg, position)
            if marker is None:
                continue
            done = states.apply_marker(pid, epoch, marker.coordinator_epoch, base, ts, marker.is_commit)
            if done is not None and rebuild and done[0].is_aborted:
                txn, lso = done
                seg.txn_index.append(AbortedTxn(pid, txn.first_offset, txn.last_offset, lso))


# `_headers.producer_run` (C): `producer_batches`' walk over whole v2 batches.
_native_producer_run = load_native("chronolog.storage._headers", "producer_run")
_PRODUCER_RUN_MOST = 4096  # batches per call: a bounded list, however long the segment


def producer_batches(seg: LogSegment, position: int, start: int
                     ) -> Iterator[tuple[int, int, int, int, int, int, int, int]]:
    """(producer id, epoch, base sequence, base offset, last offset, max timestamp, attributes, position)
    of each v2 batch from `position` that carries a producer id (data or control) and that ends at or
    after offset `start`: what the producers' replay needs, all of it in batch headers but a control
    batch's marker (read at `position`). Whole v2 batches are read in C (`_headers.producer_run`,
    headers only, in large reads), the rest through `batches_from` as before."""
    pos = position
    if _native_producer_run is not None and seg._fd >= 0 and not seg.corrupt_ranges:
        while pos < seg.size:
            stop, found = _native_producer_run(seg._fd, pos, seg.size, start, _PRODUCER_RUN_MOST)
            yield from found
            if stop == pos:
                break
            pos = stop
    for _pos, batch in seg.batches_from(pos):
        if batch.magic == 2 and batch.producer_id >= 0 and batch.last_offset >= start:
            yield (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.base_offset,
                   batch.last_offset, batch.max_timestamp, batch.attributes, _pos)


def _marker_at(plog: PartitionLog, seg: LogSegment, position: int) -> EndTxnMarker | None:
    """The transaction marker of the control batch at `position`; None for another control type, an
    empty control batch or one that cannot be read (logged: the replay goes on)."""
    for _pos, batch in seg.batches_from(position):
        try:
            return marker_of(batch)
        except KafkaError as exc:
            log.warning("%s-%d: control batch at offset %d unreadable: %s", plog.topic, plog.partition,
                        batch.base_offset, exc)
            return None
    return None
