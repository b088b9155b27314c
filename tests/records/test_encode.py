"""records/_encode.c (through records.encode.arrow_batches) against the Python batch builder: for random
rows (null and empty keys and values, headers with null values and non-ASCII keys, null lists, null
timestamps, out-of-order CreateTimes) in arrays sliced so their offsets are not 0, the batches hold
exactly the records build_batch would write, split at the size asked, every one a valid v2 batch;
compressed batches read back the same; the key partitioner is zlib's CRC-32 modulo the count, as
librdkafka's consistent_random."""

from __future__ import annotations

import random
import zlib
from array import array

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from chronolog.records import CompressionType, RecordBatch, SimpleRecord, build_batch, encode

pytestmark = pytest.mark.skipif(not encode.AVAILABLE, reason="the C extensions are not built")
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
NOW = 1_700_000_999_999


def random_rows(seed: int, n: int) -> list[tuple]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        key = None if i % 7 == 0 else bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 8, 200])))
        value = None if i % 11 == 5 else bytes(rng.randrange(256) for _ in range(rng.choice([0, 3, 80, 1000])))
        headers = None if i % 5 == 0 else [(rng.choice(["a", "ü", ""]), None if rng.random() < 0.3 else
                                            bytes(rng.randrange(256) for _ in range(rng.randint(0, 5))))
                                           for _ in range(rng.randint(0, 3))]
        ts = None if i % 13 == 1 else 1_700_000_000_000 + rng.randint(-10**9, 10**9)
        rows.append((key, value, headers, ts))
    return rows


def arrays(rows: list[tuple], pad: int):
    """The columns with `pad` extra rows before and after, then sliced to the rows (nonzero offsets)."""
    filler = [(b"pad", b"pad", [("p", b"p")], 1)] * pad
    full = filler + rows + filler
    key = pa.array([r[0] for r in full], pa.binary())
    value = pa.array([r[1] for r in full], pa.binary())
    headers = pa.array([None if r[2] is None else [{"key": k, "value": v} for k, v in r[2]] for r in full], HEADERS)
    ts = pa.array([r[3] for r in full], pa.int64())
    return [a.slice(pad, len(rows)) for a in (key, value, ts, headers)]


def expected(rows: list[tuple]) -> list[tuple]:
    return [(k, v, tuple(h or ()), NOW if t is None else t) for k, v, h, t in rows]


def records_of(batches: list[bytes]) -> list[tuple]:
    out = []
    for raw in batches:
        batch = RecordBatch(raw)
        batch.validate()  # CRC, lengths
        assert batch.base_offset == 0 and batch.producer_id == -1 and batch.partition_leader_epoch == -1
        recs = list(batch.records())
        assert [r.offset for r in recs] == list(range(len(recs)))
        assert batch.max_timestamp == max(r.timestamp for r in recs)
        out += [(r.key, r.value, r.headers, r.timestamp) for r in recs]
    return out


@pytest.mark.parametrize("seed", range(8))
def test_batches_hold_exactly_the_rows_and_match_the_python_builder(seed):
    rows = random_rows(seed, 300)
    key, value, ts, headers = arrays(rows, pad=seed % 3 * 5)
    whole = encode.arrow_batches(key, value, ts, headers, NOW, 1 << 30)
    assert len(whole) == 1
    assert records_of(whole) == expected(rows)
    want = build_batch([SimpleRecord(t, k, v, h) for k, v, h, t in expected(rows)])
    assert whole[0] == want  # byte for byte what the Python builder writes


@pytest.mark.parametrize("limit", [61, 200, 1500, 20_000])
def test_batches_are_split_at_the_size_asked(limit):
    rows = random_rows(99, 200)
    key, value, ts, headers = arrays(rows, pad=3)
    batches = encode.arrow_batches(key, value, ts, headers, NOW, limit)
    assert records_of(batches) == expected(rows)
    for raw in batches:  # over the limit only a batch of one record that is bigger alone
        assert len(raw) <= limit or RecordBatch(raw).last_offset_delta == 0
    if limit >= 1500:
        assert len(batches) < len(rows)


def test_absent_columns_are_null_and_now():
    value = pa.array([b"a", None, b""], pa.binary())
    [raw] = encode.arrow_batches(None, value, None, None, NOW, 1 << 20)
    assert records_of([raw]) == [(None, b"a", (), NOW), (None, None, (), NOW), (None, b"", (), NOW)]


@pytest.mark.parametrize("codec", [CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4,
                                   CompressionType.ZSTD])
def test_compressed_batches_read_back(codec):
    rows = [(b"k%d" % i, b"value " * 20, None, 1_700_000_000_000 + i) for i in range(500)]
    key, value, ts, headers = arrays(rows, pad=0)
    batches = encode.arrow_batches(key, value, ts, headers, NOW, 10_000, codec)
    assert all(RecordBatch(b).compression == codec for b in batches)
    assert records_of(batches) == expected(rows)
    # a batch that compression does not shrink goes uncompressed (as librdkafka sends it)
    noise = pa.array([random.Random(1).randbytes(50)], pa.binary())
    [raw] = encode.arrow_batches(None, noise, None, None, NOW, 10_000, codec)
    assert RecordBatch(raw).compression == CompressionType.NONE


def test_key_partitions_are_crc32_modulo_the_count():
    keys = [None, b"", b"a", b"chronolog", bytes(range(256)), b"\xff" * 1000]
    arr = pa.array([b"x"] + keys, pa.binary()).slice(1)
    for count in (1, 3, 7, 1000):
        got = pa.Array.from_buffers(pa.int32(), len(keys), [None, pa.py_buffer(encode.key_partitions(arr, count))])
        assert got.to_pylist() == [-1 if not k else zlib.crc32(k) % count for k in keys]


@pytest.mark.parametrize("seed", range(4))
def test_an_index_encodes_those_rows_in_its_order_without_a_copy(seed):
    """index= gives the batches of the arrays taken at the index (uint64 from indices_nonzero, int64,
    sliced so its offset is not 0, rows repeated and out of order); a row number out of range is refused."""
    rows = random_rows(100 + seed, 240)
    key, value, ts, headers = arrays(rows, pad=seed * 2)
    chosen = pc.indices_nonzero(pa.array([i % 3 == seed % 3 for i in range(len(rows))]))  # uint64
    for index in (chosen, pa.array([5, 3, 3, 200, 0, 239], pa.int64()).slice(1),
                  pa.array(list(range(239, -1, -2)), pa.int32())):
        want = encode.arrow_batches(*(a.take(index) for a in (key, value, ts, headers)), NOW, 1500)
        got = encode.arrow_batches(key, value, ts, headers, NOW, 1500, index=index)
        assert got == want
        assert records_of(got) == expected([rows[i] for i in index.to_pylist()])
    for bad in ([240], [-1]):
        with pytest.raises(IndexError, match="index: row"):
            encode.arrow_batches(key, value, ts, headers, NOW, 1500, index=pa.array(bad, pa.int64()))
    assert encode.arrow_batches(key, value, ts, headers, NOW, 1500, index=pa.array([], pa.int64())) == []


def test_a_gap_leaves_each_rows_last_bytes_out():
    """(validity, offsets, data, offset, gap): row i is data[offsets[i]:offsets[i + 1] - gap], the lines of
    a block of text without a copy (records/_lines.c); offsets past the data by the gap are allowed, and
    a row shorter than its gap is refused."""
    block = b"one\n\ntwo\r\nthree"
    offsets = array("i", [0, 4, 5, 10, 16])
    with_gap = encode.encode_batches(4, None, (None, offsets, block, 0, 1), None, None, NOW, 1 << 20)
    plain = encode.encode_batches(4, None, (None, array("i", [0, 3, 3, 7, 12]), b"onetwo\rthree", 0), None, None,
                                  NOW, 1 << 20)
    assert with_gap == plain
    assert [r.value for r in RecordBatch(with_gap[0]).records()] == [b"one", b"", b"two\r", b"three"]
    with pytest.raises(ValueError, match="outside"):
        encode.encode_batches(1, None, (None, array("i", [0, 0]), block, 0, 1), None, None, NOW, 1 << 20)
    with pytest.raises(ValueError, match="outside"):
        encode.encode_batches(1, None, (None, array("i", [0, 18]), block, 0, 1), None, None, NOW, 1 << 20)
