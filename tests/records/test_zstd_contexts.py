"""Zstd through reused per-thread contexts (python-zstandard) answers exactly as cramjam did: same bytes for
every frame a producer can write (with or without its content size, several frames), same errors for bad
ones, same decompression limit; and the contexts are safe to use from several threads at once."""

from __future__ import annotations

import random
import threading

import cramjam
import pytest

from chronolog.errors import CorruptMessageError
from chronolog.records import compression
from chronolog.records.compression import CompressionType, compress, decompress

zstandard = pytest.importorskip("zstandard")

_R = random.Random(7)
_DATA = bytes(_R.getrandbits(8) for _ in range(3000)) * 100  # 300 KB, compressible
_NO_SIZE = zstandard.ZstdCompressor(write_content_size=False)  # what a streaming writer (zstd-jni) leaves out

FRAMES = {
    "empty": bytes(cramjam.zstd.compress(b"")),
    "small": bytes(cramjam.zstd.compress(_DATA[:900])),
    "no content size, small": _NO_SIZE.compress(_DATA[:900]),
    "no content size, beyond the first buffer": _NO_SIZE.compress(_DATA),
    "two frames": bytes(cramjam.zstd.compress(_DATA[:500])) + bytes(cramjam.zstd.compress(_DATA[500:1700])),
    "trailing bytes": bytes(cramjam.zstd.compress(_DATA[:500])) + b"xx",
    "truncated": bytes(cramjam.zstd.compress(_DATA))[:-7],
    "not zstd": b"hello, not a zstd frame",
    "nothing": b"",
}


def _answer(data: bytes, max_size: int, reused: bool, monkeypatch) -> tuple[str, object]:
    with monkeypatch.context() as m:
        if not reused:
            m.setattr(compression, "_zstandard", None)
        try:
            return "ok", decompress(CompressionType.ZSTD, data, max_size)
        except CorruptMessageError as exc:
            return "error", str(exc)


@pytest.mark.parametrize("name", sorted(FRAMES))
@pytest.mark.parametrize("max_size", [1000, len(_DATA), compression.DEFAULT_MAX_DECOMPRESSED])
def test_reused_context_answers_as_cramjam(name, max_size, monkeypatch):
    reused = _answer(FRAMES[name], max_size, True, monkeypatch)
    plain = _answer(FRAMES[name], max_size, False, monkeypatch)
    assert reused[0] == plain[0]
    if reused[0] == "ok":
        assert reused[1] == plain[1]


def test_two_frames_are_read_whole():
    assert decompress(CompressionType.ZSTD, FRAMES["two frames"]) == _DATA[:1700]


def test_limit_holds_with_and_without_content_size():
    for frame in (bytes(cramjam.zstd.compress(_DATA)), _NO_SIZE.compress(_DATA)):
        with pytest.raises(CorruptMessageError, match="exceeds the limit"):
            decompress(CompressionType.ZSTD, frame, len(_DATA) - 1)
        assert decompress(CompressionType.ZSTD, frame, len(_DATA)) == _DATA


def test_compress_round_trips_through_both_decoders():
    for n in (0, 1, 980, len(_DATA)):
        frame = compress(CompressionType.ZSTD, memoryview(_DATA[:n]))
        assert bytes(cramjam.zstd.decompress(frame)) == _DATA[:n]
        assert decompress(CompressionType.ZSTD, frame) == _DATA[:n]


def test_contexts_are_per_thread():
    """Eight threads at once each have their own context (a zstd context is not thread-safe) and get their
    own bytes back."""
    failures: list[str] = []
    start = threading.Barrier(8)
    contexts: dict[int, object] = {}

    def work(seed: int) -> None:
        rng = random.Random(seed)
        contexts[seed] = compression._ZSTD.decompressor
        start.wait(timeout=30)  # all alive at once: no context can be one a finished thread left
        for _ in range(300):
            data = bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 400))) * rng.randrange(1, 20)
            if decompress(CompressionType.ZSTD, compress(CompressionType.ZSTD, data)) != data:
                failures.append(f"thread {seed}")
                return

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not failures
    assert len({id(c) for c in contexts.values()}) == 8
    assert not any(t.is_alive() for t in threads)


def test_a_callers_own_contexts_give_the_same_bytes():
    """`zstd_context_methods` (the log cleaner's own contexts): its compress gives the bytes `compress` gives
    (a partly kept batch recompressed in C is the one the Python path builds), its decompress the same
    records, frame after frame."""
    own_decompress, own_compress = compression.zstd_context_methods()
    rng = random.Random(3)
    for size in (0, 1, 100, 1070, 5000, 70_000):
        data = bytes(rng.getrandbits(8) for _ in range(8)) * (size // 8) + rng.randbytes(size % 8)
        frame = own_compress(data)
        assert frame == compress(CompressionType.ZSTD, data)
        assert own_decompress(frame) == decompress(CompressionType.ZSTD, frame) == data
