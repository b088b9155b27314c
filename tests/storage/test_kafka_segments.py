"""The partition written by a real Kafka broker: open, verify, look up, rebuild indexes byte for byte."""

from __future__ import annotations

import shutil

import pytest

from chronolog.storage import LogSegment, PartitionLog, TimeIndex


def test_opens_read_only_and_answers_the_documented_lookups(kafka_segments_dir):
    plog = PartitionLog.open_readonly(kafka_segments_dir)
    assert [s.base_offset for s in plog.segments] == [0, 7729, 15363, 22964]
    assert plog.log_end_offset == 30565
    ti = plog.segments[-1].time_index
    assert ti.entry(0) == (1753819244270, 22964 + 30)
    assert ti.last_entry() == (1753819281929, 22964 + 7600)
    assert ti.lookup(1753819246011) == (1753819245863, 22964 + 300)
    assert ti.lookup(1753819281927) == (1753819281864, 22964 + 7590)


def test_offset_for_timestamp_matches_a_scan_of_every_record(kafka_segments_dir):
    plog = PartitionLog.open_readonly(kafka_segments_dir)
    records = list(plog.read_records(0))
    assert len(records) == 30565
    timestamps = [r.timestamp for r in records]
    lo, hi = min(timestamps), max(timestamps)
    for target in range(lo - 5, hi + 5, (hi - lo) // 97):
        want = next((r for r in records if r.timestamp >= target), None)
        got = plog.offset_for_timestamp(target)
        assert (got.offset, got.timestamp) == (want.offset, want.timestamp) if want else got is None
    assert plog.offset_for_timestamp(hi + 1) is None
    assert plog.offset_for_timestamp(-3).timestamp == hi


@pytest.mark.parametrize("base", [0, 7729, 15363, 22964])
def test_rebuilt_indexes_reproduce_kafkas_files(kafka_segments_dir, tmp_path, base):
    name = f"{base:020d}"
    shutil.copy(kafka_segments_dir / f"{name}.log", tmp_path)
    seg = LogSegment(tmp_path, base, index_interval_bytes=4096, time_index_style="max_record")
    seg.close()  # rebuilt because the index files were missing; close appends the final entry and trims
    for suffix in (".index", ".timeindex"):
        assert (tmp_path / f"{name}{suffix}").read_bytes() == (kafka_segments_dir / f"{name}{suffix}").read_bytes()


def test_kafka_38_style_rebuild_differs_only_in_offsets_and_still_answers_right(kafka_segments_dir, tmp_path):
    shutil.copy(kafka_segments_dir / "00000000000000022964.log", tmp_path)
    seg = LogSegment(tmp_path, 22964, index_interval_bytes=4096)
    seg.close()
    ours = TimeIndex(tmp_path / "00000000000000022964.timeindex", 22964, writable=False)
    kafkas = TimeIndex(kafka_segments_dir / "00000000000000022964.timeindex", 22964, writable=False)
    assert ours.entries == kafkas.entries
    for slot in range(ours.entries):
        assert ours.entry(slot).timestamp == kafkas.entry(slot).timestamp
        assert ours.entry(slot).offset >= kafkas.entry(slot).offset
