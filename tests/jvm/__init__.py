"""Kafka's own programs (CLI tools, the Java AdminClient behind them), unmodified, against chronolog."""
