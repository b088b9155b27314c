"""The C cleaner on zstd logs (records/_clean.c): compressed batches go through the records layer's codecs
(decompressed in the map pass and again in the copy, recompressed when they keep some of their records but
not all), and the cleaned log is the Python path's as a user sees it."""

from __future__ import annotations

import random

import crc32c
import pytest

from chronolog.config import TopicConfig
from chronolog.native import load_native
from chronolog.records import CompressionType, RecordBatch, SimpleRecord, build_batch, iter_batches
from chronolog.records.compression import compress, decompress
from chronolog.storage import PartitionLog
from chronolog.storage.cleaner import Cleaner, log_to_clean

native = load_native("chronolog.records._clean")
if native is None:  # not built, or switched off by CHRONOLOG_PURE_PYTHON
    pytest.skip("the C cleaner is not loaded", allow_module_level=True)
zstandard = pytest.importorskip("zstandard")

NOW = 1_700_000_000_000
CONFIG = {"cleanup.policy": "compact", "segment.bytes": "6000", "index.interval.bytes": "300",
          "message.timestamp.after.max.ms": str(2**62), "message.timestamp.before.max.ms": str(2**62)}


def write_log(directory, seed: int, batches: int = 120, *, keys: int = 40, value_bytes: int = 80) -> None:
    """zstd batches of 1-12 records over `keys` keys (with 40, most batches lose some records, many all), a few
    tombstones and uncompressed batches between them."""
    rng = random.Random(seed)
    plog = PartitionLog.open(directory, TopicConfig.from_kafka(CONFIG))
    ts = NOW
    for _ in range(batches):
        ts += rng.randrange(1, 30)
        recs = [SimpleRecord(ts + j, b"key-%d" % rng.randrange(keys),
                             None if rng.random() < 0.05 else rng.randbytes(rng.randrange(0, value_bytes)) * 2)
                for j in range(rng.randrange(1, 13))]
        codec = CompressionType.ZSTD if rng.random() < 0.85 else CompressionType.NONE
        plog.append(build_batch(recs, compression=codec), now=ts)
    plog.roll()
    plog.close()


def seen(plog: PartitionLog) -> list:
    """Each batch's offsets, attributes and timestamps, and each record, as a consumer reads them."""
    return [(b.base_offset, b.last_offset_delta, b.attributes, b.base_timestamp, b.max_timestamp,
             [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in b.records()])
            for seg in plog.segments for b in iter_batches(seg.log_path.read_bytes())]


def counting_codecs(omap) -> dict[str, int]:
    """The records layer's codecs set on `omap`, counting their calls."""
    calls = {"decompress": 0, "compress": 0}

    def counted(name, fn):
        def call(*args):
            calls[name] += 1
            return fn(*args)
        return call

    omap.set_codecs(counted("decompress", decompress), counted("compress", compress))
    return calls


@pytest.mark.parametrize("seed", range(4))
def test_zstd_logs_clean_to_the_python_paths_records(tmp_path, seed):
    logs = []
    for name in ("c", "py"):
        write_log(tmp_path / name / "t-0", seed)
        logs.append(PartitionLog.open(tmp_path / name / "t-0", TopicConfig.from_kafka(CONFIG)))
    cleaners = [Cleaner(native=True), Cleaner(native=False)]
    calls = counting_codecs(cleaners[0].offset_map)
    results = []
    for plog, cleaner in zip(logs, cleaners, strict=True):
        ltc, _ = log_to_clean(("t", 0), plog, None, NOW + 10**9)
        end, stats = cleaner.clean(ltc, NOW + 10**9)
        results.append((end, stats.records_read, stats.records_retained))
    assert results[0] == results[1]
    assert seen(logs[0]) == seen(logs[1])
    assert calls["decompress"] > 0 and calls["compress"] > 0  # the C path took the zstd batches itself
    for plog in logs:
        plog.close()


def test_a_record_before_the_start_whose_key_comes_later_is_judged_by_it():
    """A batch straddling the map's start: its records before the start whose keys come again later are
    dropped for the later ones, as the Python path does."""
    omap = native.OffsetMap(1 << 20, 1.0, 7)
    counting_codecs(omap)
    first = build_batch([SimpleRecord(NOW, b"k%d" % j, b"v%d" % j) for j in range(10)], base_offset=0,
                        compression=CompressionType.ZSTD)
    later = build_batch([SimpleRecord(NOW, b"k%d" % j, b"w%d" % j) for j in range(5)], base_offset=10,
                        compression=CompressionType.ZSTD)
    chunk = first + later
    omap.map_chunk(chunk, 0, 5, 1 << 62, 1 << 62)
    assert len(omap) == 10
    got = omap.filter_chunk(chunk, 0, False, 1 << 62, NOW, {}, 0, 0, 0, -1, -1, 4096, 1 << 62)
    kept = [(r.offset, r.value) for b in iter_batches(got[3]) for r in b]
    assert kept == [(j, b"v%d" % j) for j in range(5, 10)] + [(10 + j, b"w%d" % j) for j in range(5)]


def _with_body(batch: bytes, body: bytes) -> bytes:
    """`batch` with its records section replaced by `body` (length and CRC-32C set again)."""
    data = bytearray(batch[:61]) + body
    data[8:12] = (len(data) - 12).to_bytes(4, "big")
    data[17:21] = crc32c.crc32c(bytes(data[21:])).to_bytes(4, "big")
    return bytes(data)


def _frames() -> dict[str, tuple[bytes, bool]]:
    """A records section in the zstd frames a producer or a hostile client may send, and whether the records
    layer's decompress takes it."""
    recs = [SimpleRecord(NOW + j, b"k%d" % (j % 3), b"v" * 50) for j in range(6)]
    body = RecordBatch(build_batch(recs, base_offset=100)).records_section().tobytes()
    plain = zstandard.ZstdCompressor(level=3).compress(body)
    return {
        "one frame": (plain, True),
        "with a checksum": (zstandard.ZstdCompressor(write_checksum=True).compress(body), True),
        "without its content size": (zstandard.ZstdCompressor(write_content_size=False).compress(body), True),
        "two frames": (zstandard.ZstdCompressor().compress(body[:40]) + zstandard.ZstdCompressor().compress(body[40:]),
                       True),
        "truncated": (plain[:-3], False),
        "garbage": (b"\x28\xb5\x2f\xfd" + b"\x00" * 40, False),
    }


@pytest.mark.parametrize("name", sorted(_frames()))
def test_zstd_frames_are_the_records_layers_to_decide(name):
    """Map and copy of one batch: a frame the records layer decompresses is judged in C (3 of its 6 records
    stay, recompressed); one it refuses stops both walks at the batch (PYTHON), with no error of their own,
    so that the Python path raises the records layer's error."""
    frame, takes = _frames()[name]
    recs = [SimpleRecord(NOW + j, b"k%d" % (j % 3), b"v" * 50) for j in range(6)]
    chunk = _with_body(build_batch(recs, base_offset=100, compression=CompressionType.ZSTD), frame)
    omap = native.OffsetMap(1 << 20, 0.9, 9)
    counting_codecs(omap)
    mapped = omap.map_chunk(chunk, 0, 0, 1 << 62, 1 << 62)
    omap.latest_offset = 105
    filtered = omap.filter_chunk(chunk, 0, False, 1 << 62, NOW, {}, 100, 0, 0, -1, -1, 4096, 1 << 62)
    if not takes:
        assert mapped[:2] == (0, native.PYTHON) and filtered[:2] == (0, native.PYTHON)
        return
    assert mapped[:2] == (len(chunk), native.MORE) and [omap.get(b"k%d" % i) for i in range(3)] == [103, 104, 105]
    out = RecordBatch(filtered[3])
    assert out.verify_crc() and out.compression == CompressionType.ZSTD
    assert [(r.offset, r.timestamp) for r in out.records()] == [(103, NOW + 3), (104, NOW + 4), (105, NOW + 5)]


def test_a_tombstone_past_its_delete_horizon_goes(tmp_path):
    """A cleaning from the log start after the delete horizon a first one set: the zstd batch's tombstone goes,
    as in the Python path."""
    cfg = dict(CONFIG, **{"delete.retention.ms": "1000", "segment.bytes": "100000"})
    logs = []
    for name in ("c", "py"):
        plog = PartitionLog.open(tmp_path / name / "t-0", TopicConfig.from_kafka(cfg))
        for i, recs in enumerate([[SimpleRecord(NOW, b"a", b"1"), SimpleRecord(NOW, b"b", b"2")],
                                  [SimpleRecord(NOW + 1, b"a", None)],
                                  [SimpleRecord(NOW + 2, b"c", b"3"), SimpleRecord(NOW + 2, b"d", b"4")],
                                  [SimpleRecord(NOW + 3, b"e", b"5")]]):
            plog.append(build_batch(recs, compression=CompressionType.ZSTD), now=NOW + i)
        plog.roll()
        logs.append(plog)
    cleaners = [Cleaner(native=True), Cleaner(native=False)]
    for now in (NOW + 10_000, NOW + 1_000_000):  # the first sets the tombstone's horizon, the second passes it
        for plog, cleaner in zip(logs, cleaners, strict=True):
            ltc, _ = log_to_clean(("t", 0), plog, None, now)
            cleaner.clean(ltc, now)
        assert seen(logs[0]) == seen(logs[1])
    assert [(r.key, r.value) for r in logs[0].read_records(0)] == [(b"b", b"2"), (b"c", b"3"), (b"d", b"4"),
                                                                   (b"e", b"5")]
    for plog in logs:
        plog.close()


def test_a_map_that_fills_takes_several_cleanings(tmp_path):
    """A map that holds 15 of the 40 keys: each cleaning maps part of the dirty log, the next starts at its
    checkpoint; the two paths stay equal."""
    memory = 24 * 4096
    load = 15 / (memory // 24)
    logs = []
    for name in ("c", "py"):
        write_log(tmp_path / name / "t-0", 5, batches=60)
        logs.append(PartitionLog.open(tmp_path / name / "t-0", TopicConfig.from_kafka(CONFIG)))
    cleaners = [Cleaner(memory, load, native=True), Cleaner(memory, load, native=False)]
    checkpoints = [None, None]
    passes = 0
    while True:
        ends = []
        for i, (plog, cleaner) in enumerate(zip(logs, cleaners, strict=True)):
            ltc, _ = log_to_clean(("t", 0), plog, checkpoints[i], NOW + 10**9)
            if ltc.cleanable_bytes == 0 or (checkpoints[i] is not None and checkpoints[i] >= ltc.first_uncleanable):
                ends.append(None)
                continue
            end, _stats = cleaner.clean(ltc, NOW + 10**9)
            checkpoints[i] = end
            ends.append(end)
        assert ends[0] == ends[1]
        assert seen(logs[0]) == seen(logs[1])
        if ends[0] is None:
            break
        passes += 1
        assert passes < 200
    assert passes > 2
    for plog in logs:
        plog.close()
