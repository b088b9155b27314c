"""Kafka 4.4's Java client, unmodified, against chronolog: idempotent and transactional producers, consumer
groups of both protocols, offsetsForTimes and seek by time, static membership, cooperative rebalancing.

java/ClientScenarios.java runs every scenario at once in one JVM (a JVM start costs seconds; the scenarios
mostly wait on rebalances), each with a topic and group of its own; each test asserts on its scenario's JSON
lines."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from chronolog.testing.kafka import java_command
from tests.brokerproc import BrokerProcess
from tests.jvm.conftest import java_classes, own_broker

# CreateTime timestamps of the last hours (older ones would be retention's to delete)
BASE_TS = (int(time.time()) - 3 * 3600) * 1000
IDEMPOTENT_RECORDS = 300
TIMES_RECORDS = 60
PROTOCOLS = ("classic", "consumer")
SPREAD_MS = 10 * 60_000
# As Kafka's own integration tests run groups: no wait for more members before the first rebalance, and
# KIP-848 members heartbeating often enough that a rebalance is seen in well under a second.
GROUP_CONFIGS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.consumer.heartbeat.interval.ms": "300",
    "group.consumer.session.timeout.ms": "10000",
}


@pytest.fixture(scope="module")
def classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return java_classes(tmp_path_factory, "Kafka's Java client", "ClientScenarios.java", "ScenarioThreads.java")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """A chronolog broker of this module's own, with GROUP_CONFIGS (the session's has Kafka's defaults)."""
    yield from own_broker(tmp_path_factory, "java-client", GROUP_CONFIGS)


@dataclass
class Runs:
    bootstrap: str
    lines: dict[str, list[dict]]
    topics: dict[str, str]
    stamps: dict[int, list[int]]  # the CreateTime of each record of the "times" topic, by partition, in order

    def of(self, tag: str) -> list[dict]:
        """The scenario's lines; its failure (a Java exception, or no end) is this test's failure."""
        lines = self.lines.get(tag, [])
        errors = [ln["error"] for ln in lines if "error" in ln]
        assert not errors, f"scenario {tag} failed in the JVM:\n{errors[0]}"
        assert any(ln.get("done") for ln in lines), f"scenario {tag} did not finish"
        return [ln for ln in lines if "done" not in ln]


def produce_out_of_order(bootstrap: str, topic: str, n: int) -> dict[int, list[int]]:
    """n records over 2 partitions whose CreateTime goes back and forth (a record may be older than the
    one before it): the timestamps of each partition, in offset order."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    stamps: dict[int, list[int]] = {0: [], 1: []}
    for i in range(n):
        ts = BASE_TS + (i * 37 % n) * 1000 + (500 if i % 7 == 0 else 0)
        p.produce(topic, value=b"%d" % i, partition=i % 2, timestamp=ts)
        stamps[i % 2].append(ts)
    assert p.flush(30) == 0
    return stamps


@pytest.fixture(scope="module", params=["chronolog", "kafka"])
def runs(request: pytest.FixtureRequest, classes: Path) -> Runs:
    """Every scenario against chronolog, and against Apache Kafka 4.4 (the oracle: the same assertions hold)."""
    broker = request.getfixturevalue("broker" if request.param == "chronolog" else "kafka_broker")
    topics = {tag: broker.create_topic(partitions=parts, prefix=tag) for tag, parts in [
        ("idem", 3), ("txn", 2), ("group-classic", 4), ("group-consumer", 4), ("static-classic", 4),
        ("static-consumer", 4), ("zombie-classic", 4), ("zombie-consumer", 4), ("coop-classic", 4),
        ("coop-consumer", 4), ("times", 2)]}
    stamps = produce_out_of_order(broker.bootstrap, topics["times"], TIMES_RECORDS)
    topics["duration"] = broker.create_topic(partitions=2, prefix="duration")
    produce_spread(broker.bootstrap, topics["duration"])
    prefix = topics["pattern"] = f"pat-{uuid.uuid4().hex[:8]}"
    for suffix, parts in (("m1", 2), ("m2", 1), ("x", 1)):
        broker.create_topic(f"{prefix}-{suffix}", partitions=parts)
    specs = [
        ("idem", "idempotent", topics["idem"], str(IDEMPOTENT_RECORDS), str(BASE_TS)),
        ("txn", "transactions", topics["txn"], f"g-{topics['txn']}"),
        *((f"group-{p}", "group", topics[f"group-{p}"], f"g-{topics[f'group-{p}']}", p) for p in PROTOCOLS),
        *((f"static-{p}", "static", topics[f"static-{p}"], f"g-{topics[f'static-{p}']}", p) for p in PROTOCOLS),
        *((f"zombie-{p}", "zombie", topics[f"zombie-{p}"], f"g-{topics[f'zombie-{p}']}", p) for p in PROTOCOLS),
        *((f"coop-{p}", "cooperative", topics[f"coop-{p}"], f"g-{topics[f'coop-{p}']}", p) for p in PROTOCOLS),
        ("times", "times", topics["times"], ",".join(map(str, time_targets(stamps)))),
        ("duration", "duration", topics["duration"], "PT35M"),
        ("pattern", "pattern", prefix, f"g-{prefix}", "3", "5"),
    ]
    cmd = java_command("ClientScenarios", [broker.bootstrap, *(";".join(spec) for spec in specs)], classes=classes)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"the JVM exited {proc.returncode}:\n{proc.stderr[-5000:]}"
    lines: dict[str, list[dict]] = defaultdict(list)
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            ln = json.loads(line)
            lines[ln.pop("scenario")].append(ln)
    return Runs(broker.bootstrap, lines, topics, stamps)


def produce_spread(bootstrap: str, topic: str) -> None:
    """13 records a partition, 10 minutes apart, the last one now."""
    p = Producer({"bootstrap.servers": bootstrap})
    now = int(time.time() * 1000)
    for k in range(13):
        for part in (0, 1):
            p.produce(topic, value=b"%d" % k, partition=part, timestamp=now - (12 - k) * SPREAD_MS)
    assert p.flush(30) == 0


def time_targets(stamps: dict[int, list[int]]) -> list[int]:
    """Before, at and between the records' timestamps, past the last, and some records' own."""
    lo, hi = BASE_TS, BASE_TS + TIMES_RECORDS * 1000
    return sorted({lo - 1, lo, lo + 1, lo + 500, lo + 7500, lo + 30_000, lo + 30_001, hi - 1000, hi - 500, hi,
                   *stamps[0][::9], *stamps[1][::11]})


def test_idempotent_producer_then_read_committed(runs):
    """enable.idempotence, acks=all, 5 requests in flight over many batches: every record once, in order,
    at the offset the producer was told, its key, headers and CreateTime intact (read read_committed)."""
    n = IDEMPOTENT_RECORDS
    lines = runs.of("idem")
    sent = {ln["sent"]: ln for ln in lines if "sent" in ln}
    read = [ln for ln in lines if "value" in ln]
    assert sorted(sent) == list(range(n))
    # every record once
    assert sorted(int(r["value"][1:]) for r in read) == list(range(n))
    by_part: dict[int, list[dict]] = defaultdict(list)
    for r in read:
        by_part[r["partition"]].append(r)
    for part, rs in by_part.items():
        # in the order sent, at the offsets the producer was told, without gaps
        assert [int(r["value"][1:]) for r in rs] == sorted(int(r["value"][1:]) for r in rs)
        assert [r["offset"] for r in rs] == list(range(len(rs)))
        for r in rs:
            i = int(r["value"][1:])
            assert (sent[i]["partition"], sent[i]["offset"]) == (part, r["offset"])
    for r in read:
        i = int(r["value"][1:])
        assert r["key"] == f"k{i}"
        assert r["headers"] == {"seq": str(i), "src": "java"}
        assert r["timestamp"] == BASE_TS + (i * 7919 % n) * 1000 == sent[i]["timestamp"]
        assert r["timestamp_type"] == "CreateTime"


def test_idempotent_producer_through_broker_kill(classes, tmp_path):
    """The broker SIGKILLed while an idempotent producer sends (batches buffered and in flight) and
    started again: the producer's retries are told apart from new batches by the producer state the broker
    rebuilt from its log, so every record is there once, in order."""
    n = 20_000
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("crash", 2, 1)])["crash"].result(30)
        cmd = java_command("ClientScenarios", [broker.bootstrap, f"crash;idempotent-crash;crash;{n}"],
                           classes=classes)
        log = tmp_path / "jvm.log"  # a file: the client's reconnect warnings must not fill a pipe
        with open(log, "w") as err, subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                     stderr=err, text=True) as proc:
            assert proc.stdout is not None and proc.stdin is not None
            cues = (json.loads(line) for line in proc.stdout if line.startswith("{"))
            assert "kill" in next(cues)  # a quarter sent: kill now
            broker.stop(signal.SIGKILL)
            assert "paused" in next(cues)  # half sent: it waits for the broker
            broker.start()
            proc.stdin.write("go\n")
            proc.stdin.flush()
            lines = {"crash": list(cues)}
            proc.wait(120)
            assert proc.returncode == 0, log.read_text()[-5000:]
    finally:
        broker.stop()
    out = next(ln for ln in Runs(broker.bootstrap, lines, {}, {}).of("crash") if "records" in ln)
    assert out["errors"] == []
    for part in (0, 1):
        got = [(off, v) for p, off, v in out["records"] if p == part]
        assert got == [(k, f"v{part + 2 * k}") for k in range(n // 2)]


def test_transactions_commit_abort_fence(runs):
    """Committed, aborted and open transactions as each isolation level reads them; a second producer with
    the same transactional.id fences the first; offsets committed inside a transaction."""
    lines = runs.of("txn")
    out = {k: v for ln in lines for k, v in ln.items()}
    committed = {f"c{i}" for i in range(10)} | {"d0"}
    aborted = {f"a{i}" for i in range(5)}
    # an open transaction holds read_committed's end (the LSO) back, not read_uncommitted's
    assert out["open_end_committed"] != out["open_end_uncommitted"]
    assert any("ProducerFencedException" in e for e in out["fenced"]), out["fenced"]
    iso = {ln["isolation"]: ln for ln in lines if "isolation" in ln}
    rc, ru = iso["read_committed"]["values"], iso["read_uncommitted"]["values"]
    assert set(rc) == committed and len(rc) == len(committed)
    assert set(ru) == committed | aborted | {"o0"} and len(ru) == len(committed | aborted) + 1
    assert out["committed"] == 7 and out["metadata"] == "in-txn"
    assert iso["read_committed"]["end"] == iso["read_uncommitted"]["end"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_group_split_commit_and_resume(runs, protocol):
    """group.protocol=classic and consumer (KIP-848): two members split the partitions and commit what they
    read; a third member of the group resumes from the committed positions."""
    lines = runs.of(f"group-{protocol}")
    split = next(ln["split"] for ln in lines if "split" in ln)
    assert sorted(split["a"] + split["b"]) == [0, 1, 2, 3] and len(split["a"]) == 2
    members = {ln["member"]: ln for ln in lines if "member" in ln}
    # each member read only its own partitions, together the whole first batch
    assert members["a"]["records"] == members["a"]["assignment"] == split["a"]
    assert members["b"]["records"] == members["b"]["assignment"] == split["b"]
    assert members["a"]["count"] + members["b"]["count"] == 40
    # the third member starts at the committed positions: only the second batch
    assert sorted((p, o) for p, o, _ in members["c"]["records"]) == [(p, o) for p in range(4) for o in range(10, 15)]
    assert {v.split("-")[0] for _, _, v in members["c"]["records"]} == {"second"}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_static_member_restart_keeps_partitions(runs, protocol):
    """group.instance.id: a consumer closed and started again within the session timeout takes its old
    partitions back, and the other member sees no rebalance (a classic restart rebalanced the whole group
    until the coordinator replaced static members as Kafka's classicGroupJoinNewStaticMember does)."""
    lines = runs.of(f"static-{protocol}")
    before = next(ln["before"] for ln in lines if "before" in ln)
    after = next(ln for ln in lines if "after" in ln)
    now = after["after"]
    # the new consumer has a's partitions and generation; b has not moved and saw no callback since
    assert (now["a2"], now["gen_a2"]) == (before["a"], before["gen_a"])
    assert (now["b"], now["gen_b"], now["events_b"]) == (before["b"], before["gen_b"], [])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_static_member_zombie(runs, protocol):
    """A second consumer started with the group.instance.id of one still running. Classic: it takes the
    place and the old one is fenced (FencedInstanceIdException); before the coordinator checked instance
    ids on Heartbeat and SyncGroup the two took the instance from each other forever. Consumer protocol:
    the newcomer is refused (UnreleasedInstanceIdException). The other member is not disturbed."""
    now = next(ln["zombie"] for ln in runs.of(f"zombie-{protocol}") if "zombie" in ln)
    if protocol == "classic":
        assert (now["alive"], now["a_failed"], now["a2_failed"]) == ("a2", "FencedInstanceIdException", "")
    else:
        assert (now["alive"], now["a_failed"], now["a2_failed"]) == ("a", "", "UnreleasedInstanceIdException")
    assert (now["alive_owns"], now["b"]) == (now["a"], now["b_before"])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_cooperative_rebalance_revokes_only_moved(runs, protocol):
    """CooperativeStickyAssignor with the classic protocol, and the consumer protocol (incremental by
    design): a second member joining revokes from the first only the partitions that move to it; the first
    keeps the rest throughout."""
    out = runs.of(f"coop-{protocol}")[-1]
    moved = out["b"]
    assert sorted(out["a"] + moved) == [0, 1, 2, 3] and len(moved) == 2
    events_a = [(e["kind"], e["partitions"]) for e in out["events_a"] if e["partitions"]]
    assert events_a == [("assigned", [0, 1, 2, 3]), ("revoked", moved)]
    assert [(e["kind"], e["partitions"]) for e in out["events_b"] if e["partitions"]] == [("assigned", moved)]


def test_offsets_for_times_and_seek(runs):
    """offsetsForTimes over CreateTimes out of order, and a consumer seeking to what it answered: the first
    offset whose timestamp is at or after the target, as a scan of the records finds it, and as the
    AdminClient's ListOffsets and librdkafka's offsets_for_times answer."""
    lines = runs.of("times")
    topic, stamps, n = runs.topics["times"], runs.stamps, TIMES_RECORDS
    targets = time_targets(stamps)
    answers = {(ln["target"], ln["partition"]): ln for ln in lines if "target" in ln}
    assert len(answers) == 2 * len(targets)

    def brute(part: int, target: int) -> tuple[int, int] | tuple[None, None]:
        for off, ts in enumerate(stamps[part]):
            if ts >= target:
                return off, ts
        return None, None

    c = Consumer({"bootstrap.servers": runs.bootstrap, "group.id": "times"})
    try:
        for t in targets:
            rd = {tp.partition: tp.offset for tp in c.offsets_for_times([TopicPartition(topic, q, t) for q in (0, 1)],
                                                                          timeout=10)}
            for part in (0, 1):
                a = answers[(t, part)]
                off, ts = brute(part, t)
                assert (a["offset"], a["timestamp"]) == (off, ts), (t, part)
                # seek there: the first record read is the one answered; no such record: the end
                assert (a["first_offset"], a["first_ts"]) == (off, ts)
                assert a["position"] == (off if off is not None else n // 2)
                # the admin's ListOffsets and librdkafka's answer agree (-1: no record that late)
                assert (a["admin_offset"], a["admin_ts"]) == ((off, ts) if off is not None else (-1, -1))
                assert rd[part] == (off if off is not None else -1)
    finally:
        c.close()
    maxes = {ln["partition"]: ln for ln in lines if "max_timestamp" in ln}
    for part in (0, 1):
        top = max(stamps[part])
        assert (maxes[part]["max_timestamp"], maxes[part]["offset"]) == (top, stamps[part].index(top))


def test_auto_offset_reset_by_duration(runs):
    """auto.offset.reset=by_duration:PT35M (KIP-1106): the consumer starts at the first record at most 35
    minutes old, the 10th of 13 records 10 minutes apart (the one 30 minutes old)."""
    out = next(ln for ln in runs.of("duration") if "positions" in ln)
    assert out["positions"] == {"0": 9, "1": 9}


def test_subscription_pattern_consumer_protocol(runs):
    """A consumer-protocol member subscribed by SubscriptionPattern (the broker resolves the regex): the
    matching topics are assigned, and a matching topic created later joins the assignment."""
    prefix = runs.topics["pattern"]
    lines = {k: v for ln in runs.of("pattern") for k, v in ln.items()}
    assert lines["before"] == [f"{prefix}-m1:0", f"{prefix}-m1:1", f"{prefix}-m2:0"]
    assert lines["after"] == [f"{prefix}-m1:0", f"{prefix}-m1:1", f"{prefix}-m2:0", f"{prefix}-m3:0",
                              f"{prefix}-m3:1"]
