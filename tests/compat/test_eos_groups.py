"""Exactly-once with each group protocol, through librdkafka and Kafka's Java client: a consume-transform-
produce app (tests/compat/eos_groups_app.py, tests/compat/java/EosApp.java) whose consumer is in a group of
`group.protocol=classic` or `=consumer` (KIP-848) commits its output and its offsets in one transaction
(TxnOffsetCommit with the member's id and generation or epoch). The app is SIGKILLed part way and started
again, and the broker (`chronolog serve`) is killed and restarted under the second instance: the output
read read_committed is every input record transformed exactly once, and the group's committed offsets are
the input's end. With `group.protocol=consumer` this loop stalled forever before (chronolog answered the
member's TxnOffsetCommit UNKNOWN_MEMBER_ID)."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.brokerproc import BrokerProcess
from tests.consuming import read_messages
from tests.waiting import poll_until

pytestmark = pytest.mark.compat
HERE = Path(__file__).parent
RECORDS = 3000  # half before the first start, half after the broker's restart
PARTITIONS = 2
CONFIGS = {"transaction.state.log.num.partitions": "4", "offsets.topic.num.partitions": "4",
           "group.consumer.heartbeat.interval.ms": "300", "group.consumer.session.timeout.ms": "6000",
           "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}


@pytest.fixture(scope="module")
def java_app(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """EosApp compiled against Kafka 4.4's client jars."""
    from chronolog.testing.kafka import compile_java, kafka_available

    reason = kafka_available()
    if reason:
        pytest.skip(reason)
    return compile_java(tmp_path_factory.mktemp("eos-java"), HERE / "java" / "EosApp.java")


class App:
    """One instance of the app, a subprocess whose lines say what it committed."""

    def __init__(self, command: list[str], log: Path) -> None:
        self.log = log
        self._out = open(log, "ab")
        self.start_at = log.stat().st_size
        self.proc = subprocess.Popen(command, stdout=self._out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def committed(self) -> int:
        """Records this instance committed so far."""
        text = self.log.read_bytes()[self.start_at:].decode(errors="replace")
        return sum(int(line.split()[1]) for line in text.splitlines() if line.startswith("committed "))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.alive():
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._out.close()


def _feed(bootstrap: str, topic: str, numbers: range) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for n in numbers:
        producer.produce(topic, key=b"k%d" % n, value=b"%d" % n, partition=n % PARTITIONS)
    assert producer.flush(30) == 0


def _group_offsets(bootstrap: str, group: str, topic: str) -> list[int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(PARTITIONS)])
    try:
        result = admin.list_consumer_group_offsets([request], request_timeout=10)[group].result(15)
    except Exception:  # noqa: BLE001 (the broker restarting, the coordinator loading: asked again)
        return [-1] * PARTITIONS
    return [tp.offset for tp in sorted(result.topic_partitions, key=lambda tp: tp.partition)]


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
@pytest.mark.parametrize("client", ["librdkafka", "java"])
def test_exactly_once_through_an_app_kill_and_a_broker_restart(client, protocol, tmp_path, request):
    broker = BrokerProcess(tmp_path / "data", CONFIGS).start()
    apps: list[App] = []
    try:
        bs = broker.bootstrap
        topic_in, topic_out = f"eos-in-{client}-{protocol}", f"eos-out-{client}-{protocol}"
        group, txn_id = f"eos-{uuid.uuid4().hex[:8]}", f"eos-app-{client}-{protocol}"
        admin = AdminClient({"bootstrap.servers": bs})
        for f in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in (topic_in, topic_out)]).values():
            f.result(30)
        half = RECORDS // 2
        _feed(bs, topic_in, range(half))
        args = [bs, protocol, group, topic_in, topic_out, txn_id]
        if client == "java":
            from chronolog.testing.kafka import java_command

            command = java_command("EosApp", args, ("-Xmx256m", "-XX:TieredStopAtLevel=1"),
                                   classes=request.getfixturevalue("java_app"))
        else:
            command = [sys.executable, str(HERE / "eos_groups_app.py"), *args]
        log = tmp_path / "app.log"

        def start() -> App:
            app = App(command, log)
            apps.append(app)
            return app

        def tail() -> str:
            return log.read_text(errors="replace")[-3000:]

        first = start()
        assert poll_until(lambda: first.committed() >= 300 or not first.alive(), 120), tail()
        assert first.alive(), tail()
        first.stop(signal.SIGKILL)  # part way, maybe inside a transaction
        second = start()
        assert poll_until(lambda: second.committed() > 0 or not second.alive(), 120), tail()
        broker.stop(signal.SIGKILL)  # the broker killed under the running app, and started again
        broker.start()
        _feed(bs, topic_in, range(half, RECORDS))
        end = [RECORDS // PARTITIONS] * PARTITIONS
        assert poll_until(lambda: _group_offsets(bs, group, topic_in) == end or not second.alive(), 180,
                          interval=0.5), tail()
        assert second.alive(), tail()
        second.stop()
        got = read_messages(bs, topic_out, PARTITIONS, "read_committed", timeout=60)
        values = Counter(m.value() for msgs in got.values() for m in msgs)
        expected = Counter(b"out-%d" % n for n in range(RECORDS))
        missing, extra = expected - values, values - expected
        assert not missing and not extra, (f"{len(missing)} lost, e.g. {sorted(missing)[:5]}; "
                                           f"{sum(extra.values())} duplicated, e.g. {sorted(extra)[:5]}\n{tail()}")
        # each partition's output in input order (a record's output goes to its input's partition)
        for p, msgs in got.items():
            numbers = [int(m.value()[4:]) for m in msgs]
            assert numbers == sorted(numbers), f"partition {p} out of order"
    finally:
        for app in apps:
            app.stop(signal.SIGKILL)
        broker.stop()
