"""The console timeline's exact counts on logs with late records: the C placement of late records
(`records.columns.place_late`) against its record-by-record twin (`timeline._place_batch`) and against
a brute-force count of every record by its own timestamp, on random logs with every codec and with
LogAppendTime batches. No broker: the timeline reads the data dir."""

from __future__ import annotations

import random

import pytest

from chronolog.records import SimpleRecord, build_batch, iter_batches
from chronolog.records.compression import CompressionType
from chronolog.storage.manager import LogManager
from chronolog.storage.minima import CHUNK_BYTES
from chronolog.timetravel import timeline
from chronolog.timetravel.sources import DataDirSource

BASE = 1_700_000_000_000
WIDE = {"message.timestamp.after.max.ms": str(2**62), "message.timestamp.before.max.ms": str(2**62),
        "retention.ms": "-1", "segment.bytes": str(CHUNK_BYTES + 40_000)}


def build(directory, seed: int) -> None:
    """Topic `t` (2 partitions, CreateTime, batches in all five codecs) and topic `a` (LogAppendTime, the
    append time going back now and then). Records are mostly in order; about one in twelve is late by up
    to two minutes and one in a hundred by up to an hour (older than the timelines' start)."""
    rng = random.Random(seed)
    manager = LogManager(directory)
    manager.startup(background=False)
    manager.create_topic("t", 2, WIDE)
    manager.create_topic("a", 1, {**WIDE, "message.timestamp.type": "LogAppendTime"})
    for p in range(2):
        plog = manager.get_log("t", p)
        t = 0
        for _ in range(400):
            stamps = []
            for _ in range(rng.randint(1, 40)):
                t += rng.randint(0, 400)
                roll = rng.random()
                late = rng.randint(0, 120_000) if roll < 0.08 else rng.randint(0, 3_600_000) if roll < 0.09 else 0
                stamps.append(BASE + t - late)
            codec = rng.choice(list(CompressionType))
            plog.append(build_batch([SimpleRecord(s, None, b"v" * rng.randint(1, 60)) for s in stamps],
                                    compression=codec), now=BASE + t + 10**9)
    alog = manager.get_log("a", 0)
    now = BASE
    for _ in range(300):
        now += rng.randint(0, 2_000) - (rng.randint(0, 60_000) if rng.random() < 0.1 else 0)
        alog.append(build_batch([SimpleRecord(now, None, b"x")] * rng.randint(1, 5)), now=now)
    manager.shutdown()


def own_counts(directory, topic: str, p: int, edges: list[int]) -> tuple[list[int], int]:
    """Per bucket, the records whose own timestamp lies in it, and how many lie before the first edge
    at or after the first offset of the timeline (the time index's answer for edges[0])."""
    source = DataDirSource(directory)
    try:
        found = source.log(topic, p).offset_for_timestamp(edges[0])
    finally:
        source.close()
    first = found.offset if found is not None else None
    counts = [0] * (len(edges) - 1)
    before = 0
    for seg in sorted((directory / f"{topic}-{p}").glob("*.log")):
        for batch in iter_batches(seg.read_bytes()):
            for r in batch.records():
                if first is None or r.offset < first:
                    continue
                if r.timestamp < edges[0]:
                    before += 1
                elif r.timestamp < edges[-1]:
                    counts[(r.timestamp - edges[0]) // (edges[1] - edges[0])] += 1
    return counts, before


def lines(directory, topic: str, start: int, end: int, step: int) -> list[tuple]:
    source = DataDirSource(directory)
    try:
        tl = timeline.build_timeline(source, topic, start, end, step=step)
    finally:
        source.close()
    assert tl.exact
    return [(line.counts, line.late, line.late_before) for line in tl.partitions]


def record_walk_lines(monkeypatch, directory, topic: str, start: int, end: int, step: int) -> list[tuple]:
    """`lines` with the C walks switched off: every batch by the record walk."""
    with monkeypatch.context() as m:
        m.setattr(timeline, "place_late", lambda *args: None)
        m.setattr(timeline, "place_late_batches", lambda *args: None)
        return lines(directory, topic, start, end, step)


@pytest.mark.parametrize("seed", [3, 4])
def test_exact_counts_in_c_equal_the_record_walk_and_brute_force(tmp_path, monkeypatch, seed):
    build(tmp_path, seed)
    spans = [(BASE + 200_000, BASE + 3_000_000, 60_000), (BASE + 1_000_000, BASE + 2_000_000, 10_000),
             (BASE - 5_000_000, BASE + 9_000_000, 1_000_000)]
    for start, end, step in spans:
        fast = lines(tmp_path, "t", start, end, step)
        slow = record_walk_lines(monkeypatch, tmp_path, "t", start, end, step)
        assert fast == slow
        edges = timeline.bucket_edges(start, end, step)
        for p, (counts, _late, before) in enumerate(fast):
            assert (counts, before) == own_counts(tmp_path, "t", p, edges)
        assert sum(sum(late) for _c, late, _b in fast) > 0  # late records were moved (the test can fail)
    # LogAppendTime batches take the record walk: their counts are still exact
    (counts, _late, before), = lines(tmp_path, "a", BASE + 50_000, BASE + 400_000, 5_000)
    assert (counts, before) == own_counts(tmp_path, "a", 0, timeline.bucket_edges(BASE + 50_000, BASE + 400_000,
                                                                                      5_000))


def test_place_late_refuses_bytes_it_cannot_walk(tmp_path):
    """A records section cut short is left to the record walk (None, nothing changed)."""
    from array import array

    from chronolog.records.columns import _native_place_late, place_late
    if _native_place_late is None:
        pytest.skip("the C extension is not built")
    batch = next(iter_batches(build_batch([SimpleRecord(BASE + i, None, b"v") for i in range(10)])))
    body = bytes(batch.records_section())
    offs, edges = array("q", [0, 5, 10]), array("q", [BASE, BASE + 5, BASE + 200])
    counts, late = array("q", [5, 5]), array("q", [0, 0])
    assert place_late(body[:-3], 10, 0, BASE, offs, edges, 0, 10, counts, late) is None
    assert place_late(body, 11, 0, BASE, offs, edges, 0, 10, counts, late) is None
    assert list(counts) == [5, 5] and list(late) == [0, 0]
    assert place_late(body, 10, 0, BASE, offs, edges, 0, 10, counts, late) == 0
    assert list(counts) == [5, 5]  # nothing late: offsets 5.. start at the edge BASE + 5
    edges[1] = BASE + 7  # offsets 5 and 6 (BASE + 5, BASE + 6) now lie below their bucket's edge
    assert place_late(body, 10, 0, BASE, offs, edges, 0, 10, counts, late) == 0
    assert (list(counts), list(late)) == ([7, 3], [2, 0])
    edges[0] = BASE + 1  # and offset 0 before the timeline's start
    assert place_late(body, 10, 0, BASE, offs, edges, 0, 10, array("q", [5, 5]), array("q", [0, 0])) == 1


def test_a_damaged_segment_is_stepped_over_alike(tmp_path, monkeypatch):
    """A batch whose CRC fails is skipped by the segments' own walk (a corrupt range), in the C path as
    in the record walk: the runs that hold it are not read whole."""
    import shutil
    build(tmp_path / "good", 5)
    data = tmp_path / "bad"
    shutil.copytree(tmp_path / "good", data)
    seg = sorted((data / "t-0").glob("*.log"))[0]
    raw = bytearray(seg.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    seg.write_bytes(bytes(raw))
    # and in partition 1, a batch length that cannot be (the walk resyncs after it)
    seg = sorted((data / "t-1").glob("*.log"))[-1]
    raw = bytearray(seg.read_bytes())
    third = [b for b in iter_batches(bytes(raw))][2]
    at = bytes(raw).index(bytes(third.raw)[:12])
    raw[at + 8:at + 12] = (1 << 30).to_bytes(4, "big")
    seg.write_bytes(bytes(raw))
    args = (BASE + 200_000, BASE + 3_000_000, 60_000)
    fast = lines(data, "t", *args)
    assert fast == record_walk_lines(monkeypatch, data, "t", *args)
    assert fast != lines(tmp_path / "good", "t", *args)  # the damaged batch's records are not counted
