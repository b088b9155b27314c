"""Tiered storage (KIP-405) in the storage layer: closed segments copied to a tier (a local directory, and
moto's S3 server through pyarrow), local copies past local.retention.ms deleted only once listed, every
record still read exactly, lookups by time exact over tiered late-CreateTime data and cheap (the tier's
reads counted), the specials -4/-5, retention over the whole log, a restart."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from chronolog.config import BrokerConfig
from chronolog.errors import InvalidConfigError
from chronolog.records import SimpleRecord, build_batch
from chronolog.storage import LogManager
from chronolog.storage.remote.metadata import METADATA_SUFFIX
from chronolog.storage.remote.reading import RANGE_BYTES
from tests.s3server import s3_server

BASE = 1_700_000_000_000
SEGMENT = 1 << 20


@pytest.fixture(scope="module")
def s3_tier():
    """An S3-compatible server on 127.0.0.1 (moto) with a bucket; yields the tier URI's prefix and query."""
    pytest.importorskip("pyarrow.fs")
    with s3_server("tier") as (server, _, query):
        server._server.app = _counting(server._server.app)
        yield query


# What the S3 server was asked, as it saw it: (method, key, Range header), for the checks of what a lookup
# by time costs the object store (independent of the tier's own counters).
S3_REQUESTS: list[tuple[str, str, str | None]] = []


def _counting(app):
    def counted(environ, start_response):
        S3_REQUESTS.append((environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""), environ.get("HTTP_RANGE")))
        return app(environ, start_response)
    return counted


@pytest.fixture(params=["dir", "s3"])
def tier_location(request, tmp_path):
    if request.param == "dir":
        return str(tmp_path / "tier")
    query = request.getfixturevalue("s3_tier")
    return f"s3://tier/{tmp_path.name}{query}"


def broker_config(tier: str, **extra: str) -> BrokerConfig:
    return BrokerConfig({"remote.log.storage.system.enable": "true", "remote.log.storage.dir": tier,
                         "remote.log.manager.task.interval.ms": "3600000", **extra})


TOPIC_CONFIGS = {"remote.storage.enable": "true", "segment.bytes": str(SEGMENT), "local.retention.ms": "1500",
                 "retention.ms": "-1", "index.interval.bytes": "4096"}


def produce(plog, batches: int, rng: random.Random, first_index: int = 0) -> list[tuple[int, int, bytes]]:
    """Batches of 50 records with late CreateTime: each batch's timestamps wander back up to 5 s from the
    running clock. Returns (offset, timestamp, value) of each record."""
    out = []
    for b in range(first_index, first_index + batches):
        clock = BASE + b * 1000
        records = []
        for j in range(50):
            ts = clock - rng.randrange(5000) + j
            value = f"{b}:{j}:".encode() + rng.randbytes(120)
            records.append(SimpleRecord(ts, f"k{j}".encode(), value))
        info = plog.append(build_batch(records), now=clock + 10_000)
        out.extend((info.first_offset + j, r.timestamp, r.value) for j, r in enumerate(records))
    return out


def oracle(produced: list[tuple[int, int, bytes]], target: int, start: int = 0) -> tuple[int, int] | None:
    found = [(o, t) for o, t, _v in produced if t >= target and o >= start]
    return min(found) if found else None


def tier_and_expire(manager: LogManager, now: int) -> None:
    """What the task and the retention check do, at `now`, until nothing is left to copy."""
    for _ in range(3):
        manager.remote_logs.run_once(manager.opened_logs(), now)
        manager.run_retention_once(now)


def local_logs(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.glob("*.log"))


def test_tier_keeps_every_record_and_finds_every_time(tmp_path, tier_location):
    rng = random.Random(42)
    manager = LogManager(tmp_path / "data", broker_config(tier_location))
    manager.startup(background=False)
    try:
        manager.create_topic("logs", 1, TOPIC_CONFIGS)
        plog = manager.get_log("logs", 0)
        produced = produce(plog, 600, rng)  # about 4.6 MB: 5 segments
        assert len(plog.segments) >= 5
        assert plog.offset_for_timestamp(-5).offset == -1  # nothing tiered yet
        now = BASE + 600 * 1000 + 60_000
        tier_and_expire(manager, now)
        remote = plog.remote
        local = local_logs(plog.dir)
        assert len(local) == 1, local  # only the active segment (rolled by local.retention.ms, then copied)
        assert plog.log_start_offset == 0
        assert plog.local_log_start_offset == plog.segments[0].base_offset > 0
        assert remote.highest_offset == plog.local_log_start_offset - 1
        # every record, exactly, across the tier and the local segment
        got = [(r.offset, r.timestamp, r.value) for r in plog.read_records(0)]
        assert got == produced
        # ListOffsets' specials (KIP-1005 as Kafka 4.4 answers them)
        assert plog.offset_for_timestamp(-2).offset == 0
        assert (plog.offset_for_timestamp(-4).timestamp, plog.offset_for_timestamp(-4).offset) == \
            (-1, plog.local_log_start_offset)
        assert (plog.offset_for_timestamp(-5).timestamp, plog.offset_for_timestamp(-5).offset) == \
            (-1, remote.highest_offset)
        assert plog.offset_for_timestamp(-1).offset == len(produced)
        top = max(t for _o, t, _v in produced)
        assert plog.offset_for_timestamp(-3).offset == min(o for o, t, _v in produced if t == top)
        # lookups by time, exact over late data, in tiered and local segments
        for target in [BASE - 10_000, BASE, *sorted(rng.randrange(BASE - 5000, BASE + 610_000) for _ in range(60))]:
            found = plog.offset_for_timestamp(target)
            want = oracle(produced, target)
            assert (found.offset, found.timestamp) == want if want else found is None, target
        # a cold lookup into a tiered segment: the time index, the offset index, one bounded byte range
        tier = manager.remote_logs.tier
        seg_meta = remote.segments[2]
        target = oracle(produced, BASE + (seg_meta.base_offset // 50) * 1000 + 500)[1]
        for cache in (remote.caches.indexes, remote.caches.ranges):
            cache.forget(tier, "")
        remote._changed()
        tier.reset_counters()
        S3_REQUESTS.clear()
        found = plog.offset_for_timestamp(target)
        assert (found.offset, found.timestamp) == oracle(produced, target)
        assert seg_meta.base_offset <= found.offset <= seg_meta.end_offset
        name = f"{seg_meta.base_offset:020d}"
        assert set(tier.reads) <= {f"{name}.timeindex", f"{name}.index", f"{name}.log"}, dict(tier.reads)
        assert tier.reads[f"{name}.log"] == 1 and tier.bytes_read[f"{name}.log"] <= RANGE_BYTES
        assert tier.reads[f"{name}.timeindex"] == 1
        if tier_location.startswith("s3://"):  # what the object store itself served
            served = [(method, key.rsplit("/", 1)[-1], span) for method, key, span in S3_REQUESTS]
            gets = sorted((key, span) for method, key, span in served if method == "GET")
            assert [key for key, _r in gets] == [f"{name}.index", f"{name}.log", f"{name}.timeindex"], served
            first, last = map(int, gets[1][1].removeprefix("bytes=").split("-"))
            assert last - first + 1 <= RANGE_BYTES  # one bounded range of the .log
            assert {(m, k) for m, k, _r in served if m != "GET"} <= {("HEAD", key) for key, _r in gets}, served
        # a fetch of a tiered offset
        piece = plog.read(seg_meta.base_offset + 7, 64 << 10)
        assert piece.first_offset == seg_meta.base_offset and 0 < piece.size <= 64 << 10
        # nothing copied twice, nothing half listed
        records = sorted(n for n in tier.list("logs-0") if n.endswith(METADATA_SUFFIX))
        assert len(records) == len(remote.segments) == len(set(records))
    finally:
        manager.shutdown()
    # a restart lists the same segments and answers the same
    manager = LogManager(tmp_path / "data", broker_config(tier_location))
    manager.startup(background=False)
    try:
        plog = manager.get_log("logs", 0)
        assert plog.log_start_offset == 0 and plog.remote.highest_offset == plog.local_log_start_offset - 1
        assert [(r.offset, r.timestamp, r.value) for r in plog.read_records(0)] == produced
        more = produce(plog, 200, rng, first_index=600)
        tier_and_expire(manager, BASE + 800 * 1000 + 60_000)
        produced += more
        assert [(r.offset, r.value) for r in plog.read_records(0)] == [(o, v) for o, _t, v in produced]
        metas = [m.base_offset for m in plog.remote.segments]
        assert metas == sorted(set(metas))
        assert all(a.end_offset + 1 == b.base_offset for a, b in
                   zip(plog.remote.segments, plog.remote.segments[1:], strict=False))
    finally:
        manager.shutdown()


def test_retention_applies_to_the_whole_log(tmp_path):
    rng = random.Random(7)
    manager = LogManager(tmp_path / "data", broker_config(str(tmp_path / "tier")))
    manager.startup(background=False)
    try:
        manager.create_topic("logs", 1, {**TOPIC_CONFIGS, "retention.ms": str(200_000)})
        plog = manager.get_log("logs", 0)
        produced = produce(plog, 600, rng)
        now = BASE + 600 * 1000 + 1000
        tier_and_expire(manager, now)
        remote = plog.remote
        # whole tiered segments whose newest record is older than now - retention.ms are gone, the others stay
        cutoff = now - 200_000
        assert remote.segments and all(m.max_timestamp >= cutoff for m in remote.segments)
        start = plog.log_start_offset
        assert start == remote.segments[0].base_offset > 0
        assert max(t for o, t, _v in produced if o < start) < cutoff  # whole segments, newest record past it
        assert [(r.offset, r.value) for r in plog.read_records(0)] == [(o, v) for o, _t, v in produced if o >= start]
        assert plog.offset_for_timestamp(-2).offset == start
        assert not any(n.startswith(f"{0:020d}") for n in remote.tier.list("logs-0"))
    finally:
        manager.shutdown()


def test_configs_are_checked_as_kafka_checks_them(tmp_path):
    off = LogManager(tmp_path / "off", BrokerConfig())
    off.startup(background=False)
    try:
        with pytest.raises(InvalidConfigError, match="Tiered Storage functionality is disabled"):
            off.create_topic("t", 1, {"remote.storage.enable": "true"})
    finally:
        off.shutdown()
    manager = LogManager(tmp_path / "data", broker_config(str(tmp_path / "tier")))
    manager.startup(background=False)
    try:
        for configs, message in [
                ({"cleanup.policy": "compact"}, "unsupported for the compacted topics"),
                ({"retention.ms": "1000", "local.retention.ms": "2000"}, "must not be more than retention.ms"),
                ({"retention.bytes": "1000", "local.retention.bytes": "-1"}, "must not be -1"),
                ({"remote.copy.lag.ms": "5"}, "only 0 is accepted"),
                ({"remote.log.copy.disable": "true", "local.retention.ms": "5", "retention.ms": "10"},
                 "must be set to the identical value")]:
            with pytest.raises(InvalidConfigError, match=message):
                manager.create_topic("t", 1, {"remote.storage.enable": "true", **configs})
        manager.create_topic("t", 1, {"remote.storage.enable": "true", "segment.bytes": "20000"})
        with pytest.raises(InvalidConfigError, match="without deleting remote data"):
            manager.alter_topic_config("t", {"remote.storage.enable": "false"})
        plog = manager.get_log("t", 0)
        produce(plog, 40, random.Random(1))
        manager.remote_logs.run_once(manager.opened_logs(), BASE)
        assert plog.remote.segments
        manager.alter_topic_config("t", {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"})
        assert plog.remote is None and not (tmp_path / "tier" / "t-0").exists()
        assert plog.offset_for_timestamp(-5) is None
    finally:
        manager.shutdown()


def test_read_committed_uses_the_tiered_txnindex(tmp_path):
    """Aborted transactions in tiered segments are found in their remote `.txnindex` (what a read_committed
    fetch returns), and a read_committed reader of tiered offsets drops them."""
    manager = LogManager(tmp_path / "data", broker_config(str(tmp_path / "tier")))
    manager.startup(background=False)
    try:
        manager.create_topic("t", 1, {**TOPIC_CONFIGS, "segment.bytes": "8000"})
        plog = manager.get_log("t", 0)
        now = BASE
        pid_commit, pid_abort = 7001, 7002
        for i in range(40):
            for pid in (pid_commit, pid_abort):
                records = [SimpleRecord(now + i, None, f"{pid}:{i}:{j}".encode() * 4) for j in range(3)]
                plog.append(build_batch(records, producer_id=pid, producer_epoch=0, base_sequence=i * 3,
                                        is_transactional=True), now=now + i)
            plog.append_control(pid_commit, 0, True, 0, now=now + i)
            plog.append_control(pid_abort, 0, False, 0, now=now + i)
        plog.append(build_batch([SimpleRecord(now + 50, None, b"tail")]), now=now + 50)
        everything = [(r.offset, r.value) for r in plog.read_records(0, isolation="read_committed")]
        aborted = plog.aborted_transactions(0, plog.log_end_offset)
        tier_and_expire(manager, now + 100_000)
        assert plog.local_log_start_offset > 100
        assert any(n.endswith(".txnindex") for n in plog.remote.tier.list("t-0"))
        assert plog.aborted_transactions(0, plog.log_end_offset) == aborted
        assert [(r.offset, r.value) for r in plog.read_records(0, isolation="read_committed")] == everything
        assert all(v.startswith(f"{pid_commit}:".encode()) or v == b"tail" for _o, v in everything)
    finally:
        manager.shutdown()


def test_an_unreachable_tier_stops_neither_appends_nor_local_reads(tmp_path, monkeypatch):
    from chronolog.storage.remote.tier import LocalTier, TierError
    down = {"on": False}

    def failing(method):
        def call(self, *args, **kwargs):
            if down["on"]:
                raise TierError("tier unreachable (test)")
            return method(self, *args, **kwargs)
        return call

    for name in ("list", "read", "read_range", "put_file", "put_bytes", "delete"):
        monkeypatch.setattr(LocalTier, name, failing(getattr(LocalTier, name)))
    rng = random.Random(3)
    config = broker_config(str(tmp_path / "tier"))
    manager = LogManager(tmp_path / "data", config)
    manager.startup(background=False)
    try:
        manager.create_topic("logs", 1, TOPIC_CONFIGS)
        plog = manager.get_log("logs", 0)
        produced = produce(plog, 300, rng)
        tier_and_expire(manager, BASE + 400_000)
        tiered = plog.remote.highest_offset
        assert tiered > 0
        down["on"] = True
        produced += produce(plog, 300, rng, first_index=300)  # appends go on
        tier_and_expire(manager, BASE + 800_000)  # copies fail: nothing more is tiered, nothing local deleted
        assert plog.remote.highest_offset == tiered and plog.local_log_start_offset == tiered + 1
        local = [(r.offset, r.value) for r in plog.read_records(tiered + 1)]
        assert local == [(o, v) for o, _t, v in produced if o > tiered]
        assert plog.offset_for_timestamp(BASE + 500_000).offset == oracle(produced, BASE + 500_000)[0]
    finally:
        manager.shutdown()
    # a start while the tier is down: the partition serves its local segments, keeps its log start offset
    manager = LogManager(tmp_path / "data", config)
    manager.startup(background=False)
    try:
        plog = manager.get_log("logs", 0)
        assert plog.log_start_offset == 0 and plog.remote.pending_start == 0
        assert [r.offset for r in plog.read_records(tiered + 1)][:1] == [tiered + 1]
        with pytest.raises(TierError):  # tiered offsets: an error, not an empty answer
            plog.read(5, 1000)
        with pytest.raises(TierError):
            plog.offset_for_timestamp(BASE)
        down["on"] = False
        tier_and_expire(manager, BASE + 900_000)  # listed again, copies resume
        assert plog.remote.pending_start is None and plog.remote.highest_offset > tiered
        assert [(r.offset, r.value) for r in plog.read_records(0)] == [(o, v) for o, _t, v in produced]
    finally:
        manager.shutdown()


def test_tiered_segments_kept_open_are_bounded(tmp_path, monkeypatch):
    from chronolog.storage.remote import remote_log
    monkeypatch.setattr(remote_log, "MAX_OPEN_SEGMENTS", 4)
    MAX_OPEN_SEGMENTS = 4
    manager = LogManager(tmp_path / "data", broker_config(str(tmp_path / "tier")))
    manager.startup(background=False)
    try:
        manager.create_topic("t", 1, {**TOPIC_CONFIGS, "segment.bytes": "2000"})
        plog = manager.get_log("t", 0)
        for i in range(200):
            plog.append(build_batch([SimpleRecord(BASE + i, None, b"x" * 100)]), now=BASE + i)
        tier_and_expire(manager, BASE + 100_000)
        assert len(plog.remote.segments) > 3 * MAX_OPEN_SEGMENTS
        assert [r.offset for r in plog.read_records(0)] == list(range(200))  # opens every tiered segment
        for i in range(0, 150, 7):
            assert plog.offset_for_timestamp(BASE + i).offset == i
        view = plog.remote.view()
        assert sum(seg.__dict__.get("_pending", True) is None for seg in view.segments) <= MAX_OPEN_SEGMENTS + 1
    finally:
        manager.shutdown()


def test_local_and_whole_log_retention_by_bytes(tmp_path):
    """local.retention.bytes keeps about that much on local disk (copied segments only go); retention.bytes
    counts the tiered and the local-only bytes, deleting whole tiered segments oldest first."""
    rng = random.Random(11)
    manager = LogManager(tmp_path / "data", broker_config(str(tmp_path / "tier")))
    manager.startup(background=False)
    try:
        manager.create_topic("logs", 1, {"remote.storage.enable": "true", "segment.bytes": str(200_000),
                                         "local.retention.bytes": str(450_000), "retention.bytes": str(1_500_000),
                                         "retention.ms": "-1"})
        plog = manager.get_log("logs", 0)
        produced = produce(plog, 300, rng)  # about 2.3 MB: 12 segments of 200 KB
        now = BASE + 400_000
        tier_and_expire(manager, now)
        remote = plog.remote
        assert plog.size <= 450_000 + 200_000  # the rule stops at the first segment that must stay
        assert remote.highest_offset + 1 >= plog.local_log_start_offset  # nothing local went uncopied
        local_only = sum(s.size for s in plog.segments if s.base_offset > remote.highest_offset)
        # Kafka's rule: a segment goes only while the breach still covers it, so what stays is above
        # retention.bytes by less than the oldest segment (none went that was not needed)
        assert 1_500_000 <= remote.size + local_only < 1_500_000 + remote.segments[0].size
        start = plog.log_start_offset
        assert start == remote.segments[0].base_offset > 0
        assert [(r.offset, r.value) for r in plog.read_records(0)] == [(o, v) for o, _t, v in produced if o >= start]
    finally:
        manager.shutdown()


def test_a_start_without_the_tier_refuses_tiered_topics(tmp_path):
    from chronolog.errors import ChronologError
    manager = LogManager(tmp_path / "data", broker_config(str(tmp_path / "tier")))
    manager.startup(background=False)
    manager.create_topic("logs", 1, {"remote.storage.enable": "true"})
    manager.shutdown()
    with pytest.raises(ChronologError, match="before disabling tiered storage cluster-wide.*logs"):
        LogManager(tmp_path / "data", BrokerConfig()).startup(background=False)


def test_remote_indexes_are_kept_on_local_disk_bounded(tmp_path):
    """Kafka's RemoteIndexCache: the indexes fetched for a lookup are kept in `<data dir>/remote-log-index-
    cache`, so after a restart a lookup by time into a tiered segment reads only its `.log` range from the
    tier; a copy left short is fetched again; the directory stays within the cache's bytes."""
    from chronolog.storage.remote.reading import INDEX_CACHE_DIR
    data, tier_dir = tmp_path / "data", str(tmp_path / "tier")
    manager = LogManager(data, broker_config(tier_dir))
    manager.startup(background=False)
    try:
        manager.create_topic("logs", 1, TOPIC_CONFIGS)
        produced = produce(manager.get_log("logs", 0), 600, random.Random(4))
        tier_and_expire(manager, BASE + 700_000)
        segments = manager.get_log("logs", 0).remote.segments
        targets = [oracle(produced, BASE + (m.base_offset // 50) * 1000 + 500)[1] for m in segments[:3]]
        for target in targets:
            assert manager.get_log("logs", 0).offset_for_timestamp(target).offset == oracle(produced, target)[0]
    finally:
        manager.shutdown()
    cache = data / INDEX_CACHE_DIR
    kept = sorted(p.name for p in cache.iterdir())
    for meta in segments[:3]:
        name = f"logs-0@{meta.base_offset:020d}"
        assert {f"{name}.index@{meta.segment_id}", f"{name}.timeindex@{meta.segment_id}"} <= set(kept), kept
    # a copy a crash left short, and one being written, are not used
    short = cache / f"logs-0@{segments[1].base_offset:020d}.timeindex@{segments[1].segment_id}"
    short.write_bytes(short.read_bytes()[:-12])
    (cache / "logs-0@x.index@y.1.tmp").write_bytes(b"cut")

    manager = LogManager(data, broker_config(tier_dir))
    manager.startup(background=False)
    try:
        plog = manager.get_log("logs", 0)
        tier = manager.remote_logs.tier
        assert not list(cache.glob("*.tmp"))
        for i, (meta, target) in enumerate(zip(segments, targets, strict=False)):
            tier.reset_counters()
            assert plog.offset_for_timestamp(target).offset == oracle(produced, target)[0]
            name = f"{meta.base_offset:020d}"
            want = {f"{name}.log": 1} if i != 1 else {f"{name}.log": 1, f"{name}.timeindex": 1}
            assert dict(tier.reads) == want
        assert short.stat().st_size == segments[1].files[f"{segments[1].base_offset:020d}.timeindex"]
    finally:
        manager.shutdown()
    # bounded: a cache of 4 KB keeps at most that much on disk
    manager = LogManager(data, broker_config(tier_dir, **{"remote.log.index.file.cache.total.size.bytes": "4096"}))
    manager.startup(background=False)
    try:
        plog = manager.get_log("logs", 0)
        assert [r.offset for r in plog.read_records(0)] == [o for o, _t, _v in produced]  # opens every segment
        sizes = [p.stat().st_size for p in cache.iterdir()]
        assert sum(sizes) <= 4096 or len(sizes) == 1
    finally:
        manager.shutdown()
