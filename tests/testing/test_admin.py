"""The fault admin API: faults programmed over HTTP from another process, seen by a real client."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer

import chronolog
from chronolog.testing.admin import AdminError, AdminServer, FaultsClient
from tests.testing.conftest import read_all

pytestmark = pytest.mark.compat
SRC = Path(chronolog.__file__).resolve().parents[1]


def call(url: str, method: str, path: str, body: bytes | None = None) -> tuple[int, dict]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


@pytest.fixture
def standalone(tmp_path):
    """`python -m chronolog.testing` in a process of its own."""
    proc = subprocess.Popen([sys.executable, "-m", "chronolog.testing", "--config", "num.partitions=2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(SRC)})
    try:
        line = proc.stdout.readline()
        assert line.startswith("bootstrap="), proc.stderr.read()
        fields = dict(item.split("=", 1) for item in line.split())
        yield proc, fields
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


def test_faults_programmed_from_another_process(standalone):
    proc, fields = standalone
    client = FaultsClient(fields["admin"])
    rule = client.push_errors("Produce", "NOT_LEADER_OR_FOLLOWER", count=2)
    assert rule["remaining"] == 2 and rule["error"] == "NOT_LEADER_OR_FOLLOWER"
    reports = []
    producer = Producer({"bootstrap.servers": fields["bootstrap"], "enable.idempotence": True,
                         "retry.backoff.ms": 20})
    for i in range(10):
        producer.produce("orders", f"v{i}".encode(), on_delivery=lambda err, msg: reports.append(err))
    assert producer.flush(60) == 0 and reports == [None] * 10
    (state_rule,) = client.state()["rules"]
    assert state_rule["hits"] == 2 and state_rule["remaining"] == 0
    assert sorted(m.value() for m in read_all(fields["bootstrap"], "orders", 2, 10)) == \
        sorted(f"v{i}".encode() for i in range(10))
    data = Path(fields["data"])
    assert data.is_dir()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    assert not data.exists()  # its temporary data went with it
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", int(fields["bootstrap"].rsplit(":", 1)[1]))) != 0


def test_every_endpoint(test_broker, faults):
    client = FaultsClient(test_broker.admin_url)
    topic = test_broker.create_topic(partitions=2)
    a = client.push_errors("Fetch", "NOT_LEADER_OR_FOLLOWER", 3, topic=topic, partition=1)
    b = client.add_latency("Metadata", 5)
    c = client.close_on("ListOffsets", 1, client_id="x")
    assert [r["id"] for r in client.state()["rules"]] == [a["id"], b["id"], c["id"]]
    assert [r.id for r in faults.rules()] == [a["id"], b["id"], c["id"]]  # the broker's own faults
    assert b["ms"] == 5 and b["remaining"] is None and c["client_id"] == "x"
    assert client.remove(a) and not client.remove(a["id"])
    client.pause(topic, 1)
    assert client.state()["paused"] == [{"topic": topic, "partition": 1}]
    client.resume(topic, 1)
    assert client.move_clock(-1000) == -1000 and client.move_clock(-1000) == -2000
    client.set_clock_offset(7)
    assert faults.clock_offset_ms == 7
    client.refuse_connections()
    assert client.state()["refusing_connections"] is True
    client.accept_connections()
    assert client.state()["refusing_connections"] is False
    Producer({"bootstrap.servers": test_broker.bootstrap}).list_topics(timeout=10)  # it listens again
    assert client.drop_connections() >= 0
    client.clear()
    assert client.state() == {"rules": [], "paused": [], "clock_offset_ms": 0, "refusing_connections": False,
                              "unhit": []}


def test_bad_requests_answer_one_line(test_broker, faults):
    url = test_broker.admin_url
    assert call(url, "GET", "/nowhere") == (404, {"error": "no such endpoint: GET /nowhere"})
    status, answer = call(url, "POST", "/faults/errors", b"{not json")
    assert status == 400 and answer["error"].startswith("body is not JSON")
    status, answer = call(url, "POST", "/faults/errors", b"[1]")
    assert (status, answer) == (400, {"error": "body must be a JSON object"})
    status, answer = call(url, "POST", "/faults/errors", json.dumps({"api": "Produce", "eror": 6}).encode())
    assert status == 400 and answer["error"].startswith("bad arguments")
    status, answer = call(url, "POST", "/clock", b"{}")
    assert (status, answer) == (400, {"error": "give one of advance_ms or offset_ms"})
    with pytest.raises(AdminError, match="unknown error 'NOPE'"):
        FaultsClient(url).push_errors("Produce", "NOPE")
    with pytest.raises(AdminError, match="does not host this topic-partition"):
        FaultsClient(url).pause("no-such-topic", 3)
    assert faults.rules() == []


def test_the_admin_api_listens_on_loopback_only(test_broker):
    for host in ("0.0.0.0", "192.0.2.1", "example.com"):
        with pytest.raises(ValueError, match="loopback only"):
            AdminServer(test_broker.faults, test_broker.faults.loop, host=host)


@pytest.mark.parametrize("args, message", [
    (["--config", "no.such.config=1"], "error: Unknown broker config name: no.such.config"),
    (["--config", "num.partitions"], "'num.partitions' is not KEY=VALUE"),
    (["--user", "alice"], "'alice' is not USER:PASSWORD"),
])
def test_the_standalone_broker_refuses_bad_input_in_one_line(args, message):
    done = subprocess.run([sys.executable, "-m", "chronolog.testing", *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(SRC)})
    assert done.returncode != 0 and done.stdout == ""
    assert message in done.stderr and "Traceback" not in done.stderr
