"""The columnar decoder (records.columns) against the record-by-record reader, in C and in the Python twin:
for random buffers of v2 batches (every codec, null keys and values, headers, LogAppendTime, control
batches, aborted transactions) and legacy v0/v1 message sets (compressed wrappers included), under random
offset and time bounds that cut batches in the middle, both builders give exactly the records the record
reader gives after the same filters. Then the two builders against each other on bad input."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chronolog.errors import CorruptMessageError, InvalidRecordError
from chronolog.records import (
    CompressionType,
    RecordBatch,
    SimpleRecord,
    TimestampType,
    build_batch,
    compress,
    iter_batches,
)
from chronolog.records import columns as columns_module
from chronolog.records.columns import ColumnDecoder, decode

pa = pytest.importorskip("pyarrow")

BUILDERS = [pytest.param(False, id="python")]
if columns_module.NATIVE_COLUMNS:
    BUILDERS.insert(0, pytest.param(True, id="c"))

BASE_TS = 1_700_000_000_000
SETTINGS = settings(max_examples=150, derandomize=True, database=None, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def legacy_message(magic: int, offset: int, key: bytes | None, value: bytes | None, *, ts: int = -1,
                   attributes: int = 0) -> bytes:
    """One v0/v1 message (`LegacyRecord`), CRC-32 over magic..end."""
    body = struct.pack(">bb", magic, attributes) + (struct.pack(">q", ts) if magic == 1 else b"")
    for field in (key, value):
        body += struct.pack(">i", -1) if field is None else struct.pack(">i", len(field)) + field
    return struct.pack(">qiI", offset, 4 + len(body), zlib.crc32(body) & 0xFFFFFFFF) + body


records_st = st.lists(st.builds(
    SimpleRecord,
    timestamp=st.integers(BASE_TS - 5000, BASE_TS + 5000),
    key=st.one_of(st.none(), st.binary(max_size=20)),
    value=st.one_of(st.none(), st.binary(max_size=300)),
    headers=st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=10))), max_size=3),
), min_size=1, max_size=12)

PIDS = (7, 8)


@st.composite
def log_buffers(draw):
    """(buffer, aborted ranges): consecutive offsets, any mix of batch kinds."""
    out = bytearray()
    offset = draw(st.integers(0, 1000))
    aborted = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["v2", "v2", "txn", "control", "legacy", "legacy-wrapper"]))
        if kind in ("v2", "txn"):
            recs = draw(records_st)
            codec = draw(st.sampled_from(list(CompressionType)))
            log_append = draw(st.booleans())
            pid = draw(st.sampled_from(PIDS)) if kind == "txn" else -1
            out += build_batch(recs, base_offset=offset, compression=codec,
                               timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME,
                               max_timestamp=BASE_TS + 99 if log_append else None, producer_id=pid,
                               producer_epoch=0 if pid >= 0 else -1, is_transactional=kind == "txn")
            if kind == "txn" and draw(st.booleans()):
                aborted.append((pid, offset - draw(st.integers(0, 3)), offset + len(recs) - 1 + draw(st.integers(0, 3))))
            offset += len(recs)
        elif kind == "control":
            out += build_batch([SimpleRecord(BASE_TS, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")],
                               base_offset=offset, producer_id=PIDS[0], producer_epoch=0, is_transactional=True,
                               is_control=True)
            offset += 1
        elif kind == "legacy":
            magic = draw(st.sampled_from([0, 1]))
            key = draw(st.one_of(st.none(), st.binary(max_size=10)))
            value = draw(st.one_of(st.none(), st.binary(max_size=50)))
            out += legacy_message(magic, offset, key, value, ts=draw(st.integers(BASE_TS - 10, BASE_TS + 10)))
            offset += 1
        else:
            magic = draw(st.sampled_from([0, 1]))
            n = draw(st.integers(1, 4))
            codec = draw(st.sampled_from([CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4]))
            if magic == 0 and codec == CompressionType.LZ4:
                codec = CompressionType.GZIP  # v0 LZ4 carries Kafka's broken header checksum: its own test
            inner = b"".join(legacy_message(magic, (offset + i) if magic == 0 else i, None, b"m%d" % i,
                                            ts=BASE_TS + i) for i in range(n))
            log_append = magic == 1 and draw(st.booleans())
            out += legacy_message(magic, offset + n - 1, None, compress(codec, inner), ts=BASE_TS + 50,
                                  attributes=int(codec) | (0x08 if log_append else 0))
            offset += n
    return bytes(out), tuple(aborted)


def reference(buf: bytes, start: int, end: int, lo: int, hi: int, aborted) -> list[tuple]:
    """The record reader's answer: (offset, timestamp, type, key, value, headers)."""
    out = []
    for batch in iter_batches(buf):
        if batch.is_control:
            continue
        if batch.is_transactional and any(pid == batch.producer_id and first <= batch.base_offset <= last
                                          for pid, first, last in aborted):
            continue
        kind = 1 if batch.timestamp_type == TimestampType.LOG_APPEND_TIME else 0
        for r in batch.records():
            if start <= r.offset < end and lo <= r.timestamp <= hi:
                out.append((r.offset, r.timestamp, kind, r.key, r.value,
                            [{"key": k, "value": v} for k, v in r.headers]))
    return out


def rows(cols) -> list[tuple]:
    a = cols.to_arrow()
    return list(zip(a["offset"].to_pylist(), a["timestamp"].to_pylist(), a["timestampType"].to_pylist(),
                    a["key"].to_pylist(), a["value"].to_pylist(), a["headers"].to_pylist(), strict=True))


@pytest.mark.parametrize("native", BUILDERS)
@SETTINGS
@given(log=log_buffers(), data=st.data())
def test_columns_equal_the_record_reader_under_any_bounds(native, log, data):
    buf, aborted = log
    offsets = [r.offset for b in iter_batches(buf) for r in b.records()]
    start = data.draw(st.integers(min(offsets) - 1, max(offsets) + 1))
    end = data.draw(st.integers(start, max(offsets) + 2))
    lo = data.draw(st.one_of(st.none(), st.integers(BASE_TS - 6000, BASE_TS + 6000)))
    hi = data.draw(st.one_of(st.none(), st.integers(BASE_TS - 6000, BASE_TS + 6000)))
    aborted = aborted if data.draw(st.booleans()) else ()
    want = reference(buf, start, end, -2**63 if lo is None else lo, 2**63 - 1 if hi is None else hi, aborted)
    got = decode(buf, headers=True, start=start, end=end, ts_min=lo, ts_max=hi, aborted=aborted, native=native)
    assert rows(got) == want
    # the same rows as `Record`s, without pyarrow (what `chronolog consume` prints)
    assert [(r.offset, r.timestamp, r.key, r.value, [{"key": k, "value": v} for k, v in r.headers])
            for r in got.records()] == [(o, t, k, v, h) for o, t, _kind, k, v, h in want]


@pytest.mark.parametrize("native", BUILDERS)
@SETTINGS
@given(log=log_buffers(), max_rows=st.integers(1, 20), cut=st.integers(0, 200))
def test_feeding_in_budgeted_pieces_and_from_a_truncated_tail_gives_the_same_rows(native, log, max_rows, cut):
    """`feed` stops at the row budget and at a torn tail; going on from the position it answers loses
    and repeats nothing, and `next_offset` is one past the last whole batch."""
    buf, aborted = log
    torn = buf[:max(0, len(buf) - cut)]
    dec = ColumnDecoder(headers=True, aborted=aborted, max_rows=max_rows, native=native)
    got, pos = [], 0
    while True:
        pos, full = dec.feed(torn, pos)
        got += rows(dec.take())
        if not full:
            break
    whole = list(iter_batches(torn))
    assert pos == sum(b.size_in_bytes for b in whole)
    assert got == reference(torn, 0, 2**63 - 1, -2**63, 2**63 - 1, aborted)
    if whole:
        assert dec.next_offset == whole[-1].last_offset + 1


@pytest.mark.parametrize("native", BUILDERS)
def test_unwanted_columns_are_not_built(native):
    buf = build_batch([SimpleRecord(BASE_TS + i, b"k", b"v" * 100) for i in range(10)])
    cols = decode(buf, keys=False, values=False, native=native)
    assert cols.keys is None and cols.values is None and cols.headers is None
    assert set(cols.to_arrow()) == {"offset", "timestamp", "timestampType"}
    assert cols.offset_list() == list(range(10))


@pytest.mark.parametrize("native", BUILDERS)
def test_header_keys_that_are_not_utf8_read_as_the_record_reader_reads_them(native):
    buf = bytearray(build_batch([SimpleRecord(BASE_TS, None, b"v", (("ab", b"1"),))]))
    at = bytes(buf).index(b"ab\x021")
    buf[at] = 0xFF  # still the same length; the CRC is not the decoder's business
    want = [dict(key=k, value=v) for k, v in next(iter(RecordBatch(bytes(buf)).records())).headers]
    assert decode(bytes(buf), headers=True, native=native).to_arrow()["headers"].to_pylist() == [want]


@pytest.mark.parametrize("native", BUILDERS)
def test_legacy_v0_fetches_of_a_real_broker_decode_to_their_texts(native, shared_data):
    from tests.records.test_real_data import _message_set_of_fetch_v0
    folder = shared_data / "legacy-v0"
    for name, text in (("fetch1.mytopic.1p.gzip.kafka.0821", "fetch1.txt"),
                       ("fetch2.mytopic.nocompression.kafka.0900", "fetch2.txt")):
        cols = decode(_message_set_of_fetch_v0((folder / name).read_bytes()), native=native).to_arrow()
        assert [v.decode() for v in cols["value"].to_pylist()] == (folder / text).read_text().splitlines()
        assert cols["timestamp"].to_pylist() == [-1] * len(cols["value"])


@pytest.mark.parametrize("native", BUILDERS)
def test_real_kafka_segments_decode_as_the_record_reader_reads_them(native, kafka_segments_dir):
    for path in sorted(kafka_segments_dir.glob("*.log")):
        buf = path.read_bytes()
        assert rows(decode(buf, headers=True, native=native)) == reference(buf, 0, 2**63 - 1, -2**63, 2**63 - 1, ())


@pytest.mark.parametrize("native", BUILDERS)
def test_size_limits_of_the_record_reader_hold(native):
    big = build_batch([SimpleRecord(BASE_TS, None, b"x" * 100_000)], compression=CompressionType.ZSTD)
    with pytest.raises(CorruptMessageError, match="position 0"):
        decode(big, max_decompressed=50_000, native=native)
    lying = bytearray(build_batch([SimpleRecord(BASE_TS, None, b"v")]))
    struct.pack_into(">i", lying, 57, 1000)  # records count
    with pytest.raises(InvalidRecordError, match="claims 1000 records"):
        decode(bytes(lying), native=native)


def test_bad_batches_name_their_position():
    good = build_batch([SimpleRecord(BASE_TS, None, b"v")])
    bad = bytearray(build_batch([SimpleRecord(BASE_TS, None, b"value")], base_offset=1))
    bad[-1] = 0x7F  # a header count that cannot be
    with pytest.raises(InvalidRecordError, match=rf"position {len(good)} \(offset 1\)"):
        decode(good + bytes(bad))
    with pytest.raises(CorruptMessageError, match="unknown magic 9"):
        decode(good + bytes(bad[:16]) + b"\x09" + bytes(bad[17:]))


# -- the two builders against each other on bad input -------------------------------------------------

def verdict(buf: bytes, native: bool, **kw):
    """Rows or the error (class and message) of one builder."""
    try:
        dec = ColumnDecoder(headers=True, native=native, max_rows=7, **kw)
        out, pos = [], 0
        while True:
            pos, full = dec.feed(buf, pos)
            out.append(dec.take().as_bytes())
            if not full:
                return out, pos, dec.next_offset
    except (CorruptMessageError, InvalidRecordError) as exc:
        return type(exc), str(exc)


def mutate(buf: bytes, rnd) -> bytes:
    raw = bytearray(buf)
    for _ in range(rnd.randint(1, 4)):
        choice = rnd.random()
        if choice < 0.6 and raw:
            raw[rnd.randrange(len(raw))] = rnd.randrange(256)
        elif choice < 0.8 and raw:
            del raw[rnd.randrange(len(raw)):]
        else:
            at = rnd.randrange(len(raw) + 1)
            raw[at:at] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 8)))
    return bytes(raw)


def fuzz(seed: int, rounds: int) -> int:
    """C against Python on mutated, truncated and random buffers; returns how many were compared."""
    import random
    rnd = random.Random(seed)
    base = [build_batch([SimpleRecord(BASE_TS + rnd.randint(-9, 9), rnd.choice([None, b"k" * rnd.randint(0, 200)]),
                                      rnd.choice([None, b"v" * rnd.randint(0, 300)]),
                                      tuple((f"h{j}", rnd.choice([None, b"x"])) for j in range(rnd.randint(0, 2))))
                         for _ in range(rnd.randint(1, 5))], base_offset=i * 5,
                        compression=rnd.choice([0, 0, 0, 1, 4]),
                        timestamp_type=rnd.choice([0, 1]), max_timestamp=BASE_TS)
            for i in range(40)]
    compared = 0
    for _ in range(rounds):
        r = rnd.random()
        if r < 0.8:
            buf = mutate(b"".join(rnd.sample(base, rnd.randint(1, 3))), rnd)
        else:
            buf = bytes(rnd.randrange(256) for _ in range(rnd.randint(0, 120)))
            if r < 0.9 and len(buf) > 17:
                buf = buf[:8] + struct.pack(">i", len(buf) - 12) + buf[12:16] + b"\x02" + buf[17:]
        kw = {"start": rnd.choice([0, 3, 50]), "ts_min": rnd.choice([None, BASE_TS - 3]),
              "aborted": rnd.choice([(), ((-1, 0, 100),)])}
        c, py = verdict(buf, True, **kw), verdict(buf, False, **kw)
        assert c == py, (buf.hex(), kw, c, py)
        compared += 1
    return compared


@pytest.mark.skipif(not columns_module.NATIVE_COLUMNS, reason="the C extension was not built here")
def test_fuzz_c_decoder_against_python_under_faulthandler():
    """In a child process under `-X faulthandler`: a crash in C shows its stack instead of killing pytest."""
    src = Path(columns_module.__file__).resolve().parents[2]
    repo = Path(__file__).resolve().parents[2]
    code = ("import sys; from tests.records.test_columns import fuzz; "
            "print(sum(fuzz(seed, 700) for seed in range(6)))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(repo)])}
    env.pop("CHRONOLOG_PURE_PYTHON", None)
    proc = subprocess.run([sys.executable, "-X", "faulthandler", "-c", code], capture_output=True, text=True,
                          env=env, cwd=repo, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert int(proc.stdout.split()[-1]) == 4200


def test_equal_columns_are_byte_for_byte_equal_buffers():
    """The twin is not merely equal as Arrow values: its buffers are C's, byte for byte."""
    if not columns_module.NATIVE_COLUMNS:
        pytest.skip("the C extension was not built here")
    buf = b"".join(build_batch([SimpleRecord(BASE_TS + i, None if i % 3 == 0 else b"k%d" % i, b"v" * i,
                                             (("a", None), ("b", b"1")) if i % 2 else ())
                                for i in range(20)], base_offset=20 * j) for j in range(3))
    assert decode(buf, headers=True, native=True).as_bytes() == decode(buf, headers=True, native=False).as_bytes()


def test_records_of_legacy_compressed_wrapper_keep_inner_offsets():
    inner = b"".join(legacy_message(1, i, None, b"m%d" % i, ts=5 + i) for i in range(3))
    buf = legacy_message(1, 9, None, compress(CompressionType.SNAPPY, inner), ts=777, attributes=2 | 0x08)
    cols = decode(buf, start=8).to_arrow()
    assert cols["offset"].to_pylist() == [8, 9] and cols["timestamp"].to_pylist() == [777, 777]
    assert cols["timestampType"].to_pylist() == [1, 1]
    assert [r.offset for r in next(iter_batches(buf)).records()] == [7, 8, 9]


@pytest.mark.skipif(not columns_module.NATIVE_COLUMNS, reason="the C extension was not built here")
@SETTINGS
@given(seed=st.integers(0, 2**32 - 1))
def test_lookup_by_time_in_c_answers_as_the_python_walk(seed):
    """`RecordBatch.first_at_or_after` (the time index's inner loop) with its C walk and without it, for
    random batches with late records in every codec, random targets and minimum offsets, and bytes
    mutated or cut short (where C declines and the Python walk answers or raises)."""
    import random

    from chronolog.records import batch as batch_module
    rng = random.Random(seed)
    stamps = [BASE_TS + i * 10 - (rng.randint(0, 500) if rng.random() < 0.2 else 0) for i in range(rng.randint(1, 40))]
    raw = bytearray(build_batch([SimpleRecord(t, None, b"v" * rng.randint(0, 200)) for t in stamps],
                                base_offset=rng.randint(0, 1000), compression=rng.choice(list(CompressionType))))
    if rng.random() < 0.3 and len(raw) > 62:  # damage the records section (the CRC is not the lookup's business)
        raw[rng.randrange(61, len(raw))] = rng.randrange(256)
    batch = RecordBatch(bytes(raw))

    def answers():
        out = []
        for _ in range(8):
            target = rng.choice([min(stamps) - 1, max(stamps), rng.randint(min(stamps) - 50, max(stamps) + 50)])
            min_offset = batch.base_offset + rng.randint(-2, len(stamps) + 2)
            try:
                out.append(batch.first_at_or_after(target, min_offset))
            except (InvalidRecordError, CorruptMessageError) as exc:
                out.append(type(exc))
        return out

    state = rng.getstate()
    fast = answers()
    rng.setstate(state)
    native, batch_module._native_first = batch_module._native_first, None
    try:
        assert answers() == fast
    finally:
        batch_module._native_first = native
