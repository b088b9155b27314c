"""Cross-checks against a codec we did not write: aiokafka's record batch builder/reader (C extension,
every Kafka codec through its own compression wrappers)."""

from __future__ import annotations

import os

import pytest

from chronolog.records import (
    CompressionType,
    RecordBatch,
    SimpleRecord,
    TimestampType,
    build_batch,
    compress,
    decompress,
)

aiokafka_records = pytest.importorskip("aiokafka.record.default_records")
aiokafka_codec = pytest.importorskip("aiokafka.codec")

CODECS = list(CompressionType)


def _theirs(codec: int, rows, *, transactional: bool = False) -> bytes:
    builder = aiokafka_records.DefaultRecordBatchBuilder(2, int(codec), int(transactional), 77, 3, 11, 1 << 22)
    for offset, ts, key, value, headers in rows:
        builder.append(offset, timestamp=ts, key=key, value=value, headers=list(headers))
    return bytes(builder.build())


def _rows(n: int = 9):
    # Mixed None keys/values, headers with null values, timestamps that go backwards (negative deltas),
    # and one value large enough for several 32 KiB xerial snappy blocks.
    return [(i, 1_700_000_000_000 - 13 * i + (i % 3) * 1000,
             None if i % 3 == 0 else b"key-%d" % i,
             None if i == 4 else (os.urandom(70_000) if i == 5 else b"value-%d" % i * i),
             (("trace", b"t%d" % i), ("empty", None)) if i % 2 else ())
            for i in range(n)]


@pytest.mark.parametrize("codec", CODECS, ids=[c.name for c in CODECS])
def test_aiokafka_builds_what_we_read(codec):
    rows = _rows()
    ours = RecordBatch(_theirs(codec, rows, transactional=True))
    ours.validate()
    assert ours.compression == codec and ours.is_transactional and not ours.is_control
    assert (ours.producer_id, ours.producer_epoch, ours.base_sequence) == (77, 3, 11)
    assert ours.max_timestamp == max(r[1] for r in rows)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in ours.records()] == rows


@pytest.mark.parametrize("codec", CODECS, ids=[c.name for c in CODECS])
def test_aiokafka_reads_what_we_build(codec):
    rows = _rows()
    built = build_batch([SimpleRecord(ts, k, v, h) for _, ts, k, v, h in rows], base_offset=1000,
                        compression=codec, producer_id=5, producer_epoch=1, base_sequence=40)
    theirs = aiokafka_records.DefaultRecordBatch(built)
    assert theirs.validate_crc()
    assert (theirs.base_offset, theirs.compression_type, theirs.producer_id, theirs.base_sequence) == (
        1000, int(codec), 5, 40)
    assert theirs.max_timestamp == max(r[1] for r in rows)
    got = [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in theirs]
    assert got == [(1000 + i, ts, k, v, h) for i, ts, k, v, h in rows]


def test_log_append_time_batches_agree_with_aiokafka():
    built = build_batch([SimpleRecord(10 + i, None, b"v") for i in range(3)], compression=CompressionType.LZ4,
                        timestamp_type=TimestampType.LOG_APPEND_TIME, max_timestamp=123_456)
    theirs = aiokafka_records.DefaultRecordBatch(built)
    assert theirs.timestamp_type == 1
    assert [r.timestamp for r in theirs] == [123_456] * 3
    assert [r.timestamp for r in RecordBatch(built).records()] == [123_456] * 3


def test_snappy_is_written_exactly_as_the_java_client_frames_it():
    """aiokafka's xerial encoder mirrors Java's SnappyOutputStream (header, 32 KiB blocks)."""
    data = os.urandom(50_000) + b"a" * 100_000
    ours = compress(CompressionType.SNAPPY, data)
    assert ours == aiokafka_codec.snappy_encode(data, xerial_compatible=True, xerial_blocksize=32 * 1024)
    assert ours[:16] == b"\x82SNAPPY\x00" + bytes([0, 0, 0, 1, 0, 0, 0, 1])
    raw = aiokafka_codec.snappy_encode(data, xerial_compatible=False)  # librdkafka's raw form
    assert decompress(CompressionType.SNAPPY, raw) == data == decompress(CompressionType.SNAPPY, ours)


@pytest.mark.parametrize("codec", [CompressionType.GZIP, CompressionType.LZ4, CompressionType.ZSTD])
def test_their_codecs_decode_ours_and_ours_decode_theirs(codec):
    data = b"chronolog " * 5000 + os.urandom(1000)
    enc, dec = {CompressionType.GZIP: (aiokafka_codec.gzip_encode, aiokafka_codec.gzip_decode),
                CompressionType.LZ4: (aiokafka_codec.lz4_encode, aiokafka_codec.lz4_decode),
                CompressionType.ZSTD: (aiokafka_codec.zstd_encode, aiokafka_codec.zstd_decode)}[codec]
    assert bytes(dec(compress(codec, data))) == data
    assert decompress(codec, enc(data)) == data
