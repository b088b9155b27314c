"""Kafka Streams 4.4 with `group.protocol=streams` (KIP-1071 streams groups): the broker assigns the tasks,
creates the repartition and changelog topics, and the exactly_once_v2 app's output stays exact through two
SIGKILLs of the app, against chronolog and, for comparison, against Kafka 4.4. `kafka-streams-groups
--describe` describes the group on both."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from chronolog.testing.kafka import KafkaBroker, java_command, run_tool
from tests.jvm.conftest import java_classes
from tests.jvm.test_streams_eos import (
    CHUNK,
    KEYS,
    App,
    assert_exactly_once,
    produce_chunk,
    wait_for,
)
from tests.scale import scaled

# Kafka's side of these scenarios (the oracle: the same explicit assertions hold on both) runs in the long
# tier (`make test-long`); `make test` runs chronolog's, which is what a change here can break.
ORACLE_SIDES = scaled(["chronolog"], ["chronolog", "kafka"])

pytestmark = pytest.mark.slow
STREAMS_GROUP_COMMAND = "org.apache.kafka.tools.streams.StreamsGroupCommand"  # kafka-streams-groups.sh
# A killed app's member holds its tasks until its session times out (the broker's, not the client's, in
# this protocol): a short one on both brokers keeps each restart quick.
# One standby replica per task: with two instances each holds the other's tasks as standbys.
SESSION = {"group.streams.session.timeout.ms": "6000", "group.streams.num.standby.replicas": "1"}


@pytest.fixture(scope="module")
def app_classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return java_classes(tmp_path_factory, "Kafka Streams", "StreamsCountApp.java")


@pytest.fixture(scope="module")
def brokers(app_classes, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    from chronolog.testing import broker

    kafka = KafkaBroker(configs={**SESSION, "group.streams.min.session.timeout.ms": "6000"})
    with broker(tmp_path_factory.mktemp("chronolog"), configs=SESSION) as chronolog, kafka:
        yield {"chronolog": chronolog, "kafka": kafka}


class StreamsApp(App):
    """The app of test_streams_eos with `group.protocol=streams`."""

    def __init__(self, classes: Path, bootstrap: str, app_id: str, src: str, dst: str, state: Path) -> None:
        cmd = java_command("StreamsCountApp", [bootstrap, app_id, src, dst, str(state), "streams"], classes=classes)
        state.parent.mkdir(parents=True, exist_ok=True)
        self.log = open(state.parent / f"{app_id}.log", "ab")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)


def describe(bootstrap: str, app_id: str, *extra: str) -> str:
    proc = run_tool(STREAMS_GROUP_COMMAND, "--bootstrap-server", bootstrap, "--describe", "--group", app_id, *extra)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.parametrize("kind", ORACLE_SIDES)
def test_streams_group_exactly_once_through_two_kills(brokers, app_classes, tmp_path, kind):
    target = brokers[kind]
    bootstrap = target.bootstrap
    suffix = f"{time.time_ns() % 10**9}"
    src, dst = f"sg-in-{suffix}", f"sg-out-{suffix}"
    target.create_topic(src, 3)
    target.create_topic(dst, 2)
    app_id = f"sgcount-{suffix}"
    state = tmp_path / "state"

    described = offsets = ""
    for chunk in range(3):
        produce_chunk(bootstrap, src, chunk * CHUNK)
        app = StreamsApp(app_classes, bootstrap, app_id, src, dst, state)
        try:
            wait_for(bootstrap, dst, chunk * CHUNK + (CHUNK // 3 if chunk < 2 else CHUNK), app)
            if chunk == 2:  # the group as kafka-streams-groups shows it while the app runs
                described = describe(bootstrap, app_id, "--members", "--verbose")
                offsets = describe(bootstrap, app_id)
        finally:
            app.kill()

    assert_exactly_once(bootstrap, dst)
    # the broker made the internal topics (the streams protocol's clients do not create them)
    names = set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics)
    assert {n for n in names if n.startswith(app_id)} == {
        f"{app_id}-KSTREAM-AGGREGATE-STATE-STORE-0000000002-repartition",
        f"{app_id}-KSTREAM-AGGREGATE-STATE-STORE-0000000002-changelog"}
    # one streams member (the killed ones fenced by their session timeout) holding every task
    rows = [line.split() for line in described.splitlines() if line.startswith(app_id)]
    live = [r for r in rows if "streams" in r]
    assert live, described
    assert any("ACTIVE:" in r and "0:[0,1,2];" in r and "1:[0,1,2];" in r for r in live), described
    parts = {tuple(line.split()[1:3]) for line in offsets.splitlines() if line.startswith(app_id)}
    assert parts == {(t, str(p)) for t in (src, f"{app_id}-KSTREAM-AGGREGATE-STATE-STORE-0000000002-repartition")
                     for p in range(3)}, offsets
    listed = run_tool(STREAMS_GROUP_COMMAND, "--bootstrap-server", bootstrap, "--list")
    assert app_id in listed.stdout.split(), listed.stdout + listed.stderr
    # the killed member fenced by its session timeout, the group is Empty: its offsets and itself may go
    deadline = time.monotonic() + 60
    while "Empty" not in (state := describe(bootstrap, app_id, "--state")) and time.monotonic() < deadline:
        time.sleep(1)
    assert "Empty" in state, state
    deleted = run_tool(STREAMS_GROUP_COMMAND, "--bootstrap-server", bootstrap, "--delete-offsets", "--group", app_id,
                       "--input-topic", src)
    assert deleted.returncode == 0 and deleted.stdout.count("Successful") == 3, deleted.stdout + deleted.stderr
    gone = run_tool(STREAMS_GROUP_COMMAND, "--bootstrap-server", bootstrap, "--delete", "--group", app_id)
    assert "was successful" in gone.stdout, gone.stdout + gone.stderr
    listed = run_tool(STREAMS_GROUP_COMMAND, "--bootstrap-server", bootstrap, "--list")
    assert app_id not in listed.stdout.split(), listed.stdout


def test_streams_group_survives_a_broker_sigkill(app_classes, tmp_path):
    """The broker SIGKILLed under a running app and started again on its data: the group comes back from
    `__consumer_offsets` with its member, epoch and tasks (the member goes on heartbeating, no rejoin), and
    the output stays exact."""
    from confluent_kafka.admin import NewTopic

    from tests.brokerproc import BrokerProcess

    proc = BrokerProcess(tmp_path / "data", configs=SESSION).start()
    app = None
    try:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        for future in admin.create_topics([NewTopic("in", 3), NewTopic("out", 2)]).values():
            future.result(30)
        produce_chunk(proc.bootstrap, "in", 0)
        app = StreamsApp(app_classes, proc.bootstrap, "sgkill", "in", "out", tmp_path / "state")
        wait_for(proc.bootstrap, "out", CHUNK // 3, app)
        before = describe(proc.bootstrap, "sgkill", "--members", "--verbose")
        proc.kill()
        proc.start()
        produce_chunk(proc.bootstrap, "in", CHUNK)
        seen = wait_for(proc.bootstrap, "out", 2 * CHUNK, app)
        after = describe(proc.bootstrap, "sgkill", "--members", "--verbose")
    finally:
        if app is not None:
            app.kill()
        proc.stop()
    per_key = 2 * CHUNK // KEYS
    assert {k: v for k, v in seen.items() if v != list(range(1, per_key + 1))} == {}
    # the same member at the same epoch (a fenced member would have joined again at a new group epoch)
    member = [line.split()[1:6] for line in before.splitlines() if line.startswith("sgkill")]
    assert member and member == [line.split()[1:6] for line in after.splitlines() if line.startswith("sgkill")], \
        (before, after)


@pytest.mark.parametrize("kind", ORACLE_SIDES)
def test_two_instances_share_the_tasks_and_one_takes_over(brokers, app_classes, tmp_path, kind):
    """Two instances of the app split the six tasks; one SIGKILLed, the other takes its tasks over once
    the broker fences it, and the output stays exact."""
    target = brokers[kind]
    bootstrap = target.bootstrap
    suffix = f"{time.time_ns() % 10**9}"
    src, dst, app_id = f"sg2-in-{suffix}", f"sg2-out-{suffix}", f"sg2count-{suffix}"
    target.create_topic(src, 3)
    target.create_topic(dst, 2)
    produce_chunk(bootstrap, src, 0)
    first = StreamsApp(app_classes, bootstrap, app_id, src, dst, tmp_path / "a" / "state")
    second = StreamsApp(app_classes, bootstrap, app_id, src, dst, tmp_path / "b" / "state")
    try:
        wait_for(bootstrap, dst, CHUNK, second)
        deadline = time.monotonic() + 60
        while True:  # both members hold active tasks once the group is stable
            rows = [line for line in describe(bootstrap, app_id, "--members").splitlines()
                    if line.startswith(app_id)]
            if len(rows) == 2 and all("ACTIVE:" in r and "STANDBY:" in r for r in rows) \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert len(rows) == 2 and all("ACTIVE:" in r and "STANDBY:" in r for r in rows), rows
        first.kill()
        produce_chunk(bootstrap, src, CHUNK)
        seen = wait_for(bootstrap, dst, 2 * CHUNK, second)
    finally:
        for app in (first, second):
            if app.proc.poll() is None:
                app.kill()
    per_key = 2 * CHUNK // KEYS
    assert {k: v for k, v in seen.items() if v != list(range(1, per_key + 1))} == {}
