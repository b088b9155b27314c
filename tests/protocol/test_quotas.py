"""Client quota entities, precedence and rates, sans I/O apart from the quota file."""

from __future__ import annotations

import json

import pytest

from chronolog.errors import ChronologError
from chronolog.security.quotas import (
    CLIENT_ID,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
    Applied,
    QuotaError,
    QuotaStore,
    entity,
)
from chronolog.server.quotas import Rate, TokenBucket


def _set(store: QuotaStore, user=..., client=..., **values) -> None:
    pairs = ([] if user is ... else [(USER, user)]) + ([] if client is ... else [(CLIENT_ID, client)])
    store.alter([(entity(pairs), values)])


def test_precedence_as_client_quota_manager_test(tmp_path):
    """ClientQuotaManagerTest.testQuotaConfigPrecedence's table: the most specific level that sets the key
    wins, and the level says who shares the quota (user, client id, or the pair)."""
    store = QuotaStore(tmp_path)
    _set(store, user=None, producer_byte_rate=1000)                 # /users/<default>
    _set(store, client=None, producer_byte_rate=2000)               # /clients/<default>
    _set(store, user=None, client=None, producer_byte_rate=3000)    # /users/<default>/clients/<default>
    _set(store, user="userA", producer_byte_rate=4000)              # /users/userA
    _set(store, user="userA", client="client1", producer_byte_rate=5000)
    _set(store, user="userB", client=None, producer_byte_rate=6000)  # /users/userB/clients/<default>
    _set(store, user="userB", client="client1", producer_byte_rate=7000)
    _set(store, user=None, client="client1", producer_byte_rate=8000)  # /users/<default>/clients/client1
    _set(store, client="client1", producer_byte_rate=9000)           # /clients/client1
    _set(store, user=None, client="client2", producer_byte_rate=8500)  # /users/<default>/clients/client2
    resolve = store.resolve
    assert resolve("userA", "client1", PRODUCER_BYTE_RATE) == Applied(5000, "userA", "client1")
    assert resolve("userA", "client2", PRODUCER_BYTE_RATE) == Applied(4000, "userA", "")  # shared by userA
    assert resolve("userB", "client1", PRODUCER_BYTE_RATE) == Applied(7000, "userB", "client1")
    assert resolve("userB", "client2", PRODUCER_BYTE_RATE) == Applied(6000, "userB", "client2")
    assert resolve("userC", "client1", PRODUCER_BYTE_RATE) == Applied(8000, "userC", "client1")
    assert resolve("userC", "client2", PRODUCER_BYTE_RATE) == Applied(8500, "userC", "client2")
    assert resolve("userC", "client3", PRODUCER_BYTE_RATE) == Applied(3000, "userC", "client3")
    assert resolve("userA", "client2", PRODUCER_BYTE_RATE) == Applied(4000, "userA", "")  # the user level first
    # Without the default-user levels the client-id ones apply, shared per client id across users.
    store.alter([(entity([(USER, None)]), {PRODUCER_BYTE_RATE: None}),
                 (entity([(USER, None), (CLIENT_ID, None)]), {PRODUCER_BYTE_RATE: None}),
                 (entity([(USER, None), (CLIENT_ID, "client1")]), {PRODUCER_BYTE_RATE: None}),
                 (entity([(USER, None), (CLIENT_ID, "client2")]), {PRODUCER_BYTE_RATE: None})])
    assert resolve("userC", "client1", PRODUCER_BYTE_RATE) == Applied(9000, "", "client1")
    assert resolve("userC", "client2", PRODUCER_BYTE_RATE) == Applied(2000, "", "client2")
    # Each key is resolved on its own: a level without the key does not hide a broader one that has it.
    _set(store, client="client1", request_percentage=25)
    assert resolve("userA", "client1", REQUEST_PERCENTAGE) == Applied(25, "", "client1")
    assert resolve("userA", "other", REQUEST_PERCENTAGE) is None


def test_values_and_entities_are_validated_and_stored_atomically(tmp_path):
    store = QuotaStore(tmp_path)
    with pytest.raises(QuotaError, match="whole number"):
        _set(store, user="a", producer_byte_rate=1.5)
    with pytest.raises(QuotaError, match="unknown quota key"):
        _set(store, user="a", producer_byte_rte=1)
    with pytest.raises(QuotaError, match="positive"):
        _set(store, user="a", request_percentage=0)
    with pytest.raises(QuotaError, match="ip quotas"):
        entity([("ip", "10.0.0.1")])
    with pytest.raises(QuotaError, match="duplicate"):
        entity([(USER, "a"), (USER, "b")])
    assert not (tmp_path / "chronolog-quotas.json").exists()  # nothing half-written
    _set(store, user="a", request_percentage=12.5)
    data = json.loads((tmp_path / "chronolog-quotas.json").read_text())
    assert data == {"version": 1, "quotas": [{"entity": {"user": "a"}, "values": {"request_percentage": 12.5}}]}
    assert (tmp_path / "chronolog-quotas.json").stat().st_mode & 0o777 == 0o600
    _set(store, user="a", request_percentage=None)  # the last value removed: the entity goes
    assert QuotaStore(tmp_path).all() == {}
    (tmp_path / "chronolog-quotas.json").write_text("{not json")
    with pytest.raises(ChronologError, match="cannot read"):
        QuotaStore(tmp_path).all()


def test_rate_and_throttle_time_as_kafka_computes_them():
    """Rate over 11 one-second samples: a young measurement counts 10 full windows, and the throttle time is
    (rate - quota) / quota * window (QuotaUtils.throttleTime)."""
    rate = Rate(11, 1000.0)
    rate.record(10_000, 0.0)
    assert rate.per_second(0.0) == pytest.approx(1000.0)  # 10 000 bytes over the padded 10 s
    assert rate.throttle_ms(1000.0, 0.0) == 0
    rate.record(10_000, 500.0)
    assert rate.window_size_ms(500.0) == pytest.approx(10_500.0)
    assert rate.per_second(500.0) == pytest.approx(20_000 / 10.5)
    assert rate.throttle_ms(1000.0, 500.0) == round((20_000 / 10.5 - 1000) / 1000 * 10_500)
    # Samples older than 11 windows are forgotten.
    assert rate.per_second(20_000.0) == 0.0


def test_rate_is_consistent_after_the_first_window():
    """Kafka's RateTest.testRateIsConsistentAfterTheFirstWindow (apache/kafka#15889): an event every 100 ms
    over 2 one-second samples measures 10-11 a second from the second window on; a sample that started
    before the monitored span but overlaps it still counts (purging by start time measured spikes)."""
    rate = Rate(2, 1000.0)
    steps = [0, 99, 100, 100, 100, 100, 100, 100, 100, 100, 100]
    now = 0.0
    for step in steps:
        now += step
        rate.record(1, now)
    now += 101
    for step in steps:
        now += step
        rate.record(1, now)
        assert 10 <= rate.per_second(now) <= 11
        assert rate.per_second(now) == rate.per_second(now)


def test_token_bucket_lets_a_burst_through_then_throttles():
    """KIP-599: burst = rate * samples * window; below zero the throttle time is the time to refill."""
    bucket = TokenBucket(11, 1000.0)
    assert bucket.record(22, 2.0, 0.0) == 0  # the whole burst (2/s * 11 s)
    assert bucket.record(4, 2.0, 0.0) == 2000  # 4 tokens short at 2/s
    assert bucket.record(0, 2.0, 2000.0) == 0  # refilled


def test_an_unthrottled_connection_keeps_the_planned_fetch(tmp_path, monkeypatch):
    """With a quota for another client id only, a consumer reading on is answered from its fetch plan
    (server.quotas.fetch_free); once a consumer_byte_rate for its client id is written mid-connection, its
    next Fetch goes through the full path, is recorded and, over the quota, throttled (throttle_time_ms)."""
    import asyncio
    import socket
    import struct

    from chronolog.records import SimpleRecord, build_batch
    from chronolog.server.broker import Broker
    from tests.brokerproc import TEST_CONFIGS
    from tests.frames import recv_frame
    from tests.protocol.test_fetch_plan import NOW, _frame, count_planned

    data = tmp_path / "data"
    store = QuotaStore(data)
    _set(store, client="other", producer_byte_rate=1000)
    loop = asyncio.new_event_loop()
    b = Broker(data, "127.0.0.1", 0, {**TEST_CONFIGS})
    loop.run_until_complete(b.start())
    try:
        b.state.log_manager.create_topic("t", 1, {"message.timestamp.after.max.ms": str(2**62)})
        plog = b.state.log_manager.get_log("t", 0)
        for i in range(80):  # batches of 20 records of 1 KB
            plog.append(build_batch([SimpleRecord(NOW + i, None, b"v" * 1000) for _ in range(20)]))
        planned = count_planned(monkeypatch)
        frames = [_frame(11, fetch_offset=o, partition_max_bytes=16384, correlation_id=k)
                  for k, o in enumerate(range(0, 80 * 20, 20))]

        def talk() -> tuple[int, int, list[int]]:
            throttles = []
            with socket.create_connection(("127.0.0.1", b.listeners[0].port), timeout=10) as sock:
                def ask(frame: bytes) -> int:
                    sock.sendall(struct.pack(">i", len(frame)) + frame)
                    return struct.unpack_from(">i", recv_frame(sock), 4)[0]  # after the correlation id
                for frame in frames[:30]:
                    assert ask(frame) == 0
                before = len(planned)
                _set(store, client="rdkafka", consumer_byte_rate=50_000)  # 500 KB over the padded 10 s
                for frame in frames[30:]:
                    throttles.append(ask(frame))
                    if throttles[-1]:
                        break
            return before, len(planned), throttles

        before, after, throttles = loop.run_until_complete(loop.run_in_executor(None, talk))
    finally:
        loop.run_until_complete(b.stop())
        loop.close()
    assert sum(planned[:before]) >= 25, planned  # the first Fetch builds the plan, the rest use it
    assert after == before, planned[before:]  # never planned once a Fetch quota applies
    assert throttles and throttles[-1] > 0, throttles
