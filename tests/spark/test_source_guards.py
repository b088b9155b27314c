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


def test_kafka_client_options_that_are_not_passed_on_are_refused():
    base = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}
    assert SourceOptions.parse(base).bootstrap == "127.0.0.1:9092"
    with pytest.raises(ChronologError, match="kafka.sasl.mechanism, kafka.security.protocol: the chronolog source"):
        SourceOptions.parse({**base, "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN"})
