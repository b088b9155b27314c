"""A stream processor's state on a compacted topic: a faust-streaming table's changelog (created by faust
with cleanup.policy=compact) is compacted by the log cleaner while the app runs, and the app, restarted
with no local state, restores from the cleaned changelog exactly the latest value of every key and none
of the deleted ones."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from chronolog.storage.checkpoints import CheckpointError, read_checkpoint
from chronolog.storage.cleaner import CLEANER_CHECKPOINT
from tests.brokerproc import BrokerProcess
from tests.consuming import read_messages
from tests.subprocs import stop

pytestmark = pytest.mark.compat
FAUST_LIB = Path(sys.prefix) / "faust-lib"  # `make faustdeps`: beside the venv, for its click<8.4 pin
CHANGELOG = "compact-faust-latest-changelog"
APP = str(Path(__file__).parent / "faust_table_app.py")
# small segments (above aiokafka's 16 KiB batches) and an eager cleaner, so that the changelog is cleaned
# while the app writes it
BROKER_CONFIGS = {"log.segment.bytes": "32768", "log.cleaner.backoff.ms": "100",
                  "log.cleaner.min.cleanable.ratio": "0.05"}


def changelog(bootstrap: str) -> tuple[int, dict[str, int | None]]:
    """(records in the changelog, each key's latest value: None for a tombstone)."""
    msgs = read_messages(bootstrap, CHANGELOG, 1, "read_uncommitted").get(0, [])
    return len(msgs), {json.loads(m.key()): None if m.value() is None else json.loads(m.value()) for m in msgs}


def cleaned_to(data_dir: Path) -> int:
    path = data_dir / CLEANER_CHECKPOINT
    try:
        return read_checkpoint(path).get((CHANGELOG, 0), 0) if path.is_file() else 0
    except (OSError, CheckpointError):
        return 0  # being replaced


@pytest.mark.skipif(not (FAUST_LIB / "faust").is_dir(),
                    reason="faust-streaming is installed by `make faustdeps` (beside the venv: it pins click<8.4)")
def test_faust_table_changelog_is_compacted_while_running_and_restored_after_restart(tmp_path):
    broker = BrokerProcess(tmp_path / "data", BROKER_CONFIGS).start()
    workers: list[subprocess.Popen] = []
    try:
        bs = broker.bootstrap
        admin = AdminClient({"bootstrap.servers": bs})
        for f in admin.create_topics([NewTopic("c-in", 1, 1)]).values():
            f.result(15)
        env = {**os.environ, "BROKER": bs, "PYTHONPATH": str(FAUST_LIB), "TABLE_DUMP": str(tmp_path / "table.json")}

        def start(n: int) -> subprocess.Popen:
            log = open(tmp_path / f"faust-{n}.log", "wb")
            workers.append(subprocess.Popen([sys.executable, APP, "worker", "-l", "info", "--without-web"],
                                            cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT))
            return workers[-1]

        keys = [f"k{i}" for i in range(30)]
        rounds = 150
        expected = {}
        producer = Producer({"bootstrap.servers": bs, "linger.ms": 5, "batch.size": 16384})
        errors = []
        worker = start(1)
        for r in range(rounds):
            for i, key in enumerate(keys):
                value = b"DEL" if r == rounds - 1 and i % 5 == 0 else b"%d" % (r * 1000 + i)
                producer.produce("c-in", key=key.encode(), value=value,
                                 on_delivery=lambda err, _msg: err and errors.append(err))
                if value == b"DEL":
                    expected.pop(key, None)
                else:
                    expected[key] = r * 1000 + i
            producer.poll(0)
        assert producer.flush(15) == 0 and not errors, errors[:3]
        updates = rounds * len(keys)

        # faust creates its changelog as a compacted topic (read it only then: a Fetch must not create it)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and CHANGELOG not in admin.list_topics(timeout=10).topics:
            assert worker.poll() is None, (tmp_path / "faust-1.log").read_text(errors="replace")[-2000:]
            time.sleep(0.5)
        resource = ConfigResource("topic", CHANGELOG)
        policy = admin.describe_configs([resource])[resource].result(15)["cleanup.policy"].value
        assert policy == "compact"

        # the app wrote every update to its changelog, and the cleaner cleaned it meanwhile
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            count, last = changelog(bs)
            live = {k: v for k, v in last.items() if v is not None}
            if live == expected and cleaned_to(broker.data_dir) > 0 and count < updates:
                break
            assert worker.poll() is None, (tmp_path / "faust-1.log").read_text(errors="replace")[-2000:]
            time.sleep(0.5)
        logs = (tmp_path / "faust-1.log").read_text(errors="replace")[-2000:]
        assert live == expected, logs
        assert cleaned_to(broker.data_dir) > 0 and count < updates, (count, updates)
        assert {k for k, v in last.items() if v is None} == {k for i, k in enumerate(keys) if i % 5 == 0}
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)

        # restarted with no local state (memory store): the table comes back from the cleaned changelog
        (tmp_path / "table.json").unlink(missing_ok=True)
        worker = start(2)
        dump = tmp_path / "table.json"
        restored = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if dump.exists():
                restored = json.loads(dump.read_text())
                if restored == expected:
                    break
            assert worker.poll() is None, (tmp_path / "faust-2.log").read_text(errors="replace")[-2000:]
            time.sleep(0.5)
        assert restored == expected, (tmp_path / "faust-2.log").read_text(errors="replace")[-2000:]
    finally:
        for w in workers:
            stop(w)
        broker.stop()
