"""chronolog: a Kafka-compatible commit log with time at its centre (KIP-32 timestamps, KIP-33 time indexes)."""

__version__ = "0.1.0"
