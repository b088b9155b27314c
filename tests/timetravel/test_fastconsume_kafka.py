"""`chronolog consume --format raw` read without typer or librdkafka (`cli.fastconsume`: Metadata,
ListOffsets and Fetch written by hand) against Apache Kafka 4.4: the bytes kcat -C would print for the
window, partition after partition, in a process of its own as a user runs it."""

from __future__ import annotations

from confluent_kafka import Producer

from tests.clirun import chronolog_process

BASE = 1_700_000_000_000
KEEP = {"retention.ms": "-1"}  # times of 2023: Kafka's retention would delete them at once
# partition p: 300 records; every 11th is late (CreateTime 5 s back), every 13th a tombstone (printed empty)
STAMPS = {p: [BASE + 100 * i - (5000 if i % 11 == 5 else 0) + p for i in range(300)] for p in range(3)}


def value(p: int, i: int) -> bytes | None:
    return None if i % 13 == 4 else b"v%d-%d" % (p, i) + b"x" * (i % 50)


def expected(t1: int, t2: int, partitions=(0, 1, 2)) -> bytes:
    out = []
    for p in partitions:
        stamps = STAMPS[p]
        first = next((i for i, ts in enumerate(stamps) if ts >= t1), len(stamps))
        out += [(value(p, i) or b"") + b"\n" for i in range(first, len(stamps)) if t1 <= stamps[i] < t2]
    return b"".join(out)


def test_raw_window_against_kafka(kafka_broker):
    topic = "fast-raw"
    kafka_broker.create_topic(topic, 3, KEEP)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "enable.idempotence": True})
    for p, stamps in STAMPS.items():
        for i, ts in enumerate(stamps):
            producer.produce(topic, value=value(p, i), key=b"k%d" % i, partition=p, timestamp=ts)
    assert producer.flush(60) == 0
    del producer  # before the broker stops: no librdkafka lines about a closed connection
    for t1, t2, more in ((BASE + 3_000, BASE + 17_000, ()), (BASE, BASE + 40_000, ()),
                         (BASE + 9_050, BASE + 9_900, ("--partitions", "2,0"))):
        run = chronolog_process("consume", topic, "--from", str(t1), "--to", str(t2), "--format", "raw",
                                "-b", kafka_broker.bootstrap, *more)
        assert run.rc == 0, run.err
        parts = (0, 2) if more else (0, 1, 2)  # partition order, whatever order they are named in
        assert run.out.encode() == expected(t1, t2, parts)
    run = chronolog_process("consume", "no-such-topic", "--from", str(BASE), "--format", "raw",
                            "-b", kafka_broker.bootstrap)
    assert run.rc != 0 and "not found" in run.err and "Traceback" not in run.err
