"""Transactions with real clients, unmodified (KIP-98): confluent-kafka's transactional producer (commit,
abort, send_offsets_to_transaction in a consume-transform-produce loop), read_committed consumers,
fencing of a second producer with the same transactional.id, the coordinator's abort of an abandoned
transaction, aiokafka's transactional producer and consumer, and kafkajs from npm."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from tests.brokerproc import BrokerProcess
from tests.consuming import read_messages
from tests.subprocs import stop
from tests.waiting import poll_until

pytestmark = pytest.mark.compat
TXN_CONFIGS = {"transaction.state.log.num.partitions": "4",
               "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}
JS_DIR = Path(__file__).parent / "js"
FAUST_LIB = Path(sys.prefix) / "faust-lib"  # `make faustdeps`: beside the venv, for its click<8.4 pin


@pytest.fixture
def txn_broker(tmp_path):
    proc = BrokerProcess(tmp_path / "data", TXN_CONFIGS).start()
    yield proc
    proc.stop()


def create_topics(bootstrap: str, *names: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, partitions, 1) for n in names])
    for f in futures.values():
        f.result(15)


def producer(bootstrap: str, txn_id: str, **extra) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5, **extra})
    p.init_transactions(20)
    return p


def read(bootstrap: str, topic: str, partitions: int, isolation: str, expected: int | None = None,
         timeout: float = 60.0) -> dict[int, list[bytes]]:
    """Every record value a consumer with this isolation level gets (until `expected` arrived, or until it
    reached the end of every partition), per partition in order."""
    got = read_messages(bootstrap, topic, partitions, isolation, expected, timeout)
    return {p: [m.value() for m in msgs] for p, msgs in got.items()}


def latest(bootstrap: str, topic: str, partition: int, committed: bool) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    futures = admin.list_offsets({TopicPartition(topic, partition): OffsetSpec.latest()}, isolation_level=level)
    return next(iter(futures.values())).result(15).offset


def test_commit_abort_and_read_committed_order(txn_broker):
    bs = txn_broker.bootstrap
    create_topics(bs, "orders")
    p = producer(bs, "orders-app")
    expected: dict[int, list[bytes]] = {0: [], 1: []}
    for round_ in range(6):
        p.begin_transaction()
        values = [b"r%d-%d" % (round_, i) for i in range(10)]
        for i, v in enumerate(values):
            p.produce("orders", value=v, partition=i % 2)
        if round_ % 3 == 1:
            p.flush(10)
            p.abort_transaction(20)
        else:
            p.commit_transaction(20)
            for i, v in enumerate(values):
                expected[i % 2].append(v)
    # an open transaction holds read_committed readers back at its first offset
    p.begin_transaction()
    p.produce("orders", value=b"open", partition=0)
    p.flush(10)
    assert latest(bs, "orders", 0, committed=True) < latest(bs, "orders", 0, committed=False)
    committed = read(bs, "orders", 2, "read_committed")
    assert committed == expected  # only committed records, in order
    everything = read(bs, "orders", 2, "read_uncommitted")
    assert sum(map(len, everything.values())) == 61 and b"open" in everything[0]
    p.commit_transaction(20)
    expected[0].append(b"open")
    assert latest(bs, "orders", 0, committed=True) == latest(bs, "orders", 0, committed=False)
    assert read(bs, "orders", 2, "read_committed") == expected


def test_consume_transform_produce_with_send_offsets(txn_broker):
    bs = txn_broker.bootstrap
    create_topics(bs, "in", "out")
    seed = Producer({"bootstrap.servers": bs, "enable.idempotence": True})
    inputs = [b"%d" % i for i in range(300)]
    for i, v in enumerate(inputs):
        seed.produce("in", value=v, partition=i % 2)
    assert seed.flush(15) == 0
    c = Consumer({"bootstrap.servers": bs, "group.id": "ctp", "isolation.level": "read_committed",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.subscribe(["in"])
    p = producer(bs, "ctp-app")
    done, batches = 0, 0
    deadline = time.monotonic() + 180
    while done < len(inputs) and time.monotonic() < deadline:
        msgs = [m for m in c.consume(40, 0.5) if not m.error()]
        if not msgs:
            continue
        batches += 1
        p.begin_transaction()
        for m in msgs:
            p.produce("out", value=b"x" + m.value(), partition=m.partition())
        p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 20)
        if batches % 4 == 2:  # abort now and then: the offsets go back with the output
            p.abort_transaction(20)
            for tp in c.committed(c.assignment(), 10):
                c.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))
            continue
        p.commit_transaction(20)
        done += len(msgs)
    assert done == len(inputs)
    committed = {tp.partition: tp.offset for tp in c.committed([TopicPartition("in", 0), TopicPartition("in", 1)], 10)}
    c.close()
    assert committed == {0: 150, 1: 150}
    out = read(bs, "out", 2, "read_committed", expected=len(inputs))
    assert out == {q: [b"x" + v for i, v in enumerate(inputs) if i % 2 == q] for q in (0, 1)}  # exactly once, in order
    assert batches > 4  # some were aborted


def test_fencing_two_producers_one_transactional_id(txn_broker):
    bs = txn_broker.bootstrap
    create_topics(bs, "fenced")
    old = producer(bs, "shared-id")
    old.begin_transaction()
    old.produce("fenced", value=b"zombie", partition=0)
    old.flush(10)
    new = producer(bs, "shared-id")  # fences `old` and aborts its transaction
    new.begin_transaction()
    new.produce("fenced", value=b"fresh", partition=0)
    new.commit_transaction(20)
    with pytest.raises(KafkaException) as caught:
        old.produce("fenced", value=b"late", partition=0)
        old.commit_transaction(20)
    assert caught.value.args[0].fatal() or "fenced" in str(caught.value).lower()
    assert read(bs, "fenced", 1, "read_committed") == {0: [b"fresh"]}


def test_abandoned_transaction_is_aborted_by_timeout(txn_broker):
    bs = txn_broker.bootstrap
    create_topics(bs, "abandoned", partitions=1)
    p = producer(bs, "walks-away", **{"transaction.timeout.ms": 2000})
    p.begin_transaction()
    for i in range(5):
        p.produce("abandoned", value=b"lost%d" % i, partition=0)
    assert p.flush(30) == 0
    # the open transaction holds the LSO at its first offset, unless (a loaded machine) its 2 s ran out
    # already: then the abort marker follows the 5 records and both ends are past it, never in between
    held = latest(bs, "abandoned", 0, committed=True)
    assert held == 0 or held == latest(bs, "abandoned", 0, committed=False) == 6
    plain = Producer({"bootstrap.servers": bs})
    plain.produce("abandoned", value=b"kept", partition=0)
    assert plain.flush(30) == 0
    # the coordinator aborts it after transaction.timeout.ms (checked every 200 ms); the bound only ends a hung run
    assert poll_until(lambda: latest(bs, "abandoned", 0, committed=True) != 0, 120)
    assert latest(bs, "abandoned", 0, committed=True) == latest(bs, "abandoned", 0, committed=False) == 7
    assert read(bs, "abandoned", 1, "read_committed") == {0: [b"kept"]}
    with pytest.raises(KafkaException):  # its producer was fenced by the abort
        p.commit_transaction(10)


def test_aiokafka_transactional_producer_and_read_committed_consumer(txn_broker):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATP

    bs = txn_broker.bootstrap
    create_topics(bs, "aio", partitions=1)

    async def main() -> list[bytes]:
        p = AIOKafkaProducer(bootstrap_servers=bs, transactional_id="aio-app")
        await p.start()
        try:
            async with p.transaction():
                for i in range(5):
                    await p.send_and_wait("aio", b"c%d" % i, partition=0)
            await p.begin_transaction()
            await p.send_and_wait("aio", b"aborted", partition=0)
            await p.abort_transaction()
            async with p.transaction():
                await p.send_and_wait("aio", b"last", partition=0)
        finally:
            await p.stop()
        c = AIOKafkaConsumer(bootstrap_servers=bs, isolation_level="read_committed", enable_auto_commit=False,
                             auto_offset_reset="earliest")
        await c.start()
        out: list[bytes] = []
        try:
            c.assign([ATP("aio", 0)])
            deadline = time.monotonic() + 60
            while len(out) < 6 and time.monotonic() < deadline:
                batch = await c.getmany(timeout_ms=300)
                out += [m.value for msgs in batch.values() for m in msgs]
        finally:
            await c.stop()
        return out

    assert asyncio.run(main()) == [b"c0", b"c1", b"c2", b"c3", b"c4", b"last"]


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_kafkajs_transactions(txn_broker):
    modules = JS_DIR / "node_modules" / "kafkajs"
    if not modules.exists():  # `make` installs it; a plain pytest run does it here
        subprocess.run(["npm", "install", "--no-audit", "--no-fund"], cwd=JS_DIR, check=True, timeout=300,
                       capture_output=True)
    bs = txn_broker.bootstrap
    create_topics(bs, "js-in", "js-out", partitions=1)
    seed = Producer({"bootstrap.servers": bs})
    for i in range(20):
        seed.produce("js-in", value=b"%d" % i, partition=0)
    seed.flush(10)
    run = subprocess.run(["node", str(JS_DIR / "transactions.js"), bs], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["committedOffset"] == "20"
    out = read(bs, "js-out", 1, "read_committed", expected=21)
    assert out[0] == [b"js-committed"] + [b"y%d" % i for i in range(20)]


def test_cli_consume_and_offsets_isolation_levels(txn_broker):
    """`chronolog consume` replays a window read_committed by default (aborted and open transactions
    left out), `--isolation-level read_uncommitted` shows everything; `offsets` stops at the LSO under
    read_committed. Over the broker and over its data dir."""
    from typer.testing import CliRunner

    from chronolog.cli.main import app

    bs = txn_broker.bootstrap
    create_topics(bs, "cli", partitions=1)
    p = producer(bs, "cli-app")
    for kind in ("c1", "a1", "c2", "open"):
        p.begin_transaction()
        p.produce("cli", value=kind.encode(), partition=0, timestamp=1_700_000_000_000)
        if kind.startswith("a"):
            p.flush(10)
            p.abort_transaction(20)
        elif kind.startswith("c"):
            p.commit_transaction(20)
    p.flush(10)

    def values(*args: str) -> list[str]:
        result = CliRunner().invoke(app, ["consume", "cli", "--from", "1699999999000", "--format", "json", *args])
        assert result.exit_code == 0, result.output
        return [json.loads(line)["value"] for line in result.output.splitlines() if line.startswith("{")]

    assert values("--bootstrap-server", bs) == ["c1", "c2"]
    assert values("--bootstrap-server", bs, "--isolation-level", "read_uncommitted") == ["c1", "a1", "c2", "open"]
    result = CliRunner().invoke(app, ["offsets", "cli", "--time", "1699999999000", "--json", "--bootstrap-server", bs,
                                      "--isolation-level", "read_committed"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.output)["partitions"]
    assert (row["offset"], row["end_offset"]) == (0, 6)  # the open transaction starts at offset 6 (after 3 markers)
    bad = CliRunner().invoke(app, ["consume", "cli", "--from", "0", "--bootstrap-server", bs,
                                   "--isolation-level", "committed"])
    assert bad.exit_code != 0 and "read_committed or read_uncommitted" in bad.output + str(bad.exception)
    p.commit_transaction(20)
    txn_broker.stop()
    data = str(txn_broker.data_dir)
    assert values("--data-dir", data) == ["c1", "c2", "open"]
    assert values("--data-dir", data, "--isolation-level", "read_uncommitted") == ["c1", "a1", "c2", "open"]


def test_kafka_python_transactional_producer(txn_broker):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    bs = txn_broker.bootstrap
    create_topics(bs, "kp", partitions=1)
    p = KafkaProducer(bootstrap_servers=bs, transactional_id="kp-app")
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(3):
            p.send("kp", b"k%d" % i, partition=0)
        p.commit_transaction()
        p.begin_transaction()
        p.send("kp", b"dropped", partition=0)
        p.flush()
        p.abort_transaction()
        p.begin_transaction()
        p.send("kp", b"end", partition=0)
        p.commit_transaction()
    finally:
        p.close(timeout=10)
    # read until the last committed record (not until a quiet spell: that waited 3 s and, under load, could
    # end before the first fetch came back); the timeout only ends a hung run
    c = KafkaConsumer(bootstrap_servers=bs, isolation_level="read_committed", enable_auto_commit=False,
                      auto_offset_reset="earliest", consumer_timeout_ms=60_000)
    c.assign([KTP("kp", 0)])
    got = []
    try:
        for m in c:
            got.append(m.value)
            if m.value == b"end":
                break
    finally:
        c.close()
    assert got == [b"k0", b"k1", b"k2", b"end"]


@pytest.mark.skipif(not (FAUST_LIB / "faust").is_dir(),
                    reason="faust-streaming is installed by `make faustdeps` (beside the venv: it pins click<8.4)")
def test_faust_streaming_exactly_once(txn_broker, tmp_path):
    """A faust-streaming worker with processing_guarantee="exactly_once" counts records per key in a table,
    is SIGKILLed part way and started again: at the crash the group's committed offsets are exactly the
    records the committed changelog counts (a transaction commits both or neither), and the changelog, read
    read_committed, ends with every key's exact count, written in transactions (markers between its records).

    The app carries a fix for Faust's own gap between its table writes and its commits (faust_eos_app.py):
    Faust as released commits offsets ahead of (or behind) the table writes they caused, so after a SIGKILL
    a count is off by a few against Apache Kafka 4.4 as against chronolog (the rare "999 instead of 1000")."""
    bs = txn_broker.bootstrap
    create_topics(bs, "f-in")
    keys = [f"k{i}" for i in range(10)]
    per_key = 1000
    seed = Producer({"bootstrap.servers": bs})

    def feed(numbers: range) -> None:
        for n in numbers:
            for i, key in enumerate(keys):
                seed.produce("f-in", key=key.encode(), value=b"%d" % n, partition=i % 2)
        assert seed.flush(10) == 0

    # The first half goes in before the crash, the second half after it: the crash is always part way
    # however fast the worker runs (it once finished everything between two looks).
    feed(range(per_key // 2))
    env = {**os.environ, "BROKER": bs, "PYTHONPATH": str(FAUST_LIB)}
    changelog = "eos-faust-counts-changelog"
    app = str(Path(__file__).parent / "faust_eos_app.py")

    def start(n: int) -> subprocess.Popen:
        log = open(tmp_path / f"faust-{n}.log", "wb")
        return subprocess.Popen([sys.executable, app, "worker", "-l", "warn", "--without-web"], cwd=tmp_path,
                                env=env, stdout=log, stderr=subprocess.STDOUT)

    def counts() -> dict[str, int]:
        last: dict[str, int] = {}
        for values in read_keyed(bs, changelog, 2).values():
            for key, value in values:
                last[json.loads(key)] = json.loads(value)
        return last

    def offsets_and_counts() -> tuple[dict[int, int], dict[int, int]]:
        """Per input partition: the group's committed offset, and the sum of the committed counts of its keys
        (f-in's offsets are all records: the feed is not transactional)."""
        committed = group_offsets(bs, "eos-faust", "f-in", 2)
        last = counts()
        return committed, {p: sum(n for k, n in last.items() if int(k[1:]) % 2 == p) for p in (0, 1)}

    done = {0: per_key * len(keys) // 2, 1: per_key * len(keys) // 2}  # every input of each partition
    worker = start(1)
    try:
        deadline = time.monotonic() + 240  # part way: then a crash (a bound only for a hung worker)
        while time.monotonic() < deadline and sum(counts().values()) < per_key * len(keys) // 10:
            time.sleep(0.3)
        worker.kill()
        worker.wait(10)
        assert 0 < sum(counts().values()) < per_key * len(keys)
        # The last transaction's markers may still be landing (the offsets' before the changelog's, or after):
        # the two agree once they have; a bound only for a broker that lost one.
        seen: list = []
        assert poll_until(lambda: seen.append(offsets_and_counts()) or seen[-1][0] == seen[-1][1], 60, 0.5), \
            f"committed input offsets vs committed changelog counts per partition: {seen[-1]}"
        feed(range(per_key // 2, per_key))
        worker = start(2)
        deadline = time.monotonic() + 240
        # the counts, then the offsets: Faust's committed offset may trail its processing by a few commits
        while time.monotonic() < deadline and offsets_and_counts() != (done, done):
            time.sleep(0.5)
    finally:
        stop(worker)
    logs = "".join((tmp_path / f"faust-{n}.log").read_text(errors="replace")[-1500:] for n in (1, 2))
    assert counts() == {k: per_key for k in keys}, logs
    assert offsets_and_counts() == (done, done)
    records = sum(len(v) for v in read_keyed(bs, changelog, 2, isolation="read_uncommitted").values())
    assert sum(latest(bs, changelog, p, committed=False) for p in (0, 1)) > records  # markers in between


def read_keyed(bootstrap: str, topic: str, partitions: int, isolation: str = "read_committed"
               ) -> dict[int, list[tuple[bytes, bytes]]]:
    """(key, value) of every record a consumer of this isolation level gets, to the end of each partition
    (TimeoutError rather than a partial read on a loaded machine)."""
    got = read_messages(bootstrap, topic, partitions, isolation, timeout=60)
    return {p: [(m.key(), m.value()) for m in msgs] for p, msgs in got.items()}


def group_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offset of each partition (0 where it committed none)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    result = admin.list_consumer_group_offsets([request], request_timeout=15)[group].result(20)
    return {tp.partition: max(tp.offset, 0) for tp in result.topic_partitions}
