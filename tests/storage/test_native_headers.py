"""The C header walk of a fetch's range (`chronolog.storage._headers.batch_end`) gives exactly the Python
walk's answer (`LogSegment.fetch_range` with the C walk switched off): the same range, and False in the same
places, on clean segments and on segments whose headers were damaged after they were written."""

from __future__ import annotations

import random

import pytest

from chronolog.storage import segment as segment_module
from tests.storage.helpers import NOW, batch, open_log

pytestmark = pytest.mark.skipif(segment_module._native_batch_end is None,
                                reason="the C header walk was not built (no compiler)")


def _both(seg, offset: int, max_bytes: int, limit, min_one: bool, monkeypatch):
    """Both walks, each from a segment with no bytes checked yet (else a fetch inside the checked span
    walks neither)."""
    seg._checked = []
    native = seg.fetch_range(offset, max_bytes, limit, min_one)
    seg._checked = []
    with monkeypatch.context() as m:
        m.setattr(segment_module, "_native_batch_end", None)
        python = seg.fetch_range(offset, max_bytes, limit, min_one)
    return native, python


def _random_log(tmp_path, rng: random.Random, n_batches: int):
    plog = open_log(tmp_path, segment_bytes=1 << 30, index_interval_bytes=rng.choice([0, 512, 4096]))
    offsets = [0]
    for i in range(n_batches):
        records = rng.choice([1, 1, 2, 5, 30])
        value = b"v" * rng.choice([10, 100, 700, 3000])
        plog.append(batch(*[NOW + i] * records, value=value), now=NOW)
        offsets.append(offsets[-1] + records)
    return plog, offsets


def _compare_everywhere(seg, offsets, rng, monkeypatch, trials: int = 300) -> set:
    """Random fetches, a third of them with `max_bytes` exactly the size of some whole batches from the
    start (the budget's edge)."""
    answers = set()
    positions = [pos for pos, _ in seg.batches_from(0, resync=False)]
    for _ in range(trials):
        first = rng.randrange(0, len(offsets) - 1)
        offset = rng.randrange(offsets[first], offsets[first + 1])
        max_bytes = rng.choice([0, 100, 1000, 5000, 20000, 1 << 20])
        if rng.random() < 0.33 and first + 1 < len(positions):
            max_bytes = positions[rng.randrange(first + 1, len(positions))] - positions[first]
        limit = rng.choice([None, None, rng.randrange(0, offsets[-1] + 2)])
        min_one = rng.random() < 0.8
        native, python = _both(seg, offset, max_bytes, limit, min_one, monkeypatch)
        assert native == python, (offset, max_bytes, limit, min_one)
        answers.add(type(native).__name__ if native in (None, False) else "range")
    return answers


@pytest.mark.parametrize("seed", range(4))
def test_clean_segments_give_the_same_ranges(tmp_path, monkeypatch, seed):
    rng = random.Random(seed)
    plog, offsets = _random_log(tmp_path, rng, 120)
    seg = plog.segments[0]
    assert _compare_everywhere(seg, offsets, rng, monkeypatch) == {"range"}
    plog.close()


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("is_last", [True, False])
@pytest.mark.parametrize("damage", ["magic", "negative length", "short length", "huge length", "negative delta",
                                    "torn"])
def test_damaged_headers_give_the_same_answers(tmp_path, monkeypatch, seed, is_last, damage):
    """Each damage a header check looks at: magic, length (negative, too small, past the end), negative
    last offset delta, a torn tail. In the last segment a torn tail (or a batch running past the end) ends
    the range; elsewhere it sends the reader to the parsing path."""
    rng = random.Random(100 + seed)
    plog, offsets = _random_log(tmp_path, rng, 60)
    seg = plog.segments[0]
    seg.flush()
    positions = [pos for pos, _ in seg.batches_from(0)]
    victim = rng.randrange(1, len(positions))
    at = positions[victim]
    with open(seg.log_path, "r+b") as f:
        if damage == "magic":
            f.seek(at + 16)
            f.write(bytes([rng.choice([0, 1, 3, 0xFF])]))
        elif damage == "negative length":
            f.seek(at + 8)
            f.write(b"\xff\xff\xff\xf0")
        elif damage == "short length":
            f.seek(at + 8)
            f.write((rng.randrange(0, 49)).to_bytes(4, "big"))
        elif damage == "huge length":
            f.seek(at + 8)
            f.write((1 << 30).to_bytes(4, "big"))
        elif damage == "negative delta":
            f.seek(at + 23)
            f.write(b"\xff\xff\xff\xfe")
        else:
            f.truncate(at + rng.randrange(1, 80))
    seg.size = seg.log_path.stat().st_size
    seg.is_last = is_last
    answers = _compare_everywhere(seg, offsets, rng, monkeypatch)
    assert "range" in answers
    if damage not in ("torn", "huge length") or not is_last:
        assert "bool" in answers, damage  # the damage was met, and sent both walks to the parsing path
    plog.close()


def test_a_file_that_shrank_under_the_reader_gives_the_same_answer(tmp_path, monkeypatch):
    """`fetch_range` bounds its walk by the size it knew; a file cut shorter meanwhile reads short."""
    rng = random.Random(7)
    plog, offsets = _random_log(tmp_path, rng, 40)
    seg = plog.segments[0]
    seg.flush()
    positions = [pos for pos, _ in seg.batches_from(0)]
    with open(seg.log_path, "r+b") as f:
        f.truncate(positions[20] + 30)
    for last in (True, False):
        seg.is_last = last
        native, python = _both(seg, 0, 1 << 20, None, True, monkeypatch)
        assert native == python
    plog.close()
