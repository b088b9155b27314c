"""confluent-kafka's ShareConsumer (librdkafka's preview, KIP-932) against chronolog and Kafka 4.4: a group
of share consumers, some of them Kafka's Java KafkaShareConsumer, sharing a topic with more members than
partitions gets every record once; RELEASE and REJECT in explicit mode behave as on Kafka."""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer

pytest.importorskip("confluent_kafka", minversion="2.16")
from confluent_kafka import AcknowledgeType, ShareConsumer  # noqa: E402

from tests.groupconfigs import set_group_configs  # noqa: E402
from tests.scale import scaled  # noqa: E402

# Kafka's side of these scenarios (the oracle: the same explicit assertions hold on both) runs in the long
# tier (`make test-long`); `make test` runs chronolog's, which is what a change here can break.
ORACLE_SIDES = scaled(["chronolog"], ["chronolog", "kafka"])

JAVA = Path(__file__).parents[1] / "jvm" / "java"


@pytest.fixture(params=ORACLE_SIDES)
def broker(request: pytest.FixtureRequest):
    return request.getfixturevalue("chronolog_broker" if request.param == "chronolog" else "kafka_broker")


def _setup(b, tag: str, records: int, partitions: int) -> tuple[str, str]:
    topic = b.create_topic(partitions=partitions, prefix=tag)
    p = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(records):
        p.produce(topic, value=f"r-{i:03d}".encode(), partition=i % partitions)
    assert p.flush(30) == 0
    group = f"g-{topic}"
    set_group_configs(b.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    return topic, group


def _poll_until_idle(consumers: list, seen: Counter, idle_s: float, most_s: float, on_message=None) -> None:
    start, last = time.monotonic(), None
    while time.monotonic() - start < most_s and (last is None or time.monotonic() - last < idle_s):
        for c in consumers:
            for m in c.poll(0.2) or []:
                assert m.error() is None, m.error()
                seen[m.value().decode()] += 1
                last = time.monotonic()
                if on_message is not None:
                    on_message(c, m)


@pytest.fixture(scope="module")
def classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from chronolog.testing.kafka import compile_java, kafka_available

    if kafka_available():
        pytest.skip(kafka_available())
    return compile_java(tmp_path_factory.mktemp("classes"), JAVA / "ShareScenarios.java", JAVA / "ScenarioThreads.java")


def test_confluent_and_java_members_share_a_topic(broker, classes, request):
    """Two confluent-kafka members and one Java member in one group on two partitions: each record once."""
    from chronolog.testing.kafka import java_command

    topic, group = _setup(broker, "mixed", 90, 2)
    # a member that gets no record (one of three on two partitions may not) polls until its bound: Kafka
    # initializes share partitions in the background before it assigns them, chronolog at once
    most_ms = 90_000 if request.node.callspec.params["broker"] == "kafka" else 40_000
    java = subprocess.Popen(java_command("ShareScenarios", [broker.bootstrap, f"java;member;{topic};{group};implicit;"
                                                            f";8000;{most_ms}"], classes=classes),
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    consumers = [ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "log_level": 3})
                 for _ in range(2)]
    seen: Counter = Counter()
    try:
        for c in consumers:
            c.subscribe([topic])
        _poll_until_idle(consumers, seen, 8, 90)
    finally:
        for c in consumers:
            c.close()
        out, _ = java.communicate(timeout=120)
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert not [ln for ln in lines if "error" in ln]
    seen.update(ln["value"] for ln in lines if "value" in ln)
    assert seen == Counter(f"r-{i:03d}" for i in range(90))


def test_confluent_explicit_release_and_reject(broker):
    """RELEASE: delivered again; REJECT: never again; the rest once."""
    topic, group = _setup(broker, "ckexplicit", 20, 1)
    acted: set[str] = set()

    def ack(c, m) -> None:
        value = m.value().decode()
        kind = AcknowledgeType.ACCEPT
        if value not in acted and value.endswith(("3", "5")):
            acted.add(value)
            kind = AcknowledgeType.RELEASE if value.endswith("3") else AcknowledgeType.REJECT
        c.acknowledge(m, kind)

    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit", "log_level": 3})
    seen: Counter = Counter()
    try:
        consumer.subscribe([topic])
        start, last = time.monotonic(), None
        while time.monotonic() - start < 90 and (last is None or time.monotonic() - last < 6):
            msgs = consumer.poll(0.2) or []
            for m in msgs:
                assert m.error() is None, m.error()
                seen[m.value().decode()] += 1
                last = time.monotonic()
                ack(consumer, m)
            if msgs:
                consumer.commit_sync()
    finally:
        consumer.close()
    expected = Counter(f"r-{i:03d}" for i in range(20))
    expected.update(["r-003", "r-013"])
    assert seen == expected
