"""Idempotent and transactional producers' state in one partition, and Kafka's producer snapshot files.

What Kafka's `ProducerStateManager` keeps: per producer id its epoch and its last five batches (sequence
range, offsets, max timestamp), enough to answer a retried batch with the offset it was first written at
and to refuse a gap in sequence numbers; and, for transactions (KIP-98), the coordinator epoch of its last
marker and the first offset of its ongoing transaction. The oldest ongoing transaction's first offset is
the first unstable offset, which bounds the last stable offset (LSO) that read_committed readers see.

The state must outlive a restart, or a batch retried across one is written twice. A restart reads the
newest `<offset>.snapshot` file and replays only the batches from that offset on, instead of scanning
segments, and a producer whose last batch is many segments back is still known. Snapshots are written
where Kafka writes them (at every roll, at the new segment's base offset, and at a clean close, at the
log end) in Kafka's own format (`ProducerSnapshot` v1: an int16 version, a CRC-32C of the rest, the
entries), so the files of either system read in the other.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from chronolog.diskio import write_atomic
from chronolog.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
)
from chronolog.records import crc32c
from chronolog.storage.segment import offsets_named, segment_name

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
_HEAD = struct.Struct(">hIi")  # version, CRC-32C of everything after it, entry count
_ENTRY = struct.Struct(">qhiqiqiq")  # id, epoch, last seq, last offset, offset delta, timestamp, coord epoch, txn
_CRC_FROM = 6  # ProducerStateManager.PRODUCER_ENTRIES_OFFSET
RETAINED_BATCHES = 5  # ProducerStateEntry.NUM_BATCHES_TO_RETAIN
_SEQUENCE_SPACE = 1 << 31  # sequences wrap at Integer.MAX_VALUE (DefaultRecordBatch.incrementSequence)


class CorruptSnapshotError(Exception):
    """A snapshot file that cannot be trusted (Kafka's CorruptSnapshotException): it is deleted."""


def increment_sequence(sequence: int, increment: int) -> int:
    return (sequence + increment) % _SEQUENCE_SPACE


class BatchMetadata(NamedTuple):
    """One written batch of a producer (Kafka's BatchMetadata)."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return increment_sequence(self.last_seq, -self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass
class ProducerEntry:
    """A producer id's state (Kafka's ProducerStateEntry); `batches` is oldest first."""

    producer_id: int
    epoch: int
    batches: list[BatchMetadata] = field(default_factory=list)
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    txn_first_offset: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


class ProducerInfo(NamedTuple):
    """A producer as DescribeProducers reports it (KIP-664, `DescribeProducersResponse.ProducerState`)."""

    producer_id: int
    epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


class CompletedTxn(NamedTuple):
    """A transaction ended by a marker (`CompletedTxn`): `last_offset` is the marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class ProducerStates:
    """The producers of one partition, updated by every append of a batch that carries a producer id."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its ongoing transaction

    def _reset(self, entries: list[ProducerEntry]) -> None:
        self.producers = {e.producer_id: e for e in entries}
        self.ongoing = {e.producer_id: e.txn_first_offset for e in entries if e.txn_first_offset >= 0}

    def __len__(self) -> int:
        return len(self.producers)

    def __call__(self) -> list[ProducerInfo]:
        """Every producer's state, by producer id (so `PartitionLog.producers()` lists them)."""
        return [ProducerInfo(pid, e.epoch, e.last_seq, e.last_timestamp, e.coordinator_epoch, e.txn_first_offset)
                for pid, e in sorted(self.producers.items())]

    # -- the produce path ---------------------------------------------------------------------------
    def duplicate_of(self, producer_id: int, epoch: int, first_seq: int, last_seq: int) -> int | None:
        """The first offset of an already written batch with this sequence range (a retry: answered with
        that offset, not written again), else None. A fenced epoch or a gap in the sequence raises, as
        Kafka's ProducerAppendInfo does for a client's batch; a producer not known here, or a new epoch,
        may start anywhere."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return None
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(f"producer {producer_id}: epoch {epoch} is fenced by {entry.epoch}")
        if epoch > entry.epoch:
            return None
        for batch in entry.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch.first_offset
        if entry.batches and first_seq != increment_sequence(entry.last_seq, 1):
            raise OutOfOrderSequenceNumberError(
                f"producer {producer_id}: expected sequence {increment_sequence(entry.last_seq, 1)}, got {first_seq}")
        return None

    def check_transactional(self, producer_id: int, transactional: bool) -> None:
        """A client's data batch while its producer has a transaction open must be transactional
        (`ProducerAppendInfo.appendDataBatch`: INVALID_TXN_STATE); checked before anything is written."""
        entry = self.producers.get(producer_id)
        if entry is not None and entry.txn_first_offset >= 0 and not transactional:
            raise InvalidTxnStateError(f"expected a transactional write from producer {producer_id}: its "
                                       f"transaction from offset {entry.txn_first_offset} is open")

    def update(self, producer_id: int, epoch: int, first_seq: int, first_offset: int, last_offset: int,
               timestamp: int, transactional: bool = False) -> None:
        """Record a written batch (`ProducerStateEntry.addBatch`): a new epoch forgets the old one's. A
        transactional batch of a producer without an open transaction opens one at its first offset."""
        entry = self._entry_at(producer_id, epoch)
        delta = last_offset - first_offset
        entry.batches.append(BatchMetadata(increment_sequence(first_seq, delta), last_offset, delta, timestamp))
        if len(entry.batches) > RETAINED_BATCHES:
            del entry.batches[0]
        entry.last_timestamp = timestamp
        if transactional and entry.txn_first_offset < 0:
            entry.txn_first_offset = first_offset
            self.ongoing[producer_id] = first_offset

    def _entry_at(self, producer_id: int, epoch: int) -> ProducerEntry:
        """The producer's entry, made if new, at `epoch`: a new epoch forgets the old one's batches
        (`ProducerStateEntry.update`); for a written batch and a written marker alike."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerEntry(producer_id, epoch)
        elif epoch != entry.epoch:
            entry.epoch = epoch
            entry.batches = []
        return entry

    # -- transaction markers ------------------------------------------------------------------------
    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> None:
        """A marker the coordinator asks to write (`ProducerAppendInfo.appendEndTxnMarker`): an epoch below
        the producer's is INVALID_PRODUCER_EPOCH, a coordinator epoch below the last marker's is
        TRANSACTION_COORDINATOR_FENCED (a zombie coordinator). Checked before anything is written."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(f"producer {producer_id}: marker epoch {epoch} is below the last seen "
                                            f"epoch {entry.epoch}")
        if entry.coordinator_epoch > coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"producer {producer_id}: coordinator epoch {coordinator_epoch} is older than {entry.coordinator_epoch}")

    def apply_marker(self, producer_id: int, epoch: int, coordinator_epoch: int, offset: int, timestamp: int,
                     commit: bool) -> tuple[CompletedTxn, int] | None:
        """Record a written marker at `offset`: the producer's transaction ends (`ProducerStateEntry.update`:
        a new epoch forgets the batches). Returns the completed transaction and the last stable offset just
        after it (`ProducerStateManager.lastStableOffset`: the first offset of the oldest other open
        transaction, else the marker's offset + 1), None when no transaction was open (an empty one)."""
        done = self.completed_by_marker(producer_id, offset, commit)
        entry = self._entry_at(producer_id, epoch)
        entry.coordinator_epoch = coordinator_epoch
        entry.txn_first_offset = -1
        entry.last_timestamp = timestamp
        self.ongoing.pop(producer_id, None)
        return done

    def completed_by_marker(self, producer_id: int, offset: int, commit: bool) -> tuple[CompletedTxn, int] | None:
        """What `apply_marker` would return for a marker at `offset`, changing nothing: the log writes an
        aborted transaction's `.txnindex` entry together with its marker, before the state moves on."""
        entry = self.producers.get(producer_id)
        if entry is None or entry.txn_first_offset < 0:
            return None
        others = [first for pid, first in self.ongoing.items() if pid != producer_id]
        return (CompletedTxn(producer_id, entry.txn_first_offset, offset, not commit),
                min(others) if others else offset + 1)

    def first_undecided_offset(self) -> int | None:
        """The first offset of the oldest open transaction (`ProducerStateManager.firstUndecidedOffset`)."""
        return min(self.ongoing.values()) if self.ongoing else None

    def expire(self, now: int, expiration_ms: int) -> int:
        """Forget producers whose last batch's max timestamp is `expiration_ms` or more before `now`
        (`producer.id.expiration.ms`, `ProducerStateManager.isProducerExpired`). Returns how many."""
        expired = [pid for pid, e in self.producers.items()
                   if e.txn_first_offset < 0 and now - e.last_timestamp >= expiration_ms]
        for pid in expired:
            del self.producers[pid]  # never one with an open transaction: `ongoing` stays as it is
        return len(expired)

    # -- snapshot files -----------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """The state as a Kafka ProducerSnapshot v1 file (`ProducerStateManager.writeSnapshot`)."""
        body = bytearray(_HEAD.pack(SNAPSHOT_VERSION, 0, len(self.producers)))
        for pid, e in self.producers.items():
            last = e.batches[-1] if e.batches else None
            body += _ENTRY.pack(pid, e.epoch, last.last_seq if last else -1, last.last_offset if last else -1,
                                last.offset_delta if last else 0, e.last_timestamp, e.coordinator_epoch,
                                e.txn_first_offset)
        struct.pack_into(">I", body, 2, crc32c(body[_CRC_FROM:]))
        return bytes(body)

    @staticmethod
    def from_bytes(data: bytes) -> list[ProducerEntry]:
        """Entries of a snapshot file (`ProducerStateManager.readSnapshot`); CorruptSnapshotError when the
        version, the sizes or the CRC are wrong. A loaded producer knows only its last batch, as in Kafka."""
        if len(data) < _HEAD.size:
            raise CorruptSnapshotError(f"{len(data)} bytes is shorter than a snapshot header")
        version, crc, count = _HEAD.unpack_from(data)
        if version != SNAPSHOT_VERSION:
            raise CorruptSnapshotError(f"unknown snapshot version {version}")
        if count < 0 or len(data) != _HEAD.size + count * _ENTRY.size:
            raise CorruptSnapshotError(f"{count} entries do not fit {len(data)} bytes")
        computed = crc32c(data[_CRC_FROM:])
        if computed != crc:
            raise CorruptSnapshotError(f"CRC mismatch (stored {crc}, computed {computed})")
        entries = []
        for i in range(count):
            pid, epoch, last_seq, last_offset, delta, ts, coord, txn = _ENTRY.unpack_from(data, _HEAD.size + i * _ENTRY.size)
            batches = [BatchMetadata(last_seq, last_offset, delta, ts)] if last_offset >= 0 else []
            entries.append(ProducerEntry(pid, epoch, batches, ts, coord, txn))
        return entries

    def write_snapshot(self, directory: Path, offset: int, *, sync: bool = False) -> Path:
        """`<offset>.snapshot`: the state of every batch below `offset`. Written whole under a temporary
        name and renamed, so a crash or a full disk leaves the old file or the new one (`diskio.write_atomic`)."""
        path = snapshot_path(directory, offset)
        write_atomic(path, self.to_bytes(), sync=sync)
        return path

    def load_snapshot(self, directory: Path, log_start: int, log_end: int, now: int, expiration_ms: int, *,
                      delete_outside: bool = True, offsets: list[int] | None = None) -> int | None:
        """Replace the state with the newest usable snapshot's and return its offset (None: there is none).
        Snapshots outside (log start, log end] are deleted first (unless not `delete_outside`: then only
        skipped) and corrupt ones when met, falling back to the next older
        (`ProducerStateManager.truncateAndReload` / `loadFromSnapshot`); expired producers are not loaded.
        `offsets`: the snapshot files' offsets when the caller has just listed the directory."""
        self._reset([])
        usable = []
        for offset in snapshot_offsets(directory) if offsets is None else offsets:
            if log_start < offset <= log_end:
                usable.append(offset)
            elif delete_outside:
                delete_snapshot(directory, offset)
        for offset in reversed(usable):
            path = snapshot_path(directory, offset)
            try:
                entries = self.from_bytes(path.read_bytes())
            except (CorruptSnapshotError, OSError) as exc:
                log.warning("%s: producer snapshot %s is not usable (%s); deleted", directory, path.name, exc)
                delete_snapshot(directory, offset)
                continue
            self._reset([e for e in entries if e.txn_first_offset >= 0 or now - e.last_timestamp < expiration_ms])
            return offset
        return None


def snapshot_path(directory: Path, offset: int) -> Path:
    return Path(directory) / segment_name(offset, SNAPSHOT_SUFFIX)


def snapshot_offsets(directory: Path) -> list[int]:
    """Offsets of the snapshot files in a partition directory, ascending."""
    return offsets_named((entry.name for entry in Path(directory).iterdir()), SNAPSHOT_SUFFIX)


def delete_snapshot(directory: Path, offset: int) -> None:
    snapshot_path(directory, offset).unlink(missing_ok=True)

