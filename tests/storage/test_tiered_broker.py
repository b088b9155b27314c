"""Tiered storage through the broker (the issue's acceptance at a test's scale): a topic with
remote.storage.enable, 1 MB segments and local.retention.ms of a second, a few MB of late-CreateTime records
produced by librdkafka; the broker's own task tiers them; local disk keeps only recent segments; a consumer
reads every record exactly; offsets_for_times is exact; a lookup by time into a tiered segment costs the
tier two indexes and one byte range; the Arrow reader on the broker and on the tier's directory (no
broker) agree; ListOffsets -4/-5 at v9."""

from __future__ import annotations

import random
import time
from types import SimpleNamespace

import pytest

from chronolog.errors import ErrorCode
from chronolog.protocol.core import list_offsets
from chronolog.protocol.registry import BrokerState, RequestContext
from chronolog.storage.remote.metadata import METADATA_SUFFIX
from chronolog.storage.remote.reading import RANGE_BYTES
from chronolog.testing import broker

ck = pytest.importorskip("confluent_kafka")
pytestmark = pytest.mark.slow


def wait_for(predicate, what: str, bound: float = 90.0) -> None:
    deadline = time.monotonic() + bound
    while not predicate():
        assert time.monotonic() < deadline, f"not {what} within {bound} s"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def tiered(tmp_path_factory):
    """The broker and its topic, produced and tiered: (broker, tier dir, produced [(offset, ts, value)])."""
    base = tmp_path_factory.mktemp("tiered")
    tier = base / "tier"
    configs = {"remote.log.storage.system.enable": "true", "remote.log.storage.dir": str(tier),
               "remote.log.manager.task.interval.ms": "200", "log.retention.check.interval.ms": "200"}
    with broker(base / "data", configs=configs) as b:
        b.create_topic("logs", 1, {"remote.storage.enable": "true", "segment.bytes": str(1 << 20),
                                   "local.retention.ms": "1000", "retention.ms": "-1"})
        rng = random.Random(5)
        producer = ck.Producer({**b.client_config(), "linger.ms": 5, "batch.size": 65536})
        produced: dict[int, tuple[int, bytes]] = {}
        now = int(time.time() * 1000)

        def delivered(err, msg):
            assert err is None, err
            produced[msg.offset()] = (msg.timestamp()[1], msg.value())

        for i in range(20_000):  # about 4.4 MB: late CreateTime, up to 10 minutes back
            value = f"{i}:".encode() + rng.randbytes(180)
            producer.produce("logs", value, timestamp=now - 600_000 + i * 20 - rng.randrange(60_000),
                             on_delivery=delivered)
            producer.poll(0)
        assert producer.flush(30) == 0
        data = b.data_dir / "logs-0"

        def tiered_enough() -> bool:
            tiered_records = list((tier / "logs-0").glob(f"*{METADATA_SUFFIX}"))
            return len(tiered_records) >= 3 and len(list(data.glob("*.log"))) <= 2
        wait_for(tiered_enough, "tiered")
        yield b, tier, sorted((o, t, v) for o, (t, v) in produced.items())


def oracle(produced, target: int):
    return min(((o, t) for o, t, _v in produced if t >= target), default=None)


def test_consumer_reads_every_record_from_the_tier_and_the_disk(tiered):
    b, _tier, produced = tiered
    manager = b._manager()
    plog = manager.get_log("logs", 0)
    assert plog.log_start_offset == 0 < plog.local_log_start_offset
    consumer = ck.Consumer({**b.client_config(), "group.id": "g", "auto.offset.reset": "earliest",
                            "enable.auto.commit": False})
    consumer.assign([ck.TopicPartition("logs", 0, 0)])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < len(produced) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append((msg.offset(), msg.timestamp()[1], msg.value()))
    assert got == produced
    # offsets_for_times, exact over late data, tiered and local
    rng = random.Random(9)
    lo, hi = produced[0][1] - 1000, max(t for _o, t, _v in produced)
    targets = [lo, *sorted(rng.randrange(lo, hi) for _ in range(25))]
    for target in targets:  # one partition per request (a partition asked twice is refused)
        [answer] = consumer.offsets_for_times([ck.TopicPartition("logs", 0, target)], timeout=10)
        assert answer.offset == oracle(produced, target)[0], target
    # a cold lookup into a tiered segment: two indexes and one bounded range of its .log
    remote = plog.remote
    tier = remote.tier
    for n in range(3):  # targets answered in tiered segments
        target = produced[remote.segments[1].base_offset + 100 * n][1]
        want = oracle(produced, target)[0]
        meta = next(m for m in remote.segments if m.base_offset <= want <= m.end_offset)
        for cache in (remote.caches.indexes, remote.caches.ranges):
            cache.forget(tier, "")
        remote._changed()
        tier.reset_counters()
        [answer] = consumer.offsets_for_times([ck.TopicPartition("logs", 0, target)], timeout=10)
        assert answer.offset == want
        name = f"{meta.base_offset:020d}"
        assert dict(tier.reads) == {f"{name}.log": 1, f"{name}.index": 1, f"{name}.timeindex": 1}
        assert tier.bytes_read[f"{name}.log"] <= RANGE_BYTES
    consumer.close()


def test_list_offsets_specials_at_v9(tiered):
    b, _tier, produced = tiered
    manager = b._manager()
    plog = manager.get_log("logs", 0)

    def ask(version: int, timestamp: int) -> dict:
        ctx = RequestContext(BrokerState(manager, manager.broker_config, "127.0.0.1", 0), 2, version, 1, "c", "h")
        req = SimpleNamespace(topics=[SimpleNamespace(name="logs", partitions=[
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
    b, tier, produced = tiered
    src = open_data_dir(tier)
    try:
        start, end = src.watermarks("logs", 0)
        assert start == 0 and end > 0
        offline = [(r.offset, r.timestamp, r.value) for r in src.read("logs", 0, 0, end)]
        assert offline == [p for p in produced if p[0] < end]
    finally:
        src.close()
    window_end = min(t for o, t, _v in produced if o == end - 1)
    lo = produced[0][1] + 30_000
    cols = ["offset", "timestamp", "value"]
    from_tier = read_window(str(tier), "logs", lo, window_end, columns=cols).read_all().sort_by("offset")
    from_broker = read_window(b.bootstrap, "logs", lo, window_end, columns=cols).read_all().sort_by("offset")
    assert from_tier.num_rows > 1000
    assert from_tier.to_pylist() == from_broker.to_pylist()


def test_consume_from_to_agrees_on_the_broker_and_on_the_tier(tiered):
    from tests.clirun import chronolog
    b, tier, produced = tiered
    end = b._manager().get_log("logs", 0).remote.highest_offset + 1
    lo = produced[0][1] + 60_000
    hi = lo + 120_000
    common = ["consume", "logs", "--from", str(lo), "--to", str(hi), "--format", "json"]
    on_tier = chronolog(*common, "--data-dir", str(tier))
    on_broker = chronolog(*common, "-b", b.bootstrap)
    assert on_tier.rc == on_broker.rc == 0, (on_tier.err, on_broker.err)
    want = [o for o, t, _v in produced if lo <= t < hi and o < end]
    assert len(want) > 100 and max(want) < end - 1000  # a window wholly in tiered segments
    assert on_tier.out == on_broker.out
    assert len(on_tier.out.splitlines()) == len(want)


def test_sql_agrees_on_the_broker_and_on_the_tier(tiered):
    pytest.importorskip("duckdb")
    from tests.clirun import chronolog
    b, tier, produced = tiered
    end = b._manager().get_log("logs", 0).remote.highest_offset + 1
    lo = produced[0][1] + 60_000
    hi = lo + 120_000
    query = 'SELECT count(*) AS n, min("offset") AS first, max("offset") AS last, sum(octet_length(value)) AS bytes FROM logs'
    common = ["sql", query, "-t", "logs", "--from", str(lo), "--to", str(hi), "--format", "csv"]
    on_tier = chronolog(*common, "--data-dir", str(tier))
    on_broker = chronolog(*common, "-b", b.bootstrap)
    assert on_tier.rc == on_broker.rc == 0, (on_tier.err, on_broker.err)
    want = [(o, v) for o, t, v in produced if lo <= t < hi and o < end]
    assert on_tier.out == on_broker.out
    assert on_tier.out.splitlines()[1] == f"{len(want)},{want[0][0]},{want[-1][0]},{sum(len(v) for _o, v in want)}"


def test_a_stalled_tier_holds_up_neither_produce_nor_local_reads(tiered):
    """While the tier does not answer, a ListOffsets by time into a tiered segment waits in a thread; a
    produce and a read of local offsets are answered meanwhile."""
    import threading

    from tests.differential.admin_wire import request
    b, _tier, produced = tiered
    plog = b._manager().get_log("logs", 0)
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
    assert answers[0]["topics"][0]["partitions"][0]["offset"] == oracle(produced, target)[0]
