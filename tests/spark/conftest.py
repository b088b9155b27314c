"""One SparkSession for the whole directory (starting one costs seconds)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    import os

    from chronolog.spark import session

    # A collect() hands its rows over a local socket the JVM opens and waits 15 s for (both sides' default);
    # on two cores with other work beside the suite, the driver once came later and got "connection refused".
    os.environ.setdefault("SPARK_AUTH_SOCKET_TIMEOUT", "120")
    s = session("local[2]", "chronolog-tests", {"spark.sql.shuffle.partitions": "2",
                                                "spark.python.authenticate.socketTimeout": "120s"})
    yield s
    s.stop()
