"""The Spark source against a broker that only speaks SASL_SSL (SCRAM-SHA-512, a CA of its own), with the
connection given as Spark's Kafka source takes it (`kafka.security.protocol`, `kafka.sasl.*`,
`kafka.ssl.*`): the planner connects with them, and since the raw fetcher speaks plaintext only the
ranges are read by librdkafka's consumer (one driver log line says why). The rows are exact."""

from __future__ import annotations

from tests.console.test_console_sasl import BASE, sasl_broker  # noqa: F401  (fixture: topic "secure", 40 records)


def test_a_time_window_through_sasl_ssl(spark, sasl_broker):  # noqa: F811
    proc, conf, base = sasl_broker
    df = (spark.read.format("chronolog").option("kafka.bootstrap.servers", conf["bootstrap.servers"])
          .option("kafka.security.protocol", "SASL_SSL").option("kafka.sasl.mechanism", "SCRAM-SHA-512")
          .option("kafka.sasl.jaas.config", 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                            'username="admin" password="admin-secret";')
          .option("kafka.ssl.ca.location", str(base / "ca.pem")).option("subscribe", "secure").load()
          .where(f"timestamp >= timestamp_millis({BASE + 5_000}) AND timestamp < timestamp_millis({BASE + 15_000})"))
    rows = sorted((r.offset, bytes(r.value)) for r in df.select("offset", "value").collect())
    assert rows == [(i, b"%d" % i) for i in range(5, 15)]


def test_a_stream_through_sasl_ssl(spark, sasl_broker, tmp_path):  # noqa: F811
    """Streaming plans and reads with the same connection options (Trigger.AvailableNow, one run)."""
    proc, conf, base = sasl_broker
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    query = (spark.readStream.format("chronolog").option("kafka.bootstrap.servers", conf["bootstrap.servers"])
             .option("kafka.security.protocol", "SASL_SSL").option("kafka.sasl.mechanism", "SCRAM-SHA-512")
             .option("kafka.sasl.username", "admin").option("kafka.sasl.password", "admin-secret")
             .option("kafka.ssl.ca.location", str(base / "ca.pem")).option("subscribe", "secure").load()
             .selectExpr("offset", "value")
             .writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    rows = sorted((r.offset, bytes(r.value)) for r in spark.read.parquet(str(out)).collect())
    assert rows == [(i, b"%d" % i) for i in range(40)]
