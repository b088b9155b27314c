"""The log cleaner's C path (records/_clean.c: the offset map, `map_chunk`, `filter_chunk`, `kept_spans`)
against its pure-Python path: on random logs (keys, tombstones, keyless records, idempotent and
transactional producers with commits and aborts, open transactions, batches of all four codecs, maps
small enough to take several passes, cleanings before and after the delete horizon, appends between
them) both leave the same log as a user sees it (each batch's offsets, attributes, timestamps and producer
fields, each record's offset, timestamp, key, value and headers), the same transaction indexes and the same
checkpoint. A recompressed batch is compared by what it holds: a codec may write other, equally valid,
bytes for the same records. A log without compressed batches is compared byte for byte, indexes too."""

from __future__ import annotations

import random
import shutil

import pytest

from chronolog.config import TopicConfig
from chronolog.native import load_native
from chronolog.records import CompressionType, RecordBatch, SimpleRecord, build_batch, iter_batches
from chronolog.storage import PartitionLog
from chronolog.storage.cleaner import Cleaner, log_to_clean

native = load_native("chronolog.records._clean")
if native is None:  # not built, or switched off by CHRONOLOG_PURE_PYTHON
    pytest.skip("the C cleaner is not loaded", allow_module_level=True)

NOW = 1_700_000_000_000
DAY = 86_400_000
CODECS = list(CompressionType)


def config(rng: random.Random) -> dict:
    # `delete` (no retention) while written: keyless records get in, as in a topic made compacted later
    return {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1", "segment.bytes": str(rng.choice([1500, 4000, 20000])),
            "index.interval.bytes": str(rng.choice([1, 200, 4096])), "delete.retention.ms": str(DAY),
            "message.timestamp.after.max.ms": str(2**62), "message.timestamp.before.max.ms": str(2**62)}


class Writer:
    """Random appends, replayed the same on every copy of a log (same seed, same calls)."""

    def __init__(self, rng: random.Random, codecs: bool) -> None:
        self.rng = rng
        self.codecs = codecs  # compressed batches too, or none
        self.ts = NOW
        self.keys = rng.choice([3, 20, 200])
        self.seqs: dict[int, int] = {}
        self.open_txn: set[int] = set()

    def batches(self, n: int):
        rng = self.rng
        for _ in range(n):
            self.ts += rng.randrange(0, 50)
            recs = [SimpleRecord(self.ts + rng.randrange(-5, 5),
                                 None if rng.random() < 0.03 else b"key-%d" % rng.randrange(self.keys),
                                 None if rng.random() < 0.15 else rng.randbytes(rng.randrange(0, 60)))
                    for _ in range(rng.randrange(1, 9))]
            codec = rng.choice(CODECS) if self.codecs and rng.random() < 0.4 else CompressionType.NONE
            kind = rng.random()
            if kind < 0.55:
                yield "batch", build_batch(recs, compression=codec)
                continue
            pid = 100 + rng.randrange(2) if kind < 0.75 else 200 + rng.randrange(2)
            transactional = pid >= 200
            if transactional and pid in self.open_txn and rng.random() < 0.35:
                self.open_txn.discard(pid)
                yield "control", (pid, rng.random() < 0.6)
                continue
            seq = self.seqs.get(pid, 0)
            self.seqs[pid] = seq + len(recs)
            if transactional:
                self.open_txn.add(pid)
            yield "batch", build_batch(recs, compression=codec, producer_id=pid, producer_epoch=0,
                                       base_sequence=seq, is_transactional=transactional)

    def write(self, logs: list[PartitionLog], n: int, close_txns: bool) -> None:
        steps = list(self.batches(n))
        if close_txns:
            steps += [("control", (pid, True)) for pid in sorted(self.open_txn)]
            self.open_txn.clear()
        for plog in logs:
            for kind, what in steps:
                if kind == "batch":
                    plog.append(what, now=self.ts)
                else:
                    plog.append_control(what[0], 0, what[1], 0, now=self.ts)
            plog.roll()


def files(directory) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())
            if p.name.endswith((".log", ".index", ".timeindex", ".txnindex"))}


def seen(directory) -> dict[str, object]:
    """What a user sees of the segments: an uncompressed batch's bytes; a compressed one's header fields
    (all but its length and CRC) and records; the transaction indexes' bytes."""
    out: dict[str, object] = {}
    for p in sorted(directory.iterdir()):
        if p.name.endswith(".txnindex"):
            out[p.name] = p.read_bytes()
        elif p.name.endswith(".log"):
            batches = []
            for batch in iter_batches(p.read_bytes()):
                if not isinstance(batch, RecordBatch) or batch.compression == CompressionType.NONE:
                    batches.append(bytes(batch.raw))
                    continue
                assert batch.verify_crc()
                batches.append((batch.base_offset, batch.last_offset_delta, batch.attributes, batch.base_timestamp,
                                batch.max_timestamp, batch.producer_id, batch.producer_epoch, batch.base_sequence,
                                batch.partition_leader_epoch, batch.records_count,
                                [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records()]))
            out[p.name] = batches
    return out


@pytest.mark.parametrize("seed", range(14))
def test_c_and_python_cleanings_leave_the_same_log(tmp_path, seed):
    rng = random.Random(seed)
    cfg = TopicConfig.from_kafka(config(rng))
    memory = rng.choice([24 * 8, 24 * 40, 1 << 20])  # several passes, or one
    load = rng.choice([0.5, 0.9, 1.0])
    logs = [PartitionLog.open(tmp_path / name / "t-0", cfg) for name in ("c", "py")]
    writer = Writer(rng, codecs=seed % 3 != 0)
    cleaners = [Cleaner(memory, load, native=True), Cleaner(memory, load, native=False)]
    checkpoints: list[int | None] = [None, None]
    cleaned = 0
    for round_ in range(4):
        writer.write(logs, rng.randrange(40, 160), close_txns=round_ == 3 or rng.random() < 0.5)
        now = NOW + DAY // 2 + round_ * DAY  # later rounds pass the first ones' delete horizons
        for _ in range(3):
            ends = []
            for i, plog in enumerate(logs):
                ltc, _ = log_to_clean(("t", 0), plog, checkpoints[i], now)
                if ltc.cleanable_bytes == 0:
                    ends.append(None)
                    continue
                end, stats = cleaners[i].clean(ltc, now)
                checkpoints[i] = end
                ends.append((end, stats.records_read, stats.records_retained, stats.bytes_written))
            assert ends[0] == ends[1]
            cleaned += ends[0] is not None
            assert seen(tmp_path / "c" / "t-0") == seen(tmp_path / "py" / "t-0")
            if not writer.codecs:
                assert files(tmp_path / "c" / "t-0") == files(tmp_path / "py" / "t-0")
    assert cleaned
    reads = [[(r.offset, r.timestamp, r.key, r.value) for r in plog.read_records(plog.log_start_offset,
                                                                                 isolation="read_committed")]
             for plog in logs]
    assert reads[0] == reads[1]
    for plog in logs:
        plog.close()
    # both reopen (recovery walks the cleaned segments) to the same log
    again = [PartitionLog.open(tmp_path / name / "t-0", cfg) for name in ("c", "py")]
    assert [[(r.offset, r.key, r.value) for r in p.read_records(p.log_start_offset)] for p in again][0] == \
        [[(r.offset, r.key, r.value) for r in p.read_records(p.log_start_offset)] for p in again][1]
    for plog in again:
        plog.close()
    shutil.rmtree(tmp_path)


def test_offset_map_is_bounded_by_its_memory_and_keeps_the_last_offset():
    omap = native.OffsetMap(24 * 1000, 0.9, 12345)
    assert omap.slots == 1000 and omap.max_entries == 900
    for i in range(900):
        omap.put(b"k%d" % i, i)
        omap.put(b"k%d" % i, 10_000 + i)  # an update takes no new slot
    assert len(omap) == 900 and omap.full and omap.latest_offset == 10_899
    assert all(omap.get(b"k%d" % i) == 10_000 + i for i in range(900))
    assert omap.get(b"absent") == -1 and omap.get(b"") == -1
    assert omap.peak_bytes <= 24 * 1000
    omap.clear()
    assert len(omap) == 0 and omap.latest_offset == -1 and omap.get(b"k1") == -1
    big = native.OffsetMap(128 << 20, 0.9, 1)
    for i in range(100):
        big.put(b"x%d" % i, i)
    assert big.peak_bytes < 1 << 20  # a small log does not touch the whole buffer
    with pytest.raises(ValueError, match="increase log.cleaner.dedupe.buffer.size"):
        native.OffsetMap(23, 0.9, 0)


def test_filter_chunk_copies_whole_batches_and_splices_partial_ones():
    """A batch whose records all stay is copied byte for byte; one that loses records is spliced with a
    valid CRC (RecordBatch checks it), its count, length and max timestamp those of the records kept."""
    from chronolog.records import RecordBatch

    omap = native.OffsetMap(1 << 16, 0.9, 7)
    whole = build_batch([SimpleRecord(NOW, b"w1", b"1"), SimpleRecord(NOW + 5, b"w2", b"2")], base_offset=0)
    partial = build_batch([SimpleRecord(NOW + 9, b"a", b"3"), SimpleRecord(NOW + 7, b"c", b"4"),
                           SimpleRecord(NOW + 8, b"a", b"5")], base_offset=2)
    for key, off in ((b"w1", 0), (b"w2", 1), (b"c", 3), (b"a", 4)):
        omap.put(key, off)
    chunk = whole + partial
    got = omap.filter_chunk(chunk, 0, False, 100, NOW, {}, 0, 0, 0, -1, -1, 4096, 1 << 40)
    off, status, nread, out, read, kept, last, points, size, *_rest = got
    assert (off, status, nread, read, kept, last, size) == (len(chunk), native.MORE, len(chunk), 5, 4, 4, len(out))
    assert out[:len(whole)] == whole
    spliced = RecordBatch(out[len(whole):])
    assert spliced.verify_crc() and spliced.records_count == 2
    assert [(r.offset, r.key, r.value) for r in spliced.records()] == [(3, b"c", b"4"), (4, b"a", b"5")]
    assert spliced.max_timestamp == NOW + 8 and spliced.last_offset == 4


@pytest.mark.parametrize("codec", [c for c in CompressionType if c != CompressionType.NONE])
def test_compressed_batches_are_judged_in_c_through_the_codecs(codec):
    """With the records layer's codecs set, a compressed batch no longer stops the C walk: its records are
    mapped, and it is copied whole or spliced and recompressed, the records `splice_batch` keeps; a batch
    whose frame does not decompress stops the walk there (PYTHON), so the Python path raises its error."""
    from chronolog.records import RecordBatch
    from chronolog.records.batch import record_spans
    from chronolog.records.batch_builder import splice_batch
    from chronolog.records.compression import compress, decompress

    whole = build_batch([SimpleRecord(NOW, b"w1", b"1"), SimpleRecord(NOW + 5, b"w2", b"2")], base_offset=0,
                        compression=codec)
    partial = build_batch([SimpleRecord(NOW + 9, b"a", b"3" * 40), SimpleRecord(NOW + 7, b"c", b"4" * 40),
                           SimpleRecord(NOW + 8, b"a", b"5" * 40)], base_offset=2, compression=codec)
    chunk = whole + partial
    plain = native.OffsetMap(1 << 16, 0.9, 7)
    assert plain.map_chunk(chunk, 0, 0, 100, 1 << 40)[1] == native.PYTHON  # without codecs: Python's
    omap = native.OffsetMap(1 << 16, 0.9, 7)
    omap.set_codecs(decompress, compress)
    off, status, nbytes, records, last = omap.map_chunk(chunk, 0, 0, 100, 1 << 40)
    assert (off, status, nbytes, records, last) == (len(chunk), native.MORE, len(chunk), 5, 4)
    assert [omap.get(k) for k in (b"w1", b"w2", b"c", b"a")] == [0, 1, 3, 4]
    omap.latest_offset = 4
    got = omap.filter_chunk(chunk, 0, False, 100, NOW, {}, 0, 0, 0, -1, -1, 4096, 1 << 40)
    off, status, nread, out, read, kept, last, points, size, *_rest = got
    assert (off, status, nread, read, kept, last, size) == (len(chunk), native.MORE, len(chunk), 5, 2 + 2, 4, len(out))
    assert out[:len(whole)] == whole
    batch = RecordBatch(partial)
    body = batch.records_section()
    spans = [s for s in record_spans(body, 3) if s[0] != 0]  # the first "a" is superseded
    want = RecordBatch(splice_batch(batch, body, spans, compress))
    spliced = RecordBatch(out[len(whole):])
    assert spliced.verify_crc() and spliced.compression == codec
    assert [(r.offset, r.timestamp, r.key, r.value) for r in spliced.records()] == \
        [(r.offset, r.timestamp, r.key, r.value) for r in want.records()] == [(3, NOW + 7, b"c", b"4" * 40),
                                                                              (4, NOW + 8, b"a", b"5" * 40)]
    assert (spliced.max_timestamp, spliced.records_count, spliced.attributes) == \
        (want.max_timestamp, want.records_count, want.attributes)
    # a frame that does not decompress: the walk stops at it, with no error of its own
    broken = bytearray(partial)
    broken[61:] = b"\x00" * (len(broken) - 61)
    fresh = native.OffsetMap(1 << 16, 0.9, 7)
    fresh.set_codecs(decompress, compress)
    assert fresh.map_chunk(whole + bytes(broken), 0, 0, 100, 1 << 40)[:2] == (len(whole), native.PYTHON)
    assert fresh.filter_chunk(whole + bytes(broken), 0, False, 100, NOW, {}, 0, 0, 0, -1, -1, 4096,
                              1 << 40)[:2] == (len(whole), native.PYTHON)


def test_the_pure_python_switch_reaches_every_c_twin():
    """CHRONOLOG_PURE_PYTHON=1 (chronolog.native) turns off the cleaner's C map and every other C module,
    the Spark sink's encoder included; the statuses the cleaner reads are the C walk's."""
    import os
    import subprocess
    import sys

    from chronolog.storage.cleaner import offset_map

    assert (offset_map.MORE, offset_map.PYTHON, offset_map.BUDGET, offset_map.END, offset_map.FULL) == \
        (native.MORE, native.PYTHON, native.BUDGET, native.END, native.FULL)
    code = ("from chronolog.storage.cleaner import Cleaner; from chronolog.records import encode, batch, columns; "
            "from chronolog.storage import segment; "
            "print(Cleaner().native, encode.AVAILABLE, batch._native_scan, columns.NATIVE_COLUMNS, "
            "segment._native_batch_end)")
    for switch, want in (("1", "False False None False None"), ("0", "True True")):
        env = {**os.environ, "CHRONOLOG_PURE_PYTHON": switch}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
        assert out.startswith(want), out
