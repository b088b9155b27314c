"""The sink against a broker that only speaks SASL_SSL (SCRAM-SHA-512, a CA of its own), with the connection
given as Spark's Kafka sink takes it (`kafka.security.protocol`, `kafka.sasl.*`, `kafka.ssl.*`): the native
path does not speak TLS, so librdkafka writes; wrong credentials are one line naming the failed
authentication (as Kafka's clients fail: SaslAuthenticationException is not retriable), not a timeout."""

from __future__ import annotations

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from chronolog.errors import ChronologError
from chronolog.spark.sink import SinkOptions, write_partition
from tests.console.test_console_sasl import sasl_broker  # noqa: F401  (fixture)

JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="{}";'


def _options(conf: dict, base, topic: str, password: str) -> SinkOptions:
    return SinkOptions.parse({"kafka.bootstrap.servers": conf["bootstrap.servers"], "topic": topic,
                              "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
                              "kafka.sasl.jaas.config": JAAS.format(password),
                              "kafka.ssl.ca.location": str(base / "ca.pem")})


def _read(conf: dict, topic: str, expected: int) -> list[tuple]:
    """(key, value) of partition 0 until `expected` came or the partition's end (a bound only for a hung run)."""
    import time

    c = Consumer({**conf, "group.id": "sink-sasl-reader", "enable.auto.commit": False, "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple] = []
    deadline = time.monotonic() + 120
    try:
        while len(out) < expected and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None:
                continue
            if m.error():
                if len(out) >= expected:
                    break
                continue
            out.append((m.key(), m.value()))
    finally:
        c.close()
    return out


def test_the_sink_writes_through_sasl_ssl_and_wrong_credentials_are_one_line(sasl_broker):  # noqa: F811
    _proc, conf, base = sasl_broker
    admin = AdminClient(conf)  # kept: a collected client ends its futures
    admin.create_topics([NewTopic("sink-secure", 1, 1)])["sink-secure"].result(30)
    rows = pa.RecordBatch.from_pydict({"key": pa.array([b"k%d" % i for i in range(10)], pa.binary()),
                                       "value": pa.array([b"v%d" % i for i in range(10)], pa.binary())})
    done = write_partition(_options(conf, base, "sink-secure", "admin-secret"), iter([rows]), None)
    assert (done.rows, done.path) == (10, "librdkafka")
    assert _read(conf, "sink-secure", 10) == [(b"k%d" % i, b"v%d" % i) for i in range(10)]
    with pytest.raises(ChronologError, match="authentication failed with .*SCRAM-SHA-512"):
        write_partition(_options(conf, base, "sink-secure", "not-the-password"), iter([rows]), None)
