"""Corruption inside segments: reported with its offsets, stepped over, never the end of the log.

Kafka's LogLoader truncates at the first invalid batch and deletes every later segment (fine with replicas
to refetch from); chronolog keeps everything that is intact (`chronolog.storage.corruption`)."""

from __future__ import annotations

import os

from chronolog.storage import PartitionLog
from tests.storage.helpers import NOW, B, batch, open_log


def _log_with_segments(tmp_path, n_records: int = 12, per_segment: int = 4) -> PartitionLog:
    plog = open_log(tmp_path, segment_bytes=per_segment * B, index_interval_bytes=0)
    for i in range(n_records):
        plog.append(batch(NOW + i), now=NOW)
    for seg in plog.segments:
        seg.flush()
    assert [s.base_offset for s in plog.segments] == list(range(0, n_records, per_segment))
    return plog


def _overwrite(path, position: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(data)


def _unclean_reopen(plog: PartitionLog) -> PartitionLog:
    """Reopen as after a crash: nothing closed, recovery from offset 0."""
    return PartitionLog.open(plog.dir, plog.config, recovery_point=0)


def test_a_zero_filled_hole_in_an_old_segment_keeps_the_later_segments(tmp_path):
    plog = _log_with_segments(tmp_path)
    _overwrite(plog.segments[1].log_path, B, b"\0" * (2 * B))  # offsets 5 and 6 lost
    reopened = _unclean_reopen(plog)
    assert [s.base_offset for s in reopened.segments] == [0, 4, 8]
    assert reopened.log_end_offset == 12
    (bad,) = reopened.corrupt_ranges()
    assert (bad.segment_base, bad.start, bad.end, bad.first_offset, bad.last_offset) == (4, B, 3 * B, 5, 6)
    assert "offsets 5-6" in bad.describe()
    assert [r.offset for r in reopened.read_records(0)] == [0, 1, 2, 3, 4, 7, 8, 9, 10, 11]
    assert reopened.segments[1].size == 4 * B  # an old segment is never truncated
    # Lookups by time skip the hole: the first record at or after NOW+5 is now offset 7.
    assert reopened.offset_for_timestamp(NOW + 5).offset == 7
    assert reopened.append(batch(NOW + 50), now=NOW).first_offset == 12


def test_garbage_at_the_end_of_an_old_segment_covers_offsets_up_to_the_next_segment(tmp_path):
    plog = _log_with_segments(tmp_path)
    _overwrite(plog.segments[0].log_path, 3 * B, os.urandom(B))
    reopened = _unclean_reopen(plog)
    (bad,) = reopened.corrupt_ranges()
    assert (bad.start, bad.end, bad.first_offset, bad.last_offset) == (3 * B, 4 * B, 3, 3)
    assert [r.offset for r in reopened.read_records(0)] == [0, 1, 2, *range(4, 12)]


def test_a_torn_tail_of_the_last_segment_is_still_truncated(tmp_path):
    plog = _log_with_segments(tmp_path)
    with open(plog.active.log_path, "ab") as f:
        f.write(batch(NOW + 99)[:-9])
    reopened = _unclean_reopen(plog)
    assert reopened.corrupt_ranges() == []
    assert reopened.active.size == 4 * B and reopened.log_end_offset == 12


def test_a_fetch_stops_before_a_corrupt_range_and_the_next_one_starts_after_it(tmp_path):
    plog = _log_with_segments(tmp_path)
    _overwrite(plog.active.log_path, B, b"\0" * B)  # offset 9 lost, inside the active segment
    reopened = _unclean_reopen(plog)
    first = reopened.read(8, 1 << 20)
    assert (first.first_offset, first.size) == (8, B)  # contiguous bytes only
    second = reopened.read(9, 1 << 20)
    assert second.first_offset == 10 and second.size == 2 * B
    assert reopened.append(batch(NOW + 50), now=NOW).first_offset == 12


def test_structural_damage_is_found_by_readers_after_a_clean_start(tmp_path):
    """No recovery runs after a clean stop; the first read that meets a bad size resynchronises."""
    plog = _log_with_segments(tmp_path)
    plog.close()
    _overwrite(plog.segments[1].log_path, 2 * B + 8, b"\xff\xff\xff\xf0")  # a negative batch length
    reopened = PartitionLog.open(plog.dir, plog.config, recover=False)
    assert reopened.corrupt_ranges() == []
    assert [r.offset for r in reopened.read_records(0)] == [0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11]
    (bad,) = reopened.corrupt_ranges()
    assert (bad.segment_base, bad.first_offset, bad.last_offset) == (4, 6, 6)


def test_a_read_only_copy_reports_corruption_without_writing(tmp_path):
    plog = _log_with_segments(tmp_path)
    plog.close()
    _overwrite(plog.segments[0].log_path, B + 16, b"\x09")  # unknown magic
    before = {p.name: p.read_bytes() for p in plog.dir.iterdir()}
    ro = PartitionLog.open_readonly(plog.dir)
    assert [r.offset for r in ro.read_records(0)] == [0, *range(2, 12)]
    assert [(r.first_offset, r.last_offset) for r in ro.corrupt_ranges()] == [(1, 1)]
    assert {p.name: p.read_bytes() for p in plog.dir.iterdir()} == before
