"""A Kafka Streams 4.4 app, unmodified, against chronolog: exactly_once_v2, a repartition topic and a state
store's changelog topic that Streams creates itself, output exact through two SIGKILLs of the app."""

from __future__ import annotations

import signal
import subprocess
import time
from collections import defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from chronolog.testing.kafka import java_command
from tests.jvm.conftest import java_classes

pytestmark = pytest.mark.slow
KEYS = 30
CHUNK = 600


@pytest.fixture(scope="module")
def app_classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return java_classes(tmp_path_factory, "Kafka Streams", "StreamsCountApp.java")


def produce_chunk(bootstrap: str, topic: str, start: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(start, start + CHUNK):
        p.produce(topic, key=b"r%d" % i, value=b"k%d,%d" % (i % KEYS, i))
    assert p.flush(30) == 0


def committed_counts(bootstrap: str, topic: str) -> dict[str, list[int]]:
    """Every count the app committed, per key, in order (read_committed, from the start to the LSO)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "isolation.level": "read_committed",
                  "enable.partition.eof": True, "enable.auto.commit": False})
    try:
        parts = list(c.list_topics(topic, timeout=10).topics[topic].partitions)
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
        todo = {p for p in parts if ends[p] > 0}
        seen: dict[str, list[int]] = defaultdict(list)
        deadline = time.monotonic() + 60
        while todo and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                todo.discard(m.partition())
                continue
            seen[m.key().decode()].append(int.from_bytes(m.value(), "big", signed=True))
        return seen
    finally:
        c.close()


class App:
    def __init__(self, classes: Path, bootstrap: str, app_id: str, src: str, dst: str, state: Path) -> None:
        cmd = java_command("StreamsCountApp", [bootstrap, app_id, src, dst, str(state)], classes=classes)
        self.log = open(state.parent / f"{app_id}.log", "ab")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self.log.close()


def wait_for(bootstrap: str, topic: str, total: int, app: App, timeout: float = 180) -> dict[str, list[int]]:
    """Poll the committed output until it holds `total` updates (bounded); fail at once if the app died."""
    deadline = time.monotonic() + timeout
    seen: dict[str, list[int]] = {}
    while time.monotonic() < deadline:
        assert app.proc.poll() is None, f"the Streams app exited {app.proc.returncode}"
        seen = committed_counts(bootstrap, topic)
        if sum(len(v) for v in seen.values()) >= total:
            return seen
        time.sleep(0.5)
    raise AssertionError(f"only {sum(len(v) for v in seen.values())} of {total} updates committed in time")


def assert_exactly_once(bootstrap: str, topic: str) -> None:
    """The app's committed output after three chunks of CHUNK records and two kills: every key, and each
    key's committed counts are 1, 2, ..., n — none lost, none twice after the kills."""
    seen = committed_counts(bootstrap, topic)
    per_key = 3 * CHUNK // KEYS
    assert sorted(seen) == sorted(f"k{i}" for i in range(KEYS))
    assert {k: v for k, v in seen.items() if v != list(range(1, per_key + 1))} == {}


def test_streams_exactly_once_through_two_kills(chronolog_broker, app_classes, tmp_path):
    bootstrap = chronolog_broker.bootstrap
    src = chronolog_broker.create_topic(partitions=3, prefix="streams-in")
    dst = chronolog_broker.create_topic(partitions=2, prefix="streams-out")
    app_id = f"count-{src[-6:]}"
    state = tmp_path / "state"

    for chunk in range(3):
        produce_chunk(bootstrap, src, chunk * CHUNK)
        app = App(app_classes, bootstrap, app_id, src, dst, state)
        try:
            # some of this chunk committed, then a crash (the last run is read to the end instead)
            wait_for(bootstrap, dst, chunk * CHUNK + (CHUNK // 3 if chunk < 2 else CHUNK), app)
        finally:
            app.kill()

    assert_exactly_once(bootstrap, dst)
    # Streams made its own repartition and changelog topics (CreateTopics answered as Kafka's client reads it)
    names = set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics)
    assert any(n.startswith(app_id) and n.endswith("-repartition") for n in names)
    assert any(n.startswith(app_id) and n.endswith("-changelog") for n in names)
