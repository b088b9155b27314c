"""The C walks of a crash recovery's two passes over a segment give exactly the Python loops' answers: the
minima rebuild (`_headers.minima_run`, in `LogSegment._extend_by_scan`) and the producers' replay
(`_headers.producer_run`, in `loader.producer_batches`), switched off for the comparison. Segments mix
every kind of batch those walks meet: uncompressed and compressed, LogAppendTime, out-of-order and
huge timestamps, no records, records the C walk declines, producers' and control batches, a batch over the C
walk's read size, and a legacy message, a torn tail or a corrupt range where the Python loop takes over."""

from __future__ import annotations

import random
import struct
import zlib

import pytest

from chronolog.config import TopicConfig
from chronolog.records import CompressionType, SimpleRecord, build_batch, crc32c
from chronolog.storage import PartitionLog
from chronolog.storage import loader as loader_module
from chronolog.storage import minima as minima_module
from chronolog.storage.minima import SegmentMinima
from tests.storage.helpers import NOW, WIDE

pytestmark = pytest.mark.skipif(minima_module._native_minima_run is None or minima_module._native_scan is None,
                                reason="the C walks were not built (no compiler)")
CODECS = [CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4, CompressionType.ZSTD]


def _legacy_v1(offset: int, timestamp: int, value: bytes) -> bytes:
    """A v1 message (magic 1, no compression): offset, size, CRC-32 of the rest, then the message."""
    body = struct.pack(">bbq", 1, 0, timestamp) + struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(message)) + message


def _random_batch(rng: random.Random, offset: int) -> tuple[bytes, int]:
    """One batch based at `offset`, of a random kind; (bytes, records)."""
    n = rng.choice([1, 1, 2, 5, 30])
    kind = rng.random()
    stamps = [NOW + rng.randrange(-50_000, 50_000) for _ in range(n)]  # out of order inside the batch
    if rng.random() < 0.05:
        stamps[0] = 2**62  # a base timestamp near the top: the deltas below it are large
    value = b"v" * rng.choice([10, 100, 3000])
    if rng.random() < 0.01:  # one record larger than the C walk's 1 MiB read
        n, stamps, value = 1, stamps[:1], b"v" * 1_200_000
    records = [SimpleRecord(t, None, value) for t in stamps]
    kwargs: dict = {"base_offset": offset}
    if rng.random() < 0.3:
        kwargs.update(producer_id=rng.choice([7, 8, 9]), producer_epoch=rng.choice([0, 1]),
                      base_sequence=rng.randrange(1000))
    if kind < 0.15:
        kwargs["compression"] = rng.choice(CODECS)
    elif kind < 0.25:
        kwargs.update(timestamp_type=1, max_timestamp=NOW + rng.randrange(10**6))
    elif kind < 0.28:
        kwargs["is_control"] = True
    data = bytearray(build_batch(records, **kwargs))
    if kind > 0.97:
        data[57:61] = struct.pack(">i", 0)  # no records
    elif kind > 0.94 and not kwargs.get("compression"):
        data[61 + 3] ^= 0x7F  # a record's bytes the C walk declines: the Python walk's verdict
    data[17:21] = struct.pack(">I", crc32c(bytes(data[21:])))  # still a valid batch to recovery
    return bytes(data), n


def _segment(tmp_path, rng: random.Random, n_batches: int, tail: str = ""):
    """A partition whose one segment file holds the batches as written (no append validation)."""
    d = tmp_path / "t-0"
    d.mkdir()
    offset = 0
    out = bytearray()
    for i in range(n_batches):
        if tail == "legacy" and i == n_batches // 2:
            out += _legacy_v1(offset, NOW, b"old")
            offset += 1
            continue
        data, n = _random_batch(rng, offset)
        out += data
        offset += n
    (d / "00000000000000000000.log").write_bytes(bytes(out))
    plog = PartitionLog.open(d, TopicConfig.from_kafka(dict(WIDE)), recover=False)
    seg = plog.segments[0]
    if tail == "torn":  # as a reader of a file still being written may see it (recovery would cut it)
        torn = build_batch([SimpleRecord(NOW, None, b"x" * 100)], base_offset=offset)[:80]
        with open(seg.log_path, "ab") as f:
            f.write(torn)
        seg.size += len(torn)
    return plog, seg


def _minima_both(seg, monkeypatch):
    native = seg._extend_by_scan(SegmentMinima(seg.base_offset))
    with monkeypatch.context() as m:
        m.setattr(minima_module, "_native_minima_run", None)
        python = seg._extend_by_scan(SegmentMinima(seg.base_offset))
    return native, python


@pytest.mark.parametrize("chunk_bytes", [1, 2000, 256 << 10])
@pytest.mark.parametrize("seed", range(4))
def test_the_minima_are_the_python_loops(tmp_path, seed, chunk_bytes, monkeypatch):
    monkeypatch.setattr(minima_module, "CHUNK_BYTES", chunk_bytes)
    rng = random.Random(seed)
    plog, seg = _segment(tmp_path, rng, 300)
    native, python = _minima_both(seg, monkeypatch)
    assert python is not None
    assert native.to_bytes() == python.to_bytes()
    assert (native.chunks, native.covered_end, native.last) == (python.chunks, python.covered_end, python.last)
    plog.close()


@pytest.mark.parametrize("tail", ["legacy", "torn"])
def test_where_the_python_loop_takes_over_the_answer_is_the_same(tmp_path, tail, monkeypatch):
    monkeypatch.setattr(minima_module, "CHUNK_BYTES", 2000)
    plog, seg = _segment(tmp_path, random.Random(11), 60, tail)
    native, python = _minima_both(seg, monkeypatch)
    assert native is None and python is None  # a legacy batch or a torn tail: the segment stays untracked
    plog.close()


def test_a_segment_with_a_corrupt_range_is_left_to_the_python_loop(tmp_path, monkeypatch):
    plog, seg = _segment(tmp_path, random.Random(5), 40)
    from chronolog.storage.corruption import CorruptRange

    seg.corrupt_ranges = [CorruptRange(0, 500, 900, 3, 4)]
    calls = []
    monkeypatch.setattr(minima_module, "_native_minima_run", lambda *a: calls.append(a))
    monkeypatch.setattr(loader_module, "_native_producer_run", lambda *a: calls.append(a))
    assert seg._extend_by_scan(SegmentMinima(0)) is None
    list(loader_module.producer_batches(seg, 0, 0))
    assert calls == []
    plog.close()


@pytest.mark.parametrize("most", [1, 3, 4096])
@pytest.mark.parametrize("seed", range(3))
def test_the_producers_batches_are_the_python_loops(tmp_path, seed, most, monkeypatch):
    monkeypatch.setattr(loader_module, "_PRODUCER_RUN_MOST", most)
    rng = random.Random(100 + seed)
    plog, seg = _segment(tmp_path, rng, 200, rng.choice(["", "legacy", "torn"]))
    for start in (0, 57, 10**9):
        native = list(loader_module.producer_batches(seg, 0, start))
        with monkeypatch.context() as m:
            m.setattr(loader_module, "_native_producer_run", None)
            python = list(loader_module.producer_batches(seg, 0, start))
        assert native == python
        if start == 0:
            assert python, "the segment should hold producers' batches"
    plog.close()


def test_opening_a_crashed_partition_rebuilds_the_same_sidecar_and_producers(tmp_path, monkeypatch):
    """End to end: a partition recovered after a crash (no clean-shutdown marker, no sidecar, no
    snapshot), once with the C walks and once without: the same minima sidecar and producer state."""
    import shutil

    (tmp_path / "a").mkdir()
    plog, _seg = _segment(tmp_path / "a", random.Random(21), 150)
    plog.close()
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    results = []
    for name, native in (("a", True), ("b", False)):
        with monkeypatch.context() as m:
            if not native:
                m.setattr(minima_module, "_native_minima_run", None)
                m.setattr(loader_module, "_native_producer_run", None)
            d = tmp_path / name / "t-0"
            for p in list(d.glob("*.snapshot")) + list(d.glob("*chronolog-minima*")):
                p.unlink()
            log = PartitionLog.open(d, TopicConfig.from_kafka(dict(WIDE)), recover=True)
            seg = log.segments[-1]
            results.append((seg._minima.to_bytes() if seg._minima is not None else None,
                            sorted((pid, e.epoch, [tuple(b) for b in e.batches]) for pid, e in
                                   log.producers.producers.items())))
            log.close()
    assert results[0][0] is not None
    assert results[0] == results[1]
