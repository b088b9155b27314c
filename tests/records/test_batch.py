"""RecordBatch v2: golden bytes, round trips against a plain oracle, patching, hostile bytes."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chronolog.errors import CorruptMessageError, InvalidRecordError
from chronolog.records import (
    CompressionType,
    LegacyBatch,
    RecordBatch,
    SimpleRecord,
    TimestampType,
    build_batch,
    crc32c,
    iter_batches,
    set_base_offset,
    set_max_timestamp,
    set_partition_leader_epoch,
    upconvert_to_v2,
)
from chronolog.records.varint import read_varint, write_varint


def test_golden_bytes_of_a_one_record_batch():
    raw = build_batch([SimpleRecord(1_000, b"k", b"v")], base_offset=5)
    # Header: baseOffset=5, batchLength=49+len(record), PLE=-1, magic=2, crc, attrs=0, lastOffsetDelta=0,
    # baseTimestamp=maxTimestamp=1000, producerId=-1, epoch=-1, baseSequence=-1, count=1.
    record = bytes([0x10, 0x00, 0x00, 0x00, 0x02]) + b"k" + bytes([0x02]) + b"v" + bytes([0x00])
    # length 8 (zigzag 0x10), attrs 0, tsDelta 0, offsetDelta 0, keyLen 1 (0x02), key, valueLen 1, value, 0 headers
    header_after_crc = struct.pack(">hiqqqhii", 0, 0, 1000, 1000, -1, -1, -1, 1)
    crc = crc32c(header_after_crc + record)
    expected = struct.pack(">qiibI", 5, 49 + len(record), -1, 2, crc) + header_after_crc + record
    assert raw == expected


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_varint_round_trip(value):
    out = bytearray()
    write_varint(value, out)
    assert read_varint(out, 0) == (value, len(out))


records_strategy = st.lists(
    st.tuples(st.integers(min_value=0, max_value=2**41), st.none() | st.binary(max_size=20),
              st.none() | st.binary(max_size=50),
              st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=2)),
    min_size=1, max_size=20)


@settings(max_examples=150, deadline=None)
@given(records_strategy, st.sampled_from(list(CompressionType)), st.integers(0, 2**40),
       st.booleans(), st.booleans())
def test_round_trip_against_the_input(recs, codec, base, transactional, control):
    raw = build_batch([SimpleRecord(t, k, v, tuple(h)) for t, k, v, h in recs], base_offset=base,
                      compression=codec, is_transactional=transactional, is_control=control)
    batch = RecordBatch(raw)
    batch.validate()
    assert (batch.base_offset, batch.last_offset, batch.records_count) == (base, base + len(recs) - 1, len(recs))
    assert batch.max_timestamp == max(t for t, *_ in recs)
    assert batch.compression == codec and batch.is_transactional == transactional and batch.is_control == control
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records()]
    assert got == [(base + i, t, k, v, tuple(h)) for i, (t, k, v, h) in enumerate(recs)]


def test_patching_keeps_crc_valid_and_payload_untouched():
    raw = bytearray(build_batch([SimpleRecord(10 + i, None, b"x" * i) for i in range(4)],
                                compression=CompressionType.GZIP))
    payload = bytes(raw[61:])
    set_base_offset(raw, 0, 1234)
    set_partition_leader_epoch(raw, 0, 7)
    set_max_timestamp(raw, 0, TimestampType.LOG_APPEND_TIME, 99_999)
    batch = RecordBatch(raw)
    assert batch.verify_crc() and bytes(raw[61:]) == payload
    assert (batch.base_offset, batch.partition_leader_epoch, batch.max_timestamp) == (1234, 7, 99_999)
    assert batch.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in batch.records()] == [99_999] * 4
    assert [r.offset for r in batch.records()] == [1234, 1235, 1236, 1237]


def test_truncated_tail_stops_iteration_cleanly():
    one = build_batch([SimpleRecord(1, None, b"a")])
    two = build_batch([SimpleRecord(2, None, b"b")], base_offset=1)
    assert [b.base_offset for b in iter_batches(one + two[:-3])] == [0]
    assert list(iter_batches(one[:10])) == []


def test_lying_batches_are_rejected():
    raw = bytearray(build_batch([SimpleRecord(1, b"k", b"v" * 10) for _ in range(3)]))
    flipped = bytearray(raw)
    flipped[-1] ^= 0xFF
    with pytest.raises(CorruptMessageError):
        RecordBatch(flipped).validate()
    count_lie = bytearray(raw)
    struct.pack_into(">i", count_lie, 57, 1_000_000_000)
    with pytest.raises(InvalidRecordError):
        list(RecordBatch(count_lie).records())
    short_lie = bytearray(raw)
    struct.pack_into(">i", short_lie, 8, 5)
    with pytest.raises(CorruptMessageError):
        list(iter_batches(short_lie))
    long_lie = bytearray(raw)
    struct.pack_into(">i", long_lie, 8, 10_000)
    assert list(iter_batches(long_lie)) == []  # looks truncated: nothing complete to yield


def test_decompression_bomb_is_capped():
    raw = build_batch([SimpleRecord(1, None, b"\0" * 5_000_000)], compression=CompressionType.GZIP)
    assert len(raw) < 20_000
    with pytest.raises(CorruptMessageError):
        list(RecordBatch(raw).records(max_decompressed=1_000_000))


def _legacy_v1(offset: int, ts: int, value: bytes, attributes: int = 0) -> bytes:
    body = struct.pack(">bbq", 1, attributes, ts) + struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    import zlib
    crc = zlib.crc32(body) & 0xFFFFFFFF
    return struct.pack(">qiI", offset, 4 + len(body), crc) + body


def test_legacy_v1_compressed_wrapper_with_relative_inner_offsets_up_converts():
    from chronolog.records import compress

    inner = b"".join(_legacy_v1(i, 100 + i, b"m%d" % i) for i in range(3))
    wrapper = _legacy_v1(52, 102, compress(CompressionType.GZIP, inner), attributes=1)
    (legacy,) = iter_batches(wrapper)
    assert isinstance(legacy, LegacyBatch) and legacy.verify_crc()
    assert [(r.offset, r.timestamp, r.value) for r in legacy.records()] == [
        (50, 100, b"m0"), (51, 101, b"m1"), (52, 102, b"m2")]
    v2 = RecordBatch(upconvert_to_v2(legacy, base_offset=7))
    assert v2.verify_crc() and v2.compression == CompressionType.GZIP
    assert [(r.offset, r.timestamp, r.value) for r in v2.records()] == [
        (7, 100, b"m0"), (8, 101, b"m1"), (9, 102, b"m2")]


def test_golden_bytes_written_out_by_hand():
    """Two records, base offset 5: (ts 1000, key "k", value "v") and (ts 990, null key, empty value, one
    header "h" with a null value) — a negative timestamp delta, a null key and a null header value."""
    golden = bytes.fromhex(
        "0000000000000005"   # baseOffset 5
        "00000044"           # batchLength 68 = 49 header bytes after it + 19 record bytes
        "ffffffff"           # partitionLeaderEpoch -1
        "02"                 # magic 2
        "9d6190a5"           # CRC-32C of everything below (checked against aiokafka's crc32c below)
        "0000"               # attributes: no codec, CreateTime, not transactional, not control
        "00000001"           # lastOffsetDelta 1
        "00000000000003e8"   # baseTimestamp 1000 (the first record's)
        "00000000000003e8"   # maxTimestamp 1000
        "ffffffffffffffff"   # producerId -1
        "ffff"               # producerEpoch -1
        "ffffffff"           # baseSequence -1
        "00000002"           # recordsCount 2
        # record 0: length 8 (zigzag 0x10), attrs 0, tsDelta 0, offsetDelta 0, key len 1 (0x02) "k",
        # value len 1 "v", 0 headers
        "10" "00" "00" "00" "02" "6b" "02" "76" "00"
        # record 1: length 9 (0x12), attrs 0, tsDelta -10 (zigzag 0x13), offsetDelta 1 (0x02), key null
        # (-1 = 0x01), value len 0, 1 header (0x02): key len 1 "h", value null (0x01)
        "12" "00" "13" "02" "01" "00" "02" "02" "68" "01")
    built = build_batch([SimpleRecord(1000, b"k", b"v"), SimpleRecord(990, None, b"", (("h", None),))],
                        base_offset=5)
    assert built == golden
    from aiokafka.record.default_records import calc_crc32c

    assert calc_crc32c(golden[21:]) == 0x9D6190A5 == crc32c(golden[21:])
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value (RFC 3720, B.4)
    batch = RecordBatch(golden)
    batch.validate()
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records()] == [
        (5, 1000, b"k", b"v", ()), (6, 990, None, b"", (("h", None),))]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5), st.integers(-(2**40), 2**40)), min_size=1, max_size=15),
       st.sampled_from(list(CompressionType)), st.booleans(), st.integers(0, 2**40))
def test_records_keep_their_offset_gaps_and_log_append_time_overrides_timestamps(gaps, codec, log_append,
                                                                                  broker_time):
    """`Record`s (as after compaction) keep their offsets; under LogAppendTime every record reads back
    with the batch max timestamp, whatever its own."""
    from chronolog.records import Record

    offsets = [1000 + sum(g for g, _ in gaps[:i + 1]) for i in range(len(gaps))]
    recs = [Record(o, ts, None, b"%d" % o) for o, (_, ts) in zip(offsets, gaps, strict=True)]
    raw = build_batch(recs, base_offset=1000, compression=codec,
                      timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME,
                      max_timestamp=broker_time if log_append else None)
    batch = RecordBatch(raw)
    batch.validate()
    assert batch.last_offset == offsets[-1] and batch.records_count == len(recs)
    want_ts = [broker_time] * len(recs) if log_append else [r.timestamp for r in recs]
    assert [(r.offset, r.timestamp, r.value) for r in batch.records()] == [
        (r.offset, t, r.value) for r, t in zip(recs, want_ts, strict=True)]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 300), min_size=1, max_size=40), st.integers(-10, 320), st.integers(0, 45),
       st.sampled_from([CompressionType.NONE, CompressionType.ZSTD]), st.booleans())
def test_first_at_or_after_matches_a_scan_of_the_records(timestamps, target, min_delta, codec, log_append):
    raw = build_batch([SimpleRecord(1_000 + t, None, b"x" * t) for t in timestamps], base_offset=50,
                      compression=codec, max_timestamp=1_200 if log_append else None,
                      timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME)
    batch = RecordBatch(raw)
    want = next(((r.offset, r.timestamp) for r in batch.records()
                 if r.timestamp >= 1_000 + target and r.offset >= 50 + min_delta), None)
    assert batch.first_at_or_after(1_000 + target, 50 + min_delta) == want
