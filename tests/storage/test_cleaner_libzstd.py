"""The C cleaner's zstd frames through the system's libzstd (records/_clean.c): the map pass summarizes a
window of batches (decompressed, walked, keys hashed) on two threads without the GIL, then puts the keys in
offset order; a frame libzstd refuses, or a body the walk rejects, takes the usual path. None of it changes
a byte: the cleaned segments equal the Python path's and the C path's without libzstd, which is also what a
machine without the library runs (forced here in a child process)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap

import pytest

from chronolog.config import TopicConfig
from chronolog.records import CompressionType, SimpleRecord, build_batch, iter_batches
from chronolog.storage import PartitionLog
from chronolog.storage.cleaner import Cleaner, log_to_clean
from tests.storage.test_cleaner_zstd import files
from tests.storage.test_cleaner_zstd import write_log as zstd_log

native = pytest.importorskip("chronolog.records._clean")
pytest.importorskip("zstandard")
needs_libzstd = pytest.mark.skipif(not native.LIBZSTD, reason="no libzstd.so.1 on this machine")

NOW = 1_700_000_000_000
CONFIG = {"cleanup.policy": "compact", "segment.bytes": str(1 << 20), "index.interval.bytes": "4096",
          "message.timestamp.after.max.ms": str(2**62), "message.timestamp.before.max.ms": str(2**62)}


def write_log(directory, seed: int, batches: int = 700) -> None:
    """Mostly zstd batches of 1-12 records over 300 keys (with tombstones, and uncompressed batches between
    them), in segments large enough that a chunk holds windows the helper thread shares."""
    zstd_log(directory, seed, batches, keys=300, value_bytes=60, repeat=3, zstd_share=0.9, config=CONFIG)


def clean(directory, cleaner: Cleaner):
    plog = PartitionLog.open(directory, TopicConfig.from_kafka(CONFIG))
    ltc, _ = log_to_clean(("t", 0), plog, None, NOW + 10**9)
    _end, stats = cleaner.clean(ltc, NOW + 10**9)
    plog.close()
    return stats


@needs_libzstd
@pytest.mark.parametrize("seed", range(3))
def test_windows_on_two_threads_write_the_python_paths_bytes(tmp_path, seed):
    for name in ("direct", "contexts", "py"):
        write_log(tmp_path / name / "t-0", seed)
    direct = Cleaner(native=True)
    contexts = Cleaner(native=True)
    contexts.offset_map.direct_zstd = False
    stats = [clean(tmp_path / "direct" / "t-0", direct), clean(tmp_path / "contexts" / "t-0", contexts),
             clean(tmp_path / "py" / "t-0", Cleaner(native=False))]
    assert files(tmp_path / "direct" / "t-0") == files(tmp_path / "py" / "t-0")
    assert files(tmp_path / "contexts" / "t-0") == files(tmp_path / "py" / "t-0")
    assert len({(s.records_read, s.records_retained, s.bytes_written, s.map_records) for s in stats}) == 1
    assert 0 < stats[0].records_retained < stats[0].records_read
    # the map pass handed windows to the helper thread (which share of them it took depends on timing: both
    # threads claim batches as they go), and libzstd decompressed the frames
    assert direct.offset_map.helper_posts > 0 and direct.offset_map.direct_frames > 0
    assert contexts.offset_map.helper_posts == 0 and contexts.offset_map.direct_frames == 0
    # and libzstd recompressed the partly kept batches (the python-zstandard context without it)
    assert direct.offset_map.direct_compress and direct.offset_map.direct_compressed > 0
    assert contexts.offset_map.direct_compressed == 0


@needs_libzstd
def test_a_compressor_whose_bytes_libzstd_does_not_give_is_kept(tmp_path):
    """set_codecs compares libzstd's compression with the map's own zstd compressor on a sample: one that
    writes other bytes (here a checksum in every frame) stays the copy's compressor, as it is the Python
    path's, and the cleaned log has its frames."""
    import zstandard

    from chronolog.records.compression import DEFAULT_MAX_DECOMPRESSED, compress, decompress

    write_log(tmp_path / "t-0", 4, batches=300)
    cleaner = Cleaner(native=True)
    assert cleaner.offset_map.direct_compress  # the records layer's own contexts: libzstd's bytes
    checksummed = zstandard.ZstdCompressor(level=3, write_checksum=True).compress
    cleaner.offset_map.set_codecs(decompress, compress, zstandard.ZstdDecompressor().decompress, checksummed,
                                  DEFAULT_MAX_DECOMPRESSED)
    assert not cleaner.offset_map.direct_compress
    stats = clean(tmp_path / "t-0", cleaner)
    assert 0 < stats.records_retained < stats.records_read and cleaner.offset_map.direct_compressed == 0
    spliced = [b for p in sorted((tmp_path / "t-0").glob("*.log")) for b in iter_batches(p.read_bytes())
               if b.compression == CompressionType.ZSTD and zstandard.get_frame_parameters(
                   bytes(b.raw[61:])).has_checksum]
    assert spliced  # the partly kept batches, recompressed by the map's compressor


def _batches(n: int) -> list[bytes]:
    rng = random.Random(7)
    return [build_batch([SimpleRecord(NOW + 10 * i + j, b"k%d" % rng.randrange(50), rng.randbytes(30) * 2)
                         for j in range(10)], base_offset=10 * i, compression=CompressionType.ZSTD)
            for i in range(n)]


def _corrupt_block(batch: bytes) -> bytes:
    """The batch's records in a frame with a checksum, its last byte flipped: the frame states its size and
    its blocks add up (so it is taken into a window), but every decoder refuses it."""
    import crc32c
    import zstandard

    body = zstandard.ZstdDecompressor().decompress(batch[61:])
    frame = bytearray(zstandard.ZstdCompressor(level=3, write_checksum=True).compress(body))
    frame[-1] ^= 0xFF
    data = bytearray(batch[:61]) + frame
    data[8:12] = (len(data) - 12).to_bytes(4, "big")
    data[17:21] = crc32c.crc32c(bytes(data[21:])).to_bytes(4, "big")
    return bytes(data)


def _transactional(batch: bytes) -> bytes:
    import crc32c

    data = bytearray(batch)
    data[22] |= 0x10
    data[43:51] = (77).to_bytes(8, "big")  # a producer id
    data[17:21] = crc32c.crc32c(bytes(data[21:])).to_bytes(4, "big")
    return bytes(data)


@needs_libzstd
@pytest.mark.parametrize("odd", ["a frame libzstd refuses", "a transactional batch", "none"])
def test_a_window_gives_what_the_loop_alone_gives(odd):
    """map_chunk over 120 zstd batches with an odd one in the middle: the same answer (position, status,
    bytes, records, last offset), the same map and the same copy with libzstd's windows as without."""
    from chronolog.records.compression import compress, decompress, zstd_context_methods

    batches = _batches(120)
    if odd == "a frame libzstd refuses":
        batches[60] = _corrupt_block(batches[60])
    elif odd == "a transactional batch":
        batches[60] = _transactional(batches[60])
    chunk = b"".join(batches)
    answers = []
    for direct in (True, False):
        omap = native.OffsetMap(1 << 20, 0.9, 3)
        omap.set_codecs(decompress, compress, *zstd_context_methods())
        omap.direct_zstd = direct
        results, off = [], 0
        while True:
            got = omap.map_chunk(chunk, off, 0, 1 << 62, 1 << 62)
            results.append(got)
            if got[1] != native.PYTHON:
                break
            off = got[0] + len(batches[60])  # what the Python code does: steps over the batch it handled
        keys = [omap.get(b"k%d" % i) for i in range(50)]
        filtered = omap.filter_chunk(chunk, 0, False, 1 << 62, NOW, {}, 0, 0, 0, -1, -1, 4096, 1 << 62)
        answers.append((results, keys, filtered[:8]))
        if direct:
            assert omap.helper_posts > 0
    assert answers[0] == answers[1]
    assert answers[0][0][0][1] == (native.MORE if odd == "none" else native.PYTHON)
    if odd != "none":
        assert answers[0][0][0][0] == sum(len(b) for b in batches[:60])
    if odd == "none":  # the copy ran over the whole chunk: the batches it wrote are whole
        out = answers[0][2][3]
        assert out and all(batch.verify_crc() for batch in iter_batches(out))


def test_without_libzstd_the_python_contexts_clean_the_same_bytes(tmp_path):
    """A child process where libzstd is not opened (as on a machine without it): the map says so, refuses
    to be switched to it, and cleans the same bytes as the Python path."""
    for name in ("child", "py"):
        write_log(tmp_path / name / "t-0", 5, batches=300)
    clean(tmp_path / "py" / "t-0", Cleaner(native=False))
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from chronolog.records import _clean
        from chronolog.storage.cleaner import Cleaner
        from test_cleaner_libzstd import clean
        assert _clean.LIBZSTD == 0, _clean.LIBZSTD
        cleaner = Cleaner(native=True)
        assert cleaner.native and not cleaner.offset_map.direct_zstd
        try:
            cleaner.offset_map.direct_zstd = True
        except ValueError:
            pass
        else:
            raise AssertionError("switched to a library that is not loaded")
        clean(sys.argv[1], cleaner)
        assert cleaner.offset_map.direct_frames == 0 and cleaner.offset_map.helper_posts == 0
        assert not cleaner.offset_map.direct_compress and cleaner.offset_map.direct_compressed == 0
        """)
    from pathlib import Path

    env = dict(os.environ, CHRONOLOG_CLEANER_NO_LIBZSTD="1")
    done = subprocess.run([sys.executable, "-c", script, str(Path(tmp_path / "child" / "t-0"))], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert files(tmp_path / "child" / "t-0") == files(tmp_path / "py" / "t-0")


@needs_libzstd
def test_partly_kept_batches_past_the_keep_flags_area_write_the_python_paths_bytes(tmp_path):
    """filter_chunk queues each partly kept zstd batch for the threads as it judges it, with its records' keep
    flags in an area that never moves while the helper reads it (64 KiB at first); a chunk whose jobs hold
    more records than that gives the rest blocks of their own. 60 batches of 2,000 records over 60,000 keys:
    every batch keeps about half of its records, 120,000 flags in one chunk. The bytes are the Python path's,
    and a second cleaning (the area grown to what the first needed) writes them too."""
    rng = random.Random(11)
    order = [b"key-%05d" % k for k in range(60_000)] * 2
    rng.shuffle(order)

    def build(directory):
        plog = PartitionLog.open(directory, TopicConfig.from_kafka(CONFIG))
        for i in range(0, len(order), 2000):
            plog.append(build_batch([SimpleRecord(NOW + i + j, key, b"v" * 20) for j, key in
                                     enumerate(order[i:i + 2000])], compression=CompressionType.ZSTD), now=NOW + i)
        plog.roll()
        plog.close()

    for name in ("direct", "again", "py"):
        build(tmp_path / name / "t-0")
    direct = Cleaner(native=True)
    first = clean(tmp_path / "direct" / "t-0", direct)
    clean(tmp_path / "py" / "t-0", Cleaner(native=False))
    assert files(tmp_path / "direct" / "t-0") == files(tmp_path / "py" / "t-0")
    assert 0 < first.records_retained < first.records_read and direct.offset_map.direct_compressed >= 50
    clean(tmp_path / "again" / "t-0", direct)  # the same map, its flags' area grown
    assert files(tmp_path / "again" / "t-0") == files(tmp_path / "py" / "t-0")


@needs_libzstd
@pytest.mark.parametrize("then", ["the chunk it was given", "the same bytes in another object", "another call first"])
def test_a_window_carried_to_the_next_chunk_maps_what_the_loop_alone_maps(then):
    """map_chunk given the next chunk (`next`, from where this one's whole batches end) lays out that chunk's
    first window for the helper when its loop ends; the call on that chunk starts with it. A call on any other
    chunk gives it up. Either way the map holds what one pass over the whole bytes gives."""
    from chronolog.records.compression import compress, decompress, zstd_context_methods

    batches = _batches(240)
    whole = b"".join(batches)
    first, second = b"".join(batches[:120]), b"".join(batches[120:])
    cut = first + second[:40]  # the first chunk ends inside a batch, as a read of a fixed size does
    assert native.chunk_end(cut) == len(first)
    answers = []
    for pieces in ([whole], [cut, second]):
        omap = native.OffsetMap(1 << 20, 0.9, 3)
        omap.set_codecs(decompress, compress, *zstd_context_methods())
        got = omap.map_chunk(pieces[0], 0, 0, 1 << 62, 1 << 62, pieces[1] if len(pieces) > 1 else None)
        if len(pieces) > 1:
            assert got[0] == len(first) and got[1] == native.MORE
            if then == "the same bytes in another object":
                second = bytes(bytearray(second))  # not the carried chunk
            elif then == "another call first":
                omap.map_chunk(b"", 0, 0, 1 << 62, 1 << 62)
            got = omap.map_chunk(second, 0, 0, 1 << 62, 1 << 62)
            assert omap.carried == (1 if then == "the chunk it was given" else 0)
        answers.append(([omap.get(b"k%d" % i) for i in range(50)], omap.latest_offset, got[1]))
    assert answers[0] == answers[1]
