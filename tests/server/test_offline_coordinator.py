"""A `__consumer_offsets` or `__transaction_state` partition that cannot be opened at start (here: a directory
where its time index should be; in the field, a full disk refusing the rebuild of an index) takes only its
own groups and transactional ids offline: the coordinators start, the other groups keep their offsets, and
every other request is served. Kafka's broker would not lead that partition: FindCoordinator answers
COORDINATOR_NOT_AVAILABLE, which clients retry."""

from __future__ import annotations

import socket

import pytest

from chronolog.records.group_records import partition_for
from chronolog.testing import broker
from tests.frames import decode_response, recv_frame, request_frame

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

PARTITIONS = 4
CONFIGS = {"offsets.topic.num.partitions": str(PARTITIONS), "transaction.state.log.num.partitions": str(PARTITIONS)}


def _named(prefix: str, partition: int) -> str:
    return next(f"{prefix}-{i}" for i in range(1000) if partition_for(f"{prefix}-{i}", PARTITIONS) == partition)


OFF_GROUP, ON_GROUP = _named("g", 1), _named("g", 2)
OFF_TXN, ON_TXN = _named("tx", 1), _named("tx", 2)


def _call(bootstrap: str, api_key: int, version: int, body):
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request_frame(api_key, version, 7, body))
        return decode_response(api_key, version, recv_frame(sock))


def _find_coordinator(bootstrap: str, key: str, key_type: int) -> int:
    from kio.schema.find_coordinator.v2.request import FindCoordinatorRequest
    return int(_call(bootstrap, 10, 2, FindCoordinatorRequest(key=key, key_type=key_type)).error_code)


def _committed(b, group: str) -> int:
    consumer = Consumer({**b.client_config(), "group.id": group, "enable.auto.commit": False})
    try:
        return consumer.committed([TopicPartition("t", 0)], timeout=30)[0].offset
    finally:
        consumer.close()


def test_an_offline_coordinator_partition_takes_only_its_groups_offline(tmp_path):
    data = tmp_path / "data"
    with broker(data, configs=CONFIGS) as b:
        b.create_topic("t", 1)
        producer = Producer(b.client_config())
        for i in range(3):
            producer.produce("t", f"v{i}".encode())
        assert producer.flush(30) == 0
        for offset, group in ((1, OFF_GROUP), (2, ON_GROUP)):
            consumer = Consumer({**b.client_config(), "group.id": group, "enable.auto.commit": False})
            consumer.commit(offsets=[TopicPartition("t", 0, offset)], asynchronous=False)
            consumer.close()
        for txn in (OFF_TXN, ON_TXN):
            Producer({**b.client_config(), "transactional.id": txn}).init_transactions(30)

    for topic in ("__consumer_offsets", "__transaction_state"):
        index = data / f"{topic}-1" / "00000000000000000000.timeindex"
        index.unlink(missing_ok=True)
        index.mkdir()  # opening the partition fails with an I/O error, as ENOSPC on a full disk does

    with broker(data, configs=CONFIGS) as b:
        consumer = Consumer({**b.client_config(), "group.id": "reader"})
        assert consumer.get_watermark_offsets(TopicPartition("t", 0), timeout=30) == (0, 3)
        consumer.close()
        assert _committed(b, ON_GROUP) == 2
        assert _find_coordinator(b.bootstrap, ON_GROUP, 0) == 0
        assert _find_coordinator(b.bootstrap, OFF_GROUP, 0) == 15  # COORDINATOR_NOT_AVAILABLE
        assert _find_coordinator(b.bootstrap, ON_TXN, 1) == 0
        assert _find_coordinator(b.bootstrap, OFF_TXN, 1) == 15
        # A request sent to the coordinator regardless is not answered from the state it never loaded
        from kio.schema.offset_fetch.v5.request import OffsetFetchRequest
        with pytest.raises((EOFError, ConnectionError)):
            _call(b.bootstrap, 9, 5, OffsetFetchRequest(group_id=OFF_GROUP, topics=None))
