"""Index file life cycle and the rolling/retention edges of the spec's checklist (items 5-7, 9, 10)."""

from __future__ import annotations

import struct
import threading

import pytest

from chronolog.errors import UnsupportedVersionError
from chronolog.storage import OffsetIndex, PartitionLog, TimeIndex
from chronolog.storage.index import IndexCorruptError
from tests.storage.helpers import NOW, batch, open_log


def test_new_indexes_are_preallocated_to_whole_entries(tmp_path):
    plog = open_log(tmp_path)  # segment.index.bytes default 10485760
    seg = plog.active
    assert seg.offset_index.path.stat().st_size == 10485760   # 1,310,720 slots of 8 bytes
    assert seg.time_index.path.stat().st_size == 10485756     # 873,813 slots of 12 bytes
    small = open_log(tmp_path / "x", segment_index_bytes=100).active
    assert (small.offset_index.path.stat().st_size, small.time_index.path.stat().st_size) == (96, 96)
    assert (small.offset_index.max_entries, small.time_index.max_entries) == (12, 8)


def test_close_trims_adds_the_final_time_entry_and_reopen_reexpands(tmp_path):
    plog = open_log(tmp_path, index_interval_bytes=10**6)  # no periodic entries
    for ts in (NOW + 3, NOW + 8, NOW + 5):
        plog.append(batch(ts), now=NOW)
    assert plog.active.time_index.entries == 0
    plog.close()
    index, timeindex = (tmp_path / "t-0" / f"{0:020d}{s}" for s in (".index", ".timeindex"))
    assert index.stat().st_size == 0
    assert timeindex.read_bytes() == struct.pack(">qi", NOW + 8, 1)  # final entry: running max, its offset
    reopened = PartitionLog.open(tmp_path / "t-0", plog.config)
    assert index.stat().st_size == 10485760 and timeindex.stat().st_size == 10485756
    assert reopened.active.time_index.entries == 1 and reopened.active.max_timestamp_so_far == NOW + 8
    assert reopened.append(batch(NOW + 9), now=NOW).first_offset == 3


def test_an_opened_file_counts_every_slot_as_an_entry(tmp_path):
    path = tmp_path / "00000000000000000100.index"
    path.write_bytes(struct.pack(">ii", 1, 10) + struct.pack(">ii", 5, 90) + bytes(16))  # 2 real + 2 zero slots
    idx = OffsetIndex(path, 100, max_index_size=64)
    assert idx.entries == 4 and idx.is_full() and idx.last_entry() == (100, 0)  # the zero slot is "last"
    with pytest.raises(IndexCorruptError):  # which is how an untrimmed file is caught and rebuilt
        idx.sanity_check()
    idx.truncate_entries(2)
    idx.resize(64)
    assert idx.max_entries == 8 and not idx.is_full() and idx.lookup(103) == (101, 10)
    idx.close()
    assert path.stat().st_size == 16
    tpath = tmp_path / "00000000000000000100.timeindex"
    tpath.write_bytes(struct.pack(">qi", 50, 1) + struct.pack(">qi", 70, 5))
    tidx = TimeIndex(tpath, 100, max_index_size=36)
    assert tidx.entries == 2 and tidx.max_entries == 2 and tidx.is_full()  # last slot reserved
    assert tidx.lookup(60) == (50, 101) and tidx.lookup(49) == (-1, 100)
    tidx.close()


def test_offset_index_full_rolls(tmp_path):
    # 36 bytes: 4 offset slots, 3 time slots; one timestamp keeps the time index at a single entry.
    plog = open_log(tmp_path, segment_index_bytes=36, index_interval_bytes=0)
    for _ in range(9):
        plog.append(batch(NOW), now=NOW)
    first = plog.segments[0]
    assert (first.offset_index.entries, first.time_index.entries) == (4, 1)
    assert [s.base_offset for s in plog.segments] == [0, 5]
    assert [r.offset for r in plog.read_records(0)] == list(range(9))


def test_offset_overflow_rolls(tmp_path):
    seg = open_log(tmp_path).active
    plog_args = dict(segment_bytes=10**9, segment_ms=10**9, jitter_ms=0, max_timestamp=NOW, messages_size=100,
                     now_ms=NOW, created_ms=NOW)
    assert not seg.should_roll(last_offset=2**31 - 1, **plog_args)
    assert seg.should_roll(last_offset=2**31, **plog_args)


def test_empty_segment_never_time_rolls(tmp_path):
    plog = open_log(tmp_path, segment_ms=1000)
    plog.append(batch(NOW), now=NOW)
    plog.roll()
    plog.append(batch(NOW + 10**7), now=NOW + 10**7)  # far past segment.ms, but the active one is empty
    assert [s.base_offset for s in plog.segments] == [0, 1]
    plog.append(batch(NOW + 10**7 + 1001), now=NOW + 10**7)
    assert [s.base_offset for s in plog.segments] == [0, 1, 2]


def test_jitter_is_below_segment_ms(tmp_path):
    plog = open_log(tmp_path, segment_ms=10, segment_jitter_ms=10**6)
    assert all(0 <= plog._new_jitter() < 10 for _ in range(200))


def test_retention_of_everything_rolls_first_and_spares_an_empty_last_segment(tmp_path):
    plog = open_log(tmp_path, segment_bytes=220, retention_ms=1000, file_delete_delay_ms=0)
    for i in range(5):
        plog.append(batch(NOW - 10_000 + i), now=NOW)
    assert plog.delete_old_segments(now=NOW) == 3  # the active segment expired too: rolled, then deleted
    assert [(s.base_offset, s.size) for s in plog.segments] == [(5, 0)]
    assert plog.log_start_offset == plog.log_end_offset == 5
    assert plog.delete_old_segments(now=NOW) == 0  # an empty last segment is never deleted
    assert plog.offset_for_timestamp(NOW - 10_000) is None
    assert plog.append(batch(NOW), now=NOW).first_offset == 5


def test_lookups_stay_right_after_truncation_and_rerolling(tmp_path):
    plog = open_log(tmp_path, segment_bytes=220, file_delete_delay_ms=0)
    for i in range(6):
        plog.append(batch(NOW + i), now=NOW)
    assert plog.offset_for_timestamp(NOW + 3).offset == 3  # caches the segment maxima
    plog.truncate_to(3)
    for i in range(3):
        plog.append(batch(NOW + 100 + i), now=NOW)
    assert [s.base_offset for s in plog.segments] == [0, 2, 4]  # same shape, new maxima
    assert plog.offset_for_timestamp(NOW + 50).offset == 3


def test_latest_tiered_without_tiering_is_none_and_pending_upload_unsupported(tmp_path):
    """-5 (KIP-1005) without tiered storage: no offset (ListOffsets -1/-1), as Kafka's UnifiedLog; -6 (delayed
    upload) is not built here."""
    plog = open_log(tmp_path)
    plog.append(batch(NOW), now=NOW)
    assert plog.offset_for_timestamp(-5) is None
    with pytest.raises(UnsupportedVersionError):
        plog.offset_for_timestamp(-6)


def test_appends_and_retention_from_two_threads(tmp_path):
    plog = open_log(tmp_path, segment_bytes=400, retention_ms=1000, file_delete_delay_ms=0)
    errors: list[BaseException] = []
    done = threading.Event()

    def writer() -> None:
        try:
            for i in range(400):
                plog.append(batch(NOW - 5000 + i, NOW + i), now=NOW)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            done.set()

    def cleaner() -> None:
        try:
            while not done.is_set():
                plog.delete_old_segments(now=NOW + 10**6)
                plog.offset_for_timestamp(NOW + 100)
        except BaseException as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=writer), threading.Thread(target=cleaner)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert plog.log_end_offset == 800
    offsets = [r.offset for r in plog.read_records(0)]
    assert offsets == list(range(plog.log_start_offset, 800))
    for seg in plog.segments:
        seg.sanity_check()
