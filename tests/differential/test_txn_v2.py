"""Transaction version 2 (KIP-890 part 2) request by request, on chronolog and Kafka 4.4: the sequences a Java 4.x
producer sends once ApiVersions finalizes `transaction.version` 2 — Produce v12 adding its partitions,
TxnOffsetCommit v5 adding the group, EndTxn v5 bumping the epoch — and the retries, fences and zombies
around them (TransactionCoordinator.endTransaction's table for version 2). Every observation is relative (epoch
deltas, "same producer id"), so the two brokers' producer ids may differ."""

from __future__ import annotations

import time
import uuid

from kio.serial.errors import OutOfBoundValue

from chronolog.records.batch import SimpleRecord
from chronolog.records.batch_builder import build_batch
from tests.differential.groups_wire import call, committed, coordinator_ready, retry

NONE, INVALID_TXN_STATE, PRODUCER_FENCED, INVALID_PRODUCER_EPOCH = 0, 48, 90, 47


class TxnV2:
    """A transaction version 2 producer by hand: InitProducerId, Produce v12, TxnOffsetCommit v5, EndTxn v5."""

    def __init__(self, side, txn_id: str | None = None) -> None:
        self.side = side
        self.txn_id = txn_id or f"tv2-{uuid.uuid4().hex[:10]}"
        self.seq: dict[tuple[str, int], int] = {}
        coordinator_ready(side, self.txn_id, key_type=1)
        self.pid, self.epoch = self.init()

    def init(self, timeout_ms: int = 60000) -> tuple[int, int]:
        answer = retry(self.side, 22, 5, transactional_id=self.txn_id, transaction_timeout=timeout_ms, producer_id=-1,
                       producer_epoch=-1)
        assert answer["error_code"] == 0, answer
        return answer["producer_id"], answer["producer_epoch"]

    def produce(self, topic: str, partition: int = 0, *, epoch: int | None = None, n: int = 2) -> int:
        """One transactional batch at Produce v12: the partition's error code."""
        epoch = self.epoch if epoch is None else epoch
        seq = self.seq.get((topic, partition), 0)
        now = int(time.time() * 1000)
        records = build_batch([SimpleRecord(now, b"k", b"v%d" % (seq + i)) for i in range(n)],
                              producer_id=self.pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)

        def error_of(r: dict) -> int:
            return r["responses"][0]["partition_responses"][0]["error_code"]

        answer = retry(self.side, 0, 12, error_of=error_of, transactional_id=self.txn_id, acks=-1, timeout=30000,
                       topic_data=[{"name": topic, "partition_data": [{"index": partition, "records": records}]}])
        error = error_of(answer)
        if error == NONE:
            self.seq[(topic, partition)] = seq + n
        return error

    def end(self, commit: bool, *, epoch: int | None = None, version: int = 5) -> dict:
        """EndTxn: its error and the epoch it answers relative to the one sent (v5 only)."""
        sent = self.epoch if epoch is None else epoch
        answer = retry(self.side, 26, version, transactional_id=self.txn_id, producer_id=self.pid,
                       producer_epoch=sent, committed=commit)
        out = {"error": answer["error_code"]}
        self.settle()
        if version >= 5:
            out["same id"] = answer["producer_id"] == self.pid
            out["epoch bump"] = answer["producer_epoch"] - sent if answer["producer_epoch"] >= 0 else None
        return out

    def settle(self, timeout: float = 20) -> None:
        """Until the markers are written: Kafka answers EndTxn once PrepareCommit/PrepareAbort is logged and
        writes them afterwards (TransactionMarkerChannelManager); chronolog before it answers."""
        deadline = time.monotonic() + timeout
        while self.describe()["state"] in ("PrepareCommit", "PrepareAbort") and time.monotonic() < deadline:
            time.sleep(0.02)

    def take(self, answer: dict) -> None:
        """Go on with the epoch an EndTxn v5 answered (TransactionManager: a new epoch, sequences from 0)."""
        if answer["error"] == NONE and answer.get("epoch bump"):
            self.epoch += answer["epoch bump"]
            self.seq.clear()

    def commit_offsets(self, group: str, topic: str, offset: int, *, version: int = 5) -> int:
        answer = retry(self.side, 28, version, error_of=lambda r: r["topics"][0]["partitions"][0]["error_code"],
                       transactional_id=self.txn_id, group_id=group, producer_id=self.pid, producer_epoch=self.epoch,
                       generation_id=-1, member_id="", group_instance_id=None,
                       topics=[{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                               "committed_leader_epoch": -1,
                                                               "committed_metadata": ""}]}])
        return answer["topics"][0]["partitions"][0]["error_code"]

    def describe(self) -> dict:
        """DescribeTransactions: the state, the epoch relative to this producer's, the partitions."""
        try:
            (state,) = call(self.side, 65, 0, transactional_ids=[self.txn_id])["transaction_states"]
        except OutOfBoundValue:  # kio cannot read the start time -1 of an Empty state: its name from the list
            (listed,) = [t for t in call(self.side, 66, 1, state_filters=[], producer_id_filters=[],
                                         duration_filter=-1)["transaction_states"]
                         if t["transactional_id"] == self.txn_id]
            return {"state": listed["transaction_state"], "epoch": None, "partitions": []}
        return {"state": state["transaction_state"], "epoch": state["producer_epoch"] - self.epoch,
                "partitions": sorted((t["topic"] if t["topic"].startswith("__") else "topic", p)
                                     for t in state["topics"] for p in t["partitions"])}


def partition_epoch(side, topic: str, pid: int, partition: int = 0) -> int | None:
    """The producer's epoch the partition knows (DescribeProducers): the last data batch's or marker's."""
    answer = call(side, 61, 0, topics=[{"name": topic, "partition_indexes": [partition]}])
    for p in answer["topics"][0]["partitions"][0]["active_producers"]:
        if p["producer_id"] == pid:
            return p["producer_epoch"]
    return None


def end_offsets(side, topic: str, committed_only: bool) -> int:
    """ListOffsets latest (read_committed: the last stable offset)."""
    answer = call(side, 2, 5, replica_id=-1, isolation_level=1 if committed_only else 0,
                  topics=[{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1,
                                                          "current_leader_epoch": -1}]}])
    return answer["topics"][0]["partitions"][0]["offset"]


# -- the scenarios ----------------------------------------------------------------------------------------
def commit_and_abort(side) -> dict:
    topic = side.create_topic(partitions=2, prefix="tv2")
    p = TxnV2(side)
    start = p.epoch
    out: dict = {"produce 0": p.produce(topic, 0), "produce 1": p.produce(topic, 1)}
    out["ongoing"] = p.describe()
    out["lso while open"] = end_offsets(side, topic, True)
    ended = p.end(True)
    out["commit"] = ended
    p.take(ended)
    out["after commit"] = p.describe()
    out["lso after commit"] = end_offsets(side, topic, True)
    out["marker epoch"] = partition_epoch(side, topic, p.pid) - start
    out["old epoch produce"] = p.produce(topic, 0, epoch=p.epoch - 1)
    out["new epoch produce"] = p.produce(topic, 0)
    ended = p.end(False)
    out["abort"] = ended
    p.take(ended)
    out["after abort"] = p.describe()
    out["lso after abort"] = (end_offsets(side, topic, True), end_offsets(side, topic, False))
    return out


def retries_and_empty_ends(side) -> dict:
    """The version 2 table: a retry (the epoch before the bump) of a completed end is answered again; the
    current epoch is the next transaction; an abort with nothing added bumps; a commit with nothing is refused."""
    topic = side.create_topic(prefix="tv2r")
    p = TxnV2(side)
    out: dict = {"commit with nothing": p.end(True), "abort with nothing": p.end(False)}
    p.take(out["abort with nothing"])
    out["abort retried"] = p.end(False, epoch=p.epoch - 1)
    out["commit after abort, retry epoch"] = p.end(True, epoch=p.epoch - 1)
    out["produce"] = p.produce(topic)
    ended = p.end(True)
    out["commit"] = ended
    p.take(ended)
    out["commit retried"] = p.end(True, epoch=p.epoch - 1)
    out["abort retry after commit"] = p.end(False, epoch=p.epoch - 1)
    out["commit again, current epoch"] = p.end(True)
    out["two epochs back"] = p.end(False, epoch=p.epoch - 2)
    out["newer epoch"] = p.end(False, epoch=p.epoch + 1)
    out["state"] = p.describe()
    out["v4 end of a v2 transaction"] = p.produce(topic), p.end(True, version=4)
    out["after v4 end"] = p.describe()
    return out


def fencing(side) -> dict:
    """A second producer with the same transactional id while the first has a transaction open: the open one
    is aborted with a bumped epoch and the first producer is a zombie everywhere."""
    topic = side.create_topic(prefix="tv2f")
    first = TxnV2(side)
    start = first.epoch
    out: dict = {"first produce": first.produce(topic)}
    second = TxnV2(side, first.txn_id)
    out["second: same id"] = second.pid == first.pid
    out["second epoch"] = second.epoch - start
    out["marker epoch"] = partition_epoch(side, topic, first.pid) - start
    out["state"] = second.describe()
    out["zombie produce"] = first.produce(topic)
    out["zombie end"] = first.end(True)
    out["zombie abort"] = first.end(False)
    out["second produce"] = second.produce(topic)
    ended = second.end(True)
    out["second commit"] = ended
    out["lso"] = (end_offsets(side, topic, True), end_offsets(side, topic, False))
    return out


def timed_out(side) -> dict:
    """A transaction older than its timeout is aborted by the coordinator's timer (every 10 s on both) with a
    fenced epoch: the producer's next EndTxn and Produce are refused."""
    topic = side.create_topic(prefix="tv2t")
    p = TxnV2(side)
    p.pid, p.epoch = p.init(timeout_ms=1000)
    start = p.epoch
    out: dict = {"produce": p.produce(topic)}
    deadline = time.monotonic() + 40
    while p.describe()["state"] != "CompleteAbort" and time.monotonic() < deadline:
        time.sleep(0.2)
    state = p.describe()
    out["state"] = state["state"], state["epoch"]
    out["marker epoch"] = partition_epoch(side, topic, p.pid) - start
    out["end with its epoch"] = p.end(True)
    out["produce with its epoch"] = p.produce(topic)
    out["lso"] = (end_offsets(side, topic, True), end_offsets(side, topic, False))
    return out


def offsets_without_add_offsets(side) -> dict:
    """TxnOffsetCommit v5 with no AddOffsetsToTxn before it: the group's offsets partition joins there."""
    topic = side.create_topic(prefix="tv2o")
    group = f"tv2g-{uuid.uuid4().hex[:8]}"
    coordinator_ready(side, group)
    p = TxnV2(side)
    out: dict = {"produce": p.produce(topic), "offsets": p.commit_offsets(group, topic, 7)}
    state = p.describe()
    out["ongoing"] = state["state"], sorted({t for t, _ in state["partitions"]})
    ended = p.end(True)
    out["commit"] = ended
    p.take(ended)
    out["committed"] = committed(side, group, topic)
    out["offsets, next transaction"] = p.commit_offsets(group, topic, 9)
    ended = p.end(False)
    out["abort"] = ended
    out["committed after abort"] = committed(side, group, topic)
    out["offsets with old epoch"] = p.commit_offsets(group, topic, 11)
    return out


def features(side) -> dict:
    answer = call(side, 18, 4, client_software_name="differential", client_software_version="1")
    return {"finalized": {f["name"]: (f["min_version_level"], f["max_version_level"])
                          for f in answer["finalized_features"] if f["name"] == "transaction.version"},
            "supported": {f["name"]: (f["min_version"], f["max_version"])
                          for f in answer["supported_features"] if f["name"] == "transaction.version"},
            "epoch known": answer["finalized_features_epoch"] >= 0}


# -- the tests ----------------------------------------------------------------------------------------------
def equal(both, steps) -> dict:
    """Kafka's observation of `steps`, after asserting chronolog's is the same to the letter."""
    c, k = both.run(steps)
    assert c == k
    return k


def test_transaction_version_is_finalized(both):
    assert equal(both, features) == {"finalized": {"transaction.version": (2, 2)},
                                     "supported": {"transaction.version": (0, 2)}, "epoch known": True}


def test_commit_and_abort(both):
    k = equal(both, commit_and_abort)
    assert k["commit"] == {"error": NONE, "same id": True, "epoch bump": 1}
    assert k["old epoch produce"] == INVALID_PRODUCER_EPOCH


def test_retries_and_empty_ends(both):
    equal(both, retries_and_empty_ends)


def test_fencing(both):
    assert equal(both, fencing)["zombie end"]["error"] == PRODUCER_FENCED


def test_a_timed_out_transaction(both):
    equal(both, timed_out)


def test_offsets_without_add_offsets(both):
    assert equal(both, offsets_without_add_offsets)["committed"] == 7
