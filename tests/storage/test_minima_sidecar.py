"""The `<base>.chronolog-minima` sidecar: written when a segment stops being active, trusted only while it
matches the `.log` file, removed with the segment, rebuilt by recovery, absent for Kafka-written dirs."""

from __future__ import annotations

import os
import random
import shutil

from chronolog.records import iter_batches
from chronolog.storage import PartitionLog
from chronolog.storage.minima import CHUNK_BYTES, MINIMA_SUFFIX, SegmentMinima, minima_path
from tests.storage.helpers import NOW, batch, open_log


def fill(plog: PartitionLog, n_batches: int, seed: int = 7, per_batch: int = 20) -> list[int]:
    """Out-of-order timestamps (a late record now and then); returns every timestamp in offset order."""
    rng = random.Random(seed)
    out = []
    for i in range(n_batches):
        stamps = [NOW + (i * per_batch + j) * 10 - (rng.randint(0, 50_000) if rng.random() < 0.05 else 0)
                  for j in range(per_batch)]
        plog.append(batch(*stamps))
        out += stamps
    return out


def true_min(seg_path) -> int:
    return min(r.timestamp for b in iter_batches(seg_path.read_bytes()) for r in b.records())


def sidecars(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if MINIMA_SUFFIX in p.name)


def test_roll_writes_a_sidecar_that_reopen_uses_without_scanning(tmp_path):
    plog = open_log(tmp_path, segment_bytes=60_000)
    fill(plog, 120)
    assert len(plog.segments) >= 3
    inactive = plog.segments[:-1]
    for seg in inactive:  # written at roll, before any close
        raw = minima_path(seg.dir, seg.base_offset).read_bytes()
        claim = SegmentMinima.from_bytes(raw, seg.base_offset)
        assert claim is not None and claim.covered_end == seg.size
        assert claim.min_timestamp == true_min(seg.log_path)
    assert not minima_path(plog.dir, plog.active.base_offset).exists()  # the active one: only at close
    plog.close()
    assert len(sidecars(plog.dir)) == len(plog.segments)

    ro = PartitionLog.open_readonly(plog.dir)
    for seg in ro.segments:
        entries = seg.time_minima()
        # Chunks (batches == 0) come from the file; a scan would give one entry per batch.
        assert entries and all(e.batches == 0 for e in entries)
        assert seg.min_timestamp() == true_min(seg.log_path)


def test_chunks_cover_big_segments_in_pieces(tmp_path):
    plog = open_log(tmp_path, segment_bytes=4 * CHUNK_BYTES)
    fill(plog, 1200, per_batch=25)
    plog.close()
    seg = PartitionLog.open_readonly(plog.dir).segments[0]
    entries = seg.time_minima()
    assert len(entries) >= 3
    assert [e.position for e in entries][0] == 0
    assert all(a.end == b.position for a, b in zip(entries, entries[1:], strict=False))
    assert entries[-1].end == seg.size
    for e in entries:
        data = seg.pread(e.position, e.end - e.position)
        assert e.min_timestamp == min(r.timestamp for b in iter_batches(data) for r in b.records())


def test_corrupt_or_foreign_sidecar_falls_back_to_scanning(tmp_path):
    plog = open_log(tmp_path, segment_bytes=60_000)
    fill(plog, 60)
    plog.close()
    path = minima_path(plog.dir, 0)
    raw = bytearray(path.read_bytes())
    raw[60] ^= 0xFF  # a torn or damaged file: its CRC fails
    path.write_bytes(bytes(raw))
    seg = PartitionLog.open_readonly(plog.dir).segments[0]
    assert all(e.batches == 1 for e in seg.time_minima())
    assert seg.min_timestamp() == true_min(seg.log_path)
    # Another segment's (valid) file under this name: wrong base offset, rejected.
    other = plog.segments[1]
    shutil.copy(minima_path(plog.dir, other.base_offset), path)
    assert SegmentMinima.from_bytes(path.read_bytes(), 0) is None
    assert PartitionLog.open_readonly(plog.dir).segments[0].min_timestamp() == true_min(seg.log_path)


def test_a_rewritten_log_under_an_old_sidecar_is_detected(tmp_path):
    """What a broker that does not know the sidecar can do: truncate the segment and write other batches
    (here with much older timestamps) past the covered end. The header checks catch it."""
    plog = open_log(tmp_path, segment_bytes=60_000)
    fill(plog, 60)
    plog.close()
    seg0 = plog.segments[0]
    log_path = seg0.log_path
    # A reader in this process has scanned nothing yet but read the sidecar; it also remembers nothing
    # stale after the rewrite (its own memory is checked the same way).
    assert PartitionLog.open_readonly(plog.dir).segments[0].min_timestamp() == true_min(log_path)
    data = log_path.read_bytes()
    batches = list(iter_batches(data))
    cut = sum(b.size_in_bytes for b in batches[: len(batches) // 2])
    keep = data[:cut]
    # Re-append the second half with timestamps an hour earlier and the same offsets.
    from chronolog.records import SimpleRecord, build_batch
    tail = b"".join(build_batch([SimpleRecord(r.timestamp - 3_600_000, None, r.value) for r in b.records()],
                                base_offset=b.base_offset) for b in batches[len(batches) // 2:])
    log_path.write_bytes(keep + tail)
    assert len(keep + tail) >= len(data) - 64  # about the same size: only the headers tell
    seg = PartitionLog.open_readonly(plog.dir).segments[0]
    assert seg.min_timestamp() == true_min(log_path) < NOW


def reopen_clean(plog: PartitionLog) -> PartitionLog:
    """Open again as after a clean shutdown (the manager opens without recovery then; with recovery the
    active segment, which holds the recovery point, would be recovered as LogLoader does)."""
    return PartitionLog.open(plog.dir, plog.config, recover=False, recovery_point=plog.log_end_offset)


def test_truncation_and_retention_remove_sidecars(tmp_path):
    plog = open_log(tmp_path, segment_bytes=60_000, file_delete_delay_ms=0)
    fill(plog, 200)
    bases = [s.base_offset for s in plog.segments]
    assert len(bases) >= 4
    plog.close()
    assert minima_path(plog.dir, bases[-1]).exists()  # the clean close wrote the active prefix
    plog = reopen_clean(plog)
    assert plog.active._minima is not None  # tracking resumed from it, without a scan
    # Truncation into the second-to-last segment: later segments go (with their sidecars) and the one
    # left active loses its file before it shrinks.
    target = bases[-2] + 5
    plog.truncate_to(target)
    names = sidecars(plog.dir)
    assert f"{bases[-1]:020d}{MINIMA_SUFFIX}" not in names
    assert f"{bases[-2]:020d}{MINIMA_SUFFIX}" not in names
    # Appends after truncation with older timestamps; the prefix written at close must say so.
    plog.append(batch(NOW - 10_000_000, NOW))
    plog.close()
    claim = SegmentMinima.from_bytes(minima_path(plog.dir, bases[-2]).read_bytes(), bases[-2])
    assert claim is not None and claim.min_timestamp == true_min(plog.active.log_path) == NOW - 10_000_000
    assert claim.covered_end == plog.active.size
    # Retention and DeleteRecords: the sidecar is renamed and deleted with its segment.
    plog = reopen_clean(plog)
    plog.delete_records_before(bases[2])
    assert sidecars(plog.dir) == [f"{b:020d}{MINIMA_SUFFIX}" for b in bases[2:-1]]
    plog.close()


def test_recovery_rebuilds_and_orphans_go(tmp_path):
    plog = open_log(tmp_path, segment_bytes=60_000)
    fill(plog, 80)
    plog.close()
    for p in plog.dir.glob("*" + MINIMA_SUFFIX):
        p.unlink()
    (plog.dir / f"{99_999_999:020d}{MINIMA_SUFFIX}").write_bytes(b"orphan")
    (plog.dir / f"{0:020d}{MINIMA_SUFFIX}.tmp").write_bytes(b"half written")
    from chronolog.config import TopicConfig
    from tests.storage.helpers import WIDE
    cfg = TopicConfig.from_kafka({**WIDE, "segment.bytes": "60000"})
    again = PartitionLog.open(plog.dir, cfg, recovery_point=0)  # as after a crash: every segment recovered
    names = sidecars(again.dir)
    assert names == [f"{s.base_offset:020d}{MINIMA_SUFFIX}" for s in again.segments[:-1]]
    for seg in again.segments[:-1]:
        claim = SegmentMinima.from_bytes(minima_path(seg.dir, seg.base_offset).read_bytes(), seg.base_offset)
        assert claim.min_timestamp == true_min(seg.log_path)
    # The active segment was rebuilt too: it tracks appends and writes its prefix at close.
    again.append(batch(NOW - 1))
    again.close()
    active = again.segments[-1]
    claim = SegmentMinima.from_bytes(minima_path(active.dir, active.base_offset).read_bytes(), active.base_offset)
    assert claim.covered_end == active.size and claim.min_timestamp == true_min(active.log_path)


def test_bytes_written_around_the_tracker_stop_the_claim(tmp_path):
    plog = open_log(tmp_path)
    plog.append(batch(NOW, NOW + 1))
    plog.append_raw_for_test(batch(NOW - 99_999))  # reaches the file without append's minimum
    assert plog.active.min_timestamp() == NOW - 99_999
    plog.close()
    assert not minima_path(plog.dir, 0).exists()


def test_kafka_written_dir_has_no_sidecar_and_is_still_exact(kafka_segments_dir, tmp_path):
    ro = PartitionLog.open_readonly(kafka_segments_dir)
    assert not any(MINIMA_SUFFIX in p.name for p in kafka_segments_dir.iterdir())
    for seg in ro.segments:
        assert seg.min_timestamp() == true_min(seg.log_path)
    # A second open in the same process reuses what the first one scanned (validated the same way).
    again = PartitionLog.open_readonly(kafka_segments_dir)
    assert all(e.batches == 0 for e in again.segments[0].time_minima())
    assert again.segments[0].min_timestamp() == ro.segments[0].min_timestamp()
    # A copy served by chronolog: no sidecar for the inactive segments it did not recover, and no scan
    # at open for the active one; answers stay exact.
    copy = tmp_path / "kafka-0"
    shutil.copytree(kafka_segments_dir, copy)
    os.chmod(copy, 0o755)
    for p in copy.iterdir():
        os.chmod(p, 0o644)
    served = PartitionLog.open(copy, recover=False)
    assert served.active._minima is None
    served.close()
    assert not any(MINIMA_SUFFIX in p.name for p in copy.iterdir())
    for seg in PartitionLog.open_readonly(copy).segments:
        assert seg.min_timestamp() == true_min(seg.log_path)
