"""Arrow out for everyone: `read_window(source, topic, start=..., end=...)` gives the records of a time window
of a topic, from a data dir or any Kafka-protocol broker, as a `pyarrow.RecordBatchReader` in the Spark
source's schema (see `chronolog.timetravel.arrow`)."""

from chronolog.timetravel.arrow import arrow_schema, read_window

__all__ = ["arrow_schema", "read_window"]
