"""PySpark: the `chronolog` data source (time ranges -> offset ranges read in parallel) and the jobs.

`chronolog.protocol` comes first: it keeps kio from importing hypothesis (and with it pytest and trio, ~0.5 s
of CPU) in the fresh interpreter Spark starts to plan each query, where `spark.broker_plan` imports kio."""

import chronolog.protocol  # noqa: F401  (before anything imports kio)
from chronolog.spark.session import session
from chronolog.spark.source import ChronologDataSource, register

__all__ = ["ChronologDataSource", "register", "session"]
