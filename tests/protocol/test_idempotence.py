"""Produce from an idempotent producer, through the handler: a retry answered with the first write's
offset (also after the broker restarts, however far back the producer's batch is), a gap in sequence
numbers and a fenced epoch answered with Kafka's error codes, and nothing written for any of them."""

from __future__ import annotations

import time
from types import SimpleNamespace

from chronolog.config import BrokerConfig
from chronolog.errors import ErrorCode
from chronolog.protocol.core import produce
from chronolog.protocol.registry import BrokerState, RequestContext
from chronolog.records import SimpleRecord, build_batch
from chronolog.storage import LogManager

PID, OTHER = 9001, 9002


def _batch(seq: int, epoch: int = 0, n: int = 4, pid: int = PID) -> bytes:
    now = int(time.time() * 1000)
    return build_batch([SimpleRecord(now, None, b"r" * 300) for _ in range(n)], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq)


def _produce(manager: LogManager, records: bytes) -> dict:
    ctx = RequestContext(BrokerState(manager, manager.broker_config, "127.0.0.1", 0), 0, 9, 1, "c", "127.0.0.1")
    req = SimpleNamespace(acks=-1, topic_data=[SimpleNamespace(name="t", partition_data=[
        SimpleNamespace(index=0, records=records)])])
    return produce(req, ctx)["responses"][0]["partition_responses"][0]


def test_retries_gaps_and_fencing_through_a_restart(tmp_path):
    manager = LogManager(tmp_path, BrokerConfig())
    manager.startup(background=False)
    manager.create_topic("t", 1, {"segment.bytes": "4096"})
    assert _produce(manager, _batch(0))["base_offset"] == 0
    for i in range(16):  # then segments of another producer's batches
        assert _produce(manager, _batch(4 * i, pid=OTHER))["error_code"] == 0
    end = manager.get_log("t", 0).log_end_offset
    assert len(manager.get_log("t", 0).segments) > 4
    manager.shutdown()

    manager = LogManager(tmp_path, BrokerConfig())
    manager.startup(background=False)
    try:
        retry = _produce(manager, _batch(0))  # its batch again, as librdkafka retries after a restart
        assert (retry["error_code"], retry["base_offset"]) == (0, 0)
        assert _produce(manager, _batch(60, pid=OTHER))["base_offset"] == end - 4
        end = manager.get_log("t", 0).log_end_offset
        gap = _produce(manager, _batch(8))
        assert gap["error_code"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert _produce(manager, _batch(4, epoch=1))["error_code"] == 0  # a new epoch may start anywhere
        fenced = _produce(manager, _batch(8, epoch=0))
        assert fenced["error_code"] == ErrorCode.INVALID_PRODUCER_EPOCH
        assert manager.get_log("t", 0).log_end_offset == end + 4  # only the new epoch's batch was written
    finally:
        manager.shutdown()
