"""Tiered storage through the broker, the issue's acceptance scenario: a topic with remote.storage.enable,
1 MB segments and local.retention.ms of a few seconds; late-CreateTime records produced by librdkafka,
`SCENARIO_MB` of them (a few MB in `make test`, the issue's 100 MB in `make test-long`: tests/scale.py);
the broker's own task tiers them; local disk keeps only the active and recent segments; a consumer reads
every record exactly; offsets_for_times is exact; a lookup by time into a tiered segment costs the tier
two indexes and one byte range; the Arrow reader, `consume --from --to` and `sql` on the broker and on the
tier's directory (no broker) agree; ListOffsets -4/-5 at v9. tests/spark/test_tiered_source.py runs the
Spark source over the same scenario."""

from __future__ import annotations

import bisect
import contextlib
import random
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from chronolog.errors import ErrorCode
from chronolog.protocol.core import list_offsets
from chronolog.protocol.registry import BrokerState, RequestContext
from chronolog.storage.remote.metadata import METADATA_SUFFIX
from chronolog.storage.remote.reading import RANGE_BYTES
from chronolog.testing import broker
from tests.scale import scaled

ck = pytest.importorskip("confluent_kafka")
pytestmark = pytest.mark.slow

# ci: 4 MB, four tiered segments at least (what the cold lookup and the windows below need); long: 100 MB.
SCENARIO_MB = scaled(4, 100)
RECORD_BYTES = 197  # on disk, measured: a 180-byte random value, its "i:" prefix, the record and batch fields
STEP_MS = 20  # CreateTime advances by this per record, minus up to LATE_MS of lateness
LATE_MS = 60_000


def wait_for(predicate, what: str, bound: float = 90.0) -> None:
    deadline = time.monotonic() + bound
    while not predicate():
        assert time.monotonic() < deadline, f"not {what} within {bound} s"
        time.sleep(0.05)


class Scenario(SimpleNamespace):
    """The broker (`b`), its tier's directory (`tier`), what was produced (`produced`: [(offset, timestamp,
    value)] by offset) and the running maximum of its timestamps (`running_max`, for `oracle`)."""

    def oracle(self, target: int) -> int | None:
        """The smallest offset holding a timestamp >= target (what ListOffsets by time must answer)."""
        i = bisect.bisect_left(self.running_max, target)
        return i if i < len(self.running_max) else None


@contextlib.contextmanager
def tiered_scenario(base: Path, megabytes: int = SCENARIO_MB, topic: str = "logs") -> Iterator[Scenario]:
    """A broker with one tiered topic, `megabytes` produced and tiered until at most two local segments
    are left (the active one and the newest closed one)."""
    tier = base / "tier"
    configs = {"remote.log.storage.system.enable": "true", "remote.log.storage.dir": str(tier),
               "remote.log.manager.task.interval.ms": "200", "log.retention.check.interval.ms": "200"}
    with broker(base / "data", configs=configs) as b:
        b.create_topic(topic, 1, {"remote.storage.enable": "true", "segment.bytes": str(1 << 20),
                                  "local.retention.ms": "3000", "retention.ms": "-1"})
        rng = random.Random(5)
        producer = ck.Producer({**b.client_config(), "linger.ms": 5, "batch.size": 65536})
        produced: dict[int, tuple[int, bytes]] = {}
        count = megabytes * (1 << 20) // RECORD_BYTES
        first = int(time.time() * 1000) - count * STEP_MS - LATE_MS  # all of it late: older than a minute

        def delivered(err, msg):
            assert err is None, err
            produced[msg.offset()] = (msg.timestamp()[1], msg.value())

        for i in range(count):
            value = f"{i}:".encode() + rng.randbytes(180)
            while True:
                try:
                    producer.produce(topic, value, timestamp=first + i * STEP_MS - rng.randrange(LATE_MS),
                                     on_delivery=delivered)
                    break
                except BufferError:  # librdkafka's queue is full: let deliveries drain it
                    producer.poll(0.1)
            producer.poll(0)
        assert producer.flush(scaled(30, 300)) == 0
        data = b.data_dir / f"{topic}-0"

        def tiered_enough() -> bool:
            tiered_records = list((tier / f"{topic}-0").glob(f"*{METADATA_SUFFIX}"))
            return len(tiered_records) >= 3 and len(list(data.glob("*.log"))) <= 2
        wait_for(tiered_enough, "tiered", bound=scaled(90, 600))
        rows = sorted((o, t, v) for o, (t, v) in produced.items())
        assert [o for o, _t, _v in rows] == list(range(len(rows)))
        running, top = [], -1
        for _o, t, _v in rows:
            top = max(top, t)
            running.append(top)
        yield Scenario(b=b, tier=tier, topic=topic, produced=rows, running_max=running, data=data)


@pytest.fixture(scope="module")
def tiered(tmp_path_factory):
    with tiered_scenario(tmp_path_factory.mktemp("tiered")) as scenario:
        yield scenario


def test_local_disk_holds_only_the_recent_segments(tiered):
    plog = tiered.b._manager().get_log(tiered.topic, 0)
    local = sorted(tiered.data.glob("*.log"))
    assert len(local) <= 3 and sum(p.stat().st_size for p in local) <= 3 << 20
    total = plog.remote.size + plog.size
    assert total >= SCENARIO_MB * 1_000_000, total  # what was produced is all there, tiered or local
    assert plog.remote.highest_offset + 1 >= plog.local_log_start_offset > 0 == plog.log_start_offset


def test_consumer_reads_every_record_from_the_tier_and_the_disk(tiered):
    produced = tiered.produced
    plog = tiered.b._manager().get_log(tiered.topic, 0)
    consumer = ck.Consumer({**tiered.b.client_config(), "group.id": "g", "auto.offset.reset": "earliest",
                            "enable.auto.commit": False})
    consumer.assign([ck.TopicPartition(tiered.topic, 0, 0)])
    got = []
    deadline = time.monotonic() + scaled(60, 600)
    while len(got) < len(produced) and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 0.5):
            if msg.error() is None:
                got.append((msg.offset(), msg.timestamp()[1], msg.value()))
    assert got == produced
    # offsets_for_times, exact over late data, tiered and local
    rng = random.Random(9)
    lo, hi = produced[0][1] - 1000, tiered.running_max[-1]
    targets = [lo, *sorted(rng.randrange(lo, hi) for _ in range(scaled(25, 100)))]
    for target in targets:  # one partition per request (a partition asked twice is refused)
        [answer] = consumer.offsets_for_times([ck.TopicPartition(tiered.topic, 0, target)], timeout=10)
        assert answer.offset == tiered.oracle(target), target
    # a cold lookup into a tiered segment: two indexes and one bounded range of its .log
    remote = plog.remote
    tier = remote.tier
    middle = len(remote.segments) // 2
    for n in range(3):  # targets answered in tiered segments, early and in the middle of the tier
        seg = remote.segments[1 if n < 2 else middle]
        target = produced[seg.base_offset + 100 + 300 * n][1]
        want = tiered.oracle(target)
        meta = next(m for m in remote.segments if m.base_offset <= want <= m.end_offset)
        for cache in (remote.caches.indexes, remote.caches.ranges):
            cache.forget(tier, "")
        remote._changed()
        tier.reset_counters()
        [answer] = consumer.offsets_for_times([ck.TopicPartition(tiered.topic, 0, target)], timeout=10)
        assert answer.offset == want
        name = f"{meta.base_offset:020d}"
        assert dict(tier.reads) == {f"{name}.log": 1, f"{name}.index": 1, f"{name}.timeindex": 1}
        assert tier.bytes_read[f"{name}.log"] <= RANGE_BYTES
    consumer.close()


def test_list_offsets_specials_at_v9(tiered):
    manager = tiered.b._manager()
    plog = manager.get_log(tiered.topic, 0)

    def ask(version: int, timestamp: int) -> dict:
        ctx = RequestContext(BrokerState(manager, manager.broker_config, "127.0.0.1", 0), 2, version, 1, "c", "h")
        req = SimpleNamespace(topics=[SimpleNamespace(name=tiered.topic, partitions=[
            SimpleNamespace(partition_index=0, timestamp=timestamp)])])
        return list_offsets(req, ctx)["topics"][0]["partitions"][0]

    earliest_local, latest_tiered = ask(9, -4), ask(9, -5)
    assert (earliest_local["offset"], earliest_local["timestamp"]) == (plog.local_log_start_offset, -1)
    assert (latest_tiered["offset"], latest_tiered["timestamp"]) == (plog.remote.highest_offset, -1)
    assert latest_tiered["offset"] >= earliest_local["offset"] - 1 > 0
    assert ask(8, -5)["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    assert ask(9, -2)["offset"] == 0


def test_the_tier_reads_alone_as_a_data_dir(tiered):
    pytest.importorskip("pyarrow")
    from chronolog.arrow import read_window
    from chronolog.timetravel.opener import open_data_dir
    produced, tier = tiered.produced, tiered.tier
    src = open_data_dir(tier)
    try:
        start, end = src.watermarks(tiered.topic, 0)
        assert start == 0 and end > 0
        offline = [(r.offset, r.timestamp, r.value) for r in src.read(tiered.topic, 0, 0, end)]
        assert offline == produced[:end]
    finally:
        src.close()
    window_end = produced[end - 1][1]
    lo = max(produced[0][1] + 30_000, window_end - 600_000)  # the tier's last ten minutes at most
    cols = ["offset", "timestamp", "value"]
    from_tier = read_window(str(tier), tiered.topic, lo, window_end, columns=cols).read_all().sort_by("offset")
    from_broker = read_window(tiered.b.bootstrap, tiered.topic, lo, window_end, columns=cols).read_all()
    assert from_tier.num_rows > 1000
    assert from_tier.to_pylist() == from_broker.sort_by("offset").to_pylist()


def _tiered_window(tiered) -> tuple[int, int, int]:
    """(from, to, tier end): two minutes of CreateTime wholly inside the tiered segments."""
    end = tiered.b._manager().get_log(tiered.topic, 0).remote.highest_offset + 1
    lo = tiered.produced[0][1] + LATE_MS
    return lo, lo + 120_000, end


def test_consume_from_to_agrees_on_the_broker_and_on_the_tier(tiered):
    from tests.clirun import chronolog
    produced, tier = tiered.produced, tiered.tier
    lo, hi, end = _tiered_window(tiered)
    common = ["consume", tiered.topic, "--from", str(lo), "--to", str(hi), "--format", "json"]
    on_tier = chronolog(*common, "--data-dir", str(tier))
    on_broker = chronolog(*common, "-b", tiered.b.bootstrap)
    assert on_tier.rc == on_broker.rc == 0, (on_tier.err, on_broker.err)
    want = [o for o, t, _v in produced if lo <= t < hi and o < end]
    assert len(want) > 100 and max(want) < end - 1000  # a window wholly in tiered segments
    assert on_tier.out == on_broker.out
    assert len(on_tier.out.splitlines()) == len(want)


def test_sql_agrees_on_the_broker_and_on_the_tier(tiered):
    pytest.importorskip("duckdb")
    from tests.clirun import chronolog
    produced, tier = tiered.produced, tiered.tier
    lo, hi, end = _tiered_window(tiered)
    query = ('SELECT count(*) AS n, min("offset") AS first, max("offset") AS last, '
             'sum(octet_length(value)) AS bytes FROM logs')
    common = ["sql", query, "-t", tiered.topic, "--from", str(lo), "--to", str(hi), "--format", "csv"]
    on_tier = chronolog(*common, "--data-dir", str(tier))
    on_broker = chronolog(*common, "-b", tiered.b.bootstrap)
    assert on_tier.rc == on_broker.rc == 0, (on_tier.err, on_broker.err)
    want = [(o, v) for o, t, v in produced if lo <= t < hi and o < end]
    assert on_tier.out == on_broker.out
    assert on_tier.out.splitlines()[1] == f"{len(want)},{want[0][0]},{want[-1][0]},{sum(len(v) for _o, v in want)}"


def test_a_stalled_tier_holds_up_neither_produce_nor_local_reads(tiered):
    """While the tier does not answer, a ListOffsets by time into a tiered segment waits in a thread; a
    produce and a read of local offsets are answered meanwhile."""
    import threading

    from tests.differential.admin_wire import request
    b, produced = tiered.b, tiered.produced
    plog = b._manager().get_log(tiered.topic, 0)
    remote = plog.remote
    tier = remote.tier
    for cache in (remote.caches.indexes, remote.caches.ranges):
        cache.forget(tier, "")
    remote._changed()
    release, entered = threading.Event(), threading.Event()
    original = type(tier).read

    def stalled(self, path):
        entered.set()
        assert release.wait(60)
        return original(self, path)

    target = produced[remote.segments[1].base_offset][1]
    answers = []
    tier.read = stalled.__get__(tier)
    try:
        asking = threading.Thread(target=lambda: answers.append(request(b.port, 2, 9, {
            "replica_id": -1, "isolation_level": 0, "topics": [{"name": "logs", "partitions": [
                {"partition_index": 0, "timestamp": target, "current_leader_epoch": -1}]}]})))
        asking.start()
        assert entered.wait(30)  # the lookup is inside the tier now
        producer = ck.Producer(b.client_config())
        producer.produce("logs", b"while the tier stalls")
        assert producer.flush(30) == 0
        latest = request(b.port, 2, 9, {"replica_id": -1, "isolation_level": 0, "topics": [{"name": "logs",
                         "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]})
        assert latest["topics"][0]["partitions"][0]["offset"] == len(produced) + 1
        assert not answers  # still waiting for the tier
    finally:
        release.set()
        del tier.read
    asking.join(30)
    assert answers[0]["topics"][0]["partitions"][0]["offset"] == tiered.oracle(target)
