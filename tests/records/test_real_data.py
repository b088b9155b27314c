"""Records against bytes nobody here wrote: Kafka-written segments, legacy v0 fetches, kafka-python."""

from __future__ import annotations

import struct

import pytest

from chronolog.errors import CorruptMessageError
from chronolog.records import CompressionType, RecordBatch, SimpleRecord, build_batch, iter_batches


def test_every_batch_of_real_kafka_segments_has_a_valid_crc(kafka_segments_dir):
    logs = sorted(kafka_segments_dir.glob("*.log"))
    assert len(logs) == 4
    expected_next = 0
    for path in logs:
        assert int(path.stem) == expected_next
        for batch in iter_batches(path.read_bytes()):
            assert batch.magic == 2 and batch.verify_crc()
            offsets = [r.offset for r in batch.records()]
            assert offsets[0] == batch.base_offset == expected_next
            assert offsets[-1] == batch.last_offset
            assert max(r.timestamp for r in batch.records()) == batch.max_timestamp
            expected_next = batch.last_offset + 1
    assert expected_next == 30565


def _message_set_of_fetch_v0(raw: bytes) -> bytes:
    """A Fetch v0 response body (without its size prefix) holding one topic with one partition."""
    pos = 4 + 4                                   # correlation id, topic count
    (name_len,) = struct.unpack_from(">h", raw, pos)
    pos += 2 + name_len + 4 + 4 + 2 + 8           # name, partition count, partition, error, high watermark
    (size,) = struct.unpack_from(">i", raw, pos)
    return raw[pos + 4:pos + 4 + size]


@pytest.mark.parametrize("name,text", [
    ("fetch1.mytopic.1p.nocompression.kafka.0821", "fetch1.txt"),
    ("fetch1.mytopic.1p.gzip.kafka.0821", "fetch1.txt"),
    ("fetch2.mytopic.nocompression.kafka.0900", "fetch2.txt"),
])
def test_legacy_v0_message_sets_decode_to_their_texts(shared_data, name, text):
    folder = shared_data / "legacy-v0"
    message_set = _message_set_of_fetch_v0((folder / name).read_bytes())
    batches = list(iter_batches(message_set))
    assert all(b.magic == 0 and b.verify_crc() for b in batches)
    values = [r.value.decode() for b in batches for r in b.records()]
    assert values == (folder / text).read_text().splitlines()
    offsets = [r.offset for b in batches for r in b.records()]
    assert offsets == list(range(len(values)))


def test_legacy_v0_with_a_bad_crc_is_rejected(shared_data):
    folder = shared_data / "legacy-v0"
    raw = (folder / "fetch2.mytopic.nocompression.invalid_crc.kafka.0900").read_bytes()
    (batch,) = iter_batches(_message_set_of_fetch_v0(raw))
    assert not batch.verify_crc()
    with pytest.raises(CorruptMessageError):
        batch.validate()


@pytest.mark.parametrize("codec", [0, 1])  # kafka-python ships no snappy/lz4/zstd codec by itself
def test_kafka_python_builds_what_we_read_and_reads_what_we_build(codec):
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=0, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    want = []
    for i in range(6):
        key = b"k%d" % i if i % 2 else None
        builder.append(i, timestamp=1000 - i * 7, key=key, value=b"v" * i, headers=[("h", b"x")])
        want.append((i, 1000 - i * 7, key, b"v" * i, (("h", b"x"),)))
    ours = RecordBatch(bytes(builder.build()))
    assert ours.verify_crc()
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in ours.records()] == want

    built = build_batch([SimpleRecord(5000 + i, None if i == 2 else b"k", b"v" * i, (("h", b"x"),))
                         for i in range(6)], base_offset=40, compression=CompressionType(codec))
    theirs = DefaultRecordBatch(built)
    assert theirs.validate_crc()
    got = [(r.offset, r.timestamp, r.key, r.value) for r in theirs]
    assert got == [(40 + i, 5000 + i, None if i == 2 else b"k", b"v" * i) for i in range(6)]


def test_aiokafka_reads_the_real_segments_exactly_as_we_do(kafka_segments_dir):
    from aiokafka.record.default_records import DefaultRecordBatch

    path = sorted(kafka_segments_dir.glob("*.log"))[-1]
    raw = path.read_bytes()
    checked = 0
    for batch in iter_batches(raw):
        theirs = DefaultRecordBatch(bytes(batch.raw))
        assert theirs.validate_crc()
        assert (theirs.base_offset, theirs.max_timestamp, theirs.compression_type, theirs.timestamp_type) == (
            batch.base_offset, batch.max_timestamp, batch.compression, batch.timestamp_type)
        assert [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in theirs] == [
            (r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records()]
        checked += batch.records_count
    assert checked > 7000
