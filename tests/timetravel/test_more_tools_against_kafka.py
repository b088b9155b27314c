"""The way out, continued: `chronolog topics`, `produce`, `groups`, `lag`, `group-history` and `sql` against
Apache Kafka 4.4 — one broker, and a 3-node cluster with a node killed while the tools run. The answers are the ones chronolog gives, or one
line and a non-zero exit; never a partial answer with exit 0."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime

import pytest
from confluent_kafka import Consumer, TopicPartition
from typer.testing import CliRunner

from chronolog.cli.main import app

BASE = 1_700_000_000_000  # 2023-11-14T22:13:20Z
KEEP = ["-c", "retention.ms=-1"]  # times of 2023: Kafka's retention would delete them within seconds


def run(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result.output


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def read_all(bootstrap: str, topic: str, partitions: int, count: int) -> list:
    """Every record of the topic, read with confluent-kafka (bounded: 60 s)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got, deadline = [], time.monotonic() + 60
    try:
        while len(got) < count and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got.append(m)
    finally:
        c.close()
    return got


def check_topics(bootstrap: str) -> str:
    topic = f"tt-{uuid.uuid4().hex[:10]}"
    run("topics", "create", topic, "--partitions", "3", *KEEP, "-b", bootstrap)
    assert json.loads(run("topics", "list", "-b", bootstrap, "--json"))[topic] == 3
    run("topics", "alter", topic, "--partitions", "4", "-c", "segment.ms=3600000", "-b", bootstrap)
    # Kafka's brokers learn the change from the controller a moment after it is acknowledged (kafka-topics
    # --describe shows the same): poll, bounded
    deadline = time.monotonic() + 30
    while True:
        out = json.loads(run("topics", "describe", topic, "-b", bootstrap, "--json"))
        if len(out["partitions"]) == 4 and out["configs"]["segment.ms"] == "3600000" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert [p["partition"] for p in out["partitions"]] == [0, 1, 2, 3]
    assert all(p["start_offset"] == p["end_offset"] == 0 for p in out["partitions"])
    assert out["configs"]["segment.ms"] == "3600000" and out["configs"]["retention.ms"] == "-1"
    return topic


def stamp(i: int) -> int:
    """Line i's own time: every fifth line out of order."""
    return BASE + 1000 * i - (1500 if i % 5 == 2 else 0)


LINES = [f"{iso(stamp(i))} line {i}" for i in range(30)]


def check_produce(bootstrap: str, topic: str, partitions: int, tmp_path) -> None:
    lines = LINES
    path = tmp_path / "lines.log"
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    run("produce", topic, str(path), "--time-field", "1", "--time-format", "iso", "-b", bootstrap)
    got = read_all(bootstrap, topic, partitions, len(lines))
    want = {(line.encode(), stamp(i)) for i, line in enumerate(lines)}
    assert {(m.value(), m.timestamp()[1]) for m in got} == want
    assert len(got) == len(lines)
    ends = {p["partition"]: p["end_offset"] for p in  # a commit past the end (by-key spreading of keyless lines varies) has lag 0
            json.loads(run("topics", "describe", topic, "-b", bootstrap, "--json"))["partitions"]}
    assert ends == {p: sum(1 for m in got if m.partition() == p) for p in range(partitions)}


def test_topics_and_produce_against_a_kafka_broker(kafka_broker, tmp_path):
    topic = check_topics(kafka_broker.bootstrap)
    check_produce(kafka_broker.bootstrap, topic, 4, tmp_path)


def commit_three_times(bootstrap: str, topic: str, group: str, partitions: int) -> list[tuple[int, dict]]:
    """A real consumer of `group` commits three sets of positions; returns (a time after each commit and
    before the next, the positions)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    marks = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 60
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(0.2)
        for step in (1, 2, 3):
            positions = {p: min(step * 2 + p, 5) for p in range(partitions)}
            c.commit(offsets=[TopicPartition(topic, p, o) for p, o in positions.items()], asynchronous=False)
            at = time.time_ns() // 1_000_000 + 1
            while time.time_ns() // 1_000_000 <= at + 1:  # the next commit is stamped strictly after `at`
                pass
            marks.append((at, positions))
    finally:
        c.close()
    return marks


def check_groups(bootstrap: str, topic: str, partitions: int) -> None:
    group = f"g-{uuid.uuid4().hex[:8]}"
    marks = commit_three_times(bootstrap, topic, group, partitions)
    assert group in run("groups", "list", "-b", bootstrap)
    out = json.loads(run("groups", "describe", group, "-b", bootstrap, "--json"))
    assert out["group"] == group and out["members"] == []
    ends = {p["partition"]: p["end_offset"] for p in  # a commit past the end (by-key spreading of keyless lines varies) has lag 0
            json.loads(run("topics", "describe", topic, "-b", bootstrap, "--json"))["partitions"]}
    assert {r["partition"]: (r["committed"], r["log_end"], r["lag"]) for r in out["partitions"]} == {
        p: (o, ends[p], max(0, ends[p] - o)) for p, o in marks[-1][1].items()}
    # group-history replays Kafka's own __consumer_offsets records, read over the broker
    for at, positions in marks:
        hist = json.loads(run("group-history", "--group", group, "--at", str(at), "-b", bootstrap, "--json"))
        assert {(r["topic"], r["partition"]): r["offset"] for r in hist["partitions"]} == {
            (topic, p): o for p, o in positions.items()}
        assert all(r["committed_at"] <= at for r in hist["partitions"])


def test_groups_and_history_against_a_kafka_broker(kafka_broker, tmp_path):
    topic = kafka_broker.create_topic(partitions=4, configs={"retention.ms": "-1"})
    check_produce(kafka_broker.bootstrap, topic, 4, tmp_path)
    check_groups(kafka_broker.bootstrap, topic, 4)


def test_sql_over_a_kafka_topic(kafka_broker, tmp_path):
    topic = kafka_broker.create_topic(partitions=4, configs={"retention.ms": "-1"})
    check_produce(kafka_broker.bootstrap, topic, 4, tmp_path)
    result = tmp_path / "window.json"  # COPY writes the file itself (stdout would bypass CliRunner)
    run("sql", "select value, timestamp from records order by timestamp, value", str(result), "--topic", topic,
        "--from", str(BASE + 5_000), "--to", str(BASE + 20_000), "--format", "json", "-b", kafka_broker.bootstrap)
    out = result.read_text()
    got = [json.loads(line)["value"] for line in out.splitlines()]
    assert got == [line for i, line in sorted(enumerate(LINES), key=lambda e: stamp(e[0]))
                   if BASE + 5_000 <= stamp(i) < BASE + 20_000]


def exact_or_refused(*args: str) -> str | None:
    """The tool's output when it answers, or None when it refuses in one line with a non-zero exit."""
    result = CliRunner().invoke(app, list(args))
    if result.exit_code == 0:
        return result.output
    assert result.output.strip() and len(result.output.strip().splitlines()) == 1, result.output
    assert not isinstance(result.exception, AssertionError | TypeError | KeyError), repr(result.exception)
    return None


@pytest.mark.slow
def test_topics_groups_produce_against_a_cluster_while_a_node_dies(kafka_cluster, tmp_path):
    bootstrap = kafka_cluster.bootstrap
    topic = kafka_cluster.create_topic(partitions=4, configs={"retention.ms": "-1"}, replication=3)
    check_produce(bootstrap, topic, 4, tmp_path)
    group = f"g-{uuid.uuid4().hex[:8]}"
    marks = commit_three_times(bootstrap, topic, group, 4)
    ends = {p["partition"]: p["end_offset"] for p in
            json.loads(run("topics", "describe", topic, "-b", bootstrap, "--json"))["partitions"]}
    victim = kafka_cluster.nodes[1]
    victim.kill()  # leaders (and maybe the group's coordinator) move while the tools ask
    try:
        out = exact_or_refused("topics", "list", "-b", bootstrap, "--json")
        if out is not None:
            assert json.loads(out)[topic] == 4
        out = exact_or_refused("topics", "describe", topic, "-b", bootstrap, "--json")
        if out is not None:
            assert {p["partition"]: p["end_offset"] for p in json.loads(out)["partitions"]} == ends
        out = exact_or_refused("groups", "describe", group, "-b", bootstrap, "--json")
        if out is not None:
            assert {r["partition"]: r["committed"] for r in json.loads(out)["partitions"]} == marks[-1][1]
        out = exact_or_refused("lag", "--group", group, "-b", bootstrap, "--json")
        if out is not None:
            assert {r["partition"]: (r["committed"], r["lag"]) for r in json.loads(out)["partitions"]} == {
                p: (o, max(0, ends[p] - o)) for p, o in marks[-1][1].items()}
        at, positions = marks[1]
        out = exact_or_refused("group-history", "--group", group, "--at", str(at), "-b", bootstrap, "--json")
        if out is not None:  # the second commit's positions, replayed from Kafka's own __consumer_offsets
            assert {r["partition"]: r["offset"] for r in json.loads(out)["partitions"]} == positions
        result = tmp_path / "window.json"
        out = exact_or_refused("sql", "select value from records order by timestamp, value", str(result),
                               "--topic", topic, "--from", str(BASE + 5_000), "--to", str(BASE + 20_000),
                               "--format", "json", "-b", bootstrap)
        if out is not None:  # the whole window or nothing
            assert [json.loads(line)["value"] for line in result.read_text().splitlines()] == [
                line for i, line in sorted(enumerate(LINES), key=lambda e: stamp(e[0]))
                if BASE + 5_000 <= stamp(i) < BASE + 20_000]
        path = tmp_path / "more.log"
        path.write_text("".join(f"{iso(BASE + 100_000 + i)} more {i}\n" for i in range(20)))
        out = exact_or_refused("produce", topic, str(path), "--time-field", "1", "-b", bootstrap)
        if out is not None:  # every line landed, with its own time
            got = read_all(bootstrap, topic, 4, len(LINES) + 20)
            assert sorted(m.timestamp()[1] for m in got if m.value().startswith(b"20") and b" more " in m.value()) \
                == [BASE + 100_000 + i for i in range(20)]
    finally:
        victim.start()  # the session's cluster whole again for the next test
        kafka_cluster.wait_ready(120)
