"""The source's readers on the columnar decoder: broker mode by raw Fetch against a broker that answers
with legacy v0 message sets (chronolog serving a data dir a Kafka 0.8.2 broker wrote), the librdkafka
fallback for a `kafka.*` option the raw fetcher does not honour (same rows, one log line), and a corrupt
batch in path mode failing the query with one message naming the segment file and byte."""

from __future__ import annotations

import logging

import pytest

from chronolog.spark.options import SourceOptions
from chronolog.spark.ranges import OffsetRange, RangeGroup, with_client_options
from chronolog.spark.source import ChronologDataSource, _log_reader_choice
from tests.brokerproc import BrokerProcess
from tests.timetravel.test_arrow_reader import _legacy_dir, reseal, single_record_batches

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def legacy_broker(shared_data, tmp_path_factory):
    root = tmp_path_factory.mktemp("legacy") / "data"
    lines = _legacy_dir(shared_data, root)
    proc = BrokerProcess(root).start()
    yield proc, root, lines
    proc.stop()


def values(df) -> list[str]:
    return [r.value.decode() for r in df.orderBy("offset").select("value").collect()]


def test_both_modes_read_legacy_v0_message_sets(spark, legacy_broker):
    proc, root, lines = legacy_broker
    by_fetch = spark.read.format("chronolog").option("kafka.bootstrap.servers", proc.bootstrap) \
        .option("subscribe", "legacy").load()
    assert values(by_fetch) == lines
    assert {r.timestampType for r in by_fetch.select("timestampType").collect()} == {0}
    from_files = spark.read.format("chronolog").option("path", str(root)).option("subscribe", "legacy").load()
    assert values(from_files) == lines


def test_an_option_raw_fetch_cannot_honour_keeps_librdkafka_and_says_why(spark, legacy_broker, caplog):
    """The rows through Spark; the log line from the planning call itself (Spark plans a Python source in
    a Python worker, whose stderr is not this process's)."""
    proc, _root, lines = legacy_broker
    options = {"kafka.bootstrap.servers": proc.bootstrap, "kafka.fetch.wait.max.ms": "100", "subscribe": "legacy"}
    reader = spark.read.format("chronolog")
    for k, v in options.items():
        reader = reader.option(k, v)
    assert values(reader.load()) == lines
    with caplog.at_level(logging.WARNING, logger="chronolog.spark"):
        planned = ChronologDataSource(options).reader(None).partitions()
    assert all(not r.raw_fetch for r in planned)
    said = [r.getMessage() for r in caplog.records if r.name == "chronolog.spark"]
    assert said == [f"reading {proc.bootstrap} with librdkafka's consumer, not raw Fetch: the raw fetcher "
                    "does not honour fetch.wait.max.ms"]


def test_the_reader_choice_per_range():
    opts = SourceOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribe": "t",
                                "kafka.fetch.min.bytes": "1000", "kafka.isolation.level": "read_committed"})
    part = OffsetRange("t", 0, 0, 10, "h:1", "kafka")
    chosen = with_client_options(RangeGroup((part, part)), opts)
    assert all(not r.raw_fetch and dict(r.kafka_conf)["fetch.min.bytes"] == "1000" for r in chosen.ranges)
    assert SourceOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribe": "t",
                                "kafka.security.protocol": "PLAINTEXT"}).kafka_conf == {"security.protocol": "PLAINTEXT"}
    tls = SourceOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "kafka.ssl.ca.location": "ca"})
    assert not with_client_options(part, tls).raw_fetch  # the raw fetcher speaks plaintext: librdkafka reads
    plain = SourceOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "kafka.client.id": "me"})
    assert with_client_options(part, plain).raw_fetch
    assert plain.isolation_level == "read_uncommitted" and opts.isolation_level == "read_committed"
    _log_reader_choice(plain)  # nothing to say
    with pytest.raises(Exception, match="kafka.isolation.level is"):
        SourceOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "kafka.isolation.level": "dirty"})


def test_a_corrupt_batch_fails_the_query_naming_the_file_and_byte(spark, tmp_path):
    seg = single_record_batches(tmp_path / "bad-0", 4)
    raw = bytearray(seg.read_bytes())
    size = len(raw) // 4
    raw[2 * size - 1] = 0x7F  # the second batch's only record: a header count that cannot be
    seg.write_bytes(bytes(reseal(raw, size, size)))
    with pytest.raises(Exception) as info:
        spark.read.format("chronolog").option("path", str(tmp_path)).option("subscribe", "bad").load().collect()
    assert f"corrupt record batch in {seg}: at byte {size} (offset 1): invalid header count -64" in str(info.value)
