"""PySpark: the `chronolog` data source (time ranges -> offset ranges read in parallel) and the jobs."""

from chronolog.spark.session import session
from chronolog.spark.source import ChronologDataSource, register

__all__ = ["ChronologDataSource", "register", "session"]
