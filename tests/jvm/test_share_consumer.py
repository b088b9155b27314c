"""Kafka 4.4's Java KafkaShareConsumer (KIP-932), unmodified, against chronolog and against Kafka 4.4 (the
oracle: the same assertions hold for both): explicit acknowledgement with released, rejected, renewed and
lock-expired records, the delivery count limit, implicit acknowledgement shared by more members than
partitions, group configs set through the admin API, and a broker SIGKILL (chronolog only).

java/ShareScenarios.java runs every member of a broker's scenarios in one JVM; each test asserts on its
scenario's JSON lines."""

from __future__ import annotations

import json
import signal
import subprocess
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from chronolog.testing.kafka import KafkaBroker, java_command
from tests.brokerproc import BrokerProcess
from tests.jvm.conftest import java_classes, own_broker
from tests.scale import scaled

# Kafka's side of these scenarios (the oracle: the same explicit assertions hold on both) runs in the long
# tier (`make test-long`); `make test` runs chronolog's, which is what a change here can break.
ORACLE_SIDES = scaled(["chronolog"], ["chronolog", "kafka"])

# Locks short enough for a test to see them expire (Kafka's broker minimum is 1 s; a group's, 15 s).
CONFIGS = {"group.share.record.lock.duration.ms": "2500", "group.share.min.record.lock.duration.ms": "1000"}
STALL_MS = 4000
RECORDS = 20


@pytest.fixture(scope="module")
def classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return java_classes(tmp_path_factory, "Kafka's Java client", "ShareScenarios.java", "ScenarioThreads.java")


@pytest.fixture(scope="module")
def chronolog(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    yield from own_broker(tmp_path_factory, "share", CONFIGS)


@pytest.fixture(scope="module")
def kafka(classes: Path) -> Iterator:
    """Kafka 4.4 with the same short locks (the session's broker has Kafka's defaults)."""
    with KafkaBroker(configs=CONFIGS) as k:
        yield k


def produce(bootstrap: str, topic: str, n: int, partitions: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        p.produce(topic, value=f"r-{i:03d}".encode(), partition=i % partitions)
    assert p.flush(30) == 0


def run(bootstrap: str, classes: Path, specs: list[str], timeout: float = 240) -> dict[str, list[dict]]:
    proc = subprocess.run(java_command("ShareScenarios", [bootstrap, *specs], classes=classes),
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-5000:]
    lines: dict[str, list[dict]] = defaultdict(list)
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            ln = json.loads(line)
            lines[ln.pop("scenario")].append(ln)
    for tag, got in lines.items():
        errors = [ln["error"] for ln in got if "error" in ln]
        assert not errors, f"{tag} failed in the JVM:\n{errors[0]}"
    return lines


@pytest.fixture(scope="module", params=ORACLE_SIDES)
def runs(request: pytest.FixtureRequest, classes: Path) -> dict[str, list[dict]]:
    broker = request.getfixturevalue(request.param)
    topics = {tag: broker.create_topic(partitions=parts, prefix=f"share-{tag}")
              for tag, parts in (("explicit", 2), ("limit", 1), ("implicit", 2), ("expiry", 1), ("leave", 2))}
    produce(broker.bootstrap, topics["explicit"], RECORDS, 2)
    produce(broker.bootstrap, topics["limit"], 10, 1)
    produce(broker.bootstrap, topics["implicit"], 3 * RECORDS, 2)
    produce(broker.bootstrap, topics["expiry"], 1, 1)
    produce(broker.bootstrap, topics["leave"], 3 * RECORDS, 2)
    group = {tag: f"g-{t}" for tag, t in topics.items()}
    # A member that never gets a record polls until `most` (one of three on two partitions does, by design):
    # chronolog assigns at the first heartbeat; Kafka initializes share partitions in the background first.
    idle, most = 6000, (120_000 if request.param == "kafka" else 40_000)
    specs = [
        f"cfg-explicit;config;{group['explicit']};share.auto.offset.reset=earliest",
        f"cfg-limit;config;{group['limit']};share.auto.offset.reset=earliest,share.delivery.count.limit=2",
        f"cfg-implicit;config;{group['implicit']};share.auto.offset.reset=earliest",
        f"cfg-expiry;config;{group['expiry']};share.auto.offset.reset=earliest",
        f"cfg-leave;config;{group['leave']};share.auto.offset.reset=earliest",
        f"explicit;member;{topics['explicit']};{group['explicit']};explicit;"
        f"3=release,5=reject,9=renew;{idle};{most}",
        f"expiry;member;{topics['expiry']};{group['expiry']};explicit;0=stall,stallMs={STALL_MS};{idle};{most}",
        f"limit;member;{topics['limit']};{group['limit']};explicit;3=release-always;{idle};{most}",
        *(f"implicit-{i};member;{topics['implicit']};{group['implicit']};implicit;;{idle};{most}" for i in range(3)),
        f"leaver;member;{topics['leave']};{group['leave']};explicit;005=close;{idle};{most}",
        *(f"stayer-{i};member;{topics['leave']};{group['leave']};explicit;after=leaver;{idle};{most}"
          for i in range(2)),
    ]
    return run(broker.bootstrap, classes, specs)


def deliveries(lines: list[dict]) -> list[tuple[str, int, str]]:
    return [(ln["value"], ln["delivery"], ln["action"]) for ln in lines if "value" in ln]


def test_explicit_release_reject_renew(runs):
    """Released: delivered again with delivery count 2. Rejected: never again. Renewed (KIP-1222): the
    consumer hands it out again, count 1."""
    got = deliveries(runs["explicit"])
    by_value: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for value, count, action in got:
        by_value[value].append((count, action))
    assert set(by_value) == {f"r-{i:03d}" for i in range(RECORDS)}
    for value, seen in by_value.items():
        if value.endswith("3"):
            assert seen == [(1, "release"), (2, "accept")], value
        elif value.endswith("5"):
            assert seen == [(1, "reject")], value
        elif value.endswith("9"):
            assert seen == [(1, "renew"), (1, "accept")], value
        else:
            assert seen == [(1, "accept")], value
    assert not any("commit_error" in ln for ln in runs["explicit"])


def test_lock_expiry_redelivers(runs):
    """A record held past its acquisition lock comes again, delivery count 2. (The late ACCEPT of the first
    delivery usually fails; it succeeds when the client's background fetch took the record again for the same
    member meanwhile, on either broker.)"""
    assert deliveries(runs["expiry"]) == [("r-000", 1, "stall"), ("r-000", 2, "accept")]


def test_delivery_count_limit_archives(runs):
    """share.delivery.count.limit=2 (a group config): a record released at every delivery comes twice."""
    got = deliveries(runs["limit"])
    assert [(v, c) for v, c, _ in got if v.endswith("3")] == [("r-003", 1), ("r-003", 2)]
    assert Counter(v for v, _, a in got if a == "accept") == Counter(f"r-{i:03d}" for i in range(10) if i != 3)


def test_implicit_more_members_than_partitions(runs):
    """Three members share two partitions (the simple assignor puts several members on a partition): every
    record delivered once, in all."""
    got = [d for i in range(3) for d in deliveries(runs[f"implicit-{i}"])]
    assert Counter(v for v, _, _ in got) == Counter(f"r-{i:03d}" for i in range(3 * RECORDS))
    assert {c for _, c, _ in got} == {1}


def test_member_leaving_gives_back_what_it_held(runs):
    """A member closes holding a record it did not acknowledge; two members joining after it get that record
    (delivery count 2) and what it never fetched; every record is accepted once in all."""
    leaver = deliveries(runs["leaver"])
    assert ("r-005", 1, "close") in leaver and any("closing" in ln for ln in runs["leaver"])
    stayers = [d for i in range(2) for d in deliveries(runs[f"stayer-{i}"])]
    accepted = Counter(v for v, _, a in leaver + stayers if a == "accept")
    assert accepted == Counter(f"r-{i:03d}" for i in range(3 * RECORDS))
    assert ("r-005", 2, "accept") in stayers


def test_broker_sigkill_loses_and_repeats_nothing(classes, tmp_path):
    """chronolog SIGKILLed once a member acknowledged some records, then started again: the member goes on,
    no acknowledged record comes again and none is lost (the state file is written before the answer)."""
    broker = BrokerProcess(tmp_path / "data", configs=CONFIGS).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("crash", 2, 1)])["crash"].result(30)
        produce(broker.bootstrap, "crash", 200, 2)
        specs = ["cfg;config;g-crash;share.auto.offset.reset=earliest",
                 "crash;member;crash;g-crash;explicit;pauseAfter=60;8000;120000"]
        cmd = java_command("ShareScenarios", [broker.bootstrap, *specs], classes=classes)
        log = tmp_path / "jvm.log"
        with open(log, "w") as err, subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                     stderr=err, text=True) as proc:
            assert proc.stdout is not None and proc.stdin is not None
            lines = []
            for line in proc.stdout:
                if line.startswith("{"):
                    lines.append(json.loads(line))
                    if "pause" in lines[-1]:
                        break
            before = [ln["value"] for ln in lines if "value" in ln]
            broker.stop(signal.SIGKILL)
            broker.start()
            proc.stdin.write("go\n")
            proc.stdin.flush()
            lines += [json.loads(line) for line in proc.stdout if line.startswith("{")]
            proc.wait(120)
            assert proc.returncode == 0, log.read_text()[-5000:]
    finally:
        broker.stop()
    errors = [ln["error"] for ln in lines if "error" in ln]
    assert not errors, errors[0]
    values = [ln["value"] for ln in lines if "value" in ln]
    after = values[len(before):]
    assert before and not set(before) & set(after)
    assert Counter(values) == Counter(f"r-{i:03d}" for i in range(200))
