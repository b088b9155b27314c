"""An exactly-once consume-transform-produce loop through librdkafka (confluent-kafka), the way its docs write
one: a read_committed consumer of a group (`group.protocol` classic or consumer, KIP-848), a transactional
producer, each batch's output and the consumer's positions (send_offsets_to_transaction: TxnOffsetCommit
with the member's id and generation or epoch) committed in one transaction. On an abortable error the
transaction is aborted and the consumer rewound to the group's committed offsets.

Usage: eos_groups_app.py BOOTSTRAP GROUP_PROTOCOL GROUP IN_TOPIC OUT_TOPIC TRANSACTIONAL_ID
Runs until SIGTERM (or SIGKILL, which the test sends); prints one line per committed transaction."""

from __future__ import annotations

import faulthandler
import os
import signal
import sys

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer


def transform(value: bytes) -> bytes:
    return b"out-" + value


def commit(producer: Producer) -> None:
    """commit_transaction, again while its error is retriable (librdkafka's documented loop)."""
    while True:
        try:
            producer.commit_transaction(60)
            return
        except KafkaException as exc:
            if not exc.args[0].retriable():
                raise
            print(f"commit retried: {exc.args[0]}", flush=True)


def rewind(consumer: Consumer) -> None:
    """Back to what the group committed (the start, where it committed nothing): the aborted batch is read
    again."""
    for tp in consumer.committed(consumer.assignment(), 30):
        if tp.offset < 0:
            tp.offset = OFFSET_BEGINNING
        try:
            consumer.seek(tp)
        except KafkaException as exc:  # not fetching that partition yet: it starts from the committed offset
            print(f"seek {tp}: {exc}", flush=True)


def main(bootstrap: str, protocol: str, group: str, topic_in: str, topic_out: str, txn_id: str) -> None:
    faulthandler.register(signal.SIGUSR1)  # where it is, when a test's bound runs out
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
            "enable.auto.commit": False, "isolation.level": "read_committed", "auto.offset.reset": "earliest"}
    if protocol == "classic":
        conf["session.timeout.ms"] = 6000  # a killed predecessor's partitions come back soon
    consumer = Consumer(conf)
    # metadata.recovery.strategy=none: librdkafka 2.16 re-bootstraps when its one broker is down and then
    # decommissions it, and a send_offsets_to_transaction whose cached group coordinator was decommissioned
    # hangs past its timeout (confluentinc/librdkafka#5511, #5456), against any broker that restarts.
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5,
                         "transaction.timeout.ms": 10000, "metadata.recovery.strategy": "none", **({"debug": os.environ["EOS_APP_DEBUG"]}
                                                             if os.environ.get("EOS_APP_DEBUG") else {})})
    producer.init_transactions(60)
    consumer.subscribe([topic_in])
    while not stop:
        batch = consumer.consume(200, 0.5)
        records = [m for m in batch if m.error() is None]
        if not records:
            continue
        try:
            producer.begin_transaction()
            for m in records:
                producer.produce(topic_out, key=m.key(), value=transform(m.value()), partition=m.partition())
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 30)
            commit(producer)
            print(f"committed {len(records)}", flush=True)
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.fatal() or not error.txn_requires_abort():
                raise
            print(f"aborted: {error}", flush=True)
            producer.abort_transaction(60)
            rewind(consumer)
    consumer.close()


if __name__ == "__main__":
    main(*sys.argv[1:7])
