"""One writer per data dir (Kafka's `.lock`, `LogManager.lockLogDirs`): a second `chronolog serve` on the same
data dir is refused with one line naming the holder's pid, the first keeps serving real clients, and the
lock goes with its holder however it stops. `serve --data-dir` on a file is one line too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from chronolog.timetravel.sources import DataDirSource
from tests.brokerproc import BrokerProcess, free_port
from tests.clirun import chronolog_completed

NOW = int(time.time() * 1000)


def _serve(data_dir, timeout: float = 60) -> subprocess.CompletedProcess:
    """`chronolog serve` that is expected to stop by itself; a second broker that starts serving (the bug)
    is killed at `timeout` and reported as such."""
    args = [sys.executable, "-m", "chronolog.cli.main", "serve", "--data-dir", str(data_dir),
            "--port", str(free_port())]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"the second broker kept running: {out[-500:]} {err[-500:]}") from None
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def _round_trip(bootstrap: str, topic: str, n: int) -> list[bytes]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        producer.produce(topic, value=b"v%d" % i, timestamp=NOW + i)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lock-test", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got.append(msg.value())
    consumer.close()
    return got


def test_second_serve_on_one_data_dir_is_refused_and_the_first_keeps_serving(tmp_path):
    first = BrokerProcess(tmp_path / "data").start()
    try:
        second = _serve(tmp_path / "data")
        assert second.returncode != 0
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in second.stderr, second.stderr
        assert f"in use by process {first.proc.pid}" in lines[0]
        assert (tmp_path / "data" / ".lock").read_text().strip() == str(first.proc.pid)
        # The first broker is untouched: a real client writes and reads after the refusal.
        assert _round_trip(first.bootstrap, "after", 20) == [b"v%d" % i for i in range(20)]
        # Read-only readers never take the lock.
        source = DataDirSource(tmp_path / "data")
        assert source.partitions("after") == [0]
        source.close()
        # A writing tool is refused the same way, before it writes anything.
        inputs = tmp_path / "in"
        inputs.mkdir()
        (inputs / "a.log").write_text("Jun 14 15:16:01 combo sshd[19939]: session opened\n"
                                      "Jun 14 15:16:02 combo sshd[19939]: session closed\n")
        demo = chronolog_completed("demo", "--data-dir", str(tmp_path / "data"), "--input", str(inputs))
        assert demo.returncode != 0 and f"in use by process {first.proc.pid}" in demo.stderr, demo.stderr
        assert demo.stderr.strip().count("\n") == 0 and not (tmp_path / "data" / "a-0").exists()
        check = chronolog_completed("check", "--data-dir", str(tmp_path / "data"))
        assert check.returncode == 0, check.stdout + check.stderr
    finally:
        assert first.stop() == 0


def test_the_lock_goes_with_its_holder_clean_stop_or_kill(tmp_path):
    broker = BrokerProcess(tmp_path / "data").start()
    broker.stop()
    broker.start()  # a clean stop released it
    broker.kill()
    broker.start()  # so did SIGKILL (the kernel drops a dead process's flock)
    try:
        assert _round_trip(broker.bootstrap, "again", 5) == [b"v%d" % i for i in range(5)]
    finally:
        broker.stop(signal.SIGTERM)


def test_serve_on_a_file_is_one_line(tmp_path):
    target = tmp_path / "not-a-dir"
    target.write_text("x")
    for given in (target, target / "below"):
        result = _serve(given)
        assert result.returncode != 0
        assert result.stderr.strip().count("\n") == 0 and "Traceback" not in result.stderr, result.stderr
        assert str(given) in result.stderr and "directory" in result.stderr
    assert target.read_text() == "x"
    assert not os.path.exists(tmp_path / ".lock")
