"""The index searches (a sparse summary of keys, then one stride's keys) against a plain scan of the entries:
every target around every key, indexes of every size around the summary's stride, entries appended and
removed between searches (the summary must follow), equal timestamps and an index opened from disk."""

from __future__ import annotations

import random

import pytest

from chronolog.storage import OffsetIndex, TimeIndex
from chronolog.storage.index import _STRIDE, IndexCorruptError


def _floor(keys: list[int], target: int) -> int:
    """The last slot whose key is <= target (keys ascending), or -1."""
    slot = -1
    for i, k in enumerate(keys):
        if k <= target:
            slot = i
    return slot


def _ceil(keys: list[int], target: int) -> int:
    """The first slot whose key is >= target, or -1."""
    return next((i for i, k in enumerate(keys) if k >= target), -1)


def _offset_index(path, base: int, rels: list[int], positions: list[int]) -> OffsetIndex:
    index = OffsetIndex(path, base, max_index_size=8 * (len(rels) + 4))
    for rel, pos in zip(rels, positions, strict=True):
        index.append(base + rel, pos)
    return index


def _check_offsets(index: OffsetIndex, base: int, rels: list[int], positions: list[int]) -> None:
    for rel in {r + d for r in rels for d in (-1, 0, 1)} | {-5, 0, (rels[-1] + 7) if rels else 3}:
        slot = _floor(rels, rel)
        expected = (base, 0) if slot < 0 else (base + rels[slot], positions[slot])
        assert tuple(index.lookup(base + rel)) == expected, rel
        assert index._smallest_upper_bound_slot(rel) == _ceil(rels, rel), rel
    for pos in {p + d for p in positions for d in (-1, 0, 1)} | {0}:
        slot = _floor(positions, pos)
        assert index.position_floor(pos) == (0 if slot < 0 else positions[slot]), pos


@pytest.mark.parametrize("n", [0, 1, 2, _STRIDE - 1, _STRIDE, _STRIDE + 1, 2 * _STRIDE, 3 * _STRIDE + 5, 700])
def test_offset_lookups_match_a_scan(tmp_path, n):
    rng = random.Random(n)
    rels = sorted(rng.sample(range(1, 50 * n + 10), n))
    positions = sorted(rng.sample(range(0, 100 * n + 10), n))
    _check_offsets(_offset_index(tmp_path / "i.index", 1000, rels, positions), 1000, rels, positions)


@pytest.mark.parametrize("n", [0, 1, _STRIDE - 1, _STRIDE, _STRIDE + 1, 5 * _STRIDE + 3, 600])
def test_time_lookups_match_a_scan(tmp_path, n):
    rng = random.Random(n + 1)
    stamps = sorted(rng.sample(range(10**12, 10**12 + 40 * n + 10), n))
    index = TimeIndex(tmp_path / "i.timeindex", 50, max_index_size=12 * (n + 4))
    for i, ts in enumerate(stamps):
        assert index.maybe_append(ts, 50 + 2 * i)
    for target in {t + d for t in stamps for d in (-1, 0, 1)} | {0, 2**62}:
        slot = _floor(stamps, target)
        expected = (-1, 50) if slot < 0 else (stamps[slot], 50 + 2 * slot)
        assert tuple(index.lookup(target)) == expected, target


def test_equal_timestamps_of_a_file_find_the_last(tmp_path):
    """A time index written elsewhere may repeat a timestamp: the largest slot not above the target wins,
    as Kafka's binary search answers."""
    stamps = [5] * (_STRIDE + 3) + [9] * (2 * _STRIDE) + [12]
    path = tmp_path / "00000000000000000000.timeindex"
    path.write_bytes(b"".join(ts.to_bytes(8, "big") + i.to_bytes(4, "big") for i, ts in enumerate(stamps)))
    index = TimeIndex(path, 0, writable=False)
    for target in (4, 5, 8, 9, 11, 12, 13):
        slot = _floor(stamps, target)
        assert tuple(index.lookup(target)) == ((-1, 0) if slot < 0 else (stamps[slot], slot)), target


def test_searches_follow_appends_and_truncations(tmp_path):
    """The summary grows with appends made between searches and is dropped when entries are removed, so
    slots written again with other keys are never answered from old ones."""
    rng = random.Random(7)
    base = 0
    index = OffsetIndex(tmp_path / "i.index", base, max_index_size=8 * 2000)
    rels: list[int] = []
    positions: list[int] = []
    for step in range(60):
        for _ in range(rng.randint(0, 3 * _STRIDE)):
            rels.append((rels[-1] if rels else 0) + rng.randint(1, 5))
            positions.append((positions[-1] if positions else 0) + rng.randint(1, 90))
            index.append(base + rels[-1], positions[-1])
        if rels:
            _check_offsets(index, base, rels, positions)
        if step % 3 == 2 and rels:
            cut = rng.randint(0, len(rels))
            if rng.random() < 0.5:
                index.truncate_entries(cut)
            else:
                index.truncate_to(base + rels[cut] if cut < len(rels) else base + rels[-1] + 1)
            del rels[cut:], positions[cut:]
            assert index.entries == len(rels)
    index.reset()
    assert index.entries == 0 and index.lookup(base + 5) == (base, 0)
    index.append(base + 3, 10)
    assert tuple(index.lookup(base + 9)) == (base + 3, 10)


def test_a_reopened_index_searches_its_file(tmp_path):
    rng = random.Random(3)
    rels = sorted(rng.sample(range(1, 5000), 300))
    positions = sorted(rng.sample(range(0, 90000), 300))
    index = _offset_index(tmp_path / "00000000000000000100.index", 100, rels, positions)
    index.close()
    reopened = OffsetIndex(tmp_path / "00000000000000000100.index", 100, writable=False)
    _check_offsets(reopened, 100, rels, positions)


@pytest.mark.parametrize(("rels", "bad"), [([1, 2, 3, 4], None), ([0, 5, 9], None), ([1, 3, 3, 4], 2),
                                           ([4, 2, 7], 1), ([1, 2, 3, 9, 8], 4)])
def test_sanity_check_names_the_first_entry_out_of_order(tmp_path, rels, bad):
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(b"".join(r.to_bytes(4, "big") + (10 * i).to_bytes(4, "big") for i, r in enumerate(rels)))
    index = OffsetIndex(path, 0, writable=False)
    if bad is None:
        index.sanity_check()
    else:
        with pytest.raises(IndexCorruptError, match=f"not increasing at entry {bad}$"):
            index.sanity_check()


def test_searches_from_threads_while_appending(tmp_path):
    """Readers search without the log's lock while the writer appends: every answer stays a scan's."""
    import threading

    index = OffsetIndex(tmp_path / "i.index", 0, max_index_size=8 * 20000)
    done = threading.Event()
    errors: list[str] = []

    def reader() -> None:
        rng = random.Random(threading.get_ident())
        while not done.is_set():
            n = index.entries
            if n:
                target = rng.randint(0, 3 * n)
                slot = index._largest_lower_bound_slot(target)
                # entries hold offsets 3, 6, 9, ...: the floor of `target` is slot target // 3 - 1
                expected = min(target // 3, n) - 1  # (more entries may come meanwhile)
                if slot < expected or slot > target // 3 - 1:
                    errors.append(f"{target}: {slot} (n {n})")

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for i in range(1, 15000):
        index.append(3 * i, 10 * i)
    done.set()
    for t in threads:
        t.join()
    assert not errors, errors[:5]
