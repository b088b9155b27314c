"""Each programmable fault, seen by real clients (librdkafka through confluent-kafka, aiokafka,
kafka-python): the client's own retries, rebalances, metrics and errors, over the real protocol."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from tests.testing.conftest import LogLines, Stats, read_all
from tests.waiting import poll_until

pytestmark = pytest.mark.compat

N = 50


def produce_idempotent(bootstrap: str, topic: str, partitions: int, n: int = N, **extra) -> list:
    """librdkafka's idempotent producer; the delivery reports."""
    reports = []
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         "retry.backoff.ms": 20, **extra})
    for i in range(n):
        producer.produce(topic, f"v{i}".encode(), key=str(i).encode(), partition=i % partitions,
                         on_delivery=lambda err, msg: reports.append(err))
    assert producer.flush(60) == 0
    return reports


def assert_once(test_broker, topic: str, partitions: int, n: int = N) -> None:
    assert sum(test_broker.end_offsets(topic)) == n, "a record was written twice or lost"
    values = sorted(m.value().decode() for m in read_all(test_broker.bootstrap, topic, partitions, n))
    assert values == sorted(f"v{i}" for i in range(n))


@pytest.mark.parametrize("error", ["NOT_LEADER_OR_FOLLOWER", "REQUEST_TIMED_OUT"])
def test_librdkafka_idempotent_producer_retries_through_injected_errors(test_broker, faults, error):
    topic = test_broker.create_topic(partitions=2)
    rule = faults.push_errors("Produce", error, count=3)
    reports = produce_idempotent(test_broker.bootstrap, topic, 2)
    assert reports == [None] * N
    assert rule.hits == 3 and rule.remaining == 0  # the faults fired, and the producer got through them
    assert_once(test_broker, topic, 2)


@pytest.mark.parametrize("error", ["NOT_LEADER_OR_FOLLOWER", "REQUEST_TIMED_OUT"])
def test_aiokafka_idempotent_producer_retries_through_injected_errors(test_broker, faults, error):
    from aiokafka import AIOKafkaProducer

    topic = test_broker.create_topic(partitions=2)
    rule = faults.push_errors("Produce", error, count=3)

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=test_broker.bootstrap, enable_idempotence=True,
                                    retry_backoff_ms=20, request_timeout_ms=10000)
        await producer.start()
        try:
            futures = [await producer.send(topic, f"v{i}".encode(), partition=i % 2) for i in range(N)]
            await asyncio.wait_for(asyncio.gather(*futures), 60)
        finally:
            await producer.stop()

    asyncio.run(run())
    assert rule.hits == 3
    assert_once(test_broker, topic, 2)


def test_a_non_retriable_error_reaches_the_application(test_broker, faults):
    """The same path answers what the client must not retry: librdkafka reports it per message."""
    topic = test_broker.create_topic()
    faults.push_errors("Produce", "TOPIC_AUTHORIZATION_FAILED", count=1)
    reports = []
    producer = Producer({"bootstrap.servers": test_broker.bootstrap})
    producer.produce(topic, b"x", on_delivery=lambda err, msg: reports.append(err))
    producer.flush(30)
    assert [e.code() for e in reports] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert test_broker.end_offsets(topic) == [0]  # not executed


def test_a_rule_scoped_to_one_partition_answers_only_that_partition(test_broker, faults):
    """kafka-python sends both partitions in one Produce request: partition 1 fails, partition 0 is written."""
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    topic = test_broker.create_topic(partitions=2)
    producer = KafkaProducer(bootstrap_servers=test_broker.bootstrap, linger_ms=200, retries=0)
    try:
        producer.partitions_for(topic)
        rule = faults.push_errors("Produce", "TOPIC_AUTHORIZATION_FAILED", topic=topic, partition=1)
        ok = producer.send(topic, b"zero", partition=0)
        failed = producer.send(topic, b"one", partition=1)
        producer.flush(30)
        assert ok.get(30).offset == 0
        with pytest.raises(TopicAuthorizationFailedError):
            failed.get(30)
    finally:
        producer.close(5)
    assert rule.hits == 1
    assert test_broker.end_offsets(topic) == [1, 0]


def test_a_rule_for_another_topic_or_client_does_not_fire(test_broker, faults):
    topic = test_broker.create_topic()
    other = faults.push_errors("Produce", "TOPIC_AUTHORIZATION_FAILED", topic="elsewhere")
    stranger = faults.push_errors("Produce", "TOPIC_AUTHORIZATION_FAILED", client_id="someone-else")
    assert produce_idempotent(test_broker.bootstrap, topic, 1, n=5, **{"client.id": "me"}) == [None] * 5
    assert other.hits == stranger.hits == 0


def test_consumer_group_survives_coordinator_errors(test_broker, faults):
    """librdkafka's group consumer through COORDINATOR_NOT_AVAILABLE (FindCoordinator, OffsetCommit),
    COORDINATOR_LOAD_IN_PROGRESS (JoinGroup) and REBALANCE_IN_PROGRESS (Heartbeat: Kafka's way of telling
    members to rejoin): it rediscovers the coordinator, rejoins, commits and reads every record (at least
    once: what it read before the rejoin without committing may come again)."""
    topic = test_broker.create_topic(partitions=2)
    assert produce_idempotent(test_broker.bootstrap, topic, 2) == [None] * N
    find = faults.push_errors("FindCoordinator", "COORDINATOR_NOT_AVAILABLE", count=2)
    join = faults.push_errors("JoinGroup", "COORDINATOR_LOAD_IN_PROGRESS", count=1)
    commit = faults.push_errors("OffsetCommit", "COORDINATOR_NOT_AVAILABLE", count=1)
    beat = None
    assignments = []
    consumer = Consumer({"bootstrap.servers": test_broker.bootstrap, "group.id": f"g-{topic}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "heartbeat.interval.ms": 100, "session.timeout.ms": 6000})
    consumer.subscribe([topic], on_assign=lambda c, parts: assignments.append(len(parts)))
    seen = []
    ends = test_broker.end_offsets(topic)

    def caught_up() -> bool:
        """Both partitions assigned and read to their ends since the last assignment: the offsets to commit are
        stored (a rejoin that came after every record was read starts the positions afresh)."""
        assigned = consumer.assignment()
        return len(assigned) == 2 and all(tp.offset == ends[tp.partition] for tp in consumer.position(assigned))

    failures = []
    try:
        deadline = time.monotonic() + 60
        while (len(set(seen)) < N or len(assignments) < 2 or not caught_up()) and time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                seen.append(msg.value())
                if beat is None:
                    # only now: librdkafka ignores REBALANCE_IN_PROGRESS on a heartbeat sent before the
                    # application took its assignment (a rebalance is then already under way), and on a
                    # busy machine its first heartbeat can go out before the on_assign callback ran
                    beat = faults.push_errors("Heartbeat", "REBALANCE_IN_PROGRESS", count=1)
        committed = None
        while committed is None and time.monotonic() < deadline:
            try:
                committed = consumer.commit(asynchronous=False)
            except Exception as exc:  # the injected COORDINATOR_NOT_AVAILABLE, retried by the application
                failures.append(str(exc))
                continue
        offsets = consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10)
    finally:
        consumer.close()
    assert set(seen) == {f"v{i}".encode() for i in range(N)}
    assert committed is not None, failures[-3:]
    assert find.hits == 2 and join.hits == 1 and beat is not None and beat.hits == 1 and commit.hits == 1
    assert len(assignments) >= 2  # the injected REBALANCE_IN_PROGRESS made it join again
    assert sum(tp.offset for tp in offsets) == N


def test_kafka_python_group_survives_coordinator_not_available(test_broker, faults):
    from kafka import KafkaConsumer

    topic = test_broker.create_topic()
    assert produce_idempotent(test_broker.bootstrap, topic, 1, n=10) == [None] * 10
    find = faults.push_errors("FindCoordinator", "COORDINATOR_NOT_AVAILABLE", count=2)
    sync = faults.push_errors("SyncGroup", "REBALANCE_IN_PROGRESS", count=1)
    consumer = KafkaConsumer(topic, bootstrap_servers=test_broker.bootstrap, group_id=f"g-{topic}",
                             auto_offset_reset="earliest", enable_auto_commit=False, retry_backoff_ms=20)
    seen = []
    try:
        deadline = time.monotonic() + 60
        while len(seen) < 10 and time.monotonic() < deadline:
            for records in consumer.poll(200).values():
                seen += [r.value for r in records]
        consumer.commit()
    finally:
        consumer.close()
    assert sorted(seen) == sorted(f"v{i}".encode() for i in range(10))
    assert find.hits == 2 and sync.hits == 1


def test_aiokafka_group_survives_coordinator_errors(test_broker, faults):
    """aiokafka's group consumer: COORDINATOR_NOT_AVAILABLE and COORDINATOR_LOAD_IN_PROGRESS while joining,
    REBALANCE_IN_PROGRESS on a commit (it rejoins; what was not committed is read again: at-least-once), then
    on a heartbeat (it rejoins and goes on from the committed offsets). Nothing is lost."""
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

    class Assignments(ConsumerRebalanceListener):
        count = 0

        async def on_partitions_revoked(self, revoked) -> None:
            pass

        async def on_partitions_assigned(self, assigned) -> None:
            Assignments.count += 1

    topic = test_broker.create_topic(partitions=2)
    assert produce_idempotent(test_broker.bootstrap, topic, 2, n=20) == [None] * 20
    find = faults.push_errors("FindCoordinator", "COORDINATOR_NOT_AVAILABLE", count=2)
    join = faults.push_errors("JoinGroup", "COORDINATOR_LOAD_IN_PROGRESS", count=1)
    commit = faults.push_errors("OffsetCommit", "REBALANCE_IN_PROGRESS", count=1)

    async def take(consumer, seen: list, n: int) -> None:
        while len(seen) < n:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                seen += [(r.partition, r.offset) for r in records if (r.partition, r.offset) not in seen]
            if len(seen) >= n:
                while True:
                    try:
                        await consumer.commit()
                        return
                    except Exception:  # the injected REBALANCE_IN_PROGRESS: the application retries
                        await asyncio.sleep(0.05)

    async def run() -> tuple[list, int, dict]:
        consumer = AIOKafkaConsumer(bootstrap_servers=test_broker.bootstrap, group_id=f"g-{topic}",
                                    auto_offset_reset="earliest", enable_auto_commit=False, retry_backoff_ms=20,
                                    heartbeat_interval_ms=100)
        consumer.subscribe([topic], listener=Assignments())
        await consumer.start()
        seen: list = []
        try:
            async with asyncio.timeout(60):
                await take(consumer, seen, 20)
                assigned = Assignments.count
                beat = faults.push_errors("Heartbeat", "REBALANCE_IN_PROGRESS", count=1)
                while beat.hits == 0 or Assignments.count == assigned:  # until it has joined again
                    await consumer.getmany(timeout_ms=100)
                await asyncio.to_thread(produce_idempotent, test_broker.bootstrap, topic, 2, 5)
                await take(consumer, seen, 25)
                committed = {p: await consumer.committed(TopicPartition(topic, p)) for p in (0, 1)}
        finally:
            await consumer.stop()
        return seen, beat.hits, committed

    seen, beats, committed = asyncio.run(run())
    assert len(seen) == 25
    assert find.hits == 2 and join.hits == 1 and commit.hits == 1 and beats == 1
    assert sum(committed.values()) == 25


def test_fetch_and_metadata_errors_are_retried_by_the_consumer(test_broker, faults):
    topic = test_broker.create_topic()
    assert produce_idempotent(test_broker.bootstrap, topic, 1, n=10) == [None] * 10
    fetch = faults.push_errors("Fetch", "NOT_LEADER_OR_FOLLOWER", count=2)
    meta = faults.push_errors("Metadata", "LEADER_NOT_AVAILABLE", count=1, topic=topic)
    assert len(read_all(test_broker.bootstrap, topic, 1, 10)) == 10
    assert fetch.hits == 2 and meta.hits == 1


def test_a_metadata_error_lands_on_the_topics(test_broker, faults):
    topic = test_broker.create_topic()
    rule = faults.push_errors("Metadata", "LEADER_NOT_AVAILABLE", count=1000)  # no topic: every topic answered
    consumer = Consumer({"bootstrap.servers": test_broker.bootstrap, "group.id": "meta"})
    try:
        first = consumer.list_topics(topic, timeout=10)
        assert faults.remove(rule)
        again = consumer.list_topics(topic, timeout=10)
    finally:
        consumer.close()
    assert first.topics[topic].error.code() == KafkaError.LEADER_NOT_AVAILABLE and first.brokers
    assert again.topics[topic].error is None and rule.hits >= 1


def test_latency_shows_in_librdkafka_round_trip_times(test_broker, faults):
    topic = test_broker.create_topic()
    stats = Stats()
    faults.add_latency("Produce", 300)
    reports = produce_idempotent(test_broker.bootstrap, topic, 1, n=3, **{"statistics.interval.ms": 100,
                                                                         "stats_cb": stats, "linger.ms": 0})
    assert reports == [None] * 3
    producer = Producer({"bootstrap.servers": test_broker.bootstrap, "statistics.interval.ms": 100,
                         "stats_cb": stats, "linger.ms": 0})
    producer.produce(topic, b"x")
    producer.flush(30)
    assert poll_until(lambda: (producer.poll(0.05) or True) and stats.broker().get("rtt", {}).get("max", 0) > 0, 60)
    assert stats.broker()["rtt"]["max"] >= 300_000  # microseconds: the broker really held each produce


def test_closed_connections_show_in_librdkafka_logs_and_nothing_is_lost(test_broker, faults):
    topic = test_broker.create_topic()
    lines = LogLines()
    close = faults.close_on("Produce", count=2)
    reports = []
    producer = Producer({"bootstrap.servers": test_broker.bootstrap, "enable.idempotence": True,
                         "logger": lines.logger, "retry.backoff.ms": 20})
    for i in range(10):
        producer.produce(topic, f"v{i}".encode(), on_delivery=lambda err, msg: reports.append(err))
    assert producer.flush(60) == 0
    assert reports == [None] * 10 and close.hits == 2
    assert sum("Disconnected" in line for line in lines.lines) >= 2
    assert_once(test_broker, topic, 1, 10)


def test_dropped_connections_are_reported_by_the_client(test_broker, faults):
    """A consumer always has a Fetch long poll in flight, so librdkafka reports the cut (an idle connection
    closed by the broker it would log only at debug level, taking it for connections.max.idle.ms)."""
    topic = test_broker.create_topic()
    lines = LogLines()
    consumer = Consumer({"bootstrap.servers": test_broker.bootstrap, "group.id": "dropped", "logger": lines.logger,
                         "fetch.wait.max.ms": 5000})
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        assert poll_until(lambda: consumer.poll(0.05) is None and test_broker.faults.broker._readers, 60)
        consumer.poll(0.3)  # its first fetch is out
        assert faults.drop_connections() >= 1
        assert poll_until(lambda: consumer.poll(0.05) is None and any("Disconnected" in x for x in lines.lines), 60)
        producer = Producer({"bootstrap.servers": test_broker.bootstrap})
        producer.produce(topic, b"after")
        assert producer.flush(30) == 0
        got = []

        def take() -> list:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
            return got
        assert poll_until(take, 20) and got == [b"after"]  # it reconnects and goes on
    finally:
        consumer.close()


def test_refused_connections_until_accepted(test_broker, faults):
    topic = test_broker.create_topic()
    faults.refuse_connections()
    errors = []
    reports = []
    producer = Producer({"bootstrap.servers": test_broker.bootstrap, "error_cb": errors.append, "log_level": 0,
                         "reconnect.backoff.max.ms": 100, "message.timeout.ms": 60000})
    try:
        producer.produce(topic, b"after the outage", on_delivery=lambda err, msg: reports.append(err))
        assert poll_until(lambda: producer.poll(0.05) >= 0 and any("refused" in e.str().lower() for e in errors), 20)
        assert reports == []
        faults.accept_connections()
        assert producer.flush(30) == 0
    finally:
        producer.flush(1)
    assert reports == [None]
    assert test_broker.end_offsets(topic) == [1]


def test_refusal_for_a_while_ends_by_itself(test_broker, faults):
    faults.refuse_connections(0.3)
    assert faults.refusing
    assert poll_until(lambda: not faults.refusing, 60)
    assert len(read_all(test_broker.bootstrap, test_broker.create_topic(), 1, 0)) == 0  # connects again


def test_a_paused_partition_times_produce_out_and_fetches_nothing(test_broker, faults):
    topic = test_broker.create_topic(partitions=2)
    faults.pause(topic, 1)
    reports = []
    producer = Producer({"bootstrap.servers": test_broker.bootstrap, "request.timeout.ms": 300, "retries": 0,
                         "message.timeout.ms": 5000, "acks": "all"})
    producer.produce(topic, b"p0", partition=0, on_delivery=lambda err, msg: reports.append((0, err)))
    producer.produce(topic, b"p1", partition=1, on_delivery=lambda err, msg: reports.append((1, err)))
    producer.flush(30)
    assert dict(reports)[0] is None
    assert dict(reports)[1] is not None and dict(reports)[1].code() in (
        KafkaError.REQUEST_TIMED_OUT, KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT)
    assert test_broker.end_offsets(topic) == [1, 0]
    # Records already in a paused partition are not fetched until it is resumed.
    faults.resume(topic, 1)
    producer.produce(topic, b"p1", partition=1)
    assert producer.flush(30) == 0
    faults.pause(topic, 1)
    consumer = Consumer({"bootstrap.servers": test_broker.bootstrap, "group.id": "paused",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
    got = []

    def take() -> bool:
        msg = consumer.poll(0.1)
        if msg is not None and msg.error() is None:
            got.append(msg.partition())
        return True

    try:
        assert poll_until(lambda: take() and got, 20)
        deadline = time.monotonic() + 1.0  # a second of fetching: partition 1 stays silent
        while time.monotonic() < deadline:
            take()
        assert got == [0]
        faults.resume(topic, 1)
        assert poll_until(lambda: take() and len(got) == 2, 20)
        assert got == [0, 1]
    finally:
        consumer.close()


def test_a_produce_held_by_a_pause_goes_through_when_resumed(test_broker, faults):
    topic = test_broker.create_topic()
    faults.pause(topic, 0)
    reports = []
    producer = Producer({"bootstrap.servers": test_broker.bootstrap, "request.timeout.ms": 30000})
    producer.produce(topic, b"held", on_delivery=lambda err, msg: reports.append(err))
    producer.poll(0.2)
    assert reports == [] and test_broker.end_offsets(topic) == [0]
    threading.Timer(0.2, faults.resume, (topic, 0)).start()
    assert producer.flush(30) == 0
    assert reports == [None] and test_broker.end_offsets(topic) == [1]


def test_the_clock_of_log_append_time_topics_moves(test_broker, faults):
    day = 86_400_000
    stamped = test_broker.create_topic(configs={"message.timestamp.type": "LogAppendTime"})
    created = test_broker.create_topic()
    faults.move_clock(-day)
    producer = Producer({"bootstrap.servers": test_broker.bootstrap})
    producer.produce(stamped, b"a day ago")
    producer.produce(created, b"now", timestamp=int(time.time() * 1000))
    assert producer.flush(30) == 0
    now = int(time.time() * 1000)
    (old,) = read_all(test_broker.bootstrap, stamped, 1, 1)
    (new,) = read_all(test_broker.bootstrap, created, 1, 1)
    kind, ts = old.timestamp()
    assert kind == 2  # TIMESTAMP_LOG_APPEND_TIME
    assert now - day - 60_000 <= ts <= now - day + 60_000
    assert new.timestamp()[1] > now - 60_000  # CreateTime records keep the producer's time
    # ListOffsets by time answers from the moved timestamps (the time index was written with them).
    consumer = Consumer({"bootstrap.servers": test_broker.bootstrap, "group.id": "times"})
    try:
        (found,) = consumer.offsets_for_times([TopicPartition(stamped, 0, now - 2 * day)], timeout=10)
        (none,) = consumer.offsets_for_times([TopicPartition(stamped, 0, now - day // 2)], timeout=10)
    finally:
        consumer.close()
    assert found.offset == 0 and none.offset == -1


def test_faults_are_refused_in_one_line(test_broker, faults):
    cases = [
        (lambda: faults.push_errors("Nope", "NOT_LEADER_OR_FOLLOWER"), "unknown API 'Nope'"),
        (lambda: faults.push_errors("Produce", "NOT_AN_ERROR"), "unknown error 'NOT_AN_ERROR'"),
        (lambda: faults.push_errors("Produce", 9999), "unknown error code 9999"),
        (lambda: faults.push_errors("Produce", "NONE"), "error 0 is NONE"),
        (lambda: faults.push_errors("Produce", "REQUEST_TIMED_OUT", count=0), "count must be >= 1"),
        (lambda: faults.push_errors("Produce", "REQUEST_TIMED_OUT", partition=1), "partition needs topic"),
        (lambda: faults.push_errors("Heartbeat", "REQUEST_TIMED_OUT", topic="t"), "name no topic partitions"),
        (lambda: faults.push_errors("SaslAuthenticate", "REQUEST_TIMED_OUT", client_id="x") and None, None),
        (lambda: faults.add_latency("Fetch", -1), "latency must be >= 0"),
        (lambda: faults.refuse_connections(-1), "seconds must be >= 0"),
    ]
    for call, message in cases:
        if message is None:
            call()
            continue
        with pytest.raises(ValueError, match=message) as info:
            call()
        assert "\n" not in str(info.value)
    with pytest.raises(Exception, match="does not host this topic-partition: no-such-topic-0"):
        faults.pause("no-such-topic", 0)


def test_rules_are_listed_removed_and_cleared(test_broker, faults):
    a = faults.push_errors(2, 6, count=2)
    b = faults.add_latency(None, 10)
    assert [r.id for r in faults.rules()] == [a.id, b.id]
    assert faults.state()["rules"][0]["api"] == "ListOffsets" and faults.state()["rules"][0]["error"] == \
        "NOT_LEADER_OR_FOLLOWER"
    assert faults.remove(a) and not faults.remove(a)
    faults.move_clock(5)
    assert test_broker.faults.broker.plan_fetches is False  # every fetch passes the rules while any exist
    faults.clear()
    assert faults.state() == {"rules": [], "paused": [], "clock_offset_ms": 0, "refusing_connections": False,
                              "unhit": []}
    assert test_broker.faults.broker.plan_fetches is True


def test_a_broker_stops_cleanly_in_any_fault_state():
    import chronolog.testing

    def brokers() -> set:
        return {t for t in threading.enumerate() if t.name == "chronolog-embedded" and t.is_alive()}

    before = brokers()  # (the module's broker may run)
    with chronolog.testing.broker() as b:
        topic = b.create_topic()
        b.faults.pause(topic, 0)
        b.faults.add_latency(None, 10_000)
        b.faults.refuse_connections(30)
        data = b.data_dir
    assert not data.exists() and not b.running
    assert brokers() == before
