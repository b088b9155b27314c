"""Differential tests: the same scenario against chronolog and Apache Kafka 4.4, the observations compared."""
