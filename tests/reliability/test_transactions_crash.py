"""SIGKILL the broker again and again (4 times; 6 in the long run, tests/scale.py) while a confluent-kafka
consume-transform-produce loop runs with transactions (send_offsets_to_transaction, read_committed input),
restart it each time, and prove the read_committed output holds every input exactly once, in order, with
no aborted record visible. The application does what an exactly-once application does on an error it
cannot retry: it starts again (a new producer with the same transactional.id fences the old one and aborts
its transaction; the consumer resumes from the committed offsets, KIP-447's require_stable waiting for an
open commit to end).

librdkafka's send_offsets_to_transaction can block forever when the group coordinator's connection went
down under it (it ignores its timeout: librdkafka issues #5456 and #5511, open), whichever broker it talks
to. The application here bounds that call itself and, when it is stuck, abandons that producer and starts
again, which is what such an application has to do. The bound is 3 s: an answered call takes milliseconds,
and about half a second right after a restart; a stuck one never returns, so a longer bound only waited
longer (with 10 s, four stuck calls were 40 of the test's 50 s). A call that is slow but not stuck and
meets the bound is abandoned the same way, which the application survives like any other restart."""

from __future__ import annotations

import collections
import random
import threading
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.brokerproc import BrokerProcess
from tests.scale import scaled

INPUTS = 2000
KILLS = scaled(4, 6)  # the long run (tests/scale.py) kills six times, as the test was first written
BATCH = 10  # records per transaction: many transactions, so the kills land inside them
QUIET = {"log_level": 0}
SEND_OFFSETS_BOUND_S = 3.0  # see the module's docstring


class Stuck(Exception):
    """A client call that did not return within its bound."""


def bounded(call, seconds: float):
    """`call()` in a daemon thread: its result, its exception, or Stuck after `seconds`."""
    box: list = []

    def run() -> None:
        try:
            box.append((True, call()))
        except BaseException as exc:  # handed to the caller
            box.append((False, exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if not box:
        raise Stuck(getattr(call, "__name__", "call"))
    ok, value = box[0]
    if not ok:
        raise value
    return value


class App:
    def __init__(self, bootstrap: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos", "enable.auto.commit": False,
                                  "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                                  "session.timeout.ms": 6000, "reconnect.backoff.max.ms": 200, **QUIET})
        self.consumer.subscribe(["in"])
        self.producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "eos-app", "linger.ms": 5,
                                  "reconnect.backoff.max.ms": 200, "transaction.timeout.ms": 20000, **QUIET})
        self.producer.init_transactions(30)

    def step(self) -> bool:
        """One transaction over what the consumer gives; True when one was committed."""
        msgs = [m for m in self.consumer.consume(BATCH, 0.3) if not m.error()]
        if not msgs:
            return False
        self.producer.begin_transaction()
        for m in msgs:
            self.producer.produce("out", value=b"t-" + m.value(), partition=m.partition())
        positions = self.consumer.position(self.consumer.assignment())
        metadata = self.consumer.consumer_group_metadata()
        bounded(lambda: self.producer.send_offsets_to_transaction(positions, metadata, SEND_OFFSETS_BOUND_S - 0.5),
                SEND_OFFSETS_BOUND_S)
        self.producer.commit_transaction(30)
        return True

    def committed(self) -> int:
        tps = self.consumer.committed([TopicPartition("in", 0), TopicPartition("in", 1)], 10)
        return sum(max(tp.offset, 0) for tp in tps)

    def close(self) -> None:
        try:
            bounded(self.consumer.close, 5)
        except Exception:
            pass


def test_exactly_once_through_broker_sigkills(tmp_path):
    proc = BrokerProcess(tmp_path / "data", {"transaction.state.log.num.partitions": "4",
                                             "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"})
    proc.start()
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    for f in admin.create_topics([NewTopic("in", 2, 1), NewTopic("out", 2, 1)]).values():
        f.result(15)
    seed = Producer({"bootstrap.servers": proc.bootstrap, "enable.idempotence": True, **QUIET})
    for i in range(INPUTS):
        seed.produce("in", value=b"%d" % i, partition=i % 2)
    assert seed.flush(30) == 0

    stop = threading.Event()
    kills = []
    rng = random.Random(15)

    progress = [0]

    def killer() -> None:
        """A SIGKILL each time another 1/(KILLS+1) of the input was committed, a random moment later: the
        kills land inside the loop's transactions, never after it finished."""
        for k in range(1, KILLS + 1):
            while not stop.is_set() and progress[0] < k * INPUTS // (KILLS + 1):
                stop.wait(0.01)
            if stop.wait(rng.uniform(0.0, 0.05)):
                return
            proc.kill()
            kills.append(progress[0])
            proc.start()

    thread = threading.Thread(target=killer)
    thread.start()
    app, restarts, done = None, 0, 0
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline:
            try:
                if app is None:
                    app = App(proc.bootstrap)
                if app.step() or done < INPUTS:
                    done = progress[0] = app.committed()
                if done >= INPUTS:
                    break
            except (KafkaException, Stuck):
                restarts += 1  # what an EOS application does: start again from the committed state
                if app is not None:
                    app.close()
                app = None
    finally:
        stop.set()
        thread.join(60)
        if app is not None:
            app.close()
    assert done == INPUTS and len(kills) == KILLS and max(kills) < INPUTS, (kills, done)

    reader = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": "check", "isolation.level": "read_committed",
                       "enable.auto.commit": False, "enable.partition.eof": True, **QUIET})
    reader.assign([TopicPartition("out", p, 0) for p in (0, 1)])
    out: dict[int, list[bytes]] = {0: [], 1: []}
    eof: set[int] = set()
    deadline = time.monotonic() + 60
    while len(eof) < 2 and time.monotonic() < deadline:
        m = reader.poll(0.3)
        if m is None:
            continue
        if m.error():
            if m.error().code() == -191:
                eof.add(m.partition())
            continue
        eof.discard(m.partition())
        out[m.partition()].append(m.value())
    reader.close()
    proc.stop()
    expected = {p: [b"t-%d" % i for i in range(INPUTS) if i % 2 == p] for p in (0, 1)}
    if out != expected:  # say what went wrong: duplicates, missing records, order
        report = {}
        for p in (0, 1):
            seen = collections.Counter(out[p])
            report[p] = {"got": len(out[p]), "duplicated": sorted(v for v, n in seen.items() if n > 1)[:10],
                         "missing": [v for v in expected[p] if v not in seen][:10]}
        raise AssertionError(f"read_committed output is not every input once, in order: {report}; "
                             f"restarts {restarts}, kills at {kills}")
