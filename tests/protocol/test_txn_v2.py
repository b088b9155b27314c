"""Transaction version 2 (KIP-890 part 2) through the handlers, no sockets: Produce v12 adding its partition,
EndTxn v5 bumping the epoch and its markers carrying the bumped one, the epochs running out (a new producer
id, and a retry of that EndTxn), TransactionLogValue v1 with its tagged fields, and a restart that completes
a PrepareCommit moving to its next producer id. tests/differential/test_txn_v2.py compares the sequences with
Kafka 4.4; tests/jvm/test_java_txn_v2.py runs Kafka's Java producer."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from chronolog.errors import ErrorCode
from chronolog.protocol import transactions as txn_api
from chronolog.protocol.core import api_versions, produce
from chronolog.records import SimpleRecord, build_batch
from chronolog.server.txn_log import MAX_EPOCH, TxnMetadata, TxnState, read_value, value_bytes
from tests.protocol.test_transactions import TXN, Env, _reopen


@pytest.fixture
def env(tmp_path):
    e = Env(tmp_path)
    yield e
    e.close()


def produce_v12(env: Env, pid: int, epoch: int, seq: int, partition: int = 0, n: int = 2) -> dict:
    batch = build_batch([SimpleRecord(env.now, None, b"v%d" % (seq + i)) for i in range(n)], producer_id=pid,
                        producer_epoch=epoch, base_sequence=seq, is_transactional=True)
    req = NS(acks=-1, transactional_id=TXN, topic_data=[NS(name="t", partition_data=[
        NS(index=partition, records=batch)])])
    return produce(req, env.ctx(0, 12))["responses"][0]["partition_responses"][0]


def end_v5(env: Env, pid: int, epoch: int, commit: bool) -> tuple[int, int, int]:
    out = txn_api.end_txn(NS(transactional_id=TXN, producer_id=pid, producer_epoch=epoch, committed=commit),
                          env.ctx(26, 5))
    return out["error_code"], out["producer_id"], out["producer_epoch"]


def partition_epoch(env: Env, pid: int, partition: int = 0) -> int:
    (entry,) = [p for p in env.log(partition).producers() if p.producer_id == pid]
    return entry.epoch


def test_log_value_v1_round_trip():
    meta = TxnMetadata("ab", 7, 3, 2, previous_producer_id=6, timeout_ms=60000, state=TxnState.PREPARE_COMMIT,
                       partitions={("t", 1), ("t", 0)}, last_update_ms=1000, start_ms=900, next_producer_id=8,
                       client_version=2)
    data = value_bytes(meta, 1)
    assert data[:2] == b"\x00\x01"
    back = read_value("ab", data)
    assert (back.producer_id, back.producer_epoch, back.state, back.partitions, back.previous_producer_id,
            back.next_producer_id, back.client_version, back.start_ms) == (7, 3, TxnState.PREPARE_COMMIT,
                                                                           meta.partitions, 6, 8, 2, 900)
    empty = read_value("ab", value_bytes(TxnMetadata("ab", 7, 0, state=TxnState.EMPTY), 1))
    assert (empty.state, empty.partitions, empty.previous_producer_id, empty.next_producer_id,
            empty.client_version) == (TxnState.EMPTY, set(), -1, -1, 0)


def test_transaction_version_is_finalized(env):
    out = api_versions(NS(client_software_name="t", client_software_version="1"), env.ctx(18, 4))
    assert {"name": "transaction.version", "min_version_level": 2, "max_version_level": 2} in out["finalized_features"]
    assert out["finalized_features_epoch"] >= 0


def test_produce_adds_and_end_txn_bumps(env):
    r = env.init()
    pid, epoch = r["producer_id"], r["producer_epoch"]
    assert produce_v12(env, pid, epoch, 0)["error_code"] == 0  # no AddPartitionsToTxn before it
    assert env.txns.txns[TXN].state == TxnState.ONGOING and env.txns.txns[TXN].client_version == 2
    assert end_v5(env, pid, epoch, True) == (0, pid, epoch + 1)
    assert partition_epoch(env, pid) == epoch + 1  # the marker carries the bumped epoch
    assert env.list_offset(-1, 1)["offset"] == 3
    zombie = produce_v12(env, pid, epoch, 2)
    assert zombie["error_code"] == ErrorCode.INVALID_PRODUCER_EPOCH  # PRODUCER_FENCED, as Produce answers it
    assert end_v5(env, pid, epoch, True) == (0, pid, epoch + 1)  # a retry of the commit
    assert end_v5(env, pid, epoch + 1, True)[0] == ErrorCode.INVALID_TXN_STATE  # nothing to commit
    assert end_v5(env, pid, epoch + 1, False) == (0, pid, epoch + 2)  # an abort of nothing bumps
    assert produce_v12(env, pid, epoch + 2, 0)["error_code"] == 0
    assert end_v5(env, pid, epoch + 2, False) == (0, pid, epoch + 3)
    assert env.list_offset(-1, 1)["offset"] == env.list_offset(-1, 0)["offset"] == 6


def test_produce_v12_errors(env):
    r = env.init()
    pid, epoch = r["producer_id"], r["producer_epoch"]
    assert produce_v12(env, pid + 1, epoch, 0)["error_code"] == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert produce_v12(env, pid, epoch + 1, 0)["error_code"] == ErrorCode.INVALID_PRODUCER_EPOCH
    meta = env.txns.txns[TXN].copy()
    meta.state = TxnState.PREPARE_ABORT
    env.txns.txns[TXN] = meta  # a transaction whose markers are not written yet: the producer retries
    assert produce_v12(env, pid, epoch, 0)["error_code"] == ErrorCode.NOT_ENOUGH_REPLICAS


def test_the_epochs_run_out(env):
    """TransactionMetadata.prepareComplete after an overflow: the markers at MAX with the old id, then the
    next producer id at epoch 0; a retry of that EndTxn (the old id at MAX-1) is answered the same."""
    first = env.init()
    pid = first["producer_id"]
    meta = env.txns.txns[TXN].copy()
    meta.producer_epoch = MAX_EPOCH - 1
    env.txns._write(meta, TXN)
    assert produce_v12(env, pid, MAX_EPOCH - 1, 0)["error_code"] == 0
    error, new_pid, new_epoch = end_v5(env, pid, MAX_EPOCH - 1, True)
    assert (error, new_epoch) == (0, 0) and new_pid != pid
    assert partition_epoch(env, pid) == MAX_EPOCH
    assert end_v5(env, pid, MAX_EPOCH - 1, True) == (0, new_pid, 0)
    env = _reopen(env)
    try:
        meta = env.txns.txns[TXN]
        assert (meta.producer_id, meta.producer_epoch, meta.previous_producer_id) == (new_pid, 0, pid)
        assert end_v5(env, pid, MAX_EPOCH - 1, True) == (0, new_pid, 0)
        assert produce_v12(env, new_pid, 0, 0)["error_code"] == 0
        assert end_v5(env, new_pid, 0, True) == (0, new_pid, 1)
    finally:
        env.close()


def test_a_restart_completes_a_prepare_commit_with_its_next_producer_id(env):
    pid = env.init()["producer_id"]
    assert produce_v12(env, pid, 0, 0)["error_code"] == 0
    meta = env.txns.txns[TXN].copy()
    meta.state, meta.producer_epoch, meta.next_producer_id = TxnState.PREPARE_COMMIT, 1, pid + 100
    env.txns._write(meta, TXN)  # the coordinator died before the markers
    env = _reopen(env)
    try:
        meta = env.txns.txns[TXN]
        assert (meta.state, meta.producer_id, meta.producer_epoch) == (TxnState.COMPLETE_COMMIT, pid + 100, 0)
        assert partition_epoch(env, pid) == 1
        assert env.list_offset(-1, 1)["offset"] == 3
    finally:
        env.close()


def test_version_1_clients_keep_their_epoch(env):
    """librdkafka and Java clients without version 2: AddPartitionsToTxn, EndTxn v3, the epoch unchanged."""
    r = env.init()
    pid, epoch = r["producer_id"], r["producer_epoch"]
    assert env.add(pid, epoch, {"t": [0]}) == {("t", 0): 0}
    assert env.produce(pid, epoch, 0)["error_code"] == 0
    assert env.end(pid, epoch, True) == 0
    assert env.txns.txns[TXN].producer_epoch == epoch and partition_epoch(env, pid) == epoch
    assert env.end(pid, epoch, False) == ErrorCode.INVALID_TXN_STATE
