"""Bytes that lie: bombs, bit flips, truncations, odd legacy wrappers. Every failure must be a Kafka error
(`CorruptMessageError` / `InvalidRecordError`), never a hang or a stray exception."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chronolog.errors import CorruptMessageError, InvalidRecordError
from chronolog.records import (
    CompressionType,
    LegacyBatch,
    MemoryRecords,
    RecordBatch,
    SimpleRecord,
    TimestampType,
    build_batch,
    compress,
    crc32c,
    decompress,
    iter_batches,
    upconvert_to_v2,
)

CODECS = list(CompressionType)


@pytest.mark.parametrize("codec", CODECS[1:], ids=[c.name for c in CODECS[1:]])
def test_every_codec_caps_its_output(codec):
    packed = compress(codec, b"\0" * 3_000_000)
    assert len(packed) < 200_000
    with pytest.raises(CorruptMessageError, match="exceeds the limit"):
        decompress(codec, packed, max_size=1_000_000)
    assert decompress(codec, packed, max_size=3_000_000) == b"\0" * 3_000_000


@pytest.mark.parametrize("codec", CODECS[1:], ids=[c.name for c in CODECS[1:]])
def test_garbage_is_a_corrupt_message_for_every_codec(codec):
    with pytest.raises(CorruptMessageError):
        decompress(codec, b"\x82SNAPPY\x00garbage-that-is-no-stream" * 3)


def test_an_unknown_codec_in_the_attributes_is_rejected():
    raw = bytearray(build_batch([SimpleRecord(1, None, b"v")]))
    struct.pack_into(">h", raw, 21, 6)
    struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
    with pytest.raises(CorruptMessageError, match="unknown compression codec 6"):
        list(RecordBatch(raw).records())


_BASE = build_batch([SimpleRecord(1000 + i, b"k%d" % i if i % 2 else None, b"v" * i, (("h", b"x"),))
                     for i in range(6)])
_BASES = {codec: build_batch([SimpleRecord(1000 - i, None, b"value %d" % i) for i in range(6)],
                             compression=codec) for codec in CODECS}


def _decode_everything(raw: bytes) -> None:
    for batch in iter_batches(raw):
        batch.validate()
        list(batch.records())


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(CODECS), st.data())
def test_flipped_or_cut_bytes_never_escape_as_other_errors(codec, data):
    raw = bytearray(_BASES[codec] if data.draw(st.booleans()) else _BASE)
    for _ in range(data.draw(st.integers(1, 3))):
        raw[data.draw(st.integers(0, len(raw) - 1))] ^= data.draw(st.integers(1, 255))
    cut = data.draw(st.integers(0, len(raw)))
    try:
        _decode_everything(bytes(raw[:cut]))
    except (CorruptMessageError, InvalidRecordError):
        pass


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_records_of_a_batch_with_a_valid_crc_over_lying_bytes_raise_kafka_errors(data):
    """A CRC only proves the bytes arrived as sent; a hostile producer computes it over lies."""
    raw = bytearray(_BASE)
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(61, len(raw) - 1))] = data.draw(st.integers(0, 255))
    struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
    batch = RecordBatch(raw)
    batch.validate()
    try:
        list(batch.records())
    except InvalidRecordError:
        pass


def _legacy(magic: int, offset: int, value: bytes, *, ts: int = -1, attributes: int = 0) -> bytes:
    body = struct.pack(">bb", magic, attributes) + (struct.pack(">q", ts) if magic == 1 else b"")
    body += struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    return struct.pack(">qiI", offset, 4 + len(body), zlib.crc32(body) & 0xFFFFFFFF) + body


def test_legacy_v0_compressed_wrapper_keeps_absolute_inner_offsets():
    inner = b"".join(_legacy(0, 40 + i, b"m%d" % i) for i in range(3))
    (wrapper,) = iter_batches(_legacy(0, 42, compress(CompressionType.GZIP, inner), attributes=1))
    assert wrapper.timestamp_type == TimestampType.NO_TIMESTAMP
    assert (wrapper.base_offset, wrapper.last_offset, wrapper.records_count) == (40, 42, 3)
    assert [(r.offset, r.timestamp, r.value) for r in wrapper.records()] == [
        (40, -1, b"m0"), (41, -1, b"m1"), (42, -1, b"m2")]


def test_legacy_v1_log_append_time_wrapper_gives_every_inner_message_its_timestamp():
    inner = b"".join(_legacy(1, i, b"m%d" % i, ts=5 + i) for i in range(3))
    raw = _legacy(1, 9, compress(CompressionType.SNAPPY, inner), ts=777, attributes=CompressionType.SNAPPY | 0x08)
    (wrapper,) = iter_batches(raw)
    assert wrapper.timestamp_type == TimestampType.LOG_APPEND_TIME and wrapper.max_timestamp == 777
    assert [(r.offset, r.timestamp) for r in wrapper.records()] == [(7, 777), (8, 777), (9, 777)]


def test_legacy_inner_message_with_a_bad_crc_is_rejected():
    inner = bytearray(_legacy(1, 0, b"payload", ts=1))
    inner[-1] ^= 1
    (wrapper,) = iter_batches(_legacy(1, 0, compress(CompressionType.GZIP, bytes(inner)), ts=1, attributes=1))
    assert wrapper.verify_crc()  # the wrapper itself is intact
    with pytest.raises(CorruptMessageError):
        list(wrapper.records())


def test_memory_records_mixes_magics_and_reports_its_valid_prefix():
    v0 = _legacy(0, 0, b"old")
    v1 = _legacy(1, 1, b"older-format-with-time", ts=50)
    v2 = build_batch([SimpleRecord(60, None, b"new"), SimpleRecord(61, None, b"newer")], base_offset=2)
    whole = v0 + v1 + v2
    mem = MemoryRecords(whole + v2[:30])
    assert [b.magic for b in mem.batches()] == [0, 1, 2]
    assert isinstance(next(iter(mem.batches())), LegacyBatch)
    assert mem.valid_bytes == len(whole)
    assert [(r.offset, r.value) for r in mem.records()] == [
        (0, b"old"), (1, b"older-format-with-time"), (2, b"new"), (3, b"newer")]


def test_an_unknown_magic_is_corrupt_not_truncated():
    raw = bytearray(build_batch([SimpleRecord(1, None, b"v")]))
    raw[16] = 3
    with pytest.raises(CorruptMessageError):
        list(iter_batches(raw))


def test_upconversion_assigns_consecutive_offsets_whatever_the_legacy_producer_sent():
    inner = b"".join(_legacy(1, 0, b"m%d" % i, ts=30 - i) for i in range(3))  # all inner offsets 0
    (wrapper,) = iter_batches(_legacy(1, 0, compress(CompressionType.GZIP, inner), ts=30, attributes=1))
    v2 = RecordBatch(upconvert_to_v2(wrapper, 100, compression=CompressionType.ZSTD))
    v2.validate()
    assert v2.compression == CompressionType.ZSTD and v2.timestamp_type == TimestampType.CREATE_TIME
    assert (v2.base_offset, v2.last_offset, v2.max_timestamp) == (100, 102, 30)
    assert [(r.offset, r.timestamp, r.value) for r in v2.records()] == [(100, 30, b"m0"), (101, 29, b"m1"),
                                                                        (102, 28, b"m2")]
    assert v2.scan_timestamps() == (28, 30, 3)


def test_legacy_v0_lz4_with_kafkas_broken_header_checksum_is_read_and_v1_is_checked():
    """Kafka before 0.10 computed the LZ4 frame descriptor checksum over the magic number too
    (`KafkaLZ4BlockOutputStream` with useBrokenFlagDescriptorChecksum); `KafkaLZ4BlockInputStream`
    ignores it for magic 0 only. Build such a frame by hand: HC = second byte of XXH32(magic..BD)."""
    from chronolog.records.compression import _xxh32_short

    inner = b"".join(_legacy(0, i, b"lz%d" % i) for i in range(3))
    frame = bytearray(compress(CompressionType.LZ4, inner))
    assert frame[4] & 0x09 == 0  # no content size / dictionary id: the checksum byte sits at 6
    broken = (_xxh32_short(bytes(frame[0:6])) >> 8) & 0xFF
    assert broken != frame[6]
    frame[6] = broken
    (wrapper,) = iter_batches(_legacy(0, 2, bytes(frame), attributes=CompressionType.LZ4))
    assert [(r.offset, r.value) for r in wrapper.records()] == [(0, b"lz0"), (1, b"lz1"), (2, b"lz2")]
    inner_v1 = b"".join(_legacy(1, i, b"lz%d" % i, ts=1) for i in range(3))
    frame = bytearray(compress(CompressionType.LZ4, inner_v1))
    frame[6] = (_xxh32_short(bytes(frame[0:6])) >> 8) & 0xFF
    (wrapper,) = iter_batches(_legacy(1, 2, bytes(frame), ts=1, attributes=CompressionType.LZ4))
    with pytest.raises(CorruptMessageError):
        list(wrapper.records())
