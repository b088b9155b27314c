"""SIGKILL the broker at random moments while a librdkafka producer writes, restart it each time, and prove
every acknowledged record is stored and lookups by time are right: an idempotent producer (acks=all, every
append fsynced) 8 times (20 in the long run, tests/scale.py), each record exactly once; a plain acks=1
producer with Kafka's default flush settings (no fsync: the page cache outlives a killed process) 5 times
(10), each acknowledged record at least once (without idempotence a retry after a kill may store a record
twice, as with Kafka)."""

from __future__ import annotations

import random
import threading
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from chronolog.timetravel.sources import DataDirSource
from tests.brokerproc import BrokerProcess
from tests.scale import scaled

# Recent record times: a producer whose last batch's max timestamp is producer.id.expiration.ms (a day)
# old is forgotten at a restart, as in Kafka, and its retries could no longer be recognised.
T0 = int(time.time() * 1000) - 600_000
# Kills per case: 8 caught the lost producer state at a restart the test was written for (and are what
# `make test` runs); the long runs kill 20 and 10 times.
CASES = {
    "idempotent-acks-all-fsync": ({"enable.idempotence": True, "acks": "all"}, {"log.flush.interval.messages": "1"},
                                  scaled(8, 20)),
    "acks-1-default-flush": ({"acks": "1", "retries": 1_000_000}, {}, scaled(5, 10)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_acknowledged_records_survive_broker_sigkills(tmp_path, case):
    producer_conf, broker_conf, kills = CASES[case]
    idempotent = producer_conf.get("enable.idempotence", False)
    proc = BrokerProcess(tmp_path / "data", broker_conf).start()
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    admin.create_topics([NewTopic("crash", 2, 1, config={"segment.bytes": "65536"})])["crash"].result(15)
    acked: set[bytes] = set()
    errors: list[str] = []
    stop = threading.Event()

    def on_delivery(err, msg) -> None:
        if err is None:
            acked.add(msg.value())
        else:
            errors.append(str(err))

    def produce() -> None:
        p = Producer({"bootstrap.servers": proc.bootstrap, **producer_conf, "linger.ms": 2, "batch.size": 16384, "message.timeout.ms": 120_000, "reconnect.backoff.ms": 20,
                      "reconnect.backoff.max.ms": 200})
        i = 0
        while not stop.is_set():
            try:
                p.produce("crash", value=b"r-%d" % i, partition=i % 2, timestamp=T0 + i, on_delivery=on_delivery)
                i += 1
            except BufferError:
                pass
            p.poll(0.001 if i % 50 else 0.01)
        p.flush(120)

    writer = threading.Thread(target=produce)
    writer.start()
    rng = random.Random(20261122)
    try:
        for _ in range(kills):
            time.sleep(rng.uniform(0.2, 0.8))
            proc.kill()
            proc.start()
        time.sleep(1.0)
    finally:
        stop.set()
        writer.join(180)
        proc.stop()
    assert not errors, errors[:3]
    assert len(acked) > 1000
    source = DataDirSource(tmp_path / "data")
    stored: list[tuple[int, int, bytes]] = []
    for p in (0, 1):
        stored += [(p, r.offset, r.value) for r in source.read("crash", p, 0, source.watermarks("crash", p)[1])]
    values = [v for _, _, v in stored]
    if idempotent:
        assert len(values) == len(set(values)), "a record was stored twice"
    assert acked <= set(values), f"{len(acked - set(values))} acknowledged records are missing"
    for p in (0, 1):
        recs = [(o, int(v.split(b"-")[1])) for pp, o, v in stored if pp == p]
        for target in range(0, max(i for _, i in recs), 997):
            want = next((o for o, i in recs if i >= target), None)
            got = source.offsets_for_time("crash", T0 + target, [p])[p]
            assert (got.offset if got.found else None) == want
