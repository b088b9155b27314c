"""Reading a topic back in tests: every message a consumer of one isolation level gets, per partition in
order, until `expected` messages arrived or every partition reached its end (or the topic does not exist).
A read to the end that does not get there within its timeout raises: returning what it had would hand the
caller a silently partial (stale) view of the topic."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, TopicPartition

PARTITION_EOF = -191
UNKNOWN_TOPIC_OR_PART = 3


def read_messages(bootstrap: str, topic: str, partitions: int, isolation: str = "read_committed",
                  expected: int | None = None, timeout: float = 15.0) -> dict[int, list]:
    """partition -> confluent-kafka messages, in offset order. With `expected`, what arrived within `timeout`
    (the caller compares); without, every partition read to its end (the last stable offset under
    read_committed), or TimeoutError."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                  "isolation.level": isolation, "enable.auto.commit": False, "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: dict[int, list] = {p: [] for p in range(partitions)}
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == PARTITION_EOF:
                    at_end.add(m.partition())
                    if expected is None and len(at_end) == partitions:
                        break
                elif m.error().code() == UNKNOWN_TOPIC_OR_PART:
                    break
                continue
            at_end.discard(m.partition())
            out[m.partition()].append(m)
            if expected is not None and sum(map(len, out.values())) >= expected:
                break
        else:
            if expected is None:
                raise TimeoutError(f"{topic}: partitions {sorted(set(range(partitions)) - at_end)} not read to "
                                   f"their end within {timeout} s ({sum(map(len, out.values()))} messages read)")
    finally:
        c.close()
    return out
