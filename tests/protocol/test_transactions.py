"""The transaction APIs through their handlers, on a real LogManager with the transaction and group
coordinators (no sockets): the state machine's answers with Kafka's error codes, markers and the last
stable offset, read_committed Fetch and ListOffsets, __transaction_state records and what a reload makes
of them (a PrepareCommit completed, an Ongoing transaction left to its producer or its timeout),
transactional offset commits, expiration, the admin APIs and the ACL checks."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace as NS

import pytest

from chronolog.config import BrokerConfig
from chronolog.errors import ErrorCode
from chronolog.protocol import codec
from chronolog.protocol import groups as group_api
from chronolog.protocol import transactions as txn_api
from chronolog.protocol.core import fetch, list_offsets, produce
from chronolog.protocol.registry import BrokerState, RequestContext
from chronolog.records import SimpleRecord, build_batch
from chronolog.records.memory import iter_batches
from chronolog.server.coordinator import GroupCoordinator
from chronolog.server.transactions import TransactionCoordinator
from chronolog.server.txn_log import (
    TRANSACTION_STATE_TOPIC,
    TxnMetadata,
    TxnState,
    java_string_hash,
    key_bytes,
    partition_for,
    read_key,
    read_value,
    value_bytes,
)
from chronolog.storage import LogManager

TXN = "app-1"
CONFIGS = {"transaction.state.log.num.partitions": "4", "transaction.max.timeout.ms": "60000"}


class Env:
    """A broker's state without the server: handlers are called as the server calls them."""

    def __init__(self, tmp_path, configs: dict | None = None, authorizer=None) -> None:
        self.tmp_path = tmp_path
        self.config = BrokerConfig({**CONFIGS, **(configs or {})})
        self.now = int(time.time() * 1000)
        self.manager = LogManager(tmp_path, self.config)
        self.manager.startup(background=False)
        if not self.manager.has_topic("t"):
            self.manager.create_topic("t", 2)
        self.groups = GroupCoordinator(tmp_path / "__consumer_offsets-state", self.config, self.manager)
        self.groups.store.load()
        self.state = BrokerState(self.manager, self.config, "127.0.0.1", 9092, coordinator=self.groups)
        if authorizer is not None:
            self.state.authorizer = authorizer
        self.txns = TransactionCoordinator(self.manager, self.config, self.state.producer_ids, self.groups,
                                           clock=lambda: self.now)
        self.state.transactions = self.txns
        self.txns.load()

    def close(self) -> None:
        self.groups.store.close()
        self.manager.shutdown()

    def ctx(self, api_key: int, version: int) -> RequestContext:
        return RequestContext(self.state, api_key, version, 1, "client", "127.0.0.1")

    def init(self, txn_id: str = TXN, timeout_ms: int = 30000, pid: int = -1, epoch: int = -1) -> dict:
        return txn_api.init_producer_id(NS(transactional_id=txn_id, transaction_timeout=timeout_ms,
                                           producer_id=pid, producer_epoch=epoch), self.ctx(22, 4))

    def add(self, pid: int, epoch: int, partitions: dict[str, list[int]], txn_id: str = TXN) -> dict:
        topics = [NS(name=t, partitions=ps) for t, ps in partitions.items()]
        out = txn_api.add_partitions_to_txn(NS(v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid,
                                               v3_and_below_producer_epoch=epoch, v3_and_below_topics=topics),
                                            self.ctx(24, 3))
        return {(t["name"], r["partition_index"]): r["partition_error_code"]
                for t in out["results_by_topic_v3_and_below"] for r in t["results_by_partition"]}

    def end(self, pid: int, epoch: int, commit: bool, txn_id: str = TXN) -> int:
        return txn_api.end_txn(NS(transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, committed=commit),
                               self.ctx(26, 3))["error_code"]

    def produce(self, pid: int, epoch: int, seq: int, n: int = 3, partition: int = 0, txn_id: str | None = TXN,
                transactional: bool = True) -> dict:
        batch = build_batch([SimpleRecord(self.now, None, b"v%d" % (seq + i)) for i in range(n)], producer_id=pid,
                            producer_epoch=epoch, base_sequence=seq, is_transactional=transactional)
        req = NS(acks=-1, transactional_id=txn_id, topic_data=[NS(name="t", partition_data=[
            NS(index=partition, records=batch)])])
        return produce(req, self.ctx(0, 9))["responses"][0]["partition_responses"][0]

    def fetch(self, offset: int, isolation: int, partition: int = 0) -> dict:
        req = NS(max_wait=0, min_bytes=0, max_bytes=1 << 20, isolation_level=isolation, topics=[
            NS(topic="t", partitions=[NS(partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20)])])
        out = asyncio.run(fetch(req, self.ctx(1, 11)))
        part = out["responses"][0]["partitions"][0]
        records = part["records"]
        part["batches"] = list(iter_batches(bytearray(records))) if records else []
        return part

    def list_offset(self, timestamp: int, isolation: int, partition: int = 0) -> dict:
        req = NS(isolation_level=isolation, topics=[NS(name="t", partitions=[
            NS(partition_index=partition, timestamp=timestamp)])])
        return list_offsets(req, self.ctx(2, 5))["topics"][0]["partitions"][0]

    def log(self, partition: int = 0):
        return self.manager.get_log("t", partition)


@pytest.fixture
def env(tmp_path):
    e = Env(tmp_path)
    yield e
    e.close()


def _reopen(env: Env, configs: dict | None = None) -> Env:
    env.close()
    return Env(env.tmp_path, configs)


def test_record_schemas_and_partitioning():
    # java.lang.String.hashCode values, and Utils.abs(hash) % partitions
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -2147483648  # Integer.MIN_VALUE: Utils.abs gives 0
    assert partition_for("polygenelubricants", 50) == 0
    assert java_string_hash("é€") == 233 * 31 + 0x20AC
    assert key_bytes("ab") == b"\x00\x00\x00\x02ab"
    meta = TxnMetadata("ab", 7, 3, timeout_ms=60000, state=TxnState.ONGOING, partitions={("t", 1), ("t", 0), ("u", 2)},
                       last_update_ms=1000, start_ms=900)
    expected = (b"\x00\x00" + (7).to_bytes(8, "big") + (3).to_bytes(2, "big") + (60000).to_bytes(4, "big") + b"\x01"
                + (2).to_bytes(4, "big")
                + b"\x00\x01t" + (2).to_bytes(4, "big") + (0).to_bytes(4, "big") + (1).to_bytes(4, "big")
                + b"\x00\x01u" + (1).to_bytes(4, "big") + (2).to_bytes(4, "big")
                + (1000).to_bytes(8, "big") + (900).to_bytes(8, "big"))
    assert value_bytes(meta) == expected
    back = read_value("ab", expected)
    assert (back.producer_id, back.producer_epoch, back.state, back.partitions) == (7, 3, TxnState.ONGOING,
                                                                                     meta.partitions)
    empty = TxnMetadata("ab", 7, 3, state=TxnState.EMPTY, last_update_ms=1, start_ms=-1)
    assert value_bytes(empty)[17:21] == b"\xff\xff\xff\xff"  # an Empty transaction's partitions are null
    assert read_key(key_bytes("ab")) == "ab" and read_value("ab", None) is None


def test_init_bumps_the_epoch_and_survives_a_restart(env):
    first = env.init()
    assert (first["error_code"], first["producer_epoch"]) == (0, 0)
    again = env.init()
    assert (again["producer_id"], again["producer_epoch"]) == (first["producer_id"], 1)
    # the state is in its __transaction_state partition, in Kafka's record schemas
    plog = env.manager.get_log(TRANSACTION_STATE_TOPIC, partition_for(TXN, 4))
    records = list(plog.read_records(0))
    assert [read_key(r.key) for r in records] == [TXN, TXN]
    assert read_value(TXN, records[-1].value).producer_epoch == 1
    env = _reopen(env)
    try:
        third = env.init()
        assert (third["producer_id"], third["producer_epoch"]) == (first["producer_id"], 2)
        # KIP-360: a producer that lost its epoch asks with its id and epoch; a stale one is fenced
        assert env.init(pid=first["producer_id"], epoch=2)["producer_epoch"] == 3
        assert env.init(pid=first["producer_id"], epoch=2)["producer_epoch"] == 3  # a retry of that bump
        assert env.init(pid=first["producer_id"], epoch=1)["error_code"] == ErrorCode.PRODUCER_FENCED
        assert env.init(pid=first["producer_id"] + 1, epoch=3)["error_code"] == ErrorCode.PRODUCER_FENCED
        assert env.init(pid=first["producer_id"], epoch=-1)["error_code"] == ErrorCode.INVALID_REQUEST
    finally:
        env.close()


def test_commit_and_abort_markers_lso_and_read_committed_fetch(env):
    r = env.init()
    pid, epoch = r["producer_id"], r["producer_epoch"]
    plain = build_batch([SimpleRecord(env.now, None, b"plain")])
    produce(NS(acks=-1, transactional_id=None, topic_data=[NS(name="t", partition_data=[NS(index=0, records=plain)])]),
            env.ctx(0, 9))
    assert env.add(pid, epoch, {"t": [0, 1]}) == {("t", 0): 0, ("t", 1): 0}
    assert env.produce(pid, epoch, 0)["error_code"] == 0  # offsets 1-3
    assert env.log().last_stable_offset == 1 and env.log().high_watermark == 4
    committed = env.fetch(0, 1)
    assert committed["last_stable_offset"] == 1 and committed["high_watermark"] == 4
    assert [b.base_offset for b in committed["batches"]] == [0]  # the open transaction is not served
    assert committed["aborted_transactions"] == []
    uncommitted = env.fetch(0, 0)
    assert uncommitted["aborted_transactions"] is None and len(uncommitted["batches"]) == 2
    assert uncommitted["last_stable_offset"] == 1  # reported to every reader, as Kafka does
    assert env.list_offset(-1, 1)["offset"] == 1 and env.list_offset(-1, 0)["offset"] == 4
    assert env.list_offset(env.now, 1)["offset"] == 0  # a lookup by time stops before the LSO
    assert env.list_offset(env.now + 1, 1)["offset"] == -1

    assert env.end(pid, epoch, commit=True) == 0
    assert env.txns.txns[TXN].state == TxnState.COMPLETE_COMMIT
    for partition in (0, 1):  # a marker in every partition of the transaction
        last = list(env.log(partition).read_batches(0))[-1]
        assert last.is_control and last.is_transactional and last.producer_id == pid
    assert env.log().last_stable_offset == env.log().high_watermark == 5
    assert env.end(pid, epoch, commit=True) == 0  # a retry of the completed commit
    assert env.end(pid, epoch, commit=False) == ErrorCode.INVALID_TXN_STATE

    assert env.add(pid, epoch, {"t": [0]}) == {("t", 0): 0}
    assert env.produce(pid, epoch, 3)["base_offset"] == 5
    assert env.end(pid, epoch, commit=False) == 0
    aborted = env.fetch(0, 1)
    assert aborted["aborted_transactions"] == [{"producer_id": pid, "first_offset": 5}]
    assert env.fetch(0, 0)["aborted_transactions"] is None
    assert env.log().last_stable_offset == env.log().high_watermark == 9


def test_bad_input_gets_kafka_error_codes_and_writes_nothing(env):
    assert env.end(1234, 0, commit=True) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert env.add(1234, 0, {"t": [0]}) == {("t", 0): ErrorCode.INVALID_PRODUCER_ID_MAPPING}
    assert env.init(timeout_ms=60001)["error_code"] == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert env.init(timeout_ms=0)["error_code"] == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert env.init(txn_id="")["error_code"] == ErrorCode.INVALID_REQUEST
    r = env.init()
    pid, epoch = r["producer_id"], r["producer_epoch"]
    assert env.end(pid, epoch, commit=True) == ErrorCode.INVALID_TXN_STATE  # nothing begun
    assert env.end(pid, epoch - 1, commit=True) == ErrorCode.PRODUCER_FENCED
    assert env.add(pid, epoch + 1, {"t": [0]}) == {("t", 0): ErrorCode.PRODUCER_FENCED}
    # an unknown topic or partition: that one UNKNOWN_TOPIC_OR_PARTITION, the rest not attempted
    assert env.add(pid, epoch, {"t": [0, 7], "nope": [0]}) == {
        ("t", 0): ErrorCode.OPERATION_NOT_ATTEMPTED, ("t", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert env.txns.txns[TXN].state == TxnState.EMPTY
    end = env.log().log_end_offset
    # a transactional batch for a partition the transaction did not add (verification, KIP-890)
    assert env.produce(pid, epoch, 0)["error_code"] == ErrorCode.INVALID_TXN_STATE
    assert env.add(pid, epoch, {"t": [1]}) == {("t", 1): 0}
    assert env.produce(pid, epoch, 0, partition=0)["error_code"] == ErrorCode.INVALID_TXN_STATE
    assert env.produce(pid, epoch, 0, txn_id=None)["error_code"] == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert env.produce(pid, epoch, 0, partition=0, txn_id="other")["error_code"] == \
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert env.log().log_end_offset == end
    # a client's control batch (storage refuses it: LogValidator)
    control = build_batch([SimpleRecord(env.now, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")],
                          producer_id=pid, producer_epoch=epoch, base_sequence=-1, is_transactional=True,
                          is_control=True)
    req = NS(acks=-1, transactional_id=TXN, topic_data=[NS(name="t", partition_data=[NS(index=1, records=control)])])
    answer = produce(req, env.ctx(0, 9))["responses"][0]["partition_responses"][0]
    assert answer["error_code"] == ErrorCode.INVALID_RECORD
    assert env.log(1).log_end_offset == 0
    # clients cannot write the coordinator's topic
    req = NS(acks=-1, transactional_id=None, topic_data=[NS(name=TRANSACTION_STATE_TOPIC, partition_data=[
        NS(index=0, records=build_batch([SimpleRecord(env.now, b"k", b"v")]))])])
    assert produce(req, env.ctx(0, 9))["responses"][0]["partition_responses"][0]["error_code"] == \
        ErrorCode.INVALID_TOPIC_EXCEPTION


def test_fencing_aborts_the_old_producers_transaction(env):
    old = env.init()
    pid = old["producer_id"]
    env.add(pid, 0, {"t": [0]})
    assert env.produce(pid, 0, 0)["error_code"] == 0
    # the same transactional id from a new producer: the transaction is aborted, and Kafka's retriable
    # CONCURRENT_TRANSACTIONS answered; the retry bumps the epoch again
    assert env.init()["error_code"] == ErrorCode.CONCURRENT_TRANSACTIONS
    new = env.init()
    assert (new["error_code"], new["producer_id"], new["producer_epoch"]) == (0, pid, 2)
    batches = list(env.log().read_batches(0))
    assert batches[-1].is_control and batches[-1].producer_epoch == 1  # aborted with the fenced epoch
    assert env.fetch(0, 1)["aborted_transactions"] == [{"producer_id": pid, "first_offset": 0}]
    assert env.end(pid, 0, commit=True) == ErrorCode.PRODUCER_FENCED
    assert env.add(pid, 0, {"t": [0]}) == {("t", 0): ErrorCode.PRODUCER_FENCED}
    assert env.produce(pid, 0, 3)["error_code"] == ErrorCode.INVALID_PRODUCER_EPOCH
    assert env.log().last_stable_offset == env.log().high_watermark


def test_a_reload_completes_prepare_commit_and_keeps_ongoing(env):
    r = env.init()
    pid = r["producer_id"]
    env.add(pid, 0, {"t": [0, 1]})
    env.produce(pid, 0, 0, partition=0)
    env.produce(pid, 0, 0, partition=1)
    env.init(txn_id="other")
    other = env.txns.txns["other"].producer_id
    env.add(other, 0, {"t": [1]}, txn_id="other")
    env.produce(other, 0, 0, partition=1, txn_id="other")
    # a crash right after PrepareCommit was logged: no marker written yet
    prepared = env.txns.txns[TXN].copy()
    prepared.state = TxnState.PREPARE_COMMIT
    env.txns._write(prepared, TXN)
    assert env.log(0).last_stable_offset == 0
    env = _reopen(env)
    try:
        assert env.txns.txns[TXN].state == TxnState.COMPLETE_COMMIT
        assert env.log(0).last_stable_offset == env.log(0).high_watermark
        assert not env.fetch(0, 1, partition=0)["aborted_transactions"]
        assert [b.base_offset for b in env.fetch(0, 1, partition=0)["batches"]][:1] == [0]
        # the other transaction stays open for its producer (Kafka keeps Ongoing ones across a load)...
        assert env.txns.txns["other"].state == TxnState.ONGOING
        assert env.log(1).last_stable_offset == 3
        assert env.txns.abort_timed_out() == 0
        env.now += 30001  # ...until its transaction.timeout.ms passed
        assert env.txns.abort_timed_out() == 1
        assert env.txns.txns["other"].state == TxnState.COMPLETE_ABORT
        assert env.txns.txns["other"].producer_epoch == 1  # fenced: the producer's next call fails
        assert env.log(1).last_stable_offset == env.log(1).high_watermark
        assert env.fetch(0, 1, partition=1)["aborted_transactions"] == [{"producer_id": other, "first_offset": 3}]
        assert env.end(other, 0, commit=True, txn_id="other") == ErrorCode.PRODUCER_FENCED
    finally:
        env.close()


def _txn_commit(env: Env, pid: int, epoch: int, offset: int, generation: int = -1, member: str = "") -> int:
    req = NS(transactional_id=TXN, group_id="g", producer_id=pid, producer_epoch=epoch, generation_id=generation,
             member_id=member, group_instance_id=None,
             topics=[NS(name="t", partitions=[NS(partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
                                                 committed_metadata=None)])])
    return txn_api.txn_offset_commit(req, env.ctx(28, 3))["topics"][0]["partitions"][0]["error_code"]


def _fetch_offset(env: Env, require_stable: bool) -> tuple[int, int]:
    req = NS(groups=[NS(group_id="g", topics=[NS(name="t", partition_indexes=[0])])], require_stable=require_stable)
    part = group_api.offset_fetch(req, env.ctx(9, 8))["groups"][0]["topics"][0]["partitions"][0]
    return part["error_code"], part["committed_offset"]


def test_transactional_offset_commits(env):
    r = env.init()
    pid = r["producer_id"]
    assert _txn_commit(env, pid, 0, 10) == ErrorCode.INVALID_TXN_STATE  # AddOffsetsToTxn first
    add = txn_api.add_offsets_to_txn(NS(transactional_id=TXN, producer_id=pid, producer_epoch=0, group_id="g"),
                                     env.ctx(25, 3))
    assert add["error_code"] == 0
    assert ("__consumer_offsets", partition_for("g", 50)) in env.txns.txns[TXN].partitions
    assert _txn_commit(env, pid, 0, 10, generation=3) == ErrorCode.ILLEGAL_GENERATION  # KIP-447
    # without a generation an absent group becomes a simple one, empty: any member id goes (Kafka 4.4)
    assert _txn_commit(env, pid, 0, 10, member="ghost") == 0
    assert _txn_commit(env, pid, 0, 10) == 0
    assert _fetch_offset(env, require_stable=True) == (ErrorCode.UNSTABLE_OFFSET_COMMIT, -1)
    assert _fetch_offset(env, require_stable=False) == (0, -1)
    env = _reopen(_reopen(env))  # pending offsets survive restarts (and the offsets file's compaction at each)
    try:
        assert _fetch_offset(env, require_stable=True)[0] == ErrorCode.UNSTABLE_OFFSET_COMMIT
        assert env.end(pid, 0, commit=True) == 0
        assert _fetch_offset(env, require_stable=True) == (0, 10)
        txn_api.add_offsets_to_txn(NS(transactional_id=TXN, producer_id=pid, producer_epoch=0, group_id="g"),
                                   env.ctx(25, 3))
        assert _txn_commit(env, pid, 0, 20) == 0
        assert env.end(pid, 0, commit=False) == 0
        assert _fetch_offset(env, require_stable=True) == (0, 10)  # the aborted commit is dropped
    finally:
        env.close()


def test_expiration_and_admin_apis(env):
    r = env.init()
    pid = r["producer_id"]
    env.add(pid, 0, {"t": [1]})
    env.produce(pid, 0, 0, partition=1)
    env.init(txn_id="idle")
    listed = txn_api.list_transactions(NS(state_filters=["Ongoing"], producer_id_filters=[], duration_filter=-1,
                                          transactional_id_pattern=None), env.ctx(66, 1))
    assert [(s["transactional_id"], s["transaction_state"]) for s in listed["transaction_states"]] == [(TXN, "Ongoing")]
    listed = txn_api.list_transactions(NS(state_filters=["Bogus"], producer_id_filters=[], duration_filter=-1,
                                          transactional_id_pattern=None), env.ctx(66, 2))
    assert listed["unknown_state_filters"] == ["Bogus"] and listed["transaction_states"] == []
    listed = txn_api.list_transactions(NS(state_filters=[], producer_id_filters=[], duration_filter=-1,
                                          transactional_id_pattern="id.*"), env.ctx(66, 2))
    assert [s["transactional_id"] for s in listed["transaction_states"]] == ["idle"]
    described = txn_api.describe_transactions(NS(transactional_ids=[TXN, "nope"]), env.ctx(65, 0))
    found, missing = described["transaction_states"]
    assert (found["transaction_state"], found["producer_id"], found["topics"]) == \
        ("Ongoing", pid, [{"topic": "t", "partitions": [1]}])
    assert missing["error_code"] == 105  # TRANSACTIONAL_ID_NOT_FOUND
    # the answers encode (kio's non-nullable start time: -1 for the missing id)
    raw = codec.encode_values(65, 0, 1, described)
    assert raw.count(b"\xff" * 8) >= 2 and codec.encode_values(66, 2, 1, listed)
    producers = txn_api.describe_producers(NS(topics=[NS(name="t", partition_indexes=[1])]), env.ctx(61, 0))
    assert codec.encode_values(61, 0, 1, producers)
    (state,) = producers["topics"][0]["partitions"][0]["active_producers"]
    assert (state["producer_id"], state["current_txn_start_offset"]) == (pid, 0)
    # transactional.id.expiration.ms: only ids without a transaction expire
    env.now += 604800000
    assert env.txns.expire_transactional_ids() == 1
    assert set(env.txns.txns) == {TXN}
    env = _reopen(env)
    try:
        assert set(env.txns.txns) == {TXN}
    finally:
        env.close()


class DenyTransactionalIds:
    """An authorizer hook that allows everything but transactional ids other than `allowed` and Write on
    topic `secret`."""

    def authorize(self, principal, operation, resource_type, name):
        if resource_type.lower() in ("transactional_id", "transactionalid"):
            return name == "allowed"
        return not (resource_type.lower() == "topic" and name == "secret" and operation.lower() == "write")


def test_acl_checks(tmp_path):
    env = Env(tmp_path, authorizer=DenyTransactionalIds())
    try:
        env.manager.create_topic("secret", 1)
        assert env.init()["error_code"] == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        r = env.init(txn_id="allowed")
        assert r["error_code"] == 0
        pid = r["producer_id"]
        assert env.add(pid, 0, {"t": [0], "secret": [0]}, txn_id="allowed") == {
            ("t", 0): ErrorCode.OPERATION_NOT_ATTEMPTED, ("secret", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED}
        assert env.add(pid, 0, {"t": [0]}, txn_id="denied") == {("t", 0): ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
        assert env.end(pid, 0, True, txn_id="denied") == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert env.produce(pid, 0, 0, txn_id="denied")["error_code"] == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        find = asyncio.run(group_api.find_coordinator(NS(key="denied", key_type=1), env.ctx(10, 3)))
        assert find["error_code"] == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert asyncio.run(group_api.find_coordinator(NS(key="allowed", key_type=1), env.ctx(10, 3)))["error_code"] == 0
        described = txn_api.describe_transactions(NS(transactional_ids=["denied"]), env.ctx(65, 0))
        assert described["transaction_states"][0]["error_code"] == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    finally:
        env.close()


def test_a_failed_marker_write_is_retried_by_the_timer(env, monkeypatch):
    r = env.init()
    pid = r["producer_id"]
    env.add(pid, 0, {"t": [0]})
    env.produce(pid, 0, 0)
    plog = env.log()
    real = plog.append_control
    calls = []

    def failing(*args, **kwargs):
        calls.append(args)
        if len(calls) == 1:
            raise OSError(28, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(plog, "append_control", failing)
    assert env.end(pid, 0, commit=True) == ErrorCode.COORDINATOR_NOT_AVAILABLE  # retriable for the client
    assert env.txns.txns[TXN].state == TxnState.PREPARE_COMMIT
    assert env.end(pid, 0, commit=True) == ErrorCode.CONCURRENT_TRANSACTIONS
    assert plog.last_stable_offset == 0
    env.txns.abort_timed_out()  # the periodic job completes it
    assert env.txns.txns[TXN].state == TxnState.COMPLETE_COMMIT
    assert plog.last_stable_offset == plog.high_watermark
    assert env.end(pid, 0, commit=True) == 0


def test_a_grown_state_partition_is_rewritten_at_load(env):
    """Our stand-in for compaction: a partition holding far more records than live ids gets its live
    records appended again and everything before them dropped, and loads the same state afterwards."""
    for _ in range(1010):
        last = env.init()
    plog = env.manager.get_log(TRANSACTION_STATE_TOPIC, partition_for(TXN, 4))
    assert plog.log_end_offset == 1010 and plog.log_start_offset == 0
    env = _reopen(env)
    try:
        plog = env.manager.get_log(TRANSACTION_STATE_TOPIC, partition_for(TXN, 4))
        assert plog.log_start_offset == 1010 and plog.log_end_offset == 1011
        assert (env.txns.txns[TXN].producer_id, env.txns.txns[TXN].producer_epoch) == \
            (last["producer_id"], last["producer_epoch"])
    finally:
        env.close()
    env = _reopen(env)
    try:
        assert env.txns.txns[TXN].producer_epoch == last["producer_epoch"]
        assert env.init()["producer_epoch"] == last["producer_epoch"] + 1
    finally:
        env.close()


def test_an_exhausted_epoch_rotates_the_producer_id(env):
    """TransactionMetadata.prepareProducerIdRotation: at epoch 32766 the next InitProducerId gives a new
    producer id with epoch 0; a KIP-360 retry of that request (the old id and its exhausted epoch) gets the
    same answer, an anonymous one was not recorded for retries."""
    first = env.init()
    meta = env.txns.txns[TXN].copy()
    meta.producer_epoch = 32766
    env.txns._write(meta, TXN)
    rotated = env.init(pid=first["producer_id"], epoch=32766)
    assert rotated["producer_id"] != first["producer_id"] and rotated["producer_epoch"] == 0
    assert env.txns.txns[TXN].previous_producer_id == first["producer_id"]
    retry = env.init(pid=first["producer_id"], epoch=32766)
    assert (retry["error_code"], retry["producer_id"], retry["producer_epoch"]) == (0, rotated["producer_id"], 0)
    meta = env.txns.txns[TXN].copy()
    meta.producer_epoch = 32766
    env.txns._write(meta, TXN)
    again = env.init()
    assert again["producer_id"] not in (first["producer_id"], rotated["producer_id"]) and again["producer_epoch"] == 0
    assert env.init(pid=rotated["producer_id"], epoch=32766)["error_code"] == ErrorCode.PRODUCER_FENCED
