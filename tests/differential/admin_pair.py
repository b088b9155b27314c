"""The two brokers of the admin differential tests and what their answers are compared on.

`pair`: (chronolog, Kafka 4.4), chronolog a TestBroker of the module, Kafka the session's `kafka_broker`.
Raw answers (admin_wire) are normalised by `norm`: throttle times out, topic ids as whether one was given,
config lists sorted by name, documentation as whether some was given."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

ZERO_UUID = str(uuid.UUID(int=0))


@pytest.fixture(scope="module")
def pair(kafka_broker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    from chronolog.testing.runner import TestBroker

    broker = TestBroker(tmp_path_factory.mktemp("admin-diff") / "data", keep_data=False).start()
    try:
        yield broker, kafka_broker
    finally:
        broker.stop()


def norm(answer: Any, *, messages: bool = True) -> Any:
    """An answer without what legitimately differs between two brokers."""
    if isinstance(answer, list):
        items = [norm(v, messages=messages) for v in answer]
        if items and all(isinstance(v, dict) and "name" in v and "value" in v for v in items):
            items.sort(key=lambda v: v["name"])
        return items
    if not isinstance(answer, dict):
        return answer
    out = {}
    for key, value in answer.items():
        if key in ("throttle_time", "throttle_time_ms"):
            continue
        if key == "topic_id":
            value = value not in (None, ZERO_UUID)
        elif key == "documentation":
            value = value is not None
        elif key == "error_message" and not messages:
            continue
        out[key] = norm(value, messages=messages)
    return out


def unique(prefix: str = "a") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def same(pair: tuple[Any, Any], steps: Callable[..., Any], *args: Any, messages: bool = True, **kwargs: Any) -> Any:
    """`steps(broker, *args, **kwargs)` on chronolog and on Kafka; the normalised observations must be equal."""
    chronolog, kafka = pair
    c = norm(steps(chronolog, *args, **kwargs), messages=messages)
    k = norm(steps(kafka, *args, **kwargs), messages=messages)
    assert c == k, f"chronolog and Kafka differ:\n chronolog: {c!r}\n kafka:     {k!r}"
    return c


# -- the admin requests, at Kafka 4.4's newest versions ------------------------------------------------------
CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 33, 44
TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def create(broker: Any, *topics: tuple, validate_only: bool = False, version: int = 7) -> dict:
    """CreateTopics of (name, partitions, replication factor[, configs dict[, assignments]]) tuples."""
    from tests.differential.admin_wire import request

    body = []
    for t in topics:
        name, partitions, rf = t[:3]
        configs = t[3] if len(t) > 3 else {}
        assignments = t[4] if len(t) > 4 else []
        body.append({"name": name, "num_partitions": partitions, "replication_factor": rf,
                     "assignments": [{"partition_index": i, "broker_ids": b} for i, b in assignments],
                     "configs": [{"name": k, "value": v} for k, v in configs.items()]})
    return request(broker.port, CREATE_TOPICS, version, {"topics": body, "timeout": 30000,
                                                         "validate_only": validate_only})


def describe(broker: Any, rtype: int, name: str, keys: list[str] | None = None, synonyms: bool = True,
             docs: bool = False) -> dict:
    from tests.differential.admin_wire import request

    return request(broker.port, DESCRIBE_CONFIGS, 4, {
        "resources": [{"resource_type": rtype, "resource_name": name, "configuration_keys": keys}],
        "include_synonyms": synonyms, "include_documentation": docs})


def incremental(broker: Any, name: str, ops: list[tuple[str, int, str | None]], validate_only: bool = False,
                rtype: int = TOPIC) -> dict:
    from tests.differential.admin_wire import request

    return request(broker.port, INCREMENTAL_ALTER_CONFIGS, 1, {
        "resources": [{"resource_type": rtype, "resource_name": name,
                       "configs": [{"name": n, "config_operation": op, "value": v} for n, op, v in ops]}],
        "validate_only": validate_only})


def alter(broker: Any, name: str, configs: dict[str, str | None], validate_only: bool = False,
          rtype: int = TOPIC) -> dict:
    from tests.differential.admin_wire import request

    return request(broker.port, ALTER_CONFIGS, 2, {
        "resources": [{"resource_type": rtype, "resource_name": name,
                       "configs": [{"name": n, "value": v} for n, v in configs.items()]}],
        "validate_only": validate_only})


def metadata_partitions(broker: Any, name: str) -> tuple[int, int]:
    from tests.differential.admin_wire import request

    answer = request(broker.port, 3, 12, {"topics": [{"name": name, "topic_id": None}],
                                           "allow_auto_topic_creation": False})
    (topic,) = answer["topics"]
    return topic["error_code"], len(topic["partitions"])


def visible(broker: Any, name: str, partitions: int, timeout: float = 15.0) -> tuple[int, int]:
    """Metadata of a topic once it shows `partitions` (Kafka's brokers learn of a creation from the metadata
    log a moment after the answer)."""
    deadline = time.monotonic() + timeout
    while (state := metadata_partitions(broker, name)) != (0, partitions) and time.monotonic() < deadline:
        time.sleep(0.05)
    return state
