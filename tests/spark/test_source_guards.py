"""What the Spark source must not do silently: create a mistyped topic while planning against a broker
(librdkafka's AdminClient asks Metadata with allowAutoTopicCreation=true; the consumer does not), or accept
kafka.* client options it would not pass on."""

from __future__ import annotations

import pytest

from chronolog.errors import ChronologError, UnknownTopicOrPartitionError
from chronolog.spark.options import SourceOptions
from chronolog.timetravel.sources import BrokerSource
from tests.brokerproc import broker  # noqa: F401  (fixture)


def test_planning_a_mistyped_topic_does_not_create_it(broker):  # noqa: F811
    source = BrokerSource(broker.bootstrap)
    try:
        with pytest.raises(UnknownTopicOrPartitionError, match="'typo' not found"):
            source.partitions("typo")
        assert "typo" not in source.topics()
    finally:
        source.close()
    assert not (broker.data_dir / "typo-0").exists()


def test_kafka_connection_options_reach_the_client_in_librdkafka_words():
    """TLS/SASL options are the planner's and the reader's (tests/spark/test_sasl_read.py reads through
    them); the Java client's JAAS line becomes librdkafka's username and password, and a JKS truststore,
    which librdkafka cannot read, is one line naming the PEM option."""
    base = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}
    assert SourceOptions.parse(base).bootstrap == "127.0.0.1:9092"
    conf = SourceOptions.parse({**base, "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
                                "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule '
                                                          'required username="alice" password="s3cret";'}).kafka_conf
    assert (conf["security.protocol"], conf["sasl.username"], conf["sasl.password"]) == ("SASL_SSL", "alice", "s3cret")
    assert "sasl.jaas.config" not in conf
    with pytest.raises(ChronologError, match="ssl.truststore.location"):
        SourceOptions.parse({**base, "kafka.ssl.truststore.location": "/x.jks"})
