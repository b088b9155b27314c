"""Kafka's log rules (reference spec, section 7), one test each where a rule is observable."""

from __future__ import annotations

import logging
import os
import struct
import time

import pytest

from chronolog.config import TopicConfig
from chronolog.errors import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidTimestampError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
    UnsupportedVersionError,
)
from chronolog.records import (
    CompressionType,
    RecordBatch,
    SimpleRecord,
    TimestampType,
    build_batch,
    iter_batches,
)
from chronolog.storage import LogManager, PartitionLog
from chronolog.storage.checkpoints import read_checkpoint, write_checkpoint
from tests.storage.helpers import NOW, B, batch, open_log


def test_offsets_are_assigned_and_leader_epoch_set(tmp_path):
    plog = open_log(tmp_path)
    a = plog.append(batch(NOW, NOW + 1), now=NOW)
    b = plog.append(batch(NOW + 2), now=NOW)
    assert (a.first_offset, a.last_offset, b.first_offset) == (0, 1, 2)
    batches = list(iter_batches(plog.read(0, 1 << 20).read_bytes()))
    assert [(x.base_offset, x.partition_leader_epoch) for x in batches] == [(0, 0), (2, 0)]
    assert all(x.verify_crc() for x in batches)


def test_log_append_time_overwrites_only_the_batch_header(tmp_path):
    plog = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    raw = batch(5, 6, codec=CompressionType.GZIP)
    info = plog.append(raw, now=NOW)
    assert info.log_append_time == NOW
    (stored,) = iter_batches(plog.read(0, 1 << 20).read_bytes())
    assert stored.timestamp_type == TimestampType.LOG_APPEND_TIME and stored.max_timestamp == NOW
    assert bytes(stored.raw[61:]) == raw[61:]  # compressed records untouched (no recompression)
    assert [r.timestamp for r in stored.records()] == [NOW, NOW]


def test_timestamp_bounds_are_inclusive_and_minus_one_bypasses_them(tmp_path):
    plog = PartitionLog.open(tmp_path / "t-0", TopicConfig.from_kafka(
        {"message.timestamp.before.max.ms": "1000", "message.timestamp.after.max.ms": "500"}))
    plog.append(batch(NOW - 1000, NOW + 500, -1), now=NOW)
    with pytest.raises(InvalidTimestampError):
        plog.append(batch(NOW - 1001), now=NOW)
    with pytest.raises(InvalidTimestampError):
        plog.append(batch(NOW + 501), now=NOW)
    assert plog.log_end_offset == 3


def test_kafka_4_default_rejects_timestamps_more_than_an_hour_ahead(tmp_path):
    plog = PartitionLog.open(tmp_path / "t-0", TopicConfig())
    with pytest.raises(InvalidTimestampError):
        plog.append(batch(NOW + 3_600_001), now=NOW)
    plog.append(batch(NOW - 10**10), now=NOW)  # before.max.ms defaults to unbounded


def test_difference_max_ms_alias_sets_both_bounds():
    cfg = TopicConfig.from_kafka({"message.timestamp.difference.max.ms": "42"})
    assert (cfg.message_timestamp_before_max_ms, cfg.message_timestamp_after_max_ms) == (42, 42)


def test_bad_input_is_rejected_and_nothing_is_stored(tmp_path):
    plog = open_log(tmp_path, max_message_bytes=500)
    good = bytearray(batch(NOW))
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 1
    with pytest.raises(CorruptMessageError):
        plog.append(bad_crc, now=NOW)
    with pytest.raises(CorruptMessageError):
        plog.append(good[:-5], now=NOW)
    with pytest.raises(MessageTooLargeError):
        plog.append(batch(NOW, value=b"x" * 600), now=NOW)
    with pytest.raises(InvalidRecordError):
        plog.append(good + good, now=NOW)  # one v2 batch per partition per produce
    small_segments = open_log(tmp_path / "small", segment_bytes=400)
    with pytest.raises(RecordListTooLargeError):  # UnifiedLog.append: RecordBatchTooLargeException
        small_segments.append(batch(NOW, value=b"x" * 450), now=NOW)
    assert small_segments.log_end_offset == 0
    control = build_batch([SimpleRecord(NOW, b"\0\0\0\0", None)], is_control=True)
    with pytest.raises(InvalidRecordError):
        plog.append(control, now=NOW)
    assert plog.log_end_offset == 0 and plog.size == 0


def test_first_append_is_never_indexed_and_interval_is_strict(tmp_path):
    plog = open_log(tmp_path, index_interval_bytes=200)
    sizes = []
    for i in range(6):
        raw = batch(NOW + i)
        sizes.append(len(raw))
        plog.append(raw, now=NOW)
    seg = plog.active
    # 108-byte batches: after two appends 216 > 200 bytes are pending, so the 3rd append is indexed.
    assert sizes == [B] * 6 and B == 108
    assert [seg.offset_index.entry(i) for i in range(seg.offset_index.entries)] == [(2, 2 * B), (4, 4 * B)]
    assert [seg.time_index.entry(i) for i in range(seg.time_index.entries)] == [(NOW + 2, 2), (NOW + 4, 4)]


def test_time_index_takes_only_growing_maxima_and_final_entry_on_roll(tmp_path):
    plog = open_log(tmp_path, index_interval_bytes=0)
    for ts in (NOW + 5, NOW + 9, NOW + 3, NOW + 9, NOW + 12, NOW + 1):
        plog.append(batch(ts), now=NOW)
    ti = plog.active.time_index
    assert [ti.entry(i) for i in range(ti.entries)] == [(NOW + 9, 1), (NOW + 12, 4)]
    first = plog.active
    plog.roll()
    assert first.time_index.entries == 2  # max (NOW+12 at 4) already present: the final entry adds nothing
    assert first.offset_index.path.stat().st_size == first.offset_index.entries * 8  # trimmed


def test_size_rolling(tmp_path):
    plog = open_log(tmp_path, segment_bytes=350)
    for i in range(10):
        plog.append(batch(NOW + i), now=NOW)
    assert [s.base_offset for s in plog.segments] == [0, 3, 6, 9]
    assert all(s.size <= 350 for s in plog.segments)


def test_time_rolling_uses_first_batch_max_timestamp(tmp_path):
    plog = open_log(tmp_path, segment_ms=1000)
    plog.append(batch(NOW + 500, NOW), now=NOW)       # first batch max = NOW+500
    plog.append(batch(NOW + 1500), now=NOW)           # waited 1000: not > 1000, no roll
    plog.append(batch(NOW + 1501), now=NOW)           # waited 1001 > 1000: roll
    assert [s.base_offset for s in plog.segments] == [0, 3]


def test_time_index_full_rolls_and_reserves_the_last_slot(tmp_path):
    plog = open_log(tmp_path, segment_index_bytes=48, index_interval_bytes=0)  # 4 slots -> 3 usable
    for i in range(8):
        plog.append(batch(NOW + i), now=NOW)
    first = plog.segments[0]
    assert first.time_index.max_entries == 3  # trimmed to its entries; the final entry fit the reserved slot
    assert len(plog.segments) > 1


def test_time_retention_oldest_first_stops_at_first_unexpired(tmp_path, caplog):
    plog = open_log(tmp_path, segment_bytes=220, retention_ms=1000, file_delete_delay_ms=0)
    for ts in (NOW - 5000, NOW - 4000, NOW, NOW - 9000, NOW - 6000, NOW - 100):
        plog.append(batch(ts), now=NOW)
    assert [s.base_offset for s in plog.segments] == [0, 2, 4]
    # segment 0: largest NOW-4000 expired; segment 2: largest NOW -> stop, though segment 4 is expired
    assert plog.delete_old_segments(now=NOW) == 1
    assert plog.log_start_offset == 2 and [s.base_offset for s in plog.segments] == [2, 4]
    assert not list((tmp_path / "t-0").glob("00000000000000000000.*"))


def test_future_timestamp_blocks_retention_with_a_warning(tmp_path, caplog):
    plog = open_log(tmp_path, segment_bytes=120, retention_ms=1000)
    plog.append(batch(NOW + 10**9), now=NOW)
    plog.append(batch(NOW - 10**9), now=NOW)
    with caplog.at_level(logging.WARNING):
        assert plog.delete_old_segments(now=NOW) == 0
    assert "00000000000000000000.log" in caplog.text and "future" in caplog.text


def test_size_retention(tmp_path):
    plog = open_log(tmp_path, segment_bytes=220, retention_bytes=450, file_delete_delay_ms=0)
    for i in range(8):
        plog.append(batch(NOW + i), now=NOW)
    sizes = [s.size for s in plog.segments]
    assert sizes == [2 * B] * 4
    # 864 - 450 = 414 bytes over: the first segment (216) fits in the excess, the second would not.
    assert plog.delete_old_segments(now=NOW) == 1
    assert plog.log_start_offset == 2


def test_deleted_files_wait_for_file_delete_delay(tmp_path):
    plog = open_log(tmp_path, segment_bytes=120, retention_ms=0, file_delete_delay_ms=300)
    plog.append(batch(NOW - 10), now=NOW)
    plog.append(batch(NOW - 5), now=NOW)
    plog.delete_old_segments(now=NOW)
    assert list((tmp_path / "t-0").glob("*.deleted"))
    deadline = time.monotonic() + 60
    while list((tmp_path / "t-0").glob("*.deleted")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not list((tmp_path / "t-0").glob("*.deleted"))


def test_delete_records_and_reads_below_log_start(tmp_path):
    plog = open_log(tmp_path, segment_bytes=220, file_delete_delay_ms=0)
    for i in range(6):
        plog.append(batch(NOW + i), now=NOW)
    assert plog.delete_records_before(3) == 3
    assert [s.base_offset for s in plog.segments] == [2, 4]  # segment 0-1 gone, 2-3 still holds offset 3
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(2, 1000)
    assert plog.read(3, 1000).first_offset == 3
    assert plog.offset_for_timestamp(NOW).offset == 3
    assert plog.offset_for_timestamp(-2).offset == 3


def test_specials_and_unknown_negative_target(tmp_path):
    plog = open_log(tmp_path)
    assert plog.offset_for_timestamp(-3) is None  # no batch holds a max timestamp: no answer, as UnifiedLog
    plog.append(batch(NOW + 3, NOW + 9, NOW + 9), now=NOW)
    plog.append(batch(NOW + 1), now=NOW)
    assert plog.offset_for_timestamp(-1).offset == 4
    assert plog.offset_for_timestamp(-2).offset == 0
    assert plog.offset_for_timestamp(-4).offset == 0
    found = plog.offset_for_timestamp(-3)
    assert (found.timestamp, found.offset) == (NOW + 9, 1)
    with pytest.raises(UnsupportedVersionError):
        plog.offset_for_timestamp(-7)


def test_largest_timestamp_falls_back_to_mtime(tmp_path):
    plog = open_log(tmp_path)
    plog.append(batch(-1), now=NOW)
    seg = plog.active
    os.utime(seg.log_path, (1234.5, 1234.5))
    assert seg.largest_timestamp == 1234500


def test_truncation(tmp_path):
    plog = open_log(tmp_path, segment_bytes=220, index_interval_bytes=0)
    for i in range(6):
        plog.append(batch(NOW + i), now=NOW)
    plog.truncate_to(3)
    assert plog.log_end_offset == 3 and [s.base_offset for s in plog.segments] == [0, 2]
    assert plog.offset_for_timestamp(NOW + 3) is None
    assert plog.append(batch(NOW + 100), now=NOW).first_offset == 3


def test_recovery_truncates_a_torn_tail_and_rebuilds_indexes(tmp_path):
    plog = open_log(tmp_path, index_interval_bytes=0)
    for i in range(5):
        plog.append(batch(NOW + i), now=NOW)
    torn = batch(NOW + 99)[:-7]
    plog.append_raw_for_test(torn)
    for seg in plog.segments:  # simulate a crash: no close, corrupt the index too
        seg.flush()
    idx = plog.active.offset_index.path
    with open(idx, "r+b") as f:
        f.write(struct.pack(">ii", 1000, 99999))
    reopened = PartitionLog.open(tmp_path / "t-0", plog.config)
    assert reopened.log_end_offset == 5 and reopened.active.size == 5 * B
    assert reopened.offset_for_timestamp(NOW + 2).offset == 2
    assert reopened.append(batch(NOW + 7), now=NOW).first_offset == 5


def test_recovery_steps_over_a_corrupt_middle_batch_and_keeps_what_follows(tmp_path):
    """A deliberate difference from Kafka's LogLoader (which truncates here): see storage.corruption."""
    plog = open_log(tmp_path)
    for i in range(5):
        plog.append(batch(NOW + i), now=NOW)
    plog.active.flush()
    with open(plog.active.log_path, "r+b") as f:
        f.seek(2 * B + 70)
        f.write(b"\xff")
    reopened = PartitionLog.open(tmp_path / "t-0", plog.config)
    assert reopened.log_end_offset == 5
    assert [(r.first_offset, r.last_offset) for r in reopened.corrupt_ranges()] == [(2, 2)]
    assert [r.offset for r in reopened.read_records(0)] == [0, 1, 3, 4]


def test_checkpoint_and_partition_metadata_formats(tmp_path):
    write_checkpoint(tmp_path / "cp", {("a", 0): 5, ("b-c", 2): 7})
    assert (tmp_path / "cp").read_text() == "0\n2\na 0 5\nb-c 2 7\n"
    assert read_checkpoint(tmp_path / "cp") == {("a", 0): 5, ("b-c", 2): 7}
    with LogManager(tmp_path / "data") as manager:
        manager.create_topic("t", 1)
    meta = (tmp_path / "data" / "t-0" / "partition.metadata").read_text()
    assert meta.startswith("version: 0\ntopic_id: ") and not meta.endswith("\n")
    assert (tmp_path / "data" / ".kafka_cleanshutdown").exists()


def test_codec_change_recompresses_level_change_does_not(tmp_path):
    plog = open_log(tmp_path, compression_type="zstd")
    plog.append(batch(NOW, NOW + 1, codec=CompressionType.GZIP), now=NOW)
    (stored,) = iter_batches(plog.read(0, 1 << 20).read_bytes())
    assert stored.compression == CompressionType.ZSTD
    assert [r.timestamp for r in stored.records()] == [NOW, NOW + 1]
    assert isinstance(stored, RecordBatch) and stored.verify_crc()
