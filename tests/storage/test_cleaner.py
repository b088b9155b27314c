"""The log cleaner (storage.cleaner) against a model of Kafka's rules: last record per key kept with its
offset and timestamp, tombstones and empty transactions' markers until their KIP-534 delete horizon,
aborted transactions removed, time lookups exact, the compaction lags judged by record timestamps."""

from __future__ import annotations

import os
import random

import pytest

from chronolog.config import BrokerConfig, TopicConfig
from chronolog.errors import InvalidConfigError, InvalidRecordError, PolicyViolationError
from chronolog.records import RecordBatch, SimpleRecord, build_batch
from chronolog.storage import PartitionLog
from chronolog.storage.cleaner import Cleaner, OffsetMap, choose_log, log_to_clean

NOW = 1_700_000_000_000
DAY = 86_400_000
WIDE = {"message.timestamp.after.max.ms": str(2**62), "message.timestamp.before.max.ms": str(2**62)}


def compact_log(tmp_path, **overrides) -> PartitionLog:
    cfg = dict(WIDE, **{"cleanup.policy": "compact", "segment.bytes": "2000"})
    cfg.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
    return PartitionLog.open(tmp_path / "t-0", TopicConfig.from_kafka(cfg))


def put(plog: PartitionLog, key: bytes, value: bytes | None, ts: int, **kw) -> int:
    return plog.append(build_batch([SimpleRecord(ts, key, value)], **kw), now=ts).first_offset


def clean(plog: PartitionLog, now: int, last_clean: int | None = None, cleaner: Cleaner | None = None) -> int:
    ltc, _ = log_to_clean(("t", 0), plog, last_clean, now)
    end, _stats = (cleaner or Cleaner()).clean(ltc, now)
    return end


def records(plog: PartitionLog) -> list[tuple[int, int, bytes | None, bytes | None]]:
    return [(r.offset, r.timestamp, r.key, r.value) for r in plog.read_records(plog.log_start_offset)]


def fill(plog: PartitionLog, n: int, keys: int, seed: int = 1, tombstone_every: int = 0, prefix: str = "k",
         start: int = NOW):
    rng = random.Random(seed)
    written = []
    for i in range(n):
        key = f"{prefix}{rng.randrange(keys)}".encode()
        value = None if tombstone_every and i % tombstone_every == tombstone_every - 1 else f"v{i}".encode()
        ts = start + i * 10 + rng.randrange(5)
        written.append((put(plog, key, value, ts), ts, key, value))
    return written


def expected_after(written, end: int, *, drop_tombstones: bool = False):
    """The model: below `end` only each key's last record (before `end`) stays; from `end` on, all."""
    last = {}
    for off, _ts, key, _v in written:
        if off < end:
            last[key] = off
    out = []
    for rec in written:
        off, _ts, key, value = rec
        if off >= end:
            out.append(rec)
        elif last[key] == off and not (drop_tombstones and value is None):
            out.append(rec)
    return out


def test_keeps_last_record_per_key_with_offsets_and_timestamps(tmp_path):
    plog = compact_log(tmp_path)
    written = fill(plog, 400, 25, tombstone_every=17)
    before = len(plog.segments)
    for i, seg in enumerate(plog.segments[:-1]):
        os.utime(seg.log_path, (1_600_000_000 + i, 1_600_000_000 + i))
    end = clean(plog, NOW + DAY // 2)
    # each cleaned segment keeps its group's modification time (`setLastModified`)
    assert [int(os.stat(s.log_path).st_mtime) for s in plog.segments[:-1]] == \
        [1_600_000_000 + i for i in range(before - 1)]
    assert end == plog.active.base_offset
    assert records(plog) == expected_after(written, end)
    assert len(plog.segments) == before  # the groups kept their segment boundaries (segment.bytes)
    plog.close()
    reopened = compact_log(tmp_path)
    assert records(reopened) == expected_after(written, end)
    assert not [p.name for p in (tmp_path / "t-0").iterdir() if p.name.endswith((".cleaned", ".swap"))]


def test_small_segments_are_grouped_into_one(tmp_path):
    plog = compact_log(tmp_path, segment_bytes=400)
    written = fill(plog, 120, 3)
    plog.update_config(TopicConfig.from_kafka(dict(WIDE, **{"cleanup.policy": "compact",
                                                            "segment.bytes": "100000"})))
    many = len(plog.segments)
    end = clean(plog, NOW + DAY)
    assert records(plog) == expected_after(written, end)
    assert len(plog.segments) == 2 < many  # all inactive segments became one, plus the active one


def test_tombstones_stay_until_delete_horizon_then_go(tmp_path):
    plog = compact_log(tmp_path, delete_retention_ms=1000)
    written = fill(plog, 200, 10, tombstone_every=7)
    for k in (b"k0", b"k1", b"k2"):
        written.append((put(plog, k, None, NOW + 5000), NOW + 5000, k, None))
    plog.roll()
    t1 = NOW + 10 * DAY
    end = clean(plog, t1)
    assert end == 203
    kept = records(plog)
    assert kept == expected_after(written, end)
    tombstones = [r for r in kept if r[3] is None and r[0] < end]
    assert tombstones
    # the batches holding them carry the horizon (KIP-534) and their records keep their timestamps
    horizons = {b.delete_horizon_ms for s in plog.segments[:-1] for _p, b in s.batches_from(0)
                if isinstance(b, RecordBatch) and b.records_count and any(r.value is None for r in b.records())}
    assert horizons == {t1 + 1000}
    # more updates (a dirty part), cleaned before the horizon: the tombstones stay
    more = fill(plog, 40, 200, seed=7, prefix="n")  # new keys only
    end2 = clean(plog, t1 + 999, last_clean=end)
    assert [r for r in records(plog) if r[3] is None and r[0] < end] == tombstones
    # after the horizon they go, everything else stays
    fill(plog, 40, 300, seed=8, prefix="m")
    end3 = clean(plog, t1 + 1001, last_clean=end2)
    left = records(plog)
    assert not [r for r in left if r[3] is None and r[0] < end]
    assert [r for r in left if r[0] < end] == [r for r in expected_after(written, end) if r[3] is not None]
    assert end3 > end2 and more


def test_time_lookups_match_brute_force_before_and_after(tmp_path):
    plog = compact_log(tmp_path, index_interval_bytes=100)
    rng = random.Random(3)
    for _ in range(300):
        ts = NOW + rng.randrange(0, 5000)  # out of order timestamps
        put(plog, f"k{rng.randrange(20)}".encode(), b"x" * rng.randrange(1, 60), ts)

    def brute(t):
        found = [(off, ts) for off, ts, _k, _v in records(plog) if ts >= t]
        return min(found) if found else None

    def check():
        for t in range(NOW - 10, NOW + 5010, 37):
            got = plog.offset_for_timestamp(t)
            want = brute(t)
            assert (None if got is None else (got.offset, got.timestamp)) == want, t
    check()
    clean(plog, NOW + DAY)
    check()
    plog.close()
    plog = compact_log(tmp_path, index_interval_bytes=100)
    check()


def test_offset_map_bounded_cleans_in_several_passes(tmp_path):
    plog = compact_log(tmp_path)
    written = fill(plog, 400, 60)
    small = Cleaner(dedupe_buffer_size=24 * 30, load_factor=1.0)  # 30 keys a pass
    end, passes = None, 0
    while True:
        ltc, _ = log_to_clean(("t", 0), plog, end, NOW + DAY)
        if ltc.first_dirty >= ltc.first_uncleanable:
            break
        end, _ = small.clean(ltc, NOW + DAY)
        passes += 1
        assert small.offset_map.peak_bytes > 0
    assert passes > 1
    # the same result as one pass with a big map
    assert records(plog) == expected_after(written, end)


def test_offset_map_counts_slots_like_kafka():
    omap = OffsetMap(24 * 100, 0.9)
    assert omap.slots == 100 and omap.max_entries == 90
    omap.put(b"a", 5)
    omap.put(b"a", 9)
    assert omap.get(b"a") == 9 and omap.get(b"b") == -1 and len(omap) == 1
    with pytest.raises(Exception, match="too small"):
        OffsetMap(23, 0.9)


def test_min_compaction_lag_by_record_timestamps(tmp_path):
    plog = compact_log(tmp_path, min_compaction_lag_ms=60_000)
    fill(plog, 200, 10)  # timestamps NOW .. NOW+2000
    last_ts = max(s.largest_timestamp for s in plog.segments[:-1])
    ltc, _ = log_to_clean(("t", 0), plog, None, last_ts + 59_999)
    first_young = next(s for s in plog.segments if s.largest_timestamp > last_ts + 59_999 - 60_000)
    assert ltc.first_uncleanable == first_young.base_offset < plog.active.base_offset
    ltc, _ = log_to_clean(("t", 0), plog, None, last_ts + 60_000)
    assert ltc.first_uncleanable == plog.active.base_offset
    ltc, _ = log_to_clean(("t", 0), plog, None, NOW)  # nothing is old enough
    assert ltc.first_uncleanable == 0 and ltc.cleanable_bytes == 0


def test_max_compaction_lag_forces_cleaning_below_the_ratio(tmp_path):
    plog = compact_log(tmp_path, max_compaction_lag_ms=DAY, min_cleanable_dirty_ratio=0.99)
    fill(plog, 200, 10)
    plog.roll()
    end = clean(plog, NOW + 2 * DAY)
    first_ts = NOW + 5 * DAY
    fill(plog, 30, 10, seed=5, start=first_ts)  # a little dirt: ratio far below 0.99
    plog.roll()
    logs = {("t", 0): plog}
    chosen, _ = choose_log(logs, {("t", 0): end}, first_ts + DAY - 1)
    assert chosen is None
    chosen, _ = choose_log(logs, {("t", 0): end}, first_ts + DAY + 10)
    assert chosen is not None and chosen.needs_compaction_now and chosen.first_dirty == end


def test_dirty_ratio_picks_the_filthiest(tmp_path):
    a = PartitionLog.open(tmp_path / "a-0", TopicConfig.from_kafka(dict(WIDE, **{"cleanup.policy": "compact",
                                                                                "segment.bytes": "2000"})))
    b = PartitionLog.open(tmp_path / "b-0", TopicConfig.from_kafka(dict(WIDE, **{"cleanup.policy": "compact",
                                                                                "segment.bytes": "2000"})))
    d = PartitionLog.open(tmp_path / "d-0", TopicConfig.from_kafka(dict(WIDE, **{"segment.bytes": "2000"})))
    for plog in (a, b, d):
        fill(plog, 100, 5)
    fill(a, 200, 10**6, prefix="u")  # unique keys: they stay after cleaning
    a.roll()
    end_a = Cleaner().clean(log_to_clean(("a", 0), a, None, NOW + DAY)[0], NOW + DAY)[0]
    fill(a, 30, 5)
    chosen, _ = choose_log({("a", 0): a, ("b", 0): b, ("d", 0): d}, {("a", 0): end_a}, NOW + DAY)
    assert chosen.key == ("b", 0)  # all dirty; `d` is not compacted
    chosen, _ = choose_log({("a", 0): a, ("d", 0): d}, {("a", 0): end_a}, NOW + DAY)
    assert chosen is None  # a's dirty share is below 0.5


def test_aborted_transactions_removed_markers_kept_until_safe(tmp_path):
    plog = compact_log(tmp_path, delete_retention_ms=1000)
    expected = []
    pid = 7
    for i in range(60):
        ts = NOW + i
        txn = i % 10 < 4
        if txn:
            # a transaction of one batch, aborted when i % 20 < 10
            seq = sum(1 for j in range(i) if j % 10 < 4)
            off = plog.append(build_batch([SimpleRecord(ts, f"t{i % 4}".encode(), f"x{i}".encode())],
                                          producer_id=pid, producer_epoch=0, base_sequence=seq,
                                          is_transactional=True), now=ts).first_offset
            commit = i % 20 >= 10
            plog.append_control(pid, 0, commit, 0, now=ts)
            if commit:
                expected.append((off, f"t{i % 4}".encode()))
        else:
            off = put(plog, f"p{i % 5}".encode(), f"y{i}".encode(), ts)
            expected.append((off, f"p{i % 5}".encode()))
    # an aborted transaction whose key nothing else writes: only the abort removes it
    seq = sum(1 for j in range(60) if j % 10 < 4)
    plog.append(build_batch([SimpleRecord(NOW + 60, b"only-aborted", b"z")], producer_id=pid, producer_epoch=0,
                            base_sequence=seq, is_transactional=True), now=NOW + 60)
    plog.append_control(pid, 0, False, 0, now=NOW + 60)
    plog.roll()
    end = plog.active.base_offset
    assert b"only-aborted" in {r.key for r in plog.read_records(0)}
    committed_before = [(r.offset, r.key) for r in plog.read_records(0, isolation="read_committed")]
    assert committed_before == expected
    clean(plog, NOW + DAY)
    last = {}
    for off, key in expected:
        last[key] = off
    want = sorted(last.values())
    plain = [(r.offset, r.key) for r in plog.read_records(0)]
    assert [o for o, _k in plain] == want  # aborted records gone even in read_uncommitted
    assert [(r.offset, r.key) for r in plog.read_records(0, isolation="read_committed")] == plain
    markers = [b for s in plog.segments for _p, b in s.batches_from(0) if b.is_control and b.records_count]
    assert markers and all(m.delete_horizon_ms is None or m.delete_horizon_ms == NOW + DAY + 1000 for m in markers)
    # markers of transactions left without batches get a horizon at the next cleaning (an ABORT once its
    # batches are gone, a COMMIT once its records are), and go at the first cleaning after it
    t2 = NOW + 2 * DAY
    fill(plog, 20, 50, seed=9, prefix="q")
    plog.roll()
    end2 = clean(plog, t2, last_clean=end)
    horizons = {b.delete_horizon_ms for s in plog.segments for _p, b in s.batches_from(0)
                if b.is_control and b.records_count}
    assert t2 + 1000 in horizons
    fill(plog, 20, 50, seed=10, prefix="r")
    plog.roll()
    clean(plog, t2 + 999, last_clean=end2)
    assert len([b for s in plog.segments for _p, b in s.batches_from(0) if b.is_control and b.records_count]) \
        == len(markers)
    fill(plog, 20, 50, seed=11, prefix="s")
    plog.roll()
    clean(plog, t2 + 1000, last_clean=plog.segments[-2].base_offset)
    markers_after = [b for s in plog.segments for _p, b in s.batches_from(0) if b.is_control and b.records_count]
    assert len(markers_after) < len(markers)
    # a COMMIT whose transaction still has a record is kept
    kept_txn_keys = {k for _o, k in plain if k.startswith(b"t")}
    assert len(markers_after) >= len(kept_txn_keys)
    assert [(r.offset, r.key) for r in plog.read_records(0, isolation="read_committed") if r.offset < end] == \
        [(o, k) for o, k in plain]


def test_last_batch_of_active_producer_is_kept_for_its_sequence(tmp_path):
    plog = compact_log(tmp_path)
    pid = 11
    for seq in range(5):
        plog.append(build_batch([SimpleRecord(NOW + seq, b"same", b"v%d" % seq)], producer_id=pid,
                                producer_epoch=0, base_sequence=seq), now=NOW + seq)
    put(plog, b"same", b"newest", NOW + 10)  # supersedes the producer's last record
    plog.roll()
    clean(plog, NOW + DAY)
    kept = [(b.producer_id, b.base_sequence, b.records_count)
            for s in plog.segments for _p, b in s.batches_from(0)]
    assert (pid, 4, 0) in kept  # an empty batch keeps its last sequence
    plog.close()
    for snap in (tmp_path / "t-0").glob("*.snapshot"):
        snap.unlink()  # the producer state comes back from the cleaned log itself
    reopened = PartitionLog.open(tmp_path / "t-0", plog.config, now=NOW + 20)
    retry = build_batch([SimpleRecord(NOW + 4, b"same", b"v4")], producer_id=pid, producer_epoch=0, base_sequence=4)
    assert reopened.append(retry, now=NOW + 20).duplicate
    nxt = build_batch([SimpleRecord(NOW + 5, b"same", b"v5")], producer_id=pid, producer_epoch=0, base_sequence=5)
    assert not reopened.append(nxt, now=NOW + 21).duplicate


def test_keyless_records_refused_on_compacted_topic(tmp_path):
    plog = compact_log(tmp_path)
    with pytest.raises(InvalidRecordError, match="without key"):
        plog.append(build_batch([SimpleRecord(NOW, b"k", b"v"), SimpleRecord(NOW, None, b"v")]), now=NOW)
    with pytest.raises(InvalidRecordError, match="without key"):
        plog.append(build_batch([SimpleRecord(NOW, None, b"v")]), now=NOW)
    assert plog.log_end_offset == 0
    plain = PartitionLog.open(tmp_path / "u-0", TopicConfig.from_kafka(WIDE))
    plain.append(build_batch([SimpleRecord(NOW, None, b"v")]), now=NOW)


def test_delete_records_refused_on_compact_only_topic(tmp_path):
    plog = compact_log(tmp_path)
    fill(plog, 20, 3)
    with pytest.raises(PolicyViolationError, match="configured policy"):
        plog.delete_records_before(5)
    both = PartitionLog.open(tmp_path / "b-0", TopicConfig.from_kafka(dict(WIDE, **{
        "cleanup.policy": "compact,delete"})))
    fill(both, 20, 3)
    assert both.delete_records_before(5) == 5


def test_cleaner_configs_have_kafkas_defaults_and_bounds():
    cfg = TopicConfig.from_kafka({})
    assert (cfg.delete_retention_ms, cfg.min_compaction_lag_ms, cfg.max_compaction_lag_ms,
            cfg.min_cleanable_dirty_ratio) == (86400000, 0, 2**63 - 1, 0.5)
    assert TopicConfig.from_kafka({"cleanup.policy": "compact,delete"}).cleanup_policy == "compact,delete"
    with pytest.raises(InvalidConfigError, match="no more than 1"):
        TopicConfig.from_kafka({"min.cleanable.dirty.ratio": "1.5"})
    with pytest.raises(InvalidConfigError, match="log.cleaner.threads"):
        BrokerConfig({"log.cleaner.threads": "2"})
    with pytest.raises(InvalidConfigError, match="Unknown broker config"):
        BrokerConfig({"log.cleaner.io.buffer.size": "1000"})
    broker = BrokerConfig({"log.cleaner.min.cleanable.ratio": "0.1", "log.cleaner.delete.retention.ms": "5"})
    assert broker.default_topic_config().min_cleanable_dirty_ratio == 0.1
    assert broker.default_topic_config().delete_retention_ms == 5
    assert broker["log.cleaner.dedupe.buffer.size"] == 134217728 and broker["log.cleaner.backoff.ms"] == 15000


def test_manager_cleans_the_due_log_and_keeps_its_checkpoint(tmp_path):
    from chronolog.storage import LogManager
    from chronolog.storage.checkpoints import read_checkpoint
    from chronolog.storage.cleaner import CLEANER_CHECKPOINT

    manager = LogManager(tmp_path, BrokerConfig({"log.cleaner.backoff.ms": "10"}))
    manager.startup(background=False)
    manager.create_topic("c", 1, dict(WIDE, **{"cleanup.policy": "compact", "segment.bytes": "2000",
                                               "min.compaction.lag.ms": str(DAY)}))
    manager.create_topic("d", 1, dict(WIDE, **{"segment.bytes": "2000"}))
    written = fill(manager.get_log("c", 0), 200, 10)
    fill(manager.get_log("d", 0), 200, 10)
    clock = [NOW + DAY - 1]
    manager.cleaner_clock = lambda: clock[0]
    assert manager.run_cleaner_once() is None  # every segment is younger than min.compaction.lag.ms
    clock[0] = NOW + 2000 + DAY
    key, end, stats = manager.run_cleaner_once()
    assert key == ("c", 0) and end == manager.get_log("c", 0).active.base_offset and stats.records_read > 0
    assert read_checkpoint(tmp_path / CLEANER_CHECKPOINT) == {("c", 0): end}
    assert manager.run_cleaner_once() is None  # nothing dirty left; `d` is not compacted
    assert records(manager.get_log("c", 0)) == expected_after(written, end)
    manager.shutdown()
    again = LogManager(tmp_path, BrokerConfig())
    again.startup(background=False)
    try:
        assert again.cleaner_checkpoints() == {("c", 0): end}
        assert records(again.get_log("c", 0)) == expected_after(written, end)
    finally:
        again.shutdown()


@pytest.mark.parametrize("codec", ["gzip", "zstd", "lz4", "snappy"])
def test_compressed_batches_are_cleaned_and_recompressed(tmp_path, codec):
    from chronolog.records import CompressionType
    plog = compact_log(tmp_path)
    rng = random.Random(6)
    written = []
    for i in range(0, 300, 5):
        recs = [SimpleRecord(NOW + i + j, f"k{rng.randrange(12)}".encode(),
                             None if rng.random() < 0.05 else f"v{i + j}".encode()) for j in range(5)]
        off = plog.append(build_batch(recs, compression=CompressionType[codec.upper()]), now=NOW + i).first_offset
        written += [(off + j, r.timestamp, r.key, r.value) for j, r in enumerate(recs)]
    plog.roll()
    end = clean(plog, NOW + DAY)
    assert records(plog) == expected_after(written, end)
    codecs = {b.compression for s in plog.segments for _p, b in s.batches_from(0) if b.records_count}
    assert codecs == {CompressionType[codec.upper()]}


def test_record_spans_c_and_python_agree():
    from chronolog.records.batch import _native_spans, _record_spans_py, record_spans
    rng = random.Random(8)
    for _ in range(300):
        recs = [SimpleRecord(NOW + rng.randrange(-10**6, 10**6), None if rng.random() < 0.2 else rng.randbytes(
            rng.randrange(0, 300)), None if rng.random() < 0.2 else rng.randbytes(rng.randrange(0, 3000)),
            tuple((f"h{i}", rng.randbytes(3)) for i in range(rng.randrange(3)))) for _ in range(rng.randrange(1, 20))]
        batch = RecordBatch(build_batch(recs))
        body = batch.records_section()
        spans = _record_spans_py(body, batch.records_count)
        assert record_spans(body, batch.records_count) == spans
        position = 0
        for i, ((od, td, s, e, ks, kl, vl), rec) in enumerate(zip(spans, recs, strict=True)):
            assert od == i and batch.base_timestamp + td == rec.timestamp
            assert s == position < e  # whole records, length varint included, back to back
            position = e
            assert (None if kl < 0 else bytes(body[ks:ks + kl])) == rec.key and (vl < 0) == (rec.value is None)
        assert position == len(body)
        if _native_spans is not None:
            cut = bytes(body)[:rng.randrange(len(body))]
            assert _native_spans(cut, batch.records_count) is None


def test_describe_segments_shows_cleaned_and_dirty_parts(tmp_path):
    import json

    from typer.testing import CliRunner

    from chronolog.cli.main import app
    from chronolog.cli.topics import _plot
    from chronolog.storage import LogManager

    manager = LogManager(tmp_path, BrokerConfig())
    manager.startup(background=False)
    manager.create_topic("c", 1, dict(WIDE, **{"cleanup.policy": "compact", "segment.bytes": "2000"}))
    plog = manager.get_log("c", 0)
    fill(plog, 200, 10)
    end = manager.run_cleaner_once(now=NOW + DAY)[1]
    fill(plog, 60, 10, seed=3, start=NOW + 5000)
    manager.shutdown()
    result = CliRunner().invoke(app, ["describe-segments", "c", "--data-dir", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    states = [(r["base_offset"], r["cleaned"]) for r in rows]
    assert [s for b, s in states if b < end] == ["cleaned"] * len([b for b, _s in states if b < end])
    assert [s for b, s in states if b >= end] and all(s == "dirty" for b, s in states if b >= end)
    drawn = _plot("c", rows, tmp_path / "c.png")
    assert {d["base_offset"] for d in drawn["segments"] if d["hatched"]} == {b for b, s in states if s == "dirty"}


def test_appends_and_rolls_during_a_cleaning_do_not_abort_it_retention_does(tmp_path, monkeypatch):
    from chronolog.storage.cleaner import CleaningAbortedError

    plog = compact_log(tmp_path, cleanup_policy="compact,delete", retention_ms=-1)
    written = fill(plog, 200, 10)
    plog.roll()
    original = Cleaner._build_offset_map
    during = []

    def meanwhile(self, *args):
        end = original(self, *args)
        during.extend(fill(plog, 40, 10, seed=2, start=NOW + 10_000))  # appends that roll segments
        return end
    monkeypatch.setattr(Cleaner, "_build_offset_map", meanwhile)
    end = clean(plog, NOW + DAY)
    assert end == 200 and len(during) == 40
    assert records(plog) == expected_after(written, end) + during
    # DeleteRecords removing a segment being cleaned: that group is not swapped, nothing is lost
    monkeypatch.setattr(Cleaner, "_build_offset_map", lambda self, *a: (plog.delete_records_before(
        plog.segments[1].base_offset), original(self, *a))[1])
    fill(plog, 40, 10, seed=4, start=NOW + 20_000)
    plog.roll()
    before = records(plog)
    with pytest.raises(CleaningAbortedError):
        clean(plog, NOW + DAY, last_clean=end)
    assert records(plog) == [r for r in before if r[0] >= plog.log_start_offset]


def test_offline_time_tools_and_spark_path_planning_on_a_cleaned_data_dir(tmp_path):
    """What readers of a data dir (the time tools, Spark's path mode) compute from a cleaned partition: a
    lookup by time and the proven end of a time window, exact against brute force over the records."""
    from chronolog.spark.planning import _proven_end
    from chronolog.timetravel.opener import open_data_dir

    plog = PartitionLog.open(tmp_path / "c-0", TopicConfig.from_kafka(dict(WIDE, **{
        "cleanup.policy": "compact", "segment.bytes": "1500", "index.interval.bytes": "200"})))
    rng = random.Random(12)
    for _ in range(300):
        ts = NOW + rng.randrange(0, 3000)  # out of order
        put(plog, f"k{rng.randrange(25)}".encode(), None if rng.random() < 0.1 else b"v" * rng.randrange(1, 40), ts)
    plog.roll()
    clean(plog, NOW + DAY)
    plog.close()
    source = open_data_dir(tmp_path)
    recs = [(r.offset, r.timestamp) for r in source.read("c", 0, 0, 10**9)]
    assert recs and any(r.value is None for r in source.read("c", 0, 0, 10**9))  # horizons were set
    for t in range(NOW - 5, NOW + 3005, 41):
        found = source.offsets_for_time("c", t)[0]
        want = min((o for o, ts in recs if ts >= t), default=None)
        assert (found.offset if found.found else None) == want, t
        start = rng.choice([0] + [o for o, _ts in recs])
        end = _proven_end(source.log("c", 0), start, t)
        assert all(ts >= t for o, ts in recs if o >= end)
        below = [o for o, ts in recs if ts < t and o > start]
        if below:  # tight: no record between the last one below the window end and the proven end
            assert not [o for o, _ts in recs if max(below) < o < end]
    source.close()


def test_log_cleaner_enable_false_runs_no_cleaner(tmp_path):
    from chronolog.storage import LogManager

    for enabled, expected in (("false", False), ("true", True)):
        manager = LogManager(tmp_path / enabled, BrokerConfig({"log.cleaner.enable": enabled}))
        manager.startup(background=True)
        try:
            assert (manager._cleaner_thread is not None) == expected
        finally:
            manager.shutdown()


def test_shutdown_stops_a_throttled_cleaning_at_once_and_leaves_no_cleaned_file(tmp_path, monkeypatch):
    import threading

    from chronolog.storage import LogManager
    from chronolog.storage.cleaner import Throttler

    throttling = threading.Event()
    original = Throttler.maybe_throttle

    def noting(self, n):
        throttling.set()
        return original(self, n)
    monkeypatch.setattr(Throttler, "maybe_throttle", noting)

    manager = LogManager(tmp_path, BrokerConfig({"log.cleaner.io.max.bytes.per.second": "2000"}))
    manager.startup(background=False)
    manager.create_topic("c", 1, dict(WIDE, **{"cleanup.policy": "compact", "segment.bytes": "200000"}))
    plog = manager.get_log("c", 0)
    written = [(put(plog, b"k%d" % (i % 2), b"x" * 30_000, NOW + i), NOW + i, b"k%d" % (i % 2), b"x" * 30_000)
               for i in range(4)]
    plog.roll()
    result = []
    worker = threading.Thread(target=lambda: result.append(manager.run_cleaner_once(now=NOW + DAY)))
    worker.start()  # each 30 KB batch is 15 s of throttle at 2000 bytes/s
    assert throttling.wait(10)
    manager._stop.set()
    worker.join(12)  # well inside the 15 s the throttle would still sleep if the stop did not cut it short
    assert not worker.is_alive() and result == [None]
    manager.shutdown()
    assert not [p for p in (tmp_path / "c-0").iterdir() if p.name.endswith((".cleaned", ".swap"))]
    again = LogManager(tmp_path, BrokerConfig())
    again.startup(background=False)
    try:
        assert records(again.get_log("c", 0)) == written
    finally:
        again.shutdown()
