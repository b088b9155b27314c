"""`chronolog offsets` and `consume` against a 3-node Apache Kafka cluster while a killed node's partitions
get new leaders: each command, a fresh process as a user runs it with every node in its bootstrap list (the
dead one too), waits for the new leader and answers exactly; it never stops with librdkafka's words."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from confluent_kafka.admin import AdminClient

from chronolog.timetravel.arrow import broker_columns
from chronolog.timetravel.fetcher import RawFetcher
from tests.timetravel.test_tools_against_kafka import BASE, KEEP, PARTITIONS, STAMPS, first_at_or_after, load

pytestmark = pytest.mark.slow


def chronolog(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "chronolog.cli.main", *args], capture_output=True, timeout=180)


def ok(p: subprocess.CompletedProcess) -> bytes:
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    assert not p.stderr.strip(), p.stderr.decode(errors="replace")  # no librdkafka lines, no warnings
    return p.stdout


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=15)
    return {p: m.leader for p, m in md.topics[topic].partitions.items()}


def check_offsets(bootstrap: str, topic: str, t: int, isolation: str) -> None:
    out = json.loads(ok(chronolog("offsets", topic, "--time", str(t), "--bootstrap-server", bootstrap, "--json",
                                  "--isolation-level", isolation)))
    assert {r["partition"]: r["offset"] for r in out["partitions"]} == \
        {p: first_at_or_after(s, t) for p, s in STAMPS.items()}


def window_bytes(t1: int, t2: int) -> bytes:
    """What `consume --format raw` prints: partition after partition, each in offset order."""
    return b"".join(b"v%d-%d\n" % (p, i) for p in sorted(STAMPS) for i, ts in enumerate(STAMPS[p]) if t1 <= ts < t2)


def test_offsets_and_consume_wait_for_the_new_leaders(kafka_cluster):
    topic = kafka_cluster.create_topic(partitions=PARTITIONS, configs=KEEP, replication=3)
    load(kafka_cluster.bootstrap, topic)
    every = ",".join(f"127.0.0.1:{n.port}" for n in kafka_cluster.nodes)  # a user's list keeps the dead node
    led = leaders(every, topic)
    victim = max(kafka_cluster.nodes, key=lambda n: sum(1 for leader in led.values() if leader == n.node_id))
    assert any(leader == victim.node_id for leader in led.values())
    victim.kill()  # a crash: its partitions keep it as leader until its broker session expires, then move
    try:
        # the raw fetcher (consume's reader) first: its leader is gone, the cluster names a new one in ~10 s
        moved = next(p for p, leader in led.items() if leader == victim.node_id)
        fetcher = RawFetcher(every, timeout=5)
        try:  # and a new leader whose high watermark is still behind is waited for too: never a short read
            assert sum(len(c) for c in broker_columns(fetcher, topic, moved, 0, len(STAMPS[moved]))) == \
                len(STAMPS[moved])
        finally:
            fetcher.close()
        t1, t2 = BASE + 5_000, BASE + 21_000
        assert ok(chronolog("consume", topic, "--from", str(t1), "--to", str(t2), "--format", "raw",
                            "--bootstrap-server", every)) == window_bytes(t1, t2)
        # offsets, again and again while the leaders move (bounded), each run a new process
        deadline = time.monotonic() + 40
        runs = 0
        while time.monotonic() < deadline:
            check_offsets(every, topic, BASE + 10_000 + runs * 1_000,
                          "read_committed" if runs % 2 else "read_uncommitted")
            runs += 1
            if runs >= 3 and victim.node_id not in leaders(every, topic).values():
                break
        assert victim.node_id not in leaders(every, topic).values()
        assert ok(chronolog("consume", topic, "--from", str(t1), "--to", str(t2), "--format", "raw",
                            "--bootstrap-server", every)) == window_bytes(t1, t2)
    finally:
        victim.start()  # the session's cluster whole again for the next test
        kafka_cluster.wait_ready(120)
