"""Recovery's C walk (`chronolog.storage._headers.clean_run`, used by `LogSegment._scan`) leaves a segment
exactly as the Python loop alone does: the same indexes byte for byte, size, corrupt ranges, largest
timestamp and next offset, on clean segments and on segments damaged after they were written (the C walk
stops at whatever it does not judge itself and the Python loop carries on from there)."""

from __future__ import annotations

import random
import shutil
import struct
import zlib

import pytest

from chronolog.config import TopicConfig
from chronolog.records import CompressionType, SimpleRecord, build_batch, crc32c
from chronolog.storage import PartitionLog
from chronolog.storage import segment_recovery as recovery_module
from tests.storage.helpers import NOW, WIDE

pytestmark = pytest.mark.skipif(recovery_module._native_clean_run is None,
                                reason="the C recovery walk was not built (no compiler)")


def _config(interval: int) -> TopicConfig:
    return TopicConfig.from_kafka({**WIDE, "index.interval.bytes": str(interval), "segment.bytes": str(1 << 30),
                                   "max.message.bytes": str(8 << 20)})


def _write(directory, rng: random.Random, n: int, interval: int) -> None:
    """A partition of `n` batches of random sizes, codecs and timestamps (rising, falling, repeated)."""
    plog = PartitionLog.open(directory, _config(interval))
    ts = NOW
    for _ in range(n):
        ts += rng.choice([-50, 0, 0, 1, 7, 1000])
        records = [SimpleRecord(ts + rng.randrange(-3, 4), None, b"r" * rng.choice([0, 20, 300, 2000]))
                   for _ in range(rng.choice([1, 1, 3, 20]))]
        codec = rng.choice([CompressionType.NONE, CompressionType.NONE, CompressionType.GZIP, CompressionType.ZSTD])
        plog.append(build_batch(records, compression=codec), now=NOW)
    plog.close()


def _legacy_v1(offset: int, value: bytes) -> bytes:
    """One magic-1 message (as old Kafka wrote them) with its offset and size prefix."""
    body = struct.pack(">bbq", 1, 0, NOW) + struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(message)) + message


def _recovered(directory, interval: int, native: bool, monkeypatch) -> dict:
    walked = []  # bytes the C walk took on itself

    def counted(fd, start, *args):
        answer = real(fd, start, *args)
        walked.append(answer[0] - start)
        return answer

    real = recovery_module._native_clean_run
    with monkeypatch.context() as m:
        m.setattr(recovery_module, "_native_clean_run", counted if native else None)
        plog = PartitionLog.open(directory, _config(interval), recover=True, recovery_point=0)
    seg = plog.segments[0]
    state = {"size": seg.size, "next": plog.log_end_offset, "max": (seg.max_timestamp_so_far,
                                                                       seg.offset_of_max_timestamp_so_far),
             "corrupt": [(r.start, r.end, r.first_offset, r.last_offset) for r in seg.corrupt_ranges],
             "offsets": [tuple(seg.offset_index.entry(i)) for i in range(seg.offset_index.entries)],
             "times": [tuple(seg.time_index.entry(i)) for i in range(seg.time_index.entries)]}
    plog.close()
    if native:
        state["walked"] = sum(walked)
    state["files"] = {p.name: p.read_bytes() for p in sorted(directory.iterdir())
                      if p.suffix in (".log", ".index", ".timeindex")}
    return state


def _compare(tmp_path, damage, monkeypatch, seed: int, interval: int) -> dict:
    rng = random.Random(seed)
    original = tmp_path / "t-0"
    _write(original, rng, 150, interval)
    log_file = original / "00000000000000000000.log"
    data = bytearray(log_file.read_bytes())
    positions = []
    pos = 0
    while pos < len(data):
        positions.append(pos)
        pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
    damage(data, positions, rng)
    log_file.write_bytes(bytes(data))
    return _both_ways(original, interval, monkeypatch)


def _both_ways(original, interval: int, monkeypatch) -> dict:
    """Recover copies of the partition with and without the C walk (indexes removed first, so recovery
    rebuilds them); the two must agree. The C run's state, with the bytes the C walk took."""
    for index in original.glob("*index"):
        index.unlink()
    results = []
    for native in (True, False):
        copy = original.parent / ("c" if native else "py") / original.name
        shutil.copytree(original, copy)
        results.append(_recovered(copy, interval, native, monkeypatch))
    walked = results[0].pop("walked")
    assert results[0] == results[1]
    assert walked > 0, "the C walk did no work"
    return {**results[0], "walked": walked}


def _clean(data, positions, rng) -> None:
    pass


def _flip_payload(data, positions, rng) -> None:
    at = positions[rng.randrange(10, len(positions) - 10)]
    data[at + 70] ^= 0x40  # inside the CRC's range: a CRC mismatch mid-file


def _bad_magic(data, positions, rng) -> None:
    data[positions[rng.randrange(10, len(positions) - 10)] + 16] = 7


def _negative_delta(data, positions, rng) -> None:
    at = positions[rng.randrange(10, len(positions) - 10)]
    data[at + 23:at + 27] = struct.pack(">i", -1)


def _recrc(data, at: int) -> None:
    size = 12 + struct.unpack_from(">i", data, at + 8)[0]
    struct.pack_into(">I", data, at + 17, crc32c(bytes(data[at + 21:at + size])))


def _negative_delta_valid_crc(data, positions, rng) -> None:
    at = positions[rng.randrange(10, len(positions) - 10)]
    data[at + 23:at + 27] = struct.pack(">i", -1)
    _recrc(data, at)


def _negative_count_valid_crc(data, positions, rng) -> None:
    at = positions[rng.randrange(10, len(positions) - 10)]
    data[at + 57:at + 61] = struct.pack(">i", -5)
    _recrc(data, at)


def _offset_outside_the_segment(data, positions, rng) -> None:
    at = positions[rng.randrange(10, len(positions) - 10)]
    data[at:at + 8] = struct.pack(">q", 1 << 40)  # the base offset is outside the CRC


def _offsets_going_back(data, positions, rng) -> None:
    """A batch whose offsets repeat earlier ones (the base offset is outside the CRC: a valid batch to the C
    walk): its index entry may not be appended, which the Python loop treats as an invalid batch."""
    at = positions[rng.randrange(20, len(positions) - 10)]
    base = struct.unpack_from(">q", data, at)[0]
    data[at:at + 8] = struct.pack(">q", max(0, base - 40))


def _newest_max_at_an_older_offset(data, positions, rng) -> None:
    """A batch going back in offsets that also holds the largest timestamp so far: the time index's
    offset would go back (its max timestamp is in the CRC's range, so the CRC is made valid again)."""
    at = positions[rng.randrange(20, len(positions) - 10)]
    base = struct.unpack_from(">q", data, at)[0]
    data[at:at + 8] = struct.pack(">q", max(0, base - 40))
    data[at + 35:at + 43] = struct.pack(">q", NOW + 10**9)
    _recrc(data, at)


def _torn_tail(data, positions, rng) -> None:
    del data[positions[-1] + rng.randrange(1, 60):]


def _garbage_tail(data, positions, rng) -> None:
    data += bytes(rng.randrange(256) for _ in range(500))


def _zeroed_hole(data, positions, rng) -> None:
    at = positions[rng.randrange(10, len(positions) - 20)]
    data[at:at + 3000] = bytes(3000)


def _legacy_in_the_middle(data, positions, rng) -> None:
    """A v1 message replacing nothing: spliced between two batches with the next offset, so the v2
    batches after it overlap its offset (the C walk hands over at it, the Python loop reads it)."""
    i = rng.randrange(10, len(positions) - 10)
    offset = struct.unpack_from(">q", data, positions[i])[0]
    data[positions[i]:positions[i]] = _legacy_v1(offset, b"legacy")


DAMAGES = [_clean, _flip_payload, _bad_magic, _negative_delta, _negative_delta_valid_crc, _negative_count_valid_crc,
           _offset_outside_the_segment, _offsets_going_back, _newest_max_at_an_older_offset, _torn_tail,
           _garbage_tail, _zeroed_hole, _legacy_in_the_middle]


@pytest.mark.parametrize("damage", DAMAGES, ids=[d.__name__.strip("_") for d in DAMAGES])
@pytest.mark.parametrize("seed,interval", [(1, 4096), (2, 0), (3, 1000)])
def test_recovery_with_and_without_the_c_walk_leaves_the_same_segment(tmp_path, monkeypatch, damage, seed,
                                                                      interval):
    state = _compare(tmp_path, damage, monkeypatch, seed, interval)
    assert state["offsets"] and state["times"]
    if damage is _clean:
        assert not state["corrupt"] and state["walked"] == state["size"]  # all of it in C
    elif damage in (_flip_payload, _bad_magic, _negative_delta, _negative_delta_valid_crc, _negative_count_valid_crc,
                    _offset_outside_the_segment, _zeroed_hole):
        assert state["corrupt"]  # found and stepped over, identically
    elif damage in (_offsets_going_back, _newest_max_at_an_older_offset):
        # that one batch, not every batch after it (its timestamp must not become the running max)
        assert len(state["corrupt"]) == 1, state["corrupt"]


def test_a_batch_larger_than_the_c_walks_buffer(tmp_path, monkeypatch):
    """A batch above the 1 MiB read buffer (the walk grows it) between small ones."""
    plog = PartitionLog.open(tmp_path / "t-0", _config(4096))
    for i in range(5):
        plog.append(build_batch([SimpleRecord(NOW + i, None, b"s" * 100)]), now=NOW)
    plog.append(build_batch([SimpleRecord(NOW + 10, None, bytes(random.Random(9).randbytes(3 << 20)))]), now=NOW)
    for i in range(5):
        plog.append(build_batch([SimpleRecord(NOW + 20 + i, None, b"s" * 100)]), now=NOW)
    plog.close()
    state = _both_ways(tmp_path / "t-0", 4096, monkeypatch)
    assert state["walked"] == state["size"]
    assert state["next"] == 11 and not state["corrupt"]


def test_an_index_that_fills_up_during_recovery(tmp_path, monkeypatch):
    """Recovered with an index of ten entries (segment.index.bytes 80) and an entry per batch: where the
    Python loop's append is refused the batch counts as invalid; the C walk leaves that batch to it, so
    both give the same segment."""
    _write(tmp_path / "t-0", random.Random(4), 40, 0)
    for index in (tmp_path / "t-0").glob("*index"):
        index.unlink()
    config = TopicConfig.from_kafka({**WIDE, "index.interval.bytes": "0", "segment.bytes": str(1 << 30),
                                     "segment.index.bytes": "80", "max.message.bytes": str(8 << 20)})
    results = []
    for native in (True, False):
        copy = tmp_path / ("c" if native else "py") / "t-0"
        shutil.copytree(tmp_path / "t-0", copy)
        with monkeypatch.context() as m:
            if not native:
                m.setattr(recovery_module, "_native_clean_run", None)
            plog = PartitionLog.open(copy, config, recover=True, recovery_point=0)
        seg = plog.segments[0]
        results.append((seg.size, [(r.start, r.end) for r in seg.corrupt_ranges],
                        [tuple(seg.offset_index.entry(i)) for i in range(seg.offset_index.entries)],
                        [tuple(seg.time_index.entry(i)) for i in range(seg.time_index.entries)]))
        plog.close()
    assert results[0] == results[1]
    assert len(results[0][2]) == 10 and results[0][1]
