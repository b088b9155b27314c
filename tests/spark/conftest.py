"""One SparkSession for the whole directory (starting one costs seconds)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from chronolog.spark import session

    s = session("local[2]", "chronolog-tests", {"spark.sql.shuffle.partitions": "2"})
    yield s
    s.stop()
