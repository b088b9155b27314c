"""The transaction APIs' differences the wire fuzzer found (test_wire_fuzz.py), on both brokers: the order of
InitProducerId's checks, INVALID_PRODUCER_EPOCH for clients older than PRODUCER_FENCED (KIP-588),
AddPartitionsToTxn's answers to partitions and transactions named twice, TxnOffsetCommit's empty
transactional id. And the one case left out of the fuzzer: a batched AddPartitionsToTxn naming no
transaction, which Kafka 4.4 never answers (docs/differences.md, "Wire fuzzer").

The fuzzer's requests name producers neither broker allocated (wirefuzz.UNALLOCATED_PRODUCER_ID): the
answers to a real producer's id and epoch are compared here, with a producer made by InitProducerId.
"""

from __future__ import annotations

import datetime
import time
import uuid
from typing import Any

from tests.differential import wirefuzz
from tests.differential.groups_wire import RETRIABLE, Txn, call, committed, coordinator_ready, retry

INVALID_REQUEST, INVALID_PRODUCER_EPOCH, PRODUCER_FENCED = 42, 47, 90
UNKNOWN_TOPIC_OR_PARTITION, TOPIC_AUTHORIZATION_FAILED, OPERATION_NOT_ATTEMPTED = 3, 29, 55
INVALID_PRODUCER_ID_MAPPING, INVALID_TRANSACTION_TIMEOUT = 49, 50
INVALID_TXN_STATE, CONCURRENT_TRANSACTIONS, TRANSACTION_ABORTABLE = 48, 51, 120
UNKNOWN = 1 << 48  # a producer id neither broker allocated


def codes(side: Any, api_key: int, version: int, values: dict, timeout: float = 10) -> list[tuple[str, int]]:
    """The error codes of one raw request's answer (wirefuzz.error_codes: sorted, paths without indexes)."""
    wire = wirefuzz.Wire(side.raw.port, timeout=timeout)
    try:
        return wirefuzz.error_codes(wire.call(api_key, version, wirefuzz.build(api_key, version, values, {})))
    finally:
        wire.close()


def settled(side: Any, api_key: int, version: int, values: dict, timeout: float = 30) -> list[tuple[str, int]]:
    """`codes` again while the answer names a coordinator still loading (groups_wire.RETRIABLE)."""
    deadline = time.monotonic() + timeout
    while True:
        answer = codes(side, api_key, version, values)
        if not any(code in RETRIABLE for _, code in answer) or time.monotonic() > deadline:
            return answer
        time.sleep(0.05)


def only(answer: list[tuple[str, int]]) -> list[int]:
    return [code for _, code in answer]


def _timeout(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


# -- InitProducerId ------------------------------------------------------------------------------------------
def init_producer_id_checks(side) -> dict:
    """KafkaApis.handleInitProducerIdRequest checks the producer id and epoch pair before the coordinator
    (its transaction timeout), with or without a transactional id; PRODUCER_FENCED is INVALID_PRODUCER_EPOCH
    before v4."""
    txn = Txn(side)
    fresh = f"ti-{uuid.uuid4().hex[:10]}"
    coordinator_ready(side, fresh, key_type=1)

    def init(version: int, txn_id: str | None, pid: int, epoch: int, timeout_ms: int = 60_000) -> list[int]:
        return only(codes(side, 22, version, {"transactional_id": txn_id, "transaction_timeout": _timeout(timeout_ms),
                                              "producer_id": pid, "producer_epoch": epoch}))

    return {
        "id without epoch, bad timeout": init(4, fresh, txn.pid, -1, timeout_ms=0),
        "epoch without id": init(4, fresh, -1, 0),
        "id without epoch, no transactional id": init(3, None, UNKNOWN, -1),
        "both, no transactional id": init(3, None, UNKNOWN, 3),
        "bad timeout": init(4, fresh, -1, -1, timeout_ms=0),
        "other producer v3": init(3, txn.txn_id, UNKNOWN, 0),
        "other producer v4": init(4, txn.txn_id, UNKNOWN, 0),
        "old epoch v3": init(3, txn.txn_id, txn.pid, txn.epoch + 3),
        "unknown id with a producer": init(4, fresh, UNKNOWN, 5),
    }


def test_init_producer_id_checks_in_kafkas_order(both):
    c, k = both.run(init_producer_id_checks)
    assert c == k == {
        "id without epoch, bad timeout": [INVALID_REQUEST], "epoch without id": [INVALID_REQUEST],
        "id without epoch, no transactional id": [INVALID_REQUEST], "both, no transactional id": [0],
        "bad timeout": [INVALID_TRANSACTION_TIMEOUT], "other producer v3": [INVALID_PRODUCER_EPOCH],
        "other producer v4": [PRODUCER_FENCED], "old epoch v3": [INVALID_PRODUCER_EPOCH],
        "unknown id with a producer": [0]}


# -- the versions before PRODUCER_FENCED ---------------------------------------------------------------------
def fenced_by_version(side) -> dict:
    """A stale epoch of a known producer: INVALID_PRODUCER_EPOCH before AddPartitionsToTxn, AddOffsetsToTxn
    and EndTxn v2, PRODUCER_FENCED from v2."""
    txn = Txn(side)
    topic = side.create_topic(partitions=1, prefix="txf")
    stale = txn.epoch + 1
    out = {}
    for version in (1, 2):
        out[f"add partitions v{version}"] = only(codes(side, 24, version, {
            "v3_and_below_transactional_id": txn.txn_id, "v3_and_below_producer_id": txn.pid,
            "v3_and_below_producer_epoch": stale, "v3_and_below_topics": [{"name": topic, "partitions": [0]}]}))
        out[f"add offsets v{version}"] = only(codes(side, 25, version, {
            "transactional_id": txn.txn_id, "producer_id": txn.pid, "producer_epoch": stale, "group_id": "g"}))
        out[f"end v{version}"] = only(codes(side, 26, version, {
            "transactional_id": txn.txn_id, "producer_id": txn.pid, "producer_epoch": stale, "committed": False}))
    return out


def test_producer_fenced_is_invalid_producer_epoch_before_v2(both):
    c, k = both.run(fenced_by_version)
    assert c == k == {"add partitions v1": [INVALID_PRODUCER_EPOCH], "add offsets v1": [INVALID_PRODUCER_EPOCH],
                      "end v1": [INVALID_PRODUCER_EPOCH], "add partitions v2": [PRODUCER_FENCED],
                      "add offsets v2": [PRODUCER_FENCED], "end v2": [PRODUCER_FENCED]}


# -- AddPartitionsToTxn: partitions and transactions named twice ---------------------------------------------
def named_twice(side) -> dict:
    """KafkaApis.handleAddPartitionsToTxnRequest: a refused request answers each partition once (a map of
    errors); the coordinator's answer lists the partitions as the request does, twice if named twice. In a
    batch (v4+) naming a transactional id twice, every one of its transactions adds the last one's
    partitions, and the coordinator's errors are listed over the first one's topics."""
    txn = Txn(side)
    topic = side.create_topic(partitions=2, prefix="txd")
    v3 = {"v3_and_below_transactional_id": txn.txn_id, "v3_and_below_producer_id": UNKNOWN,
          "v3_and_below_producer_epoch": 0}

    def one(topics: list[dict]) -> list[int]:
        return sorted(only(codes(side, 24, 3, {**v3, "v3_and_below_topics": topics})))

    def batch(*transactions: dict) -> list[int]:
        return sorted(only(codes(side, 24, 4, {"transactions": [
            {"producer_id": UNKNOWN, "producer_epoch": 0, "verify_only": False, **t} for t in transactions]})))

    missing = f"txd-missing-{uuid.uuid4().hex[:6]}"
    return {
        "refused, partition twice": one([{"name": topic, "partitions": [0, 0, 5]}]),
        "refused, topic twice": one([{"name": topic, "partitions": [0]}, {"name": topic, "partitions": [0, 7]}]),
        "unknown producer, partition twice": one([{"name": topic, "partitions": [1, 1]}]),
        "unknown producer, topic twice": one([{"name": topic, "partitions": [0]}, {"name": topic, "partitions": [0]}]),
        "internal topic": one([{"name": "__consumer_offsets", "partitions": [0]}, {"name": topic, "partitions": [0]}]),
        "batch, id twice, last refused": batch(
            {"transactional_id": txn.txn_id, "topics": [{"name": topic, "partitions": [0, 1]}]},
            {"transactional_id": txn.txn_id, "topics": [{"name": missing, "partitions": [0]}]}),
        "batch, id twice, first refused": batch(
            {"transactional_id": txn.txn_id, "topics": [{"name": missing, "partitions": [0, 1, 2]}]},
            {"transactional_id": txn.txn_id, "topics": []}),
        "batch, empty id twice": batch(
            {"transactional_id": "", "topics": []},
            {"transactional_id": "", "topics": [{"name": topic, "partitions": [0]}]}),
    }


def test_add_partitions_to_txn_named_twice(both):
    c, k = both.run(named_twice)
    u, x, n = UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_ID_MAPPING, OPERATION_NOT_ATTEMPTED
    assert c == k == {
        "refused, partition twice": [u, n], "refused, topic twice": [u, n],
        "unknown producer, partition twice": [x, x], "unknown producer, topic twice": [x, x],
        "internal topic": [TOPIC_AUTHORIZATION_FAILED, n],
        "batch, id twice, last refused": [0, u, u], "batch, id twice, first refused": [0, x, x, x, x, x, x],
        "batch, empty id twice": [0]}


def verify_only(side) -> dict:
    """AddPartitionsToTxn v4 verify_only (what a broker asks before a transactional write, KIP-890 part 1):
    each partition's answer."""
    txn = Txn(side)
    topic = side.create_topic(partitions=2, prefix="txv")
    group = f"txv-{uuid.uuid4().hex[:8]}"
    assert txn.add_offsets(group) == 0

    def verify(pid: int, epoch: int, partitions: list[int]) -> list[int]:
        return only(codes(side, 24, 4, {"transactions": [{
            "transactional_id": txn.txn_id, "producer_id": pid, "producer_epoch": epoch, "verify_only": True,
            "topics": [{"name": topic, "partitions": partitions}]}]}))

    return {"not added": verify(txn.pid, txn.epoch, [0, 1]), "other epoch": verify(txn.pid, txn.epoch + 1, [0]),
            "other producer": verify(UNKNOWN, txn.epoch, [0]), "end": txn.end(False)}


def test_add_partitions_to_txn_verify_only(both):
    c, k = both.run(verify_only)
    assert c == k


# -- TxnOffsetCommit -----------------------------------------------------------------------------------------
def empty_transactional_id(side) -> dict:
    """The coordinator's verification of an empty transactional id (handleVerifyPartitionsInTransaction,
    and handleAddPartitionsToTransaction from v5): INVALID_REQUEST, after the empty group id's
    INVALID_GROUP_ID."""
    topic = side.create_topic(partitions=1, prefix="txo")
    group = f"txo-{uuid.uuid4().hex[:8]}"
    coordinator_ready(side, group)
    out = {}
    for version in range(0, 6):
        for name, group_id in (("group", group), ("no group", "")):
            values = {"transactional_id": "", "group_id": group_id, "producer_id": UNKNOWN, "producer_epoch": 0,
                      "generation_id": -1, "member_id": "", "group_instance_id": None,
                      "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                                 "committed_leader_epoch": -1,
                                                                 "committed_metadata": ""}]}]}
            out[f"v{version} {name}"] = only(settled(side, 28, version, values))
    return out


def test_txn_offset_commit_empty_transactional_id(both):
    c, k = both.run(empty_transactional_id)
    assert c == k == {f"v{v} {name}": [code] for v in range(0, 6)
                      for name, code in (("group", INVALID_REQUEST), ("no group", 24))}


# -- left out of the fuzzer ----------------------------------------------------------------------------------
def test_empty_batch_of_add_partitions_to_txn(chronolog_side, kafka_side):
    """A batched AddPartitionsToTxn (v4+, sent by brokers) naming no transaction: Kafka 4.4 never answers it
    (KafkaApis answers once every transaction has its result); chronolog answers it, with no results."""
    for side in (chronolog_side, kafka_side):
        coordinator_ready(side, "txe", key_type=1)
    assert codes(chronolog_side, 24, 4, {"transactions": []}) == [("error_code", 0)]
    assert codes(kafka_side, 24, 4, {"transactions": []}, timeout=3) == [(wirefuzz.TIMED_OUT, -1)]


# -- found with real producers -------------------------------------------------------------------------------
def init_during_a_transaction(side) -> dict:
    """InitProducerId of an id whose transaction is Ongoing: Kafka fences and aborts it and answers
    CONCURRENT_TRANSACTIONS (TransactionCoordinator.handleInitProducerId); the retry bumps the epoch again."""
    txn = Txn(side)
    topic = side.create_topic(partitions=1, prefix="txi")
    added = only(codes(side, 24, 3, {"v3_and_below_transactional_id": txn.txn_id,
                                     "v3_and_below_producer_id": txn.pid, "v3_and_below_producer_epoch": txn.epoch,
                                     "v3_and_below_topics": [{"name": topic, "partitions": [0]}]}))
    init = {"transactional_id": txn.txn_id, "transaction_timeout": _timeout(60_000), "producer_id": -1,
            "producer_epoch": -1}
    first = only(codes(side, 22, 4, init))
    retried = retry(side, 22, 4, **{**init, "transaction_timeout": 60_000})
    return {"added": added, "first": first, "retried": retried["error_code"],
            "same producer": retried["producer_id"] == txn.pid, "epoch": retried["producer_epoch"] - txn.epoch}


def test_init_producer_id_during_a_transaction(both):
    c, k = both.run(init_during_a_transaction)
    assert c == k == {"added": [0], "first": [CONCURRENT_TRANSACTIONS], "retried": 0, "same producer": True,
                      "epoch": 2}


def offsets_not_added(side) -> dict:
    """TxnOffsetCommit before AddOffsetsToTxn, and with a stale epoch: the coordinator's verification
    (handleVerifyPartitionsInTransaction) as AddPartitionsToTxnManager hands it on, TRANSACTION_ABORTABLE
    from v4 (INVALID_TXN_STATE before), INVALID_PRODUCER_EPOCH for PRODUCER_FENCED."""
    txn = Txn(side)
    topic = side.create_topic(partitions=1, prefix="txn")
    group = f"txn-{uuid.uuid4().hex[:8]}"
    coordinator_ready(side, group)
    out = {f"not added v{v}": txn.commit_offsets(group, topic, version=v) for v in range(0, 5)}
    stale = Txn(side, txn.txn_id)  # a new producer with the same id: the old epoch is fenced
    assert stale.pid == txn.pid
    out.update({f"fenced v{v}": txn.commit_offsets(group, topic, version=v) for v in range(0, 6)})
    return out


def test_txn_offset_commit_verification(both):
    c, k = both.run(offsets_not_added)
    assert c == k == {**{f"not added v{v}": INVALID_TXN_STATE for v in range(0, 4)},
                      "not added v4": TRANSACTION_ABORTABLE,
                      **{f"fenced v{v}": INVALID_PRODUCER_EPOCH for v in range(0, 6)}}


def init_after_a_fence(side) -> dict:
    """After InitProducerId fenced an Ongoing transaction, the epoch before the fence is the last epoch
    (measured on Kafka 4.4): InitProducerId expecting it is answered the fenced epoch without a bump, one
    expecting the fenced epoch bumps it."""
    txn = Txn(side)
    topic = side.create_topic(partitions=1, prefix="txf")
    assert only(codes(side, 24, 3, {"v3_and_below_transactional_id": txn.txn_id, "v3_and_below_producer_id": txn.pid,
                                    "v3_and_below_producer_epoch": txn.epoch,
                                    "v3_and_below_topics": [{"name": topic, "partitions": [0]}]})) == [0]
    init = {"transactional_id": txn.txn_id, "transaction_timeout": 60_000, "producer_id": -1, "producer_epoch": -1}
    fence = call(side, 22, 4, **init)["error_code"]
    expecting_old = retry(side, 22, 4, **{**init, "producer_id": txn.pid, "producer_epoch": txn.epoch})
    expecting_fenced = retry(side, 22, 4, **{**init, "producer_id": txn.pid, "producer_epoch": txn.epoch + 1})
    return {"fence": fence, "expecting the old epoch": (expecting_old["error_code"],
                                                        expecting_old["producer_epoch"] - txn.epoch),
            "expecting the fenced epoch": (expecting_fenced["error_code"], expecting_fenced["producer_epoch"] - txn.epoch)}


def test_init_producer_id_after_a_fence(both):
    c, k = both.run(init_after_a_fence)
    assert c == k == {"fence": CONCURRENT_TRANSACTIONS, "expecting the old epoch": (0, 1),
                      "expecting the fenced epoch": (0, 2)}


def offsets_partition_first(side) -> dict:
    """TxnOffsetCommit asks the group's offsets partition before the coordinator (ReplicaManager,
    UnifiedLog.maybeStartTransactionVerification): an epoch older than the partition's is
    INVALID_PRODUCER_EPOCH, and while the partition has the producer's transaction open at this epoch
    nothing is verified, whatever transactional id the request names."""
    txn = Txn(side)
    Txn(side, txn.txn_id)  # epoch 1: the offsets partition will know it
    txn.epoch += 1
    topic = side.create_topic(partitions=1, prefix="txp")
    group = f"txp-{uuid.uuid4().hex[:8]}"
    coordinator_ready(side, group)
    assert txn.add_offsets(group) == 0
    assert txn.commit_offsets(group, topic) == 0  # the offsets partition has the transaction open

    def commit(version: int, txn_id: str, epoch: int) -> int:
        values = {"transactional_id": txn_id, "group_id": group, "producer_id": txn.pid, "producer_epoch": epoch,
                  "generation_id": -1, "member_id": "", "group_instance_id": None,
                  "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 2,
                                                             "committed_leader_epoch": -1, "committed_metadata": ""}]}]}
        return only(settled(side, 28, version, values))[0]

    out = {}
    for version in (3, 4, 5):
        out[f"v{version} open, empty id"] = commit(version, "", txn.epoch)
        out[f"v{version} open, other id"] = commit(version, f"{txn.txn_id}-other", txn.epoch)
        out[f"v{version} older epoch, empty id"] = commit(version, "", txn.epoch - 1)
        out[f"v{version} newer epoch, empty id"] = commit(version, "", txn.epoch + 1)
    out["end"] = txn.end(True)
    out["committed"] = committed(side, group, topic)  # (waits for Kafka's marker in the offsets partition)
    out["ended, older epoch, empty id"] = commit(3, "", txn.epoch - 1)
    out["ended, empty id"] = commit(3, "", txn.epoch)
    return out


def test_txn_offset_commit_asks_the_offsets_partition_first(both):
    c, k = both.run(offsets_partition_first)
    assert c == k == {**{f"v{v} {case}": code for v in (3, 4, 5) for case, code in (
        ("open, empty id", 0), ("open, other id", 0), ("older epoch, empty id", INVALID_PRODUCER_EPOCH),
        ("newer epoch, empty id", INVALID_REQUEST))},
        "end": 0, "committed": 2, "ended, older epoch, empty id": INVALID_PRODUCER_EPOCH, "ended, empty id": INVALID_REQUEST}
