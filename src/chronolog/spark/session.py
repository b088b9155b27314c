"""A SparkSession set up for chronolog: Python workers run this interpreter (so they can import
chronolog), UTC session time zone, the `chronolog` source registered."""

from __future__ import annotations

import os
import sys


def session(master: str | None = None, app_name: str = "chronolog", extra: dict[str, str] | None = None):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from chronolog.spark.source import register

    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    settings = {"spark.ui.enabled": "false", "spark.sql.session.timeZone": "UTC",
                "spark.sql.shuffle.partitions": "4", "spark.python.worker.reuse": "true"}
    settings.update(extra or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
