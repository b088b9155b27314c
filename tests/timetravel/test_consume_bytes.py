"""`chronolog consume --format raw` writes what `kcat -C -o s@T1 -o e@T2 -e` writes: each record's value and a
newline, byte for byte (invalid UTF-8, NUL, \\r, empty and null values, every codec), under both isolation
levels with aborted and open transactions, and on a compacted log with its offset gaps. Partitions come out
one after another in partition order, each in offset order, so the reference is kcat's output per partition
(`-p P`) joined in that order; without kcat, a confluent-kafka consumer's read of the same range."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.brokerproc import BrokerProcess

pytestmark = pytest.mark.compat

T0 = 1_700_000_000_000
VALUES = [b"plain", b"", None, b"\xff\xfe bad utf-8 \x00 NUL", b"cr\r", b"crlf\r\n", b"inner\nnewline",
          "caf\u00e9 \u2603".encode(), b"\x00" * 3, b"x" * 100_000, b"\x80\x81\xc3\x28 end"]
KCAT = shutil.which("kcat")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("consume-bytes") / "data",
                         {"log.cleaner.backoff.ms": "50", "transaction.state.log.num.partitions": "2"}).start()
    yield proc
    proc.stop()


def create(bootstrap: str, topic: str, partitions: int = 1, configs: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answer: a freed client drops it
    admin.create_topics([NewTopic(topic, partitions, 1, config=configs or {})])[topic].result(15)


def chronolog(*args: str) -> bytes:
    """The real command, in its own process: stdout's bytes as the user's pipe gets them."""
    p = subprocess.run([sys.executable, "-m", "chronolog.cli.main", *args], capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    return p.stdout


def readable_end(bootstrap: str, topic: str, partition: int, isolation: str) -> int:
    """The partition's end for a consumer of that level: the high watermark, or the last stable offset."""
    from confluent_kafka import IsolationLevel
    from confluent_kafka.admin import OffsetSpec
    admin = AdminClient({"bootstrap.servers": bootstrap})
    level = IsolationLevel.READ_COMMITTED if isolation == "read_committed" else IsolationLevel.READ_UNCOMMITTED
    (fut,) = admin.list_offsets({TopicPartition(topic, partition): OffsetSpec.latest()},
                                isolation_level=level).values()
    return fut.result(15).offset


def consumer_lines(bootstrap: str, topic: str, partition: int, t1: int, t2: int, isolation: str) -> bytes:
    """value + newline of every record with T1 <= timestamp < T2 from the first offset at T1 to the
    readable end, read by confluent-kafka (on data in time order: kcat's s@T1 / e@T2)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reference", "enable.partition.eof": True,
                  "isolation.level": isolation, "enable.auto.commit": False})
    try:
        start = c.offsets_for_times([TopicPartition(topic, partition, t1)], timeout=15)[0].offset
        stop = readable_end(bootstrap, topic, partition, isolation)
        if start < 0 or start >= stop:
            return b""
        c.assign([TopicPartition(topic, partition, start)])
        out = []
        while True:
            msg = c.poll(15)
            assert msg is not None, "nothing within 15 s"
            if msg.error():
                # an EOF below the end: a fetch that held only aborted records or markers; read on
                assert msg.error().code() == msg.error()._PARTITION_EOF, msg.error()
                if msg.offset() >= stop:
                    break
                continue
            if msg.offset() >= stop:
                break
            if t1 <= msg.timestamp()[1] < t2:
                out.append((msg.value() or b"") + b"\n")
            if msg.offset() == stop - 1:
                break
        return b"".join(out)
    finally:
        c.close()


def kcat_lines(bootstrap: str, topic: str, partition: int, t1: int, t2: int, isolation: str) -> bytes:
    p = subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", topic, "-p", str(partition), "-o", f"s@{t1}",
                        "-o", f"e@{t2}", "-e", "-q", "-X", f"isolation.level={isolation}"],
                       capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


READERS = [pytest.param(kcat_lines, id="kcat", marks=pytest.mark.skipif(KCAT is None, reason="kcat not installed")),
           pytest.param(consumer_lines, id="confluent-kafka")]


def reference(reader, bootstrap: str, topic: str, partitions: int, t1: int, t2: int,
              isolation: str = "read_committed") -> bytes:
    return b"".join(reader(bootstrap, topic, p, t1, t2, isolation) for p in range(partitions))


def consume(bootstrap: str, topic: str, t1: int, t2: int, *more: str) -> bytes:
    return chronolog("consume", topic, "--from", str(t1), "--to", str(t2), "--format", "raw",
                     "--bootstrap-server", bootstrap, *more)


@pytest.fixture(scope="module")
def codecs_topic(broker):
    """Three partitions, each written with another codec, every value of VALUES many times over."""
    topic = "bytes"
    create(broker.bootstrap, topic, 3)
    for p, codec in enumerate(("none", "gzip", "zstd")):
        prod = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 20})
        for i in range(600):
            prod.produce(topic, VALUES[i % len(VALUES)], key=b"k%d" % i, partition=p, timestamp=T0 + 1000 * i + p)
        assert prod.flush(30) == 0
    return topic


@pytest.mark.parametrize("reader", READERS)
def test_raw_window_is_byte_for_byte_the_reference(broker, codecs_topic, reader):
    t1, t2 = T0 + 37_000, T0 + 512_000
    want = reference(reader, broker.bootstrap, codecs_topic, 3, t1, t2)
    assert want.count(b"\xff\xfe bad") > 10
    assert consume(broker.bootstrap, codecs_topic, t1, t2) == want


def test_raw_from_a_data_dir_is_the_same_bytes(broker, codecs_topic):
    t1, t2 = T0 + 1_000, T0 + 590_000
    online = consume(broker.bootstrap, codecs_topic, t1, t2)
    offline = chronolog("consume", codecs_topic, "--from", str(t1), "--to", str(t2), "--format", "raw",
                        "--data-dir", str(broker.data_dir))
    assert offline == online
    assert offline == reference(consumer_lines, broker.bootstrap, codecs_topic, 3, t1, t2)


def test_raw_max_messages_stops_there_and_commits_the_positions(broker, codecs_topic):
    t1, t2 = T0, T0 + 600_000
    every = consume(broker.bootstrap, codecs_topic, t1, t2)
    got = consume(broker.bootstrap, codecs_topic, t1, t2, "--max-messages", "700", "--group", "raw-max")
    assert every.startswith(got) and len(got) < len(every)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "raw-max"})
    try:
        committed = {tp.partition: tp.offset for tp in
                     c.committed([TopicPartition(codecs_topic, p) for p in range(3)], timeout=15)}
    finally:
        c.close()
    assert committed[0] == 600 and committed[1] == 100  # partition 0 whole, then 100 records of partition 1
    assert committed[2] == 0  # not reached: the window's start, where a consumer of the group goes on


@pytest.fixture(scope="module")
def txn_topic(broker):
    """Committed, aborted, committed, then a transaction left open: the last stable offset is below the end."""
    topic = "txn-bytes"
    create(broker.bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "consume-bytes", "linger.ms": 5})
    p.init_transactions(20)
    n = 0
    for outcome in ("commit", "abort", "commit", "open"):
        p.begin_transaction()
        for i in range(50):
            p.produce(topic, VALUES[i % len(VALUES)] or b"%s-%d" % (outcome.encode(), i), partition=0,
                      timestamp=T0 + 1000 * n)
            n += 1
        assert p.flush(20) == 0
        if outcome == "commit":
            p.commit_transaction(20)
        elif outcome == "abort":
            p.abort_transaction(20)
    yield topic
    p.abort_transaction(20)


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_raw_transactions_as_a_consumer_of_that_level(broker, txn_topic, reader, isolation):
    t1, t2 = T0, T0 + 1_000_000
    want = reference(reader, broker.bootstrap, txn_topic, 1, t1, t2, isolation)
    assert (b"open-" in want) == (isolation == "read_uncommitted")
    assert (b"abort-" in want) == (isolation == "read_uncommitted")
    assert consume(broker.bootstrap, txn_topic, t1, t2, "--isolation-level", isolation) == want


COMPACTED = 400


@pytest.fixture(scope="module")
def compacted_topic(broker):
    """A compacted log (10 keys, 400 records in many small segments), once the cleaner is done with it."""
    topic = "compacted-bytes"
    create(broker.bootstrap, topic, 1, {"cleanup.policy": "compact", "segment.bytes": "4096",
                                        "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0"})
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(COMPACTED):
        p.produce(topic, b"v%d\xff\x00\r" % i, key=b"k%d" % (i % 10), partition=0, timestamp=T0 + 1000 * i)
        p.flush(10)  # a batch per record: segments roll often, the cleaner has closed segments to clean
    # Poll, bounded, until the cleaner has compacted the log and is done with it (two reads alike).
    t1, t2 = T0, T0 + 1000 * COMPACTED
    deadline = time.monotonic() + 60
    before, now = None, reference(consumer_lines, broker.bootstrap, topic, 1, t1, t2)
    while (now.count(b"\n") >= COMPACTED or now != before) and time.monotonic() < deadline:
        time.sleep(0.2)
        before, now = now, reference(consumer_lines, broker.bootstrap, topic, 1, t1, t2)
    assert now.count(b"\n") < COMPACTED, "the log was not compacted within 60 s"
    return topic


@pytest.mark.parametrize("reader", READERS)
def test_raw_compacted_log_with_offset_gaps(broker, compacted_topic, reader):
    t1, t2 = T0 + 1000, T0 + 1000 * (COMPACTED - 3)
    want = reference(reader, broker.bootstrap, compacted_topic, 1, t1, t2)
    assert consume(broker.bootstrap, compacted_topic, t1, t2) == want


def test_raw_into_a_pipe_closed_early_stops_without_a_word(broker, codecs_topic):
    """`chronolog consume ... | head -c 100`: the reader goes away, the command stops quietly (status 1)."""
    proc = subprocess.Popen([sys.executable, "-m", "chronolog.cli.main", "consume", codecs_topic, "--from", str(T0),
                             "--format", "raw", "-b", broker.bootstrap], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert len(proc.stdout.read(100)) == 100
    proc.stdout.close()
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and err == b"", err
