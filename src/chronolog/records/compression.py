"""Record compression codecs, through `cramjam`.

Snappy: Kafka's Java client writes xerial-framed snappy (`SnappyCompression.wrapForOutput` creates a
`SnappyOutputStream`), librdkafka writes raw snappy; the Java reader (`SnappyInputStream`) accepts both,
and so do we. LZ4 is the LZ4 frame format (`Lz4Compression`).
Decompression is capped (`max_size`) so a small batch cannot expand into unbounded memory.

Zstd goes through `zstandard` (python-zstandard) where it is installed, with one compression and one
decompression context per thread, reused frame after frame: cramjam makes a new context for every call,
about 9 us a frame, which a batch of ten small records pays in full (the log cleaner decompresses each
batch twice and recompresses the ones it changes). What `zstandard` does not answer (a frame without its
content size that outgrows the first buffer, several frames, a corrupt one) goes to cramjam, which gives
the same bytes or the same errors as before.
"""

from __future__ import annotations

import importlib.util
import struct
import threading
import zlib
from enum import IntEnum

from chronolog.errors import CorruptMessageError, UnsupportedCompressionTypeError
from chronolog.lazy import LazyModule

# Imported by the first compressed batch, not by a broker's start (issue #26).
cramjam = LazyModule("cramjam", globals(), "cramjam")
# An install without python-zstandard: cramjam does all zstd.
_zstandard = LazyModule("zstandard", globals(), "_zstandard") if importlib.util.find_spec("zstandard") else None

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # version 1, minimum compatible version 1
XERIAL_BLOCK_SIZE = 32 * 1024  # SnappyOutputStream's default block size (uncompressed bytes per block)
DEFAULT_MAX_DECOMPRESSED = 256 * 1024 * 1024
GUNZIP_STEP = 16 * 1024 * 1024


class CompressionType(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_name(cls, name: str) -> CompressionType:
        aliases = {"uncompressed": "NONE", "none": "NONE"}
        try:
            return cls[aliases.get(name.lower(), name.upper())]
        except KeyError:
            raise UnsupportedCompressionTypeError(f"unknown compression type {name!r}") from None


def compress(codec: int, data: bytes) -> bytes:
    codec = CompressionType(codec)
    if codec == CompressionType.NONE:
        return bytes(data)
    if codec == CompressionType.GZIP:
        return bytes(cramjam.gzip.compress(bytes(data)))
    if codec == CompressionType.SNAPPY:
        return _xerial_frame(memoryview(data))
    if codec == CompressionType.LZ4:
        return bytes(cramjam.lz4.compress(bytes(data)))
    if codec == CompressionType.ZSTD:
        if _zstandard is not None:
            return _ZSTD.compressor.compress(data)
        return bytes(cramjam.zstd.compress(bytes(data)))
    raise UnsupportedCompressionTypeError(f"compression type {codec}")


class _ZstdContexts(threading.local):
    """A zstd compression and decompression context per thread (a context is not thread-safe), made on
    first use; level 3 is zstd's default, what cramjam used."""

    def __getattr__(self, name: str):  # this thread's first use
        if name not in ("compressor", "decompressor"):
            raise AttributeError(name)
        self.compressor, self.decompressor = _new_zstd_contexts()
        return getattr(self, name)


def _new_zstd_contexts():
    return _zstandard.ZstdCompressor(level=3), _zstandard.ZstdDecompressor()


_ZSTD = _ZstdContexts() if _zstandard is not None else None


def zstd_context_methods():
    """(decompress, compress) of a new pair of zstd contexts made as each thread's (the same parameters:
    `compress` gives the bytes `compress(ZSTD, ...)` gives), for a caller that keeps contexts of its own:
    the log cleaner's C walk, which calls `decompress` only for exactly one frame that states its content
    size within the limit and hands anything either refuses to `decompress` / `compress`. None without
    python-zstandard."""
    if _zstandard is None:
        return None
    compressor, decompressor = _new_zstd_contexts()
    return decompressor.decompress, compressor.compress


def _zstd_reused(data: bytes, max_size: int) -> bytes | None:
    """One zstd frame through the thread's reused context, or None for cramjam to decide. A frame that
    states its content size is refused above `max_size` before anything is allocated; one that does not
    (librdkafka's and the Java client's streaming frames) gets a buffer of 16x its size, 4x more per try up
    to `max_size` + 1 (text compresses 5-10x: a first buffer of 4x decompressed most batches three times),
    and goes to cramjam when even that fails (a corrupt frame, or one past the limit)."""
    try:
        size = _zstandard.frame_content_size(data)
    except _zstandard.ZstdError:
        return None
    if size > max_size:
        raise CorruptMessageError(f"decompressed size exceeds the limit of {max_size} bytes")
    cap = size if size >= 0 else min(max_size + 1, max(1 << 16, 16 * len(data)))
    while True:
        try:
            out = _ZSTD.decompressor.decompress(data, max_output_size=cap, allow_extra_data=False)
            break
        except _zstandard.ZstdError:
            if size >= 0 or cap > max_size:
                return None
            cap = min(max_size + 1, cap * 4)
    if len(out) > max_size:
        raise CorruptMessageError(f"decompressed size exceeds the limit of {max_size} bytes")
    return out


def _xerial_frame(data: memoryview) -> bytes:
    """What Kafka's Java producer writes (`SnappyOutputStream`): a 16-byte header, then one
    length-prefixed raw snappy block per 32 KiB of input."""
    out = bytearray(XERIAL_HEADER)
    for start in range(0, len(data), XERIAL_BLOCK_SIZE):
        block = cramjam.snappy.compress_raw(bytes(data[start:start + XERIAL_BLOCK_SIZE]))
        out += struct.pack(">i", len(block))
        out += bytes(block)
    return bytes(out)


def _check(out: bytes, max_size: int) -> bytes:
    if len(out) > max_size:
        raise CorruptMessageError(f"decompressed size exceeds the limit of {max_size} bytes")
    return out


def _snappy_raw(block: bytes, max_size: int) -> bytes:
    """Raw snappy states its decompressed length up front: check it before allocating anything."""
    if cramjam.snappy.decompress_raw_len(block) > max_size:
        raise CorruptMessageError(f"decompressed size exceeds the limit of {max_size} bytes")
    return bytes(cramjam.snappy.decompress_raw(block))


def _bounded(codec_module, data: bytes, max_size: int) -> bytes:
    """Decompress into a buffer that grows 4x per attempt up to `max_size` + 1 bytes, so a bomb fails at
    the limit instead of allocating whatever its frame asks for."""
    size = min(max_size + 1, max(1 << 16, 4 * len(data)))
    while True:
        out = None  # the smaller attempt's buffer goes before the next is allocated: peak is one buffer
        out = bytearray(size)
        try:
            n = codec_module.decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            if "whole buffer" not in str(exc):
                raise
            if size > max_size:
                raise CorruptMessageError(f"decompressed size exceeds the limit of {max_size} bytes") from None
            size = min(max_size + 1, size * 4)
            continue
        return _check(bytes(memoryview(out)[:n]), max_size)


def _gunzip(data: bytes, max_size: int) -> bytes:
    """Gzip in steps of at most 16 MiB of output, counted as they come: a bomb stops at the limit
    instead of growing one buffer to it and then copying that (twice the limit at the peak)."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    parts, total, rest = [], 0, data
    while not d.eof:
        part = d.decompress(rest, GUNZIP_STEP)
        total += len(part)
        if total > max_size:
            raise CorruptMessageError(f"decompressed size exceeds the limit of {max_size} bytes")
        parts.append(part)
        rest = d.unconsumed_tail
        if not part and not rest:  # input used up before the stream's end (GZIPInputStream: EOFException)
            break
    if not d.eof:
        raise CorruptMessageError("truncated gzip stream")
    return parts[0] if len(parts) == 1 else b"".join(parts)


_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _xxh32_short(data: bytes) -> int:
    """XXH32 with seed 0 for inputs under 16 bytes (an LZ4 frame descriptor is at most 10)."""
    h = (_P5 + len(data)) & _M32
    pos = 0
    while pos + 4 <= len(data):
        (word,) = struct.unpack_from("<I", data, pos)
        h = (_rotl((h + word * _P3) & _M32, 17) * _P4) & _M32
        pos += 4
    for byte in data[pos:]:
        h = (_rotl((h + byte * _P5) & _M32, 11) * _P1) & _M32
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    return h ^ (h >> 16)


def repair_lz4_v0_header_checksum(data: bytes) -> bytes:
    """Magic-0 messages carry Kafka's old, broken LZ4 frame descriptor checksum (computed over the magic
    number too, `Lz4BlockOutputStream.writeHeader`); Kafka's `Lz4BlockInputStream` (formerly
    `KafkaLZ4BlockInputStream`) ignores it for magic 0 only (`ignoreFlagDescriptorChecksum`).
    A standard frame decoder checks it, so rewrite it to the correct value before decoding."""
    if len(data) < 7 or data[:4] != b"\x04\x22\x4d\x18":
        return data
    flg = data[4]
    end = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)  # content size, dictionary id
    if len(data) <= end:
        return data
    hc = (_xxh32_short(data[4:end]) >> 8) & 0xFF
    return data[:end] + bytes([hc]) + data[end + 1:]


def decompress(codec: int, data, max_size: int = DEFAULT_MAX_DECOMPRESSED) -> bytes:
    if codec == 4 and _zstandard is not None:  # the hot path (a cleaner calls it per small batch): no copy, no enum
        out = _zstd_reused(data, max_size)
        if out is not None:
            return out
    try:
        codec = CompressionType(codec)
    except ValueError:
        raise UnsupportedCompressionTypeError(f"compression type {codec}") from None
    data = bytes(data)
    try:
        if codec == CompressionType.NONE:
            return data
        if codec == CompressionType.GZIP:
            return _gunzip(data, max_size)
        if codec == CompressionType.SNAPPY:
            if data.startswith(XERIAL_MAGIC):
                pos, parts, total = 16, [], 0
                while pos + 4 <= len(data):
                    (n,) = struct.unpack_from(">i", data, pos)
                    pos += 4
                    if n < 0 or pos + n > len(data):
                        raise CorruptMessageError("truncated xerial snappy block")
                    part = _snappy_raw(data[pos:pos + n], max_size - total)
                    total += len(part)
                    if total > max_size:
                        raise CorruptMessageError(f"decompressed size exceeds the limit of {max_size} bytes")
                    parts.append(part)
                    pos += n
                if pos != len(data):
                    raise CorruptMessageError("trailing bytes after the last xerial snappy block")
                return b"".join(parts)
            return _snappy_raw(data, max_size)
        if codec == CompressionType.LZ4:
            return _bounded(cramjam.lz4, data, max_size)
        if codec == CompressionType.ZSTD:
            out = _zstd_reused(data, max_size) if _zstandard is not None else None
            return out if out is not None else _bounded(cramjam.zstd, data, max_size)
    except CorruptMessageError:
        raise
    except Exception as exc:  # cramjam raises its own DecompressionError / ValueError
        raise CorruptMessageError(f"cannot decompress {codec.name}: {exc}") from None
    raise UnsupportedCompressionTypeError(f"compression type {codec}")
