"""Idempotent producers' state per partition and its snapshot files (`storage.producers`): Kafka's
file format, snapshots where Kafka takes them, and a retry recognised after a restart however many
segments back the producer's last batch is."""

from __future__ import annotations

import struct
import time

import pytest

from chronolog.errors import InvalidProducerEpochError, OutOfOrderSequenceNumberError
from chronolog.records import SimpleRecord, build_batch
from chronolog.storage import PartitionLog
from chronolog.storage.producers import (
    BatchMetadata,
    CorruptSnapshotError,
    ProducerEntry,
    ProducerStates,
    snapshot_offsets,
    snapshot_path,
)
from tests.storage.helpers import NOW, open_log

PID, OTHER = 4242, 777


def idempotent(pid: int, seq: int, n: int = 3, *, epoch: int = 0, ts: int = NOW) -> bytes:
    return build_batch([SimpleRecord(ts + i, None, b"x" * 200) for i in range(n)], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq)


def reopen(plog: PartitionLog, **kwargs) -> PartitionLog:
    """The same directory opened again (after a close, or without one: a crash)."""
    return PartitionLog.open(plog.dir, plog.config, now=kwargs.pop("now", NOW + 1000), **kwargs)


# -- the file format ---------------------------------------------------------------------------------
def test_kafka_written_snapshots_read_and_rewrite_to_the_same_bytes(kafka_segments_dir):
    files = sorted(kafka_segments_dir.glob("*.snapshot"))
    assert files
    for path in files:
        data = path.read_bytes()
        entries = ProducerStates.from_bytes(data)
        assert len(entries) == (len(data) - 10) // 46 == 1
        e = entries[0]
        assert e.producer_id >= 0 and e.epoch >= 0 and e.batches and e.batches[0].last_offset >= 0
        states = ProducerStates()
        states.producers = {x.producer_id: x for x in entries}
        assert states.to_bytes() == data
        # What Kafka wrote in it is the last batch below the snapshot's offset, as the .log holds it.
        at = int(path.name.split(".")[0])
        (last,) = [b for b in PartitionLog.open_readonly(kafka_segments_dir).read_batches(at - 1, at)]
        meta = e.batches[-1]
        assert (last.producer_id, last.producer_epoch, last.last_offset, last.max_timestamp) == (
            e.producer_id, e.epoch, meta.last_offset, meta.timestamp) and meta.last_offset == at - 1
        assert (last.base_sequence, last.base_sequence + last.last_offset_delta) == (meta.first_seq, meta.last_seq)


def test_an_empty_snapshot_is_ten_bytes_as_in_kafka():
    data = ProducerStates().to_bytes()
    assert len(data) == 10 and ProducerStates.from_bytes(data) == []


@pytest.mark.parametrize("damage", ["crc", "version", "truncated", "count"])
def test_damaged_snapshot_bytes_are_refused(damage):
    states = ProducerStates()
    states.update(PID, 1, 0, 10, 12, NOW)
    data = bytearray(states.to_bytes())
    if damage == "crc":
        data[-1] ^= 1
    elif damage == "version":
        struct.pack_into(">h", data, 0, 2)
    elif damage == "truncated":
        del data[-3:]
    else:
        struct.pack_into(">i", data, 6, 5)
    with pytest.raises(CorruptSnapshotError):
        ProducerStates.from_bytes(bytes(data))


# -- sequence rules ------------------------------------------------------------------------------------
def test_retries_gaps_fencing_and_a_new_epoch():
    states = ProducerStates()
    assert states.duplicate_of(PID, 0, 7, 9) is None  # unknown producer: may start anywhere
    states.update(PID, 0, 0, 100, 102, NOW)  # sequences 0-2 at offsets 100-102
    states.update(PID, 0, 3, 103, 104, NOW)  # 3-4 at 103-104
    assert states.duplicate_of(PID, 0, 0, 2) == 100
    assert states.duplicate_of(PID, 0, 3, 4) == 103
    assert states.duplicate_of(PID, 0, 5, 9) is None  # the next one
    with pytest.raises(OutOfOrderSequenceNumberError):
        states.duplicate_of(PID, 0, 7, 9)
    with pytest.raises(InvalidProducerEpochError):
        states.duplicate_of(PID, -1, 5, 9)
    assert states.duplicate_of(PID, 1, 0, 0) is None  # a bumped epoch starts over
    states.update(PID, 1, 0, 105, 105, NOW)
    assert states.producers[PID].batches == [BatchMetadata(0, 105, 0, NOW)]


def test_only_the_last_five_batches_are_remembered_and_sequences_wrap():
    states = ProducerStates()
    seq = 2**31 - 8
    for i in range(7):
        states.update(PID, 0, seq, 10 * i, 10 * i + 2, NOW)
        seq = (seq + 3) % 2**31
    assert len(states.producers[PID].batches) == 5
    assert states.producers[PID].batches[-1].last_seq == (2**31 - 8 + 20) % 2**31
    assert states.duplicate_of(PID, 0, seq, seq + 2) is None  # continues across the wrap
    with pytest.raises(OutOfOrderSequenceNumberError):  # the first batch is forgotten: no longer a retry
        states.duplicate_of(PID, 0, 2**31 - 8, 2**31 - 6)


def test_producers_expire_by_the_max_timestamp_of_their_last_batch():
    states = ProducerStates()
    states.update(PID, 0, 0, 0, 2, NOW)
    states.update(OTHER, 0, 0, 3, 5, NOW + 5000)
    assert states.expire(NOW + 10_000, 10_000) == 1
    assert list(states.producers) == [OTHER]


# -- the partition log ---------------------------------------------------------------------------------
def test_snapshots_are_taken_at_each_roll_and_at_a_clean_close(tmp_path):
    plog = open_log(tmp_path, segment_bytes=2000)
    plog.append(idempotent(PID, 0), now=NOW)
    for i in range(1, 8):
        plog.append(idempotent(OTHER, 3 * (i - 1)), now=NOW)
    bases = [s.base_offset for s in plog.segments]
    assert len(bases) >= 3
    assert snapshot_offsets(plog.dir) == bases[1:]  # one per roll, at the new segment's base
    end = plog.log_end_offset
    plog.close()
    assert snapshot_offsets(plog.dir) == bases[1:] + [end]
    last = ProducerStates.from_bytes(snapshot_path(plog.dir, end).read_bytes())
    assert {e.producer_id: (e.batches[0].first_offset, e.batches[0].last_seq) for e in last} == {
        PID: (0, 2), OTHER: (end - 3, 20)}


@pytest.mark.parametrize("clean", [True, False], ids=["clean-close", "crash"])
def test_a_retry_is_recognised_after_a_restart_with_the_producer_many_segments_back(tmp_path, clean):
    plog = open_log(tmp_path, segment_bytes=2000)
    plog.append(idempotent(PID, 0), now=NOW)
    for i in range(12):  # six segments of another producer's batches after it
        plog.append(idempotent(OTHER, 3 * i), now=NOW)
    assert plog.segments[-1].base_offset > plog.segments[2].base_offset > 0
    if clean:
        plog.close()
    again = reopen(plog, recover=not clean)
    assert again.producer_duplicate(PID, 0, 0, 2) == 0  # the same batch again: answered with offset 0
    assert again.producer_duplicate(OTHER, 0, 33, 2) == again.log_end_offset - 3
    with pytest.raises(OutOfOrderSequenceNumberError):
        again.producer_duplicate(PID, 0, 5, 2)
    again.append(idempotent(PID, 3), now=NOW)  # and it goes on where it was
    assert again.producer_duplicate(PID, 0, 3, 2) == again.log_end_offset - 3
    again.close()


def test_a_corrupt_newest_snapshot_falls_back_to_an_older_one_and_the_log(tmp_path, caplog):
    plog = open_log(tmp_path, segment_bytes=2000)
    plog.append(idempotent(PID, 0), now=NOW)
    for i in range(6):
        plog.append(idempotent(OTHER, 3 * i), now=NOW)
    plog.append(idempotent(PID, 3), now=NOW)
    pid_offset = plog.log_end_offset - 3
    plog.close()
    newest = snapshot_offsets(plog.dir)[-1]
    data = bytearray(snapshot_path(plog.dir, newest).read_bytes())
    data[-1] ^= 0xFF
    snapshot_path(plog.dir, newest).write_bytes(bytes(data))
    again = reopen(plog)
    assert newest not in snapshot_offsets(plog.dir)
    assert "not usable" in caplog.text
    assert again.producer_duplicate(PID, 0, 3, 2) == pid_offset  # replayed from the older snapshot on
    assert again.producer_duplicate(PID, 0, 0, 2) == 0  # its first batch came from the older snapshot
    again.close()


def test_without_snapshots_the_log_is_replayed_from_its_start(tmp_path):
    plog = open_log(tmp_path, segment_bytes=2000)
    plog.append(idempotent(PID, 0), now=NOW)
    plog.append(idempotent(OTHER, 0), now=NOW)
    plog.close()
    for offset in snapshot_offsets(plog.dir):  # a data dir from before snapshots were kept
        snapshot_path(plog.dir, offset).unlink()
    again = reopen(plog)
    assert again.producer_duplicate(PID, 0, 0, 2) == 0
    again.close()


def test_producers_idle_past_the_expiration_are_not_loaded(tmp_path):
    plog = open_log(tmp_path, segment_bytes=2000)
    plog.append(idempotent(PID, 0, ts=NOW), now=NOW)
    plog.append(idempotent(OTHER, 0, ts=NOW + 50_000), now=NOW)
    plog.close()
    again = reopen(plog, now=NOW + 60_000, producer_expiration_ms=30_000)
    assert set(again.producers.producers) == {OTHER}
    assert again.expire_producers(NOW + 90_000) == 1 and len(again.producers) == 0
    again.close()


def test_truncation_takes_the_producers_back_to_the_truncation_point(tmp_path):
    recent = int(time.time() * 1000)  # truncation reloads the state at the current time, expiring old producers
    plog = open_log(tmp_path, segment_bytes=2000)
    plog.append(idempotent(PID, 0, ts=recent), now=recent)
    for i in range(6):
        plog.append(idempotent(OTHER, 3 * i, ts=recent), now=recent)
    cut = plog.log_end_offset
    plog.append(idempotent(PID, 3, ts=recent), now=recent)
    plog.roll()
    plog.append(idempotent(PID, 6, ts=recent), now=recent)
    plog.truncate_to(cut)
    assert all(offset <= cut for offset in snapshot_offsets(plog.dir))
    assert plog.producer_duplicate(PID, 0, 0, 2) == 0
    assert plog.producer_duplicate(PID, 0, 3, 2) is None  # written after the cut: gone, so not a retry
    plog.close()


def test_retention_deletes_the_snapshots_of_deleted_segments(tmp_path):
    plog = open_log(tmp_path, segment_bytes=2000, retention_ms=1000, file_delete_delay_ms=0)
    for i in range(8):
        plog.append(idempotent(OTHER, 3 * i, ts=NOW), now=NOW)
    plog.append(idempotent(OTHER, 24, ts=NOW + 10_000), now=NOW + 10_000)
    bases = {s.base_offset for s in plog.segments}
    before = set(snapshot_offsets(plog.dir))
    assert plog.delete_old_segments(now=NOW + 5000) > 0
    deleted = bases - {s.base_offset for s in plog.segments}
    assert deleted & before  # segments that had snapshots were deleted...
    assert set(snapshot_offsets(plog.dir)) == before - deleted  # ...and their snapshots with them, only those
    plog.close()


def test_entries_keep_kafka_fields_they_do_not_use():
    states = ProducerStates()
    states.producers[PID] = ProducerEntry(PID, 3, [BatchMetadata(9, 50, 2, NOW)], NOW, coordinator_epoch=4)
    (e,) = ProducerStates.from_bytes(states.to_bytes())
    assert (e.epoch, e.batches, e.coordinator_epoch, e.txn_first_offset) == (3, [BatchMetadata(9, 50, 2, NOW)], 4, -1)


def test_the_log_manager_forgets_expired_producers_on_its_schedule(tmp_path):
    from chronolog.config import BrokerConfig
    from chronolog.storage import LogManager

    manager = LogManager(tmp_path, BrokerConfig({"producer.id.expiration.ms": "2000",
                                                 "producer.id.expiration.check.interval.ms": "100"}))
    manager.startup()
    try:
        manager.create_topic("t", 1)
        now = int(time.time() * 1000)
        plog = manager.get_log("t", 0)
        plog.append(idempotent(PID, 0, ts=now - 1500))
        plog.append(idempotent(OTHER, 0, ts=now + 60_000))
        assert set(plog.producers.producers) == {PID, OTHER}
        deadline = time.monotonic() + 60
        while PID in plog.producers.producers and time.monotonic() < deadline:
            time.sleep(0.05)
        assert set(plog.producers.producers) == {OTHER}
    finally:
        manager.shutdown()


def test_a_snapshot_that_cannot_be_written_does_not_stop_appends(tmp_path, monkeypatch, caplog):
    plog = open_log(tmp_path, segment_bytes=2000)

    def refuse(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ProducerStates, "write_snapshot", refuse)
    for i in range(6):  # rolls, each trying a snapshot
        plog.append(idempotent(PID, 3 * i), now=NOW)
    assert len(plog.segments) > 2 and snapshot_offsets(plog.dir) == []
    assert "not written" in caplog.text
    plog.close()
    monkeypatch.undo()
    again = reopen(plog)  # no snapshot: the log is replayed from its start
    assert again.producer_duplicate(PID, 0, 15, 2) == again.log_end_offset - 3
    again.close()


def test_an_empty_log_writes_no_snapshot(tmp_path):
    plog = open_log(tmp_path)
    plog.close()
    assert snapshot_offsets(plog.dir) == []


@pytest.mark.parametrize("codec", ["producer", "gzip"])  # gzip: the topic recompresses (append's general loop)
def test_append_answers_a_retry_with_the_first_writes_offsets_and_writes_nothing(tmp_path, codec):
    plog = open_log(tmp_path, compression_type=codec)
    first = plog.append(idempotent(PID, 0), now=NOW)
    plog.append(idempotent(OTHER, 0), now=NOW)
    end, size = plog.log_end_offset, plog.size
    retry = plog.append(idempotent(PID, 0), now=NOW)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (first.first_offset, first.last_offset)
    assert (plog.log_end_offset, plog.size) == (end, size)
    with pytest.raises(OutOfOrderSequenceNumberError):
        plog.append(idempotent(PID, 9), now=NOW)
    assert (plog.log_end_offset, plog.size) == (end, size)
    assert not plog.append(idempotent(PID, 0, epoch=1), now=NOW).duplicate  # a new epoch: written
    end, size = plog.log_end_offset, plog.size
    with pytest.raises(InvalidProducerEpochError):
        plog.append(idempotent(PID, 3, epoch=0), now=NOW)
    assert (plog.log_end_offset, plog.size) == (end, size)
    plog.close()
