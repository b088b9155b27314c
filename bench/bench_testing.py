"""What the pytest plugin costs a test suite: the `chronolog_broker` fixture's start and stop (once per
session, or per xdist worker), the `chronolog_topic` fixture's fresh topic (create + delete, once per test),
each beside the time of one produce/consume round trip measured in the same run (librdkafka producer,
acks=all, to a librdkafka consumer already polling the partition), the unit a Kafka test pays anyway, and
of a test's first record with new clients (connections, metadata, the consumer's first fetch).

The first start includes importing the broker (what a session pays once); the others are warm.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from bench.common import print_table

TRIES = 15
ROUND_TRIPS = 30


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def round_trips(broker, n: int) -> list[float]:
    """Seconds from produce() to the consumer holding that record, `n` times, on warm connections."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = broker.create_topic(prefix="bench")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "acks": "all"})
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bench", "fetch.wait.max.ms": 100,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out = []
    try:
        for i in range(n + 3):  # three to warm the connections up, not counted
            started = time.perf_counter()
            producer.produce(topic, str(i).encode())
            producer.flush(30)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    break
            else:
                raise RuntimeError("a round trip did not come back in 30 s")
            if i >= 3:
                out.append(time.perf_counter() - started)
    finally:
        consumer.close()
    return out


def first_round_trip(broker) -> float:
    """What a typical test pays for its first record: a fresh topic, a new producer and consumer, one record
    produced and read back."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    started = time.perf_counter()
    topic = broker.create_topic(prefix="bench")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "acks": "all"})
    producer.produce(topic, b"first")
    producer.flush(30)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bench", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                return time.perf_counter() - started
        raise RuntimeError("the first record did not come back in 30 s")
    finally:
        consumer.close()


def main() -> None:
    from chronolog.testing.runner import TestBroker

    starts, stops, topics = [], [], []
    with tempfile.TemporaryDirectory(prefix="bench-testing-") as tmp:
        started = time.perf_counter()
        first = TestBroker(Path(tmp) / "first", admin_api=True, keep_data=False).start()
        first_start = time.perf_counter() - started
        trips = round_trips(first, ROUND_TRIPS)
        firsts = [first_round_trip(first) for _ in range(5)]
        for _ in range(TRIES):  # the chronolog_topic fixture: create, then delete after the test
            started = time.perf_counter()
            name = first.create_topic(prefix="bench")
            first.delete_topic(name)
            topics.append(time.perf_counter() - started)
        first.stop()
        for i in range(TRIES):  # the chronolog_broker fixture, warm: as the plugin starts it
            broker = TestBroker(Path(tmp) / f"b{i}", admin_api=True, keep_data=False)
            started = time.perf_counter()
            broker.start()
            starts.append(time.perf_counter() - started)
            started = time.perf_counter()
            broker.stop()
            stops.append(time.perf_counter() - started)
    trip = statistics.median(trips)
    rows = [("what", "median ms", "x one round trip")]
    for label, values in [("broker start, first (imports the broker)", [first_start]),
                          ("broker start (chronolog_broker)", starts),
                          ("broker stop + data removed", stops),
                          ("per-test topic: create + delete (chronolog_topic)", topics),
                          ("one produce/consume round trip (librdkafka, acks=all)", trips),
                          ("a test's first record: topic, new producer+consumer, round trip", firsts)]:
        m = statistics.median(values)
        rows.append((label, _ms(m), f"{m / trip:.2f}"))
    print_table(rows)
    print(f"({TRIES} starts/stops and topics, {ROUND_TRIPS} warm round trips, 5 first records; medians)",
          flush=True)


if __name__ == "__main__":
    main()
