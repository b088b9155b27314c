"""The C cleaner on zstd logs (records/_clean.c): the offset-map pass keeps what the copy needs to judge each
compressed batch's records (key hashes, offsets, null keys and values: the record cache), within what
`log.cleaner.dedupe.buffer.size` leaves beside the map's table, so that the copy decompresses again only the
batches that keep some of their records but not all; zstd frames go straight to contexts of the map's own.
None of it changes a byte: the cleaned segments equal the Python path's, whatever part of the log the
bound lets the cache hold."""

from __future__ import annotations

import random

import crc32c
import pytest

from chronolog.config import TopicConfig
from chronolog.records import CompressionType, RecordBatch, SimpleRecord, build_batch, iter_batches
from chronolog.records.compression import DEFAULT_MAX_DECOMPRESSED, compress, decompress, zstd_context_methods
from chronolog.storage import PartitionLog
from chronolog.storage.cleaner import Cleaner, log_to_clean

native = pytest.importorskip("chronolog.records._clean")
zstandard = pytest.importorskip("zstandard")

NOW = 1_700_000_000_000
CONFIG = {"cleanup.policy": "compact", "segment.bytes": "6000", "index.interval.bytes": "300",
          "message.timestamp.after.max.ms": str(2**62), "message.timestamp.before.max.ms": str(2**62)}


def write_log(directory, seed: int, batches: int = 120, *, keys: int = 40, value_bytes: int = 80, repeat: int = 2,
              zstd_share: float = 0.85, config: dict = CONFIG) -> None:
    """zstd batches of 1-12 records over `keys` keys (with 40, most batches lose some records, many all), a few
    tombstones and uncompressed batches between them."""
    rng = random.Random(seed)
    plog = PartitionLog.open(directory, TopicConfig.from_kafka(config))
    ts = NOW
    for _ in range(batches):
        ts += rng.randrange(1, 30)
        recs = [SimpleRecord(ts + j, b"key-%d" % rng.randrange(keys),
                             None if rng.random() < 0.05 else rng.randbytes(rng.randrange(0, value_bytes)) * repeat)
                for j in range(rng.randrange(1, 13))]
        codec = CompressionType.ZSTD if rng.random() < zstd_share else CompressionType.NONE
        plog.append(build_batch(recs, compression=codec), now=ts)
    plog.roll()
    plog.close()


def files(directory) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())
            if p.name.endswith((".log", ".index", ".timeindex", ".txnindex"))}


def clean(directory, cleaner: Cleaner):
    plog = PartitionLog.open(directory, TopicConfig.from_kafka(CONFIG))
    ltc, _ = log_to_clean(("t", 0), plog, None, NOW + 10**9)
    zstd_batches = sum(1 for seg in plog.segments[:-1] for b in iter_batches(seg.log_path.read_bytes())
                       if b.compression == CompressionType.ZSTD)
    _end, stats = cleaner.clean(ltc, NOW + 10**9)
    plog.close()
    return stats, zstd_batches


DIRECT = [pytest.param(True, id="libzstd", marks=pytest.mark.skipif(not native.LIBZSTD, reason="no libzstd.so.1")),
          pytest.param(False, id="python-contexts")]


def decompressions(calls: dict[str, int], omap) -> int:
    """zstd frames the map decompressed straight: through libzstd or through its own Python context."""
    return calls["zstd_decompress"] + omap.direct_frames


def counting_codecs(omap, direct: bool | None = None) -> dict[str, int]:
    """The map's codecs, each call counted: the records layer's (`decompress`, `compress`) and the map's own
    zstd contexts (`zstd_decompress`, `zstd_compress`); libzstd's frames are `omap.direct_frames`. `direct`:
    whether the map uses libzstd (False: the Python contexts only, as where the library is missing)."""
    if direct is not None:
        omap.direct_zstd = direct
    calls = {"decompress": 0, "compress": 0, "zstd_decompress": 0, "zstd_compress": 0}
    zd, zc = zstd_context_methods()

    def counted(name, fn):
        def call(*args):
            calls[name] += 1
            return fn(*args)
        return call

    omap.set_codecs(counted("decompress", decompress), counted("compress", compress),
                    counted("zstd_decompress", zd), counted("zstd_compress", zc), DEFAULT_MAX_DECOMPRESSED)
    calls.update(dict.fromkeys(calls, 0))  # set_codecs' own calls (its probe of libzstd's compression) aside
    return calls


@pytest.mark.parametrize("direct", DIRECT)
@pytest.mark.parametrize("seed", range(4))
def test_only_partly_kept_batches_are_decompressed_twice_and_the_bytes_are_the_python_paths(tmp_path, seed, direct):
    for name in ("c", "py"):
        write_log(tmp_path / name / "t-0", seed)
    cleaner = Cleaner(native=True)
    calls = counting_codecs(cleaner.offset_map, direct)
    stats_c, zstd_batches = clean(tmp_path / "c" / "t-0", cleaner)
    stats_py, _ = clean(tmp_path / "py" / "t-0", Cleaner(native=False))
    assert files(tmp_path / "c" / "t-0") == files(tmp_path / "py" / "t-0")
    assert (stats_c.records_read, stats_c.records_retained, stats_c.bytes_written) == \
        (stats_py.records_read, stats_py.records_retained, stats_py.bytes_written)
    assert 0 < stats_c.records_retained < stats_c.records_read
    # every zstd frame of the (all dirty) log decompressed in the map pass, through the map's context; the
    # copy found each batch in the cache, judged those that keep all their records or none from it, and
    # decompressed again only the others
    omap = cleaner.offset_map
    assert omap.cache_hits == zstd_batches and 0 < omap.cache_decided < zstd_batches
    assert decompressions(calls, omap) == zstd_batches + (zstd_batches - omap.cache_decided)
    assert calls["zstd_decompress"] == (0 if direct else decompressions(calls, omap))
    assert calls["decompress"] == 0
    # the partly kept ones, recompressed: through libzstd, or through the map's Python context without it
    assert 0 < calls["zstd_compress"] + omap.direct_compressed <= zstd_batches - omap.cache_decided
    assert (calls["zstd_compress"], omap.direct_compressed > 0) == ((0, True) if direct else (calls["zstd_compress"], False))
    assert calls["compress"] == 0
    assert omap.cache_bytes == 0  # the cache is emptied when the cleaning ends


@pytest.mark.parametrize("direct", DIRECT)
@pytest.mark.parametrize("room", [0, 20_000, 1 << 20])
def test_the_cache_stays_within_the_dedupe_buffer_beside_the_table(tmp_path, room, direct):
    """A bound that holds the table (4096 slots for these 40 keys) and none, some or all of the batches: the
    table and the cache together never pass it, the batches it could not keep are decompressed again in the
    copy pass, and the cleaned log is the same."""
    memory = 24 * 4096 + room
    for name in ("c", "py"):
        write_log(tmp_path / name / "t-0", 11, batches=300)
    cleaner = Cleaner(memory, 1.0, native=True)
    calls = counting_codecs(cleaner.offset_map, direct)
    _stats, zstd_batches = clean(tmp_path / "c" / "t-0", cleaner)
    clean(tmp_path / "py" / "t-0", Cleaner(memory, 1.0, native=False))
    assert files(tmp_path / "c" / "t-0") == files(tmp_path / "py" / "t-0")
    omap = cleaner.offset_map
    assert omap.total_peak_bytes <= memory
    hits, decided = omap.cache_hits, omap.cache_decided
    assert decompressions(calls, omap) == zstd_batches + (zstd_batches - decided)
    if room == 0:
        assert hits == 0
    elif room < 1 << 20:
        assert 0 < decided <= hits < zstd_batches
    else:
        assert 0 < decided < hits == zstd_batches


def test_a_map_growing_past_the_bound_drops_the_last_batches():
    """The table doubles while earlier batches are in the cache: the cache drops its last ones so the two
    stay within the bound; the ones it keeps are still found by the copy."""
    omap = native.OffsetMap(24 * 8192 + 30_000, 1.0, 5)
    counting_codecs(omap)
    rng = random.Random(3)
    batches = [build_batch([SimpleRecord(NOW, b"k%d" % (10 * i + j), rng.randbytes(200)) for j in range(10)],
                           base_offset=10 * i, compression=CompressionType.ZSTD) for i in range(400)]
    chunk = b"".join(batches)
    omap.map_chunk(chunk, 0, 0, 1 << 62, 1 << 62)
    assert len(omap) == 4000 and omap.total_peak_bytes <= 24 * 8192 + 30_000
    assert 0 < omap.cache_bytes <= 30_000
    got = omap.filter_chunk(chunk, 0, False, 1 << 62, NOW, {}, 0, 0, 0, -1, -1, 4096, 1 << 62)
    assert got[3] == chunk and 0 < omap.cache_hits == omap.cache_decided < 400


@pytest.mark.parametrize("direct", DIRECT)
def test_a_record_before_the_start_whose_key_comes_later_is_judged_by_it(direct):
    """The cache keeps a record's slot in the table, not its key: a batch straddling the map's start whose
    records before it have keys the map holds only from a later batch is not cached (it is decompressed
    again), and those records are dropped for the later ones, as the Python path does."""
    omap = native.OffsetMap(1 << 20, 1.0, 7)
    counting_codecs(omap, direct)
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
    assert omap.cache_hits == 1


def _with_body(batch: bytes, body: bytes) -> bytes:
    """`batch` with its records section replaced by `body` (length and CRC-32C set again)."""
    data = bytearray(batch[:61]) + body
    data[8:12] = (len(data) - 12).to_bytes(4, "big")
    data[17:21] = crc32c.crc32c(bytes(data[21:])).to_bytes(4, "big")
    return bytes(data)


def _frames() -> dict[str, tuple[bytes, bool]]:
    """A records section in the zstd frames a producer or a hostile client may send, and whether the map's
    own context takes it (exactly one frame stating its size) or the records layer's decompress decides."""
    recs = [SimpleRecord(NOW + j, b"k%d" % (j % 3), b"v" * 50) for j in range(6)]
    body = RecordBatch(build_batch(recs, base_offset=100)).records_section().tobytes()
    plain = zstandard.ZstdCompressor(level=3).compress(body)
    return {
        "one frame": (plain, True),
        "with a checksum": (zstandard.ZstdCompressor(write_checksum=True).compress(body), True),
        "with a dictionary id field": (_with_dict_id(plain), True),
        "without its content size": (zstandard.ZstdCompressor(write_content_size=False).compress(body), False),
        "two frames": (zstandard.ZstdCompressor().compress(body[:40]) + zstandard.ZstdCompressor().compress(body[40:]),
                       False),
        "trailing bytes": (plain + b"xx", False),
        "truncated": (plain[:-3], False),
        "a size above the limit": (plain, False),  # with a limit of 100 bytes set below
    }


def _with_dict_id(frame: bytes) -> bytes:
    """The same frame with a 1-byte dictionary id field (id 0: no dictionary) after its descriptors."""
    pos = 5 if frame[4] & 0x20 else 6  # a single-segment frame has no window descriptor
    return frame[:4] + bytes([frame[4] | 1]) + frame[5:pos] + b"\x00" + frame[pos:]


@pytest.mark.parametrize("direct", DIRECT)
@pytest.mark.parametrize("name", sorted(_frames()))
def test_zstd_frames_through_the_maps_context_or_the_records_layer(name, direct):
    """Map and copy of one batch: the same answer (offset, status, records, the map, the bytes written)
    through the map's own context as through the records layer's decompress alone, which the C walk asks
    for anything but one frame that states its size within the limit."""
    frame, straight = _frames()[name]
    recs = [SimpleRecord(NOW + j, b"k%d" % (j % 3), b"v" * 50) for j in range(6)]
    template = build_batch(recs, base_offset=100, compression=CompressionType.ZSTD)
    chunk = _with_body(template, frame)
    answers = []
    for own in (True, False):
        omap = native.OffsetMap(1 << 20, 0.9, 9)
        if own:
            calls = counting_codecs(omap, direct)
            if name == "a size above the limit":
                zd, zc = zstd_context_methods()
                omap.set_codecs(decompress, compress, zd, zc, 100)
        else:
            omap.direct_zstd = False  # the records layer alone
            omap.set_codecs(decompress, compress)
        mapped = omap.map_chunk(chunk, 0, 0, 1 << 62, 1 << 62)
        keys = [omap.get(b"k%d" % i) for i in range(3)]
        omap.latest_offset = 105
        filtered = omap.filter_chunk(chunk, 0, False, 1 << 62, NOW, {}, 100, 0, 0, -1, -1, 4096, 1 << 62)
        answers.append((mapped, keys, filtered[:8]))
        if own and name != "a size above the limit":
            assert decompressions(calls, omap) == (2 if straight else 0)
            assert omap.direct_frames == (2 if straight and direct else 0)
            # the records layer's: in the map pass and again in the copy (the batch keeps some of its
            # records but not all), or twice when it refused it (map and copy both stop there)
            assert calls["decompress"] == (0 if straight else 2)
    assert answers[0] == answers[1]
    if straight:
        out = answers[0][2][3]
        assert RecordBatch(out).verify_crc() and [r.offset for r in RecordBatch(out).records()] == [103, 104, 105]


def test_a_tombstone_past_its_delete_horizon_goes_when_its_batch_is_judged_from_the_cache(tmp_path):
    """A cleaning from the log start (no checkpoint) after the delete horizon a first one set: the zstd batch
    of the tombstone is in the cache, and the tombstone goes as in the Python path."""
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
        assert files(tmp_path / "c" / "t-0") == files(tmp_path / "py" / "t-0")
    assert cleaners[0].offset_map.cache_decided > 0
    assert [(r.key, r.value) for r in logs[0].read_records(0)] == [(b"b", b"2"), (b"c", b"3"), (b"d", b"4"),
                                                                   (b"e", b"5")]
    for plog in logs:
        plog.close()


def test_a_map_that_fills_takes_several_cleanings_with_the_cache(tmp_path):
    """A map that holds 15 of the 40 keys: each cleaning maps part of the dirty log (the batch in which the
    map fills is not in the cache), the next starts at its checkpoint; the two paths stay byte-equal."""
    memory = 24 * 4096 + (1 << 20)
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
        assert files(tmp_path / "c" / "t-0") == files(tmp_path / "py" / "t-0")
        if ends[0] is None:
            break
        passes += 1
        assert passes < 200
    assert passes > 2 and cleaners[0].offset_map.cache_decided > 0
    for plog in logs:
        plog.close()
