"""Kafka 4.4's Java producer with transaction version 2 (KIP-890 part 2), unmodified, against chronolog and
against Kafka 4.4: commits with offsets, aborts, a second producer with the same transactional.id fencing the
first, and a broker SIGKILLed in the middle of a transaction. java/TxnV2Scenarios.java prints what the
producer and a read_committed consumer see; the lines must be equal on both brokers. That the producer runs
version 2 is read from the producer itself (TransactionManager.isTransactionV2Enabled) and from its
NetworkClient's DEBUG log: EndTxn v5, and no AddPartitionsToTxn / AddOffsetsToTxn sent."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from chronolog.testing.kafka import KafkaBroker, java_command
from tests.brokerproc import BrokerProcess
from tests.jvm.conftest import java_classes


@pytest.fixture(scope="module")
def classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return java_classes(tmp_path_factory, "Kafka's Java client", "TxnV2Scenarios.java", folder="txnv2-classes")


@pytest.fixture(scope="module")
def chronolog(tmp_path_factory: pytest.TempPathFactory, classes: Path) -> Iterator[BrokerProcess]:
    """A broker process of this module's own: the crash scenario kills it."""
    with BrokerProcess(tmp_path_factory.mktemp("txnv2-chronolog") / "data") as proc:
        yield proc


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory, classes: Path) -> Iterator[KafkaBroker]:
    """A Kafka broker of this module's own (not the session's): the crash scenario kills it."""
    with KafkaBroker(base=tmp_path_factory.mktemp("txnv2-kafka")) as broker:
        yield broker


def create_topic(bootstrap: str, partitions: int = 2) -> str:
    name = f"tv2j-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=30)[name].result(60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(name, timeout=5).topics.get(name)
        if md is not None and md.error is None and all(p.leader >= 0 for p in md.partitions.values()):
            return name
        time.sleep(0.1)
    raise AssertionError(f"{name} has no leaders")


def client_log4j(path: Path) -> Path:
    """The producer's NetworkClient at DEBUG to a file: each request's header names its API and version."""
    path.write_text(
        "Configuration:\n"
        "  Appenders:\n"
        "    File:\n"
        "      name: file\n"
        f"      fileName: {path.with_suffix('.log')}\n"
        "      PatternLayout: {pattern: '%p %m (%c)%n'}\n"
        "  Loggers:\n"
        "    Root: {level: WARN, AppenderRef: [{ref: file}]}\n"
        "    Logger:\n"
        "      - {name: org.apache.kafka.clients.NetworkClient, level: DEBUG}\n")
    return path


def java(classes: Path, log_base: Path, *args: str) -> subprocess.Popen:
    cmd = java_command("TxnV2Scenarios", list(args), log4j=client_log4j(log_base.with_suffix(".yaml")),
                       classes=classes)
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def lines_of(out: str) -> list[dict]:
    lines = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
    errors = [ln["error"] for ln in lines if "error" in ln]
    assert not errors, errors[0]
    assert any(ln.get("done") for ln in lines), out[-2000:]
    return [ln for ln in lines if "done" not in ln]


def requests_sent(log: Path) -> set[str]:
    """`API vVERSION` of every request the client's log shows (NetworkClient: "Sending ... RequestHeader(
    apiKey=END_TXN, apiVersion=5, ...")."""
    import re

    text = log.read_text(errors="replace") if log.exists() else ""
    return {f"{m[1]} v{m[2]}" for m in re.finditer(r"apiKey=(\w+), apiVersion=(\d+)", text)}


def run_basic(classes: Path, bootstrap: str, log_base: Path) -> list[dict]:
    topic = create_topic(bootstrap)
    proc = java(classes, log_base, bootstrap, "basic", topic, f"g-{topic}")
    out, err = proc.communicate(timeout=240)
    return lines_of(out)


def test_commit_abort_offsets_and_fencing(classes, chronolog, kafka, tmp_path):
    c = run_basic(classes, chronolog.bootstrap, tmp_path / "chronolog")
    k = run_basic(classes, kafka.bootstrap, tmp_path / "kafka")
    assert c == k
    steps = {ln["step"]: ln for ln in k}
    assert steps["init"]["tv2"] is True and steps["commit"]["epoch"] == 1  # version 2: a bump per transaction
    assert steps["zombie commit"]["result"] == "ProducerFencedException"
    values = steps["read"]["values"]
    assert values == sorted([f"a{i}" for i in range(10)] + [f"c{i}" for i in range(5)] + [f"d{i}" for i in range(4)])
    assert steps["read"]["committed"] == 5
    for side in ("chronolog", "kafka"):
        sent = requests_sent(tmp_path / f"{side}.log")
        assert "END_TXN v5" in sent, (side, sorted(sent))
        assert not {s for s in sent if s.startswith(("ADD_PARTITIONS_TO_TXN", "ADD_OFFSETS_TO_TXN"))}, (side, sent)
        assert "TXN_OFFSET_COMMIT v5" in sent or "TXN_OFFSET_COMMIT v6" in sent, (side, sorted(sent))


def run_crash(classes: Path, bootstrap: str, log_base: Path, kill_and_restart) -> list[dict]:
    topic = create_topic(bootstrap)
    proc = java(classes, log_base, bootstrap, "crash", topic)
    first = proc.stdout.readline()  # the transaction is sent and flushed, not committed
    assert json.loads(first).get("step") == "sent", first + proc.stderr.read()[-2000:]
    kill_and_restart()
    out, err = proc.communicate("go\n", timeout=300)
    return lines_of(first + out)


def test_a_broker_killed_mid_transaction(classes, chronolog, kafka, tmp_path):
    def chronolog_crash() -> None:
        chronolog.stop(signal.SIGKILL)
        chronolog.start()

    def kafka_crash() -> None:
        node = kafka.nodes[0]
        node.kill()
        node.start()
        kafka.wait_ready(120)

    c = run_crash(classes, chronolog.bootstrap, tmp_path / "chronolog", chronolog_crash)
    k = run_crash(classes, kafka.bootstrap, tmp_path / "kafka", kafka_crash)
    assert c == k
    steps = {ln["step"]: ln for ln in k}
    assert steps["sent"]["tv2"] is True
    assert steps["commit after restart"]["result"] == "committed"
    assert steps["read"]["values"] == sorted([f"x{i}" for i in range(10)] + [f"y{i}" for i in range(5)])
