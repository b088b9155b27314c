"""One SparkSession for the whole directory (starting one costs seconds)."""

from __future__ import annotations

from pathlib import Path

import pytest

# `make` resolves jvm/spark-kafka/pom.xml here (spark-sql-kafka-0-10 and its Kafka client)
SPARK_KAFKA_JARS = sorted((Path(__file__).resolve().parents[2] / "var" / "jars" / "spark-kafka").glob("*.jar"))


@pytest.fixture(scope="session")
def spark():
    import os

    from chronolog.spark import session

    # A collect() hands its rows over a local socket the JVM opens and waits 15 s for (both sides' default);
    # on two cores with other work beside the suite, the driver once came later and got "connection refused".
    os.environ.setdefault("SPARK_AUTH_SOCKET_TIMEOUT", "120")
    extra = {"spark.sql.shuffle.partitions": "2", "spark.python.authenticate.socketTimeout": "120s"}
    if SPARK_KAFKA_JARS:  # Spark's own Kafka connector, for the tests that compare it with ours
        extra["spark.jars"] = ",".join(str(p) for p in SPARK_KAFKA_JARS)
    s = session("local[2]", "chronolog-tests", extra)
    yield s
    s.stop()
