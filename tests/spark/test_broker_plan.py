"""The broker-mode planner on plain sockets (`spark.broker_plan`): the same answers as librdkafka's on
chronolog and on Apache Kafka 4.4, a refused or silent broker said in one line, no topic created."""

from __future__ import annotations

import socket

import pytest
from confluent_kafka import Producer

from chronolog.errors import ChronologError, UnknownTopicOrPartitionError
from chronolog.spark.broker_plan import SocketPlanSource
from chronolog.timetravel.sources import BrokerSource
from tests.brokerproc import broker  # noqa: F401  (fixture)

BASE = 1_700_000_000_000
MINUTE = 60_000
# 3 partitions, 2 hours a minute apart, every 5th record 20 minutes late
STAMPS = {p: [BASE + i * MINUTE - (20 * MINUTE if i % 5 == 4 else 0) for i in range(120)] for p in range(3)}
KEEP = {"retention.ms": "-1"}


def load(bootstrap: str, topic: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for part, stamps in STAMPS.items():
        for i, ts in enumerate(stamps):
            p.produce(topic, value=b"v%d" % i, partition=part, timestamp=ts)
    assert p.flush(60) == 0


def answers(source, topic: str) -> tuple:
    parts = source.partitions(topic)
    marks = [source.watermarks(topic, p) for p in parts]
    times = [source.offsets_for_time(topic, BASE + k * 17 * MINUTE, parts) for k in (-1, 0, 1, 3, 7, 200)]
    return parts, marks, times


@pytest.mark.parametrize("which", ["chronolog", "kafka"])
def test_socket_planner_answers_as_librdkafka(which, request):
    b = request.getfixturevalue("chronolog_broker" if which == "chronolog" else "kafka_broker")
    topic = b.create_topic(partitions=3, configs=KEEP)
    load(b.bootstrap, topic)
    ours, theirs = SocketPlanSource(b.bootstrap), BrokerSource(b.bootstrap)
    try:
        assert topic in ours.topics() and ours.topics()[topic] == 3
        assert answers(ours, topic) == answers(theirs, topic)
    finally:
        ours.close()
        theirs.close()


def test_a_mistyped_topic_is_named_and_not_created(broker):  # noqa: F811
    source = SocketPlanSource(broker.bootstrap)
    with pytest.raises(UnknownTopicOrPartitionError, match=f"topic 'typo' not found on {broker.bootstrap}"):
        source.partitions("typo")
    assert "typo" not in source.topics()
    assert not (broker.data_dir / "typo-0").exists()


def test_a_refused_connection_is_one_line_naming_the_broker():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ChronologError) as info:
        SocketPlanSource(f"127.0.0.1:{port}").topics()
    assert str(info.value) == (f"cannot connect to 127.0.0.1:{port} (127.0.0.1:{port}: Connection refused); "
                               "is the broker running?")


def test_a_broker_that_never_answers_is_bounded_by_the_connect_timeout():
    """`kafka.socket.connection.setup.timeout.ms` bounds a connection that is accepted but never answered
    (the planner's timeout; 10 s by default, the Java client's)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)  # the kernel completes the handshake; no ApiVersions answer ever comes
        where = f"127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(ChronologError, match=rf"cannot connect to {where} \({where}: .*timed out.*\)"):
            SocketPlanSource(where, timeout=0.3).topics()
