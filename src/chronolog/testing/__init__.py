"""chronolog for tests: a real Kafka-protocol broker in this process, started in milliseconds, with
programmable faults. No Docker, no JVM, any client.

    with chronolog.testing.broker() as b:
        topic = b.create_topic(partitions=3)
        Producer({"bootstrap.servers": b.bootstrap}).produce(topic, b"x")
        b.faults.push_errors("Produce", "NOT_LEADER_OR_FOLLOWER", count=2)

The pytest plugin (`chronolog.testing.plugin`, on by installing chronolog) gives the same as fixtures:
`chronolog_broker` and `chronolog_topic`. This package's `__init__` stays import-free, because pytest
imports it in every run just to load the plugin: the broker is imported when first asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from chronolog.testing.admin import FaultsClient
    from chronolog.testing.runner import TestBroker, broker

__all__ = ["broker", "TestBroker", "FaultsClient"]


def __getattr__(name: str) -> Any:
    if name in ("broker", "TestBroker"):
        from chronolog.testing import runner
        return getattr(runner, name)
    if name == "FaultsClient":
        from chronolog.testing.admin import FaultsClient
        return FaultsClient
    raise AttributeError(f"module 'chronolog.testing' has no attribute {name!r}")
