"""chronolog and Apache Kafka 4.4 side by side.

Fixtures:
- `broker`: parametrised over both brokers (ids `chronolog` and `kafka`), a `Side` with `.kind`, `.bootstrap`,
  `.create_topic(...)`, `.client_config()`, `.admin()`, `.partition_dir(topic, p)`. For scenarios whose answer
  is checked on each broker alone (a property both must have).
- `both`: a `Both` of (chronolog, kafka). A differential scenario runs the same steps on each and asserts the
  normalised observations equal: `both.same(steps, topic)` or `c, k = both.run(steps, topic)`. Prefer it.
- `chronolog_side`, `kafka_side`: the two sides alone (session-scoped).

Both brokers are started once per session (per xdist worker): Kafka by the `kafka_broker` fixture of
tests/conftest.py, chronolog as a TestBroker with the same broker settings (those chronolog knows; the
replication factors of Kafka's internal topics mean nothing on one node). Each scenario makes fresh topics.

`normalise(obs)` removes what legitimately differs between two brokers: cluster and node ids, hosts and
ports, throttle times, timing fields, topic ids and error messages (keep=... keeps any of them for a test
about them). Client errors become their names (`UNKNOWN_TOPIC_OR_PART`, `InvalidTimestampError`).

Every test in this folder is marked `differential` (`pytest -m differential`).
"""

from __future__ import annotations

import dataclasses
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
KINDS = ("chronolog", "kafka")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.differential)


class _Quiet:
    def log(self, *a: Any, **k: Any) -> None:
        pass


QUIET = {"log_level": 0, "logger": _Quiet()}


# -- one broker -------------------------------------------------------------------------------------------
class Side:
    """One broker of a differential scenario, the same interface whichever it is."""

    def __init__(self, kind: str, raw: Any) -> None:
        self.kind = kind
        self.raw = raw  # the TestBroker or the KafkaBroker
        self._admin: Any = None

    def __repr__(self) -> str:
        return f"<{self.kind} {self.bootstrap}>"

    @property
    def bootstrap(self) -> str:
        return self.raw.bootstrap

    def client_config(self, **extra: Any) -> dict[str, Any]:
        """librdkafka (confluent-kafka) settings for this broker."""
        return {"bootstrap.servers": self.bootstrap, **QUIET, **extra}

    def python_client_config(self, **extra: Any) -> dict[str, Any]:
        """kafka-python keyword arguments for this broker."""
        return {"bootstrap_servers": self.bootstrap, **extra}

    def admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        if self._admin is None:
            self._admin = AdminClient(self.client_config())
        return self._admin

    def producer(self, **extra: Any) -> Any:
        from confluent_kafka import Producer

        return Producer(self.client_config(**extra))

    def consumer(self, **extra: Any) -> Any:
        from confluent_kafka import Consumer

        conf = {"group.id": f"g-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
                "auto.offset.reset": "earliest", **extra}
        return Consumer(self.client_config(**conf))

    def create_topic(self, name: str | None = None, partitions: int = 1, configs: dict[str, str] | None = None,
                     *, prefix: str = "d") -> str:
        """Create a topic through CreateTopics (librdkafka's admin client, as on the other side) and wait
        until Metadata names its leaders. Returns its name."""
        from confluent_kafka.admin import NewTopic

        name = name or f"{prefix}-{uuid.uuid4().hex[:12]}"
        configs = {str(k): str(v) for k, v in (configs or {}).items()}
        futures = self.admin().create_topics([NewTopic(name, partitions, 1, config=configs)],
                                             operation_timeout=30, request_timeout=30)
        futures[name].result(60)
        self.wait_leaders(name, partitions)
        return name

    def wait_leaders(self, name: str, partitions: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            md = self.admin().list_topics(name, timeout=5).topics.get(name)
            if md is not None and md.error is None and len(md.partitions) == partitions and \
                    all(p.leader >= 0 for p in md.partitions.values()) and self._serving(name, partitions):
                return
            time.sleep(0.05)
        raise AssertionError(f"{self.kind}: topic {name} has no leader for each partition after {timeout} s")

    def _serving(self, name: str, partitions: int) -> bool:
        """ListOffsets answers every partition without error (Kafka's metadata names a leader a moment before
        its replica manager serves the partition: NOT_LEADER_OR_FOLLOWER in between)."""
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        futures = self.admin().list_offsets({TopicPartition(name, p): OffsetSpec.latest() for p in range(partitions)},
                                            request_timeout=5)
        try:
            for fut in futures.values():
                fut.result(10)
        except Exception:
            return False
        return True

    def delete_topic(self, name: str) -> None:
        self.admin().delete_topics([name], operation_timeout=30)[name].result(60)

    @property
    def data_dir(self) -> Path:
        """The broker's (first) log dir."""
        return Path(self.raw.data_dir) if self.kind == "chronolog" else Path(self.raw.log_dir)

    def partition_dir(self, topic: str, partition: int = 0) -> Path:
        """The folder of a partition's segments."""
        if self.kind == "chronolog":
            return Path(self.raw._manager().get_log(topic, partition).dir)
        return self.data_dir / f"{topic}-{partition}"


class Both:
    """The two sides of a differential scenario: (chronolog, kafka)."""

    def __init__(self, chronolog: Side, kafka: Side) -> None:
        self.chronolog = chronolog
        self.kafka = kafka

    def __iter__(self) -> Iterator[Side]:
        return iter((self.chronolog, self.kafka))

    def __getitem__(self, i: int) -> Side:
        return (self.chronolog, self.kafka)[i]

    def create_topic(self, name: str | None = None, partitions: int = 1, configs: dict[str, str] | None = None,
                     *, prefix: str = "d") -> str:
        """The same topic (same name, partitions, configs) on both brokers."""
        name = name or f"{prefix}-{uuid.uuid4().hex[:12]}"
        for side in self:
            side.create_topic(name, partitions, configs)
        return name

    def run(self, steps: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """`steps(side, *args, **kwargs)` on chronolog, then on Kafka: the two observations."""
        return steps(self.chronolog, *args, **kwargs), steps(self.kafka, *args, **kwargs)

    def same(self, steps: Callable[..., Any], *args: Any, keep: tuple[str, ...] = (), drop: tuple[str, ...] = (),
             **kwargs: Any) -> Any:
        """Run `steps` on both, assert the normalised observations equal and return the observation."""
        c, k = self.run(steps, *args, **kwargs)
        nc, nk = normalise(c, keep=keep, drop=drop), normalise(k, keep=keep, drop=drop)
        assert nc == nk, f"chronolog and Kafka differ:\n chronolog: {nc!r}\n kafka:     {nk!r}"
        return nc


# -- normalising observations -----------------------------------------------------------------------------
# What legitimately differs between two brokers answering the same requests.
DROP = frozenset({
    "cluster_id", "controller_id", "node_id", "broker_id", "leader", "leader_id", "replicas", "isr",
    "offline_replicas", "host", "port", "rack", "throttle_time_ms", "throttle_time", "error_message",
    "message", "topic_id", "session_id", "log_append_time", "log_append_time_ms", "elapsed",
})


def _error_name(err: Any, keep_message: bool) -> Any:
    try:
        from confluent_kafka import KafkaError
    except ModuleNotFoundError:  # pragma: no cover
        KafkaError = ()  # noqa: N806
    if isinstance(err, KafkaError):
        return (err.name(), err.str()) if keep_message else err.name()
    if err is not None and hasattr(err, "args") and err.args and isinstance(err.args[0], KafkaError):
        return _error_name(err.args[0], keep_message)
    return None


def normalise(obj: Any, *, keep: tuple[str, ...] | frozenset[str] = (), drop: tuple[str, ...] = ()) -> Any:
    """`obj` with what legitimately differs between two brokers taken out (see DROP), recursively:
    dicts, lists, tuples, named tuples, dataclasses, confluent-kafka's and kafka-python's result objects
    (as dicts of their fields) and errors (as their names; `keep=("error_message",)` keeps librdkafka's
    message too)."""
    dropped = (DROP | frozenset(drop)) - frozenset(keep)
    keep_message = "error_message" in keep

    def walk(x: Any) -> Any:
        if x is None or isinstance(x, (bool, int, float, str, bytes)):
            return x
        name = _error_name(x, keep_message)
        if name is not None:
            return name
        if isinstance(x, BaseException):
            return type(x).__name__ if not keep_message else (type(x).__name__, str(x))
        if isinstance(x, type) and issubclass(x, BaseException):
            return x.__name__
        if isinstance(x, dict):
            return {walk(k): walk(v) for k, v in x.items() if not (isinstance(k, str) and k in dropped)}
        if isinstance(x, tuple) and hasattr(x, "_asdict"):
            return walk(dict(x._asdict()))
        if isinstance(x, tuple):
            return tuple(walk(v) for v in x)
        if isinstance(x, list):
            return [walk(v) for v in x]
        if isinstance(x, (set, frozenset)):
            return sorted((walk(v) for v in x), key=repr)
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            return walk({f.name: getattr(x, f.name) for f in dataclasses.fields(x)})
        if hasattr(x, "__slots__") or hasattr(x, "__dict__") or type(x).__module__.startswith("cimpl"):
            fields = {k: getattr(x, k) for k in dir(x) if not k.startswith("_")
                      and not callable(getattr(x, k, None))}
            return {"type": type(x).__name__, **walk(fields)}
        return x

    return walk(obj)


# -- the brokers -----------------------------------------------------------------------------------------
def _chronolog_configs(kafka_configs: dict[str, str]) -> dict[str, str]:
    """Kafka's fixture settings that chronolog knows (a config chronolog refuses is left out: the internal
    topics' replication factors and min ISR, which one node has no use for)."""
    from chronolog.config import BrokerConfig

    known = {}
    for key, value in kafka_configs.items():
        try:
            BrokerConfig({key: value})
        except Exception:
            continue
        known[key] = value
    return known


@pytest.fixture(scope="session")
def kafka_side(kafka_broker: Any) -> Side:
    return Side("kafka", kafka_broker)


def kafka_fixture_configs() -> dict[str, str]:
    """The broker settings of tests/conftest.py's `kafka_broker` (KafkaBroker's defaults and its configs)."""
    from chronolog.testing.kafka import SINGLE_NODE_DEFAULTS
    from tests.conftest import KAFKA_TEST_CONFIGS

    return {**SINGLE_NODE_DEFAULTS, **KAFKA_TEST_CONFIGS}


@pytest.fixture(scope="session")
def chronolog_side(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Side]:
    """chronolog with Kafka's fixture settings; it does not need Kafka (tests pinning chronolog's side of a
    documented difference run without it)."""
    from chronolog.testing.runner import TestBroker

    base = tmp_path_factory.mktemp("chronolog-diff")
    broker = TestBroker(base / "data", configs=_chronolog_configs(kafka_fixture_configs()), keep_data=True)
    broker.start()
    try:
        yield Side("chronolog", broker)
    finally:
        broker.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(params=KINDS, ids=KINDS)
def broker(request: pytest.FixtureRequest) -> Side:
    return request.getfixturevalue(f"{request.param}_side")


@pytest.fixture
def both(chronolog_side: Side, kafka_side: Side) -> Both:
    return Both(chronolog_side, kafka_side)
