"""Transactions in one partition (`PartitionLog` with `storage.producers` and `storage.txnindex`), against
Kafka's rules: `ProducerAppendInfo` (a transactional batch opens the producer's transaction, a marker ends
it, the epoch and coordinator-epoch checks), `ProducerStateManager.lastStableOffset` (the LSO written
with each aborted transaction), `UnifiedLog.lastStableOffset`, `LocalLog.collectAbortedTransactions`,
`LogValidator` (clients may not write control batches), and recovery, truncation and retention keeping the
producer state, the LSO and the `.txnindex` files consistent."""

from __future__ import annotations

import os
import struct

import pytest

from chronolog.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from chronolog.records import RecordBatch, SimpleRecord, build_batch
from chronolog.records.control import ControlType, EndTxnMarker, build_control_batch
from chronolog.storage import PartitionLog
from chronolog.storage.producers import snapshot_offsets, snapshot_path
from chronolog.storage.txnindex import AbortedTxn
from tests.storage.helpers import NOW, open_log

P, Q, R = 1001, 1002, 1003


def txn(pid: int, seq: int, n: int = 2, *, epoch: int = 0, ts: int = NOW, transactional: bool = True) -> bytes:
    return build_batch([SimpleRecord(ts + i, None, b"t" * 100) for i in range(n)], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, is_transactional=transactional)


def plain(n: int = 1) -> bytes:
    return build_batch([SimpleRecord(NOW, None, b"p" * 100) for _ in range(n)])


def txnindex_files(plog: PartitionLog) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(plog.dir.glob("*.txnindex"))}


def all_aborted(plog: PartitionLog) -> list[AbortedTxn]:
    return [t for seg in plog.segments for t in seg.txn_index.entries]


def state(plog: PartitionLog) -> tuple:
    return (plog.last_stable_offset, plog.ongoing_transactions(), plog.producers(), all_aborted(plog),
            plog.log_end_offset)


# -- LSO and the abort index through sequences of appends and markers -------------------------------------
def test_lso_follows_the_oldest_open_transaction(tmp_path):
    plog = open_log(tmp_path)
    plog.append(plain(3), now=NOW)
    assert plog.last_stable_offset == plog.high_watermark == 3 and plog.first_unstable_offset is None
    plog.append(txn(P, 0), now=NOW)  # P opens at 3
    assert plog.last_stable_offset == 3 and plog.high_watermark == 5
    plog.append(plain(), now=NOW)
    plog.append(txn(Q, 0), now=NOW)  # Q opens at 6
    plog.append(txn(P, 2), now=NOW)  # P goes on: its first offset stays 3
    assert plog.ongoing_transactions() == [(P, 0, 3), (Q, 0, 6)]
    assert plog.last_stable_offset == 3
    commit = plog.append_control(P, 0, True, 0, now=NOW)
    assert commit.first_offset == commit.last_offset == 10
    assert plog.last_stable_offset == 6  # Q's transaction is now the oldest
    plog.append_control(Q, 0, False, 0, now=NOW)
    assert plog.last_stable_offset == plog.high_watermark == 12 and plog.ongoing_transactions() == []
    assert all_aborted(plog) == [AbortedTxn(Q, 6, 11, 12)]  # a commit is not indexed
    plog.close()


def test_abort_index_entries_carry_kafkas_last_stable_offset(tmp_path):
    plog = open_log(tmp_path)
    plog.append(txn(P, 0), now=NOW)  # 0-1
    plog.append(txn(Q, 0), now=NOW)  # 2-3
    plog.append(txn(R, 0), now=NOW)  # 4-5
    plog.append_control(Q, 0, False, 3, now=NOW)  # 6: the oldest other open transaction is P's, at 0
    plog.append_control(P, 0, False, 3, now=NOW)  # 7: R's, at 4
    plog.append_control(R, 0, False, 3, now=NOW)  # 8: none: marker + 1
    expected = [AbortedTxn(Q, 2, 6, 0), AbortedTxn(P, 0, 7, 4), AbortedTxn(R, 4, 8, 9)]
    assert all_aborted(plog) == expected
    plog.close()
    raw = txnindex_files(plog)["00000000000000000000.txnindex"]
    assert raw == b"".join(struct.pack(">hqqqq", 0, *t) for t in expected)
    assert plog.aborted_transactions(0, 9) == [(Q, 2), (P, 0), (R, 4)]


def test_markers_are_kafkas_control_batches(tmp_path):
    plog = open_log(tmp_path)
    plog.append(txn(P, 0, epoch=4), now=NOW)
    plog.append_control(P, 4, True, 9, now=NOW + 5)
    batches = list(plog.read_batches(0))
    assert bytes(batches[-1].raw) == build_control_batch(P, 4, EndTxnMarker(ControlType.COMMIT, 9), NOW + 5,
                                                         base_offset=2, partition_leader_epoch=0)
    plog.close()


def test_empty_transaction_marker_changes_only_epochs(tmp_path):
    plog = open_log(tmp_path)
    plog.append(plain(), now=NOW)
    plog.append_control(P, 2, False, 5, now=NOW)  # InitProducerId fencing an idle producer writes this
    assert plog.log_end_offset == 2 and plog.last_stable_offset == 2
    assert all_aborted(plog) == [] and txnindex_files(plog) == {}
    (info,) = plog.producers()
    assert (info.producer_id, info.epoch, info.coordinator_epoch, info.current_txn_start_offset) == (P, 2, 5, -1)
    with pytest.raises(InvalidProducerEpochError):
        plog.append_control(P, 1, False, 5, now=NOW)
    plog.close()


def test_describe_producers_view(tmp_path):
    plog = open_log(tmp_path)
    plog.append(txn(P, 0, n=3, epoch=1, ts=NOW + 7), now=NOW)
    (info,) = plog.producers()
    assert info == (P, 1, 2, NOW + 9, -1, 0)
    assert plog.producer_entries() == plog.producers()
    plog.close()


# -- what is refused, and that nothing is written then ------------------------------------------------
def refused(plog: PartitionLog, call, error) -> None:
    end, size = plog.log_end_offset, plog.active.size
    files = txnindex_files(plog)
    with pytest.raises(error):
        call()
    assert (plog.log_end_offset, plog.active.size, txnindex_files(plog)) == (end, size, files)


def test_clients_may_not_write_control_batches(tmp_path):
    plog = open_log(tmp_path)
    plog.append(txn(P, 0), now=NOW)
    marker = build_control_batch(P, 0, EndTxnMarker(ControlType.ABORT, 0), NOW)
    refused(plog, lambda: plog.append(marker, now=NOW), InvalidRecordError)
    refused(plog, lambda: plog.append(marker + plain(), now=NOW), InvalidRecordError)
    assert plog.ongoing_transactions() == [(P, 0, 0)]
    plog.close()


def test_non_transactional_write_inside_a_transaction_is_invalid_txn_state(tmp_path):
    plog = open_log(tmp_path)
    plog.append(txn(P, 0), now=NOW)
    refused(plog, lambda: plog.append(txn(P, 2, transactional=False), now=NOW), InvalidTxnStateError)
    plog.append_control(P, 0, True, 0, now=NOW)
    plog.append(txn(P, 2, transactional=False), now=NOW)  # after the commit: an idempotent write is fine
    plog.close()


def test_stale_marker_epochs_are_refused(tmp_path):
    plog = open_log(tmp_path)
    plog.append(txn(P, 0, epoch=3), now=NOW)
    refused(plog, lambda: plog.append_control(P, 2, True, 0, now=NOW), InvalidProducerEpochError)
    plog.append_control(P, 3, False, 6, now=NOW)
    plog.append(txn(P, 0, epoch=4), now=NOW)
    refused(plog, lambda: plog.append_control(P, 4, True, 5, now=NOW), TransactionCoordinatorFencedError)
    assert plog.ongoing_transactions() == [(P, 4, 3)]
    plog.close()


def test_fencing_abort_with_a_bumped_epoch_ends_the_old_transaction(tmp_path):
    plog = open_log(tmp_path)
    plog.append(txn(P, 0, epoch=0), now=NOW)
    plog.append_control(P, 1, False, 0, now=NOW)  # the coordinator fences epoch 0 and aborts with epoch 1
    assert plog.ongoing_transactions() == [] and all_aborted(plog) == [AbortedTxn(P, 0, 2, 3)]
    refused(plog, lambda: plog.append(txn(P, 2, epoch=0), now=NOW), InvalidProducerEpochError)
    plog.close()


# -- aborted transactions across segments -------------------------------------------------------------
def test_aborted_transactions_are_collected_across_segments(tmp_path):
    plog = open_log(tmp_path)
    plog.append(txn(P, 0), now=NOW)  # 0-1, aborted in the next segment
    plog.roll()
    plog.append(txn(Q, 0), now=NOW)  # 2-3
    plog.append_control(P, 0, False, 0, now=NOW)  # 4: (P, 0, 4, lso 2) in segment 2's index
    plog.append_control(Q, 0, False, 0, now=NOW)  # 5: (Q, 2, 5, 6)
    plog.roll()
    plog.append(txn(R, 0), now=NOW)  # 6-7
    plog.append_control(R, 0, False, 0, now=NOW)  # 8: (R, 6, 8, 9) in segment 6's index
    assert sorted(txnindex_files(plog)) == ["00000000000000000002.txnindex", "00000000000000000006.txnindex"]
    assert plog.aborted_transactions(0, 2) == [(P, 0)]  # found in the segment after the fetch's
    assert plog.aborted_transactions(0, 9) == [(P, 0), (Q, 2), (R, 6)]
    assert plog.aborted_transactions(6, 9) == [(R, 6)]
    assert plog.aborted_transactions(5, 6) == [(Q, 2)]
    assert plog.aborted_transactions(9, 10) == []
    plog.close()


# -- snapshots, recovery, truncation, retention --------------------------------------------------------
def build_history(plog: PartitionLog) -> None:
    """Transactions spanning segments: committed, aborted and one left open, plus plain writes."""
    plog.append(plain(), now=NOW)
    plog.append(txn(P, 0), now=NOW)
    plog.append(txn(Q, 0, epoch=2), now=NOW)
    plog.append(plain(2), now=NOW)
    plog.append_control(P, 0, False, 1, now=NOW)
    plog.append(txn(R, 0), now=NOW)
    plog.append(txn(Q, 2, epoch=2), now=NOW)
    plog.append_control(Q, 2, True, 1, now=NOW)
    plog.append(txn(P, 2), now=NOW)
    plog.append(plain(), now=NOW)
    plog.append_control(P, 0, False, 1, now=NOW)
    plog.append(txn(Q, 4, epoch=2), now=NOW)  # left open, as is R's


def test_history_has_several_segments_and_open_transactions(tmp_path):
    plog = open_log(tmp_path, segment_bytes=700)
    build_history(plog)
    assert len(plog.segments) >= 4
    assert [t[0] for t in plog.ongoing_transactions()] == [R, Q]
    assert plog.last_stable_offset == plog.ongoing_transactions()[0][2]
    assert len(all_aborted(plog)) == 2
    plog.close()


@pytest.mark.parametrize("how", ["clean", "crash", "crash_no_snapshots", "crash_no_txnindex", "torn_tail"])
def test_reopening_rebuilds_the_same_state(tmp_path, how):
    plog = open_log(tmp_path, segment_bytes=700)
    build_history(plog)
    before = state(plog)
    files = txnindex_files(plog)
    if how == "clean":
        plog.close()
    else:
        plog.flush()  # a crash: no clean close, so no snapshot at the log end
    if how == "crash_no_snapshots":
        for offset in snapshot_offsets(plog.dir):
            snapshot_path(plog.dir, offset).unlink()
    if how == "crash_no_txnindex":
        for path in plog.dir.glob("*.txnindex"):
            path.unlink()
    if how == "torn_tail":
        with open(plog.active.log_path, "ab") as f:
            f.write(plain()[:30])  # half a batch after the last marker
        with open(sorted(plog.dir.glob("*.txnindex"))[-1], "ab") as f:
            f.write(b"\x00" * 20)  # and a torn index entry
    again = PartitionLog.open(plog.dir, plog.config, recover=how != "clean", recovery_point=0, now=NOW)
    assert state(again) == before
    assert txnindex_files(again) == files
    again.close()


def test_a_snapshot_carries_the_open_transactions(tmp_path):
    plog = open_log(tmp_path, segment_bytes=700)
    build_history(plog)
    ongoing = plog.ongoing_transactions()
    plog.close()
    from chronolog.storage.producers import ProducerStates
    last = snapshot_offsets(plog.dir)[-1]
    entries = {e.producer_id: e for e in ProducerStates.from_bytes(snapshot_path(plog.dir, last).read_bytes())}
    assert {(pid, entries[pid].txn_first_offset) for pid, _e, _f in ongoing} == {(p, f) for p, _e, f in ongoing}
    assert entries[P].txn_first_offset == -1 and entries[P].coordinator_epoch == 1


def test_truncation_reopens_a_transaction_and_drops_its_abort_entry(tmp_path):
    plog = open_log(tmp_path)
    plog.append(txn(P, 0), now=NOW)  # 0-1
    plog.append(plain(), now=NOW)  # 2
    plog.append_control(P, 0, False, 0, now=NOW)  # 3
    plog.append(plain(), now=NOW)  # 4
    assert all_aborted(plog) == [AbortedTxn(P, 0, 3, 4)] and plog.last_stable_offset == 5
    plog.truncate_to(3)
    assert all_aborted(plog) == [] and plog.ongoing_transactions() == [(P, 0, 0)]
    assert plog.last_stable_offset == 0 and plog.log_end_offset == 3
    assert txnindex_files(plog) == {"00000000000000000000.txnindex": b""}
    plog.append_control(P, 0, True, 0, now=NOW)
    assert plog.last_stable_offset == 4 and all_aborted(plog) == []
    plog.close()


def test_retention_takes_txnindex_files_with_their_segments_and_lso_stays_above_log_start(tmp_path):
    plog = open_log(tmp_path, file_delete_delay_ms=0)
    plog.append(txn(P, 0), now=NOW)  # 0-1: stays open
    plog.append(txn(Q, 0), now=NOW)  # 2-3
    plog.append_control(Q, 0, False, 0, now=NOW)  # 4
    plog.roll()
    plog.append(plain(), now=NOW)  # 5
    plog.roll()
    assert "00000000000000000000.txnindex" in txnindex_files(plog)
    plog.delete_records_before(5)
    assert txnindex_files(plog) == {}
    assert not list(plog.dir.glob("*.deleted"))
    assert plog.ongoing_transactions() == [(P, 0, 0)]
    assert plog.last_stable_offset == 5 == plog.log_start_offset  # max(first unstable, log start)
    assert plog.aborted_transactions(5, 6) == []
    plog.close()


def test_segment_files_with_txnindex_are_renamed_deleted_first(tmp_path):
    plog = open_log(tmp_path, file_delete_delay_ms=60_000)
    plog.append(txn(P, 0), now=NOW)
    plog.append_control(P, 0, False, 0, now=NOW)
    plog.roll()
    plog.append(plain(), now=NOW)
    plog.delete_records_before(3)
    assert (plog.dir / "00000000000000000000.txnindex.deleted").exists()
    assert not (plog.dir / "00000000000000000000.txnindex").exists()
    plog.close()
    again = PartitionLog.open(plog.dir, plog.config, now=NOW, log_start_offset=3)
    assert not list(again.dir.glob("*.deleted"))  # leftovers go at the next open, as Kafka's
    again.close()


def test_read_committed_view_of_a_log(tmp_path):
    """What a read_committed reader does with `last_stable_offset` and `aborted_transactions`."""
    plog = open_log(tmp_path)
    plog.append(txn(P, 0, n=2), now=NOW)  # 0-1 aborted
    plog.append(txn(Q, 0, n=2), now=NOW)  # 2-3 committed
    plog.append(plain(), now=NOW)  # 4
    plog.append_control(P, 0, False, 0, now=NOW)  # 5
    plog.append_control(Q, 0, True, 0, now=NOW)  # 6
    plog.append(txn(R, 0, n=1), now=NOW)  # 7 open
    lso = plog.last_stable_offset
    assert lso == 7
    aborted = dict((pid, first) for pid, first in plog.aborted_transactions(0, lso))
    seen = []
    for batch in plog.read_batches(0, lso):
        if isinstance(batch, RecordBatch) and (batch.is_control or (
                batch.is_transactional and batch.producer_id in aborted
                and batch.base_offset >= aborted[batch.producer_id])):
            continue
        seen += [r.offset for r in batch.records()]
    assert seen == [2, 3, 4]
    plog.close()


def test_appends_after_recovery_keep_appending_to_the_rebuilt_index(tmp_path):
    plog = open_log(tmp_path)
    plog.append(txn(P, 0), now=NOW)
    plog.append_control(P, 0, False, 0, now=NOW)
    plog.flush()
    os.unlink(plog.dir / "00000000000000000000.txnindex")
    again = PartitionLog.open(plog.dir, plog.config, recovery_point=0, now=NOW)
    again.append(txn(Q, 0), now=NOW)
    again.append_control(Q, 0, False, 0, now=NOW)
    assert all_aborted(again) == [AbortedTxn(P, 0, 2, 3), AbortedTxn(Q, 3, 5, 6)]
    again.close()


def test_read_slice_next_offset_bounds_the_aborted_transactions_of_a_fetch(tmp_path):
    plog = open_log(tmp_path)
    plog.append(txn(P, 0, n=3), now=NOW)  # 0-2
    plog.append(plain(2), now=NOW)  # 3-4
    plog.roll()
    plog.append(plain(), now=NOW)  # 5
    first = plog.read(0, 10)  # one batch (min one message): the next batch starts at 3
    assert first.next_offset == 3
    whole = plog.read(0, 1 << 20)  # the whole first segment: the next segment's base
    assert whole.next_offset == 5
    assert plog.read(5, 1 << 20).next_offset == 6  # the log end
    assert plog.read(0, 1 << 20, max_offset=3).next_offset == 3  # capped at an LSO
    plog.close()


# -- a model of Kafka's rules, against random sequences ---------------------------------------------------
class Model:
    """What Kafka's ProducerStateManager and TransactionIndex hold after the same appends, kept naively."""

    def __init__(self) -> None:
        self.end = 0
        self.ongoing: dict[int, int] = {}
        self.aborted: list[AbortedTxn] = []
        self.visible: dict[int, bytes] = {}  # offset -> value of records a read_committed reader will see
        self.pending: dict[int, list[tuple[int, bytes]]] = {}  # open transactions' records

    def data(self, pid: int | None, n: int, value: bytes) -> None:
        records = [(self.end + i, value) for i in range(n)]
        if pid is None:
            self.visible.update(records)
        else:
            self.ongoing.setdefault(pid, self.end)
            self.pending.setdefault(pid, []).extend(records)
        self.end += n

    def marker(self, pid: int, commit: bool) -> None:
        if pid in self.ongoing:
            first = self.ongoing.pop(pid)
            records = self.pending.pop(pid)
            if commit:
                self.visible.update(records)
            else:
                lso = min(self.ongoing.values()) if self.ongoing else self.end + 1
                self.aborted.append(AbortedTxn(pid, first, self.end, lso))
        self.end += 1

    @property
    def lso(self) -> int:
        return min(self.ongoing.values()) if self.ongoing else self.end


@pytest.mark.parametrize("seed", range(6))
def test_random_sequences_match_kafkas_rules_across_reopens(tmp_path, seed):
    import random
    rng = random.Random(seed)
    plog = open_log(tmp_path, segment_bytes=rng.choice([600, 1500, 100_000]))
    model = Model()
    seqs: dict[int, int] = {}
    for step in range(120):
        op = rng.random()
        pid = rng.choice([P, Q, R])
        if op < 0.45:
            n = rng.randint(1, 3)
            value = b"v%d" % step
            plog.append(build_batch([SimpleRecord(NOW, None, value) for _ in range(n)], producer_id=pid,
                                    producer_epoch=0, base_sequence=seqs.get(pid, 0), is_transactional=True),
                        now=NOW)
            seqs[pid] = seqs.get(pid, 0) + n
            model.data(pid, n, value)
        elif op < 0.6:
            plog.append(build_batch([SimpleRecord(NOW, None, b"plain%d" % step)]), now=NOW)
            model.data(None, 1, b"plain%d" % step)
        elif op < 0.9:
            commit = rng.random() < 0.5
            plog.append_control(pid, 0, commit, 0, now=NOW)
            model.marker(pid, commit)
        else:
            how = rng.choice(["clean", "crash", "crash_no_snapshots"])
            if how == "clean":
                plog.close()
            else:
                plog.flush()
                if how == "crash_no_snapshots":
                    for offset in snapshot_offsets(plog.dir):
                        snapshot_path(plog.dir, offset).unlink()
            plog = PartitionLog.open(plog.dir, plog.config, recovery_point=0 if how != "clean" else plog.log_end_offset,
                                     now=NOW)
        assert plog.last_stable_offset == model.lso, step
        assert [(p, f) for p, _e, f in plog.ongoing_transactions()] == sorted(model.ongoing.items(),
                                                                               key=lambda kv: kv[1])
        assert all_aborted(plog) == model.aborted
    committed = {r.offset: r.value for r in plog.read_records(0, isolation="read_committed")}
    assert committed == {o: v for o, v in model.visible.items() if o < model.lso}
    assert sorted(plog.aborted_transactions(0, model.end)) == sorted((t.producer_id, t.first_offset)
                                                                     for t in model.aborted)
    plog.close()


def test_a_producer_batch_without_a_sequence_is_invalid_record(tmp_path):
    plog = open_log(tmp_path)
    no_seq = build_batch([SimpleRecord(NOW, None, b"x")], producer_id=P, producer_epoch=0, base_sequence=-1,
                         is_transactional=True)
    refused(plog, lambda: plog.append(no_seq, now=NOW), InvalidRecordError)  # LogValidator.validateBatch
    plog.close()
    recompressing = open_log(tmp_path / "gz", compression_type="gzip")  # the general append loop
    refused(recompressing, lambda: recompressing.append(no_seq, now=NOW), InvalidRecordError)
    recompressing.close()


def test_marker_on_a_log_append_time_topic_and_a_marker_that_rolls(tmp_path):
    plog = open_log(tmp_path, message_timestamp_type="LogAppendTime", segment_bytes=320)
    plog.append(txn(P, 0), now=NOW)  # 0-1, 279 bytes: the 78-byte marker does not fit the segment
    assert plog.active.size == 279
    plog.append_control(P, 0, False, 0, now=NOW + 3)
    marker = list(plog.read_batches(2))[0]
    assert marker.is_control and marker.timestamp_type == 1 and marker.max_timestamp == NOW + 3
    assert marker.verify_crc()
    assert [s.base_offset for s in plog.segments] == [0, 2]
    assert txnindex_files(plog) == {"00000000000000000002.txnindex": AbortedTxn(P, 0, 2, 3).to_bytes()}
    assert plog.aborted_transactions(0, 2) == [(P, 0)]  # found in the next segment's index
    plog.close()


@pytest.mark.parametrize("reopen", [False, True])
def test_an_abort_whose_txnindex_write_fails_leaves_no_marker(tmp_path, monkeypatch, reopen):
    """The ABORT marker and its `.txnindex` entry are one write: when the entry cannot be written the marker
    is cut back and KAFKA_STORAGE_ERROR answered (the coordinator retries), so no marker is ever on disk
    with its abort unindexed (read_committed readers would see the aborted records until recovery)."""
    from chronolog.errors import KafkaStorageErrorError
    from chronolog.storage.txnindex import TransactionIndex

    plog = open_log(tmp_path)
    plog.write_retry_ms = 0
    plog.append(plain(2), now=NOW)
    plog.append(txn(P, 0), now=NOW)  # P opens at 2
    before = (plog.log_end_offset, plog.ongoing_transactions(), plog.active.size)
    real = TransactionIndex.append

    def full(self, entry):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(TransactionIndex, "append", full)
    with pytest.raises(KafkaStorageErrorError):
        plog.append_control(P, 0, False, 0, now=NOW)
    assert (plog.log_end_offset, plog.ongoing_transactions(), plog.active.size) == before
    assert all_aborted(plog) == []
    monkeypatch.setattr(TransactionIndex, "append", real)
    if reopen:
        plog.close()
        plog = open_log(tmp_path)
        plog.write_retry_ms = 0
    info = plog.append_control(P, 0, False, 0, now=NOW)  # the coordinator's retry
    assert info.first_offset == 4 and plog.ongoing_transactions() == []
    assert all_aborted(plog) == [AbortedTxn(P, 2, 4, 5)]
    assert plog.aborted_transactions(0, plog.log_end_offset) == [(P, 2)]
