"""A fetch walks the batch headers of bytes no reader has checked, and only those (`LogSegment.fetch_range`):
bytes appended by this process, recovered, or walked by an earlier fetch form the checked span, whose end
is found from the offset index's last entry below it. Inside the span the answer must be exactly the walk's;
outside it, damage must still be met as before."""

from __future__ import annotations

import random

import pytest

from chronolog.records import SimpleRecord, build_batch
from chronolog.storage import PartitionLog
from tests.storage.helpers import NOW, batch, counting_preads, open_log


def _random_log(tmp_path, rng: random.Random, n_batches: int, interval: int):
    plog = open_log(tmp_path, segment_bytes=1 << 30, index_interval_bytes=interval)
    offsets = [0]
    for i in range(n_batches):
        records = rng.choice([1, 1, 2, 5, 30])
        value = b"v" * rng.choice([10, 100, 700, 3000, 9000])
        plog.append(build_batch([SimpleRecord(NOW + i, None, value)] * records), now=NOW)
        offsets.append(offsets[-1] + records)
    return plog, offsets


def _walked(seg, offset, max_bytes, min_one):
    """The answer of the header walk alone: the span emptied first (and restored after)."""
    spans = seg._checked
    seg._checked = []
    try:
        return seg.fetch_range(offset, max_bytes, None, min_one)
    finally:
        seg._checked = spans


@pytest.mark.parametrize("interval", [0, 512, 4096, 20000])
@pytest.mark.parametrize("seed", range(3))
def test_inside_the_span_the_answer_is_the_walks(tmp_path, seed, interval):
    rng = random.Random(seed * 10 + interval)
    plog, offsets = _random_log(tmp_path, rng, 150, interval)
    seg = plog.segments[0]
    assert seg.checked_spans() == [(0, seg.size)]  # appended here: all checked
    positions = [pos for pos, _ in seg.batches_from(0, resync=False)] + [seg.size]
    for _ in range(400):
        first = rng.randrange(0, len(offsets) - 1)
        offset = rng.randrange(offsets[first], offsets[first + 1])
        max_bytes = rng.choice([0, 100, 5000, 20000, 70000, 1 << 20])
        if rng.random() < 0.4:  # exactly some whole batches, or one byte either side: the budget's edge
            max_bytes = positions[rng.randrange(first + 1, len(positions))] - positions[first] + rng.choice([-1, 0, 1])
        min_one = rng.random() < 0.8
        got = seg.fetch_range(offset, max_bytes, None, min_one)
        assert got == _walked(seg, offset, max_bytes, min_one), (offset, max_bytes, min_one)
    plog.close()


def test_a_clean_start_checks_nothing_until_a_fetch_walks_it(tmp_path):
    rng = random.Random(5)
    plog, offsets = _random_log(tmp_path, rng, 60, 4096)
    plog.close()
    reopened = PartitionLog.open(plog.dir, plog.config, recover=False)
    seg = reopened.segments[0]
    assert seg.checked_spans() == []
    start, size, _ = seg.fetch_range(offsets[10], 20000, None, True)
    assert seg.checked_spans() == [(start, start + size)]  # what the walk read, no more
    later = seg.fetch_range(offsets[10], 20000, None, True)
    assert later == (start, size, _)
    # Reading on from where the last fetch ended grows the one span.
    base_at = {pos: b.base_offset for pos, b in seg.batches_from(0, resync=False)}
    nxt = seg.fetch_range(base_at[start + size], 1 << 20, None, True)
    assert seg.checked_spans() == [(start, nxt[0] + nxt[1])]
    # A consumer from the start reads on fetch after fetch until the whole segment is one span; the same
    # fetches again (their budgets end inside a batch) give the same answers from the span.
    answers, offset = [], 0
    while offset < offsets[-1]:
        got = seg.fetch_range(offset, 7000, None, True)
        answers.append(got)
        offset = base_at.get(got[0] + got[1], offsets[-1])
    assert seg.checked_spans() == [(0, seg.size)]
    assert [seg.fetch_range(a[2], 7000, None, True) for a in answers] == answers
    assert [_walked(seg, a[2], 7000, True) for a in answers] == answers
    reopened.close()


def test_damage_outside_the_span_is_still_met(tmp_path):
    """Bytes a fetch has not walked are walked: a header damaged after a clean stop sends the read to the
    batch-parsing path, which records the corrupt range, however much of the segment was checked before."""
    rng = random.Random(9)
    plog, offsets = _random_log(tmp_path, rng, 60, 4096)
    positions = [pos for pos, _ in plog.segments[0].batches_from(0, resync=False)]
    plog.close()
    victim = positions[40]
    with open(plog.segments[0].log_path, "r+b") as f:
        f.seek(victim + 16)
        f.write(b"\x07")  # an unknown magic
    reopened = PartitionLog.open(plog.dir, plog.config, recover=False)
    seg = reopened.segments[0]
    first = seg.fetch_range(0, positions[20], None, True)  # checks [0, positions[20])
    assert first == (0, positions[20], 0)
    assert seg.fetch_range(offsets[20], 1 << 20, None, True) is False  # the walk meets the damage
    assert reopened.read(offsets[20], 1 << 20) is not None
    (bad,) = reopened.corrupt_ranges()
    assert bad.start == victim
    reopened.close()


def test_appends_extend_the_span_only_when_it_reaches_the_end(tmp_path):
    plog = open_log(tmp_path, segment_bytes=1 << 30)
    for i in range(20):
        plog.append(batch(NOW + i, NOW + i), now=NOW)
    plog.close()
    reopened = PartitionLog.open(plog.dir, plog.config, recover=False)
    seg = reopened.segments[0]
    size = seg.size
    reopened.append(batch(NOW + 30), now=NOW)
    assert seg.checked_spans() == []  # the older bytes are not known good
    reopened.read(0, 1 << 20)  # a fetch walks the whole segment, appended batch included
    assert seg.checked_spans() == [(0, seg.size)]
    reopened.append(batch(NOW + 31), now=NOW)
    assert seg.checked_spans() == [(0, seg.size)] and seg.size > size
    reopened.truncate_to(5)
    assert seg.checked_spans() == [(0, seg.size)]
    reopened.truncate_to(0)
    reopened.append(batch(NOW + 32), now=NOW)
    assert reopened.segments[0].checked_spans() == [(0, reopened.segments[0].size)]
    reopened.close()


def test_recovery_checks_the_segment_unless_it_found_corruption(tmp_path):
    plog = open_log(tmp_path, segment_bytes=1 << 30)
    for i in range(30):
        plog.append(batch(NOW + i), now=NOW)
    plog.close()
    seg = PartitionLog.open(plog.dir, plog.config, recover=False).segments[0]
    assert seg.checked_spans() == []
    seg.recover()
    assert seg.checked_spans() == [(0, seg.size)]
    with open(seg.log_path, "r+b") as f:
        f.seek(10 * len(batch(NOW)) + 20)
        f.write(b"\0" * 8)  # a bad CRC in the middle
    seg.is_last = False
    seg._checked = []
    seg.recover()
    assert seg.corrupt_ranges and seg.checked_spans() == []


def test_spans_merge_when_they_touch_and_stay_few(tmp_path):
    """Two consumers reading on from different places each grow a span; when one reaches the other they
    become one. Random readers cannot make the list grow without bound: the shortest span goes."""
    plog = open_log(tmp_path)
    plog.append(batch(NOW), now=NOW)
    seg = plog.segments[0]
    seg._checked = []
    seg._mark_checked(100, 200)
    seg._mark_checked(300, 400)
    assert seg.checked_spans() == [(100, 200), (300, 400)]
    assert (seg._checked_end(150), seg._checked_end(250), seg._checked_end(300)) == (200, -1, 400)
    seg._mark_checked(200, 300)
    assert seg.checked_spans() == [(100, 400)]
    seg._mark_checked(50, 120)
    assert seg.checked_spans() == [(50, 400)]
    for i in range(40):
        seg._mark_checked(1000 + i * 10, 1005 + i * 10)
    assert len(seg.checked_spans()) == seg.MAX_CHECKED_SPANS and (50, 400) in seg.checked_spans()
    plog.close()


def test_a_fetch_inside_the_span_reads_a_few_headers_not_chunks(tmp_path, monkeypatch):
    """Inside the span a fetch looks at the headers at its start and at the last index entry inside its
    budget: the jump to that entry starts with a small read again, not the 64 KiB a walk grows to."""
    plog = open_log(tmp_path, segment_bytes=1 << 30, index_interval_bytes=4096)
    value = b"v" * 1000
    for i in range(400):  # batches of 15 records, about 15 KB each, as a producer's 16 KiB batches
        plog.append(build_batch([SimpleRecord(NOW + i, None, value)] * 15), now=NOW)
    sizes = counting_preads(monkeypatch)
    for offset in range(0, 5000, 1500):
        sizes.clear()
        found = plog.read(offset, 1 << 20)
        assert found is not None and found.size > (1 << 20) - 16_000
        assert len(sizes) <= 3 and max(sizes) <= 16384, sizes
