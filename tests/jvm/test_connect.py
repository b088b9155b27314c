"""Kafka Connect 4.4 in distributed mode, unmodified, against chronolog: the worker creates its own
compacted config, offset and status topics; a source connector writes a topic and a sink connector reads
it back into a file, every record once."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from chronolog.testing.kafka import _free_ports, java_command
from tests.jvm.conftest import java_classes
from tests.subprocs import stop

pytestmark = pytest.mark.slow
COUNT = 2000


@pytest.fixture(scope="module")
def connector_classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return java_classes(tmp_path_factory, "Kafka Connect", "CountingSource.java", "FileSink.java", folder="connectors")


def rest(url: str, body: dict | None = None) -> dict | list:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read() or b"null")


def wait_until(what: str, check, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.3)
    raise AssertionError(f"{what}: not within {timeout:.0f} s")


def test_connect_worker_runs_a_source_and_a_sink(chronolog_broker, connector_classes, tmp_path):
    bootstrap = chronolog_broker.bootstrap
    (port,) = _free_ports(1)
    suffix = tmp_path.name[-8:]
    internal = {"config.storage.topic": f"connect-configs-{suffix}", "offset.storage.topic": f"connect-offsets-{suffix}",
                "status.storage.topic": f"connect-status-{suffix}"}
    props = {
        "bootstrap.servers": bootstrap, "group.id": f"connect-{suffix}", **internal,
        "config.storage.replication.factor": "1", "offset.storage.replication.factor": "1",
        "status.storage.replication.factor": "1", "offset.flush.interval.ms": "500",
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.storage.StringConverter",
        "listeners": f"http://127.0.0.1:{port}", "rest.advertised.host.name": "127.0.0.1",
        "plugin.discovery": "only_scan",
    }
    worker_props = tmp_path / "worker.properties"
    worker_props.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    cmd = java_command("org.apache.kafka.connect.cli.ConnectDistributed", [str(worker_props)],
                       classes=connector_classes)
    log = open(tmp_path / "worker.log", "ab")
    worker = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        def up():
            assert worker.poll() is None, f"the worker exited {worker.returncode}: see {tmp_path / 'worker.log'}"
            try:
                return rest(f"{base}/connectors") == []
            except (urllib.error.URLError, ConnectionError, OSError):
                return False
        wait_until("the worker's REST API", up)

        # its own topics, created by the worker as compacted ones (offsets and configs are keyed state)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        wait_until("the worker's topics", lambda: set(internal.values()) <= set(admin.list_topics(timeout=10).topics))
        resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in internal.values()]
        for res, fut in admin.describe_configs(resources).items():
            assert fut.result(30)["cleanup.policy"].value == "compact", res

        topic = f"connect-data-{suffix}"
        out = tmp_path / "sink.txt"
        rest(f"{base}/connectors", {"name": "src", "config": {
            "connector.class": "CountingSource", "tasks.max": "1", "topic": topic, "count": str(COUNT)}})
        rest(f"{base}/connectors", {"name": "sink", "config": {
            "connector.class": "FileSink", "tasks.max": "1", "topics": topic, "file": str(out)}})

        def all_lines():
            assert worker.poll() is None, f"the worker exited {worker.returncode}"
            lines = out.read_text().splitlines() if out.exists() else []
            return lines if len(lines) >= COUNT else None
        lines = wait_until("every record in the sink's file", all_lines, timeout=180)
        values = [int(line.split()[1]) for line in lines]
        assert sorted(values) == list(range(COUNT))
        assert [line.split()[0] for line in lines] == [f"0@{i}" for i in range(COUNT)]
        status = rest(f"{base}/connectors/src/status")
        assert status["connector"]["state"] == "RUNNING" and status["tasks"][0]["state"] == "RUNNING"
    finally:
        stop(worker)
        log.close()
