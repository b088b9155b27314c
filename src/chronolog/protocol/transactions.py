"""Transaction APIs (KIP-98, KIP-447, KIP-664): thin translations between kio requests and the transaction
coordinator on `ctx.state.transactions`, with Kafka's authorization checks (KafkaApis.handle*).

Versions (Kafka 4.4's): InitProducerId 0-5, AddPartitionsToTxn 0-5 (v4+ is the batched form brokers send;
KafkaApis requires ClusterAction for it), AddOffsetsToTxn 0-4, EndTxn 0-5, TxnOffsetCommit 0-6 (v6 names
topics by id, KIP-1319; its schema is ours, protocol.newer_schemas). Versions that only add the error code
TRANSACTION_ABORTABLE (KIP-890 part 1) are the versions before them here.

Transaction version 2 (KIP-890 part 2) is finalized (`transaction.version` 2 in ApiVersions, as a freshly
formatted Kafka 4.x cluster has it): a Java 4.x producer then sends no AddPartitionsToTxn / AddOffsetsToTxn;
Produce v12+ and TxnOffsetCommit v5+ add their partition, and EndTxn v5 bumps the epoch and answers it.
"""

from __future__ import annotations

import datetime
import logging
import re
from typing import Any

from chronolog.errors import ErrorCode
from chronolog.protocol.core import INTERNAL_TOPICS, error_of, ms, topic_uuid
from chronolog.protocol.registry import FEATURES, RequestContext, register
from chronolog.protocol.txn_batches import (
    END_TXN_BUMPS_EPOCH,
    TRANSACTION_VERSION,
    TRANSACTION_VERSION_FEATURE,
    TXN_OFFSET_COMMIT_ADDS_PARTITION,
)

log = logging.getLogger(__name__)

TRANSACTIONAL_ID = "transactional_id"
# Kafka's TransactionState names, the ones ListTransactions filters by (TransactionState.name).
KNOWN_STATES = frozenset({"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
                          "Dead", "PrepareEpochFence"})
# Kafka 4.4 supports transaction.version 0-2 (TransactionVersion); a new cluster finalizes the latest.
FEATURES[TRANSACTION_VERSION_FEATURE] = (0, 2, TRANSACTION_VERSION)


def _coordinator(ctx: RequestContext) -> Any:
    return ctx.state.transactions


def _guarded(call, *args):
    """A coordinator call whose state write failed (a disk error, a full disk) answers
    COORDINATOR_NOT_AVAILABLE, which clients retry, as TransactionStateManager.appendTransactionToLog maps
    storage errors; the state in memory changes only after its record was written."""
    try:
        return call(*args)
    except Exception:
        log.exception("transaction coordinator: %s failed", getattr(call, "__name__", call))
        return ErrorCode.COORDINATOR_NOT_AVAILABLE


def _denied(ctx: RequestContext, op: str, transactional_id: str) -> bool:
    return not ctx.allowed(op, TRANSACTIONAL_ID, transactional_id)


def _old_fenced(error: int, version: int, first_version: int) -> int:
    """KafkaApis: clients older than PRODUCER_FENCED (KIP-588) get INVALID_PRODUCER_EPOCH, which they
    handle the same way: InitProducerId before v4, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn before v2."""
    if error == ErrorCode.PRODUCER_FENCED and version < first_version:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


# -- InitProducerId ----------------------------------------------------------------------------------
@register(22, 0, 5)
def init_producer_id(req: Any, ctx: RequestContext) -> dict:
    """KafkaApis.handleInitProducerIdRequest: Write on the transactional id; without one, IdempotentWrite
    on the cluster or Write on some topic."""
    txn_id = getattr(req, "transactional_id", None)
    fail = {"throttle_time": 0, "producer_id": -1, "producer_epoch": -1}
    if txn_id is not None:
        if _denied(ctx, "write", txn_id):
            return {**fail, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    elif not ctx.allowed("idempotent_write", "cluster", "kafka-cluster") and not ctx.allowed_on_any("write", "topic"):
        return {**fail, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
    expected_pid, expected_epoch = int(getattr(req, "producer_id", -1)), int(getattr(req, "producer_epoch", -1))
    if (expected_pid == -1) != (expected_epoch == -1):  # a producer id without an epoch or the reverse
        return {**fail, "error_code": ErrorCode.INVALID_REQUEST}
    if txn_id is None:
        return {"throttle_time": 0, "error_code": 0, "producer_id": next(ctx.state.producer_ids), "producer_epoch": 0}
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return {**fail, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
    answer = _guarded(coordinator.init_producer_id, txn_id, ms(req.transaction_timeout), expected_pid, expected_epoch)
    error, pid, epoch = answer if isinstance(answer, tuple) else (answer, -1, -1)
    return {"throttle_time": 0, "error_code": _old_fenced(error, ctx.api_version, 4), "producer_id": pid,
            "producer_epoch": epoch}


# -- AddPartitionsToTxn ------------------------------------------------------------------------------
def _listed(topics: Any, error: int) -> list[dict]:
    """AddPartitionsToTxnRequest.errorResponseForTopics: one error for every partition as the request lists
    them, a topic or partition named twice answered twice."""
    return [{"name": t.name, "results_by_partition": [{"partition_index": int(p), "partition_error_code": error}
                                                      for p in t.partitions]} for t in topics]


def _by_topic(errors: dict[tuple[str, int], int]) -> list[dict]:
    """AddPartitionsToTxnResponse.resultForTransaction: each partition of a map once."""
    by_topic: dict[str, list[dict]] = {}
    for (name, p), error in errors.items():
        by_topic.setdefault(name, []).append({"partition_index": p, "partition_error_code": error})
    return [{"name": name, "results_by_partition": parts} for name, parts in by_topic.items()]


def _add_partitions(ctx: RequestContext, txn_id: str, pid: int, epoch: int, wanted: list[tuple[str, int]],
                    listed: Any, verify_only: bool, client_version: int = 0) -> list[dict]:
    """One transaction of KafkaApis.handleAddPartitionsToTxnRequest. `wanted`: its partitions (of the last
    transaction of the request with this id: Kafka's partitionsByTransaction is a map); `listed`: the topics
    of the first one, which the coordinator's error answers (errorResponseForTransaction finds the first).
    Topics without Write (internal ones too, before v4) answer TOPIC_AUTHORIZATION_FAILED, unknown ones
    UNKNOWN_TOPIC_OR_PARTITION, and then every other partition OPERATION_NOT_ATTEMPTED; otherwise the
    coordinator's one answer for all, or verify_only's answer for each."""
    version = ctx.api_version
    if version < 4 and _denied(ctx, "write", txn_id):
        return _listed(listed, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    manager = ctx.log_manager
    errors: dict[tuple[str, int], int] = {}
    for name, p in wanted:
        if version < 4 and (name in INTERNAL_TOPICS or not ctx.allowed("write", "topic", name)):
            errors[(name, p)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif name.startswith("__") or not manager.has_topic(name) or p >= manager.topics()[name] or p < 0:
            errors[(name, p)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if errors:
        return _by_topic({tp: errors.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in wanted})
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return _listed(listed, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if verify_only:
        return _by_topic(coordinator.verify_partitions(txn_id, pid, epoch, set(wanted)))
    error = _guarded(coordinator.add_partitions, txn_id, pid, epoch, set(wanted), client_version)
    return _listed(listed, _old_fenced(error, version, 2))


def _partitions(topics: Any) -> list[tuple[str, int]]:
    return [(t.name, int(p)) for t in topics for p in t.partitions]


@register(24, 0, 5)
def add_partitions_to_txn(req: Any, ctx: RequestContext) -> dict:
    if ctx.api_version >= 4:
        if not ctx.allowed("cluster_action", "cluster", "kafka-cluster"):
            return {"throttle_time": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                    "results_by_transaction": []}
        # (an empty batch: Kafka 4.4 never answers it, as it answers once every transaction has its result)
        last = {t.transactional_id: _partitions(t.topics) for t in req.transactions}
        first: dict[str, Any] = {}
        for t in req.transactions:
            first.setdefault(t.transactional_id, t.topics)
        results = [{"transactional_id": t.transactional_id,
                    # a broker's add for a Produce v12+ (AddPartitionsToTxnManager, ADD_PARTITION): version 2
                    "topic_results": _add_partitions(ctx, t.transactional_id, int(t.producer_id),
                                                     int(t.producer_epoch), last[t.transactional_id],
                                                     first[t.transactional_id], bool(t.verify_only),
                                                     0 if t.verify_only else TRANSACTION_VERSION)}
                   for t in req.transactions]
        return {"throttle_time": 0, "error_code": 0, "results_by_transaction": results}
    return {"throttle_time": 0, "results_by_topic_v3_and_below": _add_partitions(
        ctx, req.v3_and_below_transactional_id, int(req.v3_and_below_producer_id),
        int(req.v3_and_below_producer_epoch), _partitions(req.v3_and_below_topics), req.v3_and_below_topics,
        False)}


# -- AddOffsetsToTxn ---------------------------------------------------------------------------------
@register(25, 0, 4)
def add_offsets_to_txn(req: Any, ctx: RequestContext) -> dict:
    """KafkaApis.handleAddOffsetsToTxnRequest: Write on the transactional id, Read on the group."""
    if _denied(ctx, "write", req.transactional_id):
        error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not ctx.allowed("read", "group", req.group_id):
        error = ErrorCode.GROUP_AUTHORIZATION_FAILED
    elif _coordinator(ctx) is None:
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE
    else:
        error = _old_fenced(_guarded(_coordinator(ctx).add_offsets, req.transactional_id, int(req.producer_id),
                                     int(req.producer_epoch), req.group_id), ctx.api_version, 2)
    return {"throttle_time": 0, "error_code": error}


# -- EndTxn ------------------------------------------------------------------------------------------
@register(26, 0, 5)
def end_txn(req: Any, ctx: RequestContext) -> dict:
    """KafkaApis.handleEndTxnRequest. v5 is transaction version 2 (TransactionVersion.transactionVersionForEndTxn):
    the epoch is bumped and the answer names the producer id and epoch to go on with (KIP-890 part 2)."""
    version = TRANSACTION_VERSION if ctx.api_version >= END_TXN_BUMPS_EPOCH else 0
    pid, epoch = -1, -1
    if _denied(ctx, "write", req.transactional_id):
        error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif _coordinator(ctx) is None:
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE
    else:
        answer = _guarded(_coordinator(ctx).end_transaction, req.transactional_id, int(req.producer_id),
                          int(req.producer_epoch), bool(req.committed), version)
        error, pid, epoch = answer if isinstance(answer, tuple) else (answer, -1, -1)
    return {"throttle_time": 0, "error_code": _old_fenced(error, ctx.api_version, 2), "producer_id": pid,
            "producer_epoch": epoch}


# -- TxnOffsetCommit ---------------------------------------------------------------------------------
@register(28, 0, 6)
def txn_offset_commit(req: Any, ctx: RequestContext) -> dict:
    """KafkaApis.handleTxnOffsetCommitRequest: Write on the transactional id, Read on the group, Read on
    each topic; then the producer's checks (coordinator) and KIP-447's member/generation checks (group).
    v6 names topics by id (KIP-1319): an unknown id answers UNKNOWN_TOPIC_ID."""
    if ctx.api_version >= 6:
        ids = {topic_uuid(ctx, name): name for name in ctx.log_manager.topics()}
        names = [ids.get(t.topic_id) for t in req.topics]
    else:
        names = [t.name for t in req.topics]
    unreadable = {n for n in names if n is not None and not ctx.allowed("read", "topic", n)}
    exists = {(n, int(p.partition_index)): n is not None and n not in unreadable
              and 0 <= int(p.partition_index) < ctx.log_manager.topics().get(n, 0)
              for n, t in zip(names, req.topics, strict=True) for p in t.partitions}
    whole = True  # an error of the whole request (authorization of the id or the group), not of the rest
    if _denied(ctx, "write", req.transactional_id):
        error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not ctx.allowed("read", "group", req.group_id):
        error = ErrorCode.GROUP_AUTHORIZATION_FAILED
    else:
        whole = False
        if not any(exists.values()):  # KafkaApis answers without asking the coordinators
            error = 0
        elif not req.group_id:  # GroupCoordinatorService.isGroupIdNotEmpty
            error = ErrorCode.INVALID_GROUP_ID
        elif _coordinator(ctx) is None or ctx.coordinator is None:
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        else:
            pid, epoch = int(req.producer_id), int(req.producer_epoch)
            # the offsets partition's word first: an old epoch, or this producer's transaction open there
            known = _coordinator(ctx).offsets_producer(pid, epoch, req.group_id)
            error = known or 0
            if known is None:
                if ctx.api_version >= TXN_OFFSET_COMMIT_ADDS_PARTITION:
                    # KIP-890 part 2: the group's offsets partition joins the transaction here
                    error = _guarded(_coordinator(ctx).add_offsets, req.transactional_id, pid, epoch, req.group_id,
                                     TRANSACTION_VERSION)
                if not error:
                    # the verification's answer as AddPartitionsToTxnManager hands it on: TRANSACTION_ABORTABLE
                    # from v4 (KIP-890 part 1), INVALID_TXN_STATE before
                    error = _coordinator(ctx).check_offset_commit(req.transactional_id, pid, epoch, req.group_id)
                    if error == ErrorCode.TRANSACTION_ABORTABLE and ctx.api_version < 4:
                        error = ErrorCode.INVALID_TXN_STATE
                if error == ErrorCode.PRODUCER_FENCED:  # AddPartitionsToTxnManager's mapping, as for Produce
                    error = ErrorCode.INVALID_PRODUCER_EPOCH
            if not error:
                offsets = [(n, int(p.partition_index), int(p.committed_offset),
                            int(getattr(p, "committed_leader_epoch", -1)), p.committed_metadata)
                           for n, t in zip(names, req.topics, strict=True) for p in t.partitions
                           if exists[(n, int(p.partition_index))]]
                error = _guarded(ctx.coordinator.txn_commit, req.group_id, int(getattr(req, "generation_id", -1)),
                                 getattr(req, "member_id", "") or "", getattr(req, "group_instance_id", None),
                                 int(req.producer_id), offsets, int(req.producer_epoch), ctx.api_version)

    def partition_error(name: str | None, partition: int) -> int:
        """KafkaApis.handleTxnOffsetCommitRequest: unreadable topics and partitions not in the metadata are
        answered apart from what the coordinators say of the rest."""
        if whole:
            return error
        if name is None:
            return ErrorCode.UNKNOWN_TOPIC_ID
        if name in unreadable:
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED
        return error if exists[(name, partition)] else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    return {"throttle_time": 0, "topics": [
        {"name": getattr(t, "name", n), "topic_id": getattr(t, "topic_id", None),
         "partitions": [{"partition_index": p.partition_index, "error_code": partition_error(n, int(p.partition_index))}
                        for p in t.partitions]}
        for n, t in zip(names, req.topics, strict=True)]}


# -- DescribeProducers, DescribeTransactions, ListTransactions (KIP-664) -------------------------------
@register(61, 0, 0)
def describe_producers(req: Any, ctx: RequestContext) -> dict:
    """KafkaApis.handleDescribeProducersRequest: Read on the topic; each partition's active producers."""
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partition_indexes:
            out = {"partition_index": int(p), "error_code": 0, "error_message": None, "active_producers": []}
            if not ctx.allowed("read", "topic", t.name):
                out["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            else:
                try:
                    plog = ctx.log_manager.get_log(t.name, int(p))
                    out["active_producers"] = [
                        {"producer_id": e.producer_id, "producer_epoch": e.epoch, "last_sequence": e.last_sequence,
                         "last_timestamp": e.last_timestamp, "coordinator_epoch": e.coordinator_epoch,
                         "current_txn_start_offset": e.current_txn_start_offset} for e in plog.producers()]
                except Exception as exc:
                    out.update(error_code=error_of(exc), error_message=str(exc)[:200])
            parts.append(out)
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}


@register(65, 0, 0)
def describe_transactions(req: Any, ctx: RequestContext) -> dict:
    """KafkaApis.handleDescribeTransactionsRequest: Describe on each id; topics the principal may not
    describe are left out of the answer."""
    states = []
    for txn_id in req.transactional_ids:
        if _denied(ctx, "describe", txn_id):
            out = {"transactional_id": txn_id, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                   "transaction_state": "", "transaction_timeout_ms": 0, "transaction_start_time_ms": -1,
                   "producer_id": -1, "producer_epoch": -1, "topics": []}
        elif _coordinator(ctx) is None:
            out = {"transactional_id": txn_id, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
                   "transaction_state": "", "transaction_timeout_ms": 0, "transaction_start_time_ms": -1,
                   "producer_id": -1, "producer_epoch": -1, "topics": []}
        else:
            out = _coordinator(ctx).describe(txn_id)
            out["topics"] = [t for t in out["topics"]
                             if ctx.allowed("describe", "topic", t["topic"], log_if_denied=False)]
        states.append({"error_code": out["error_code"], "transactional_id": out["transactional_id"],
                       "transaction_state": out["transaction_state"],
                       "transaction_timeout": out["transaction_timeout_ms"],
                       # kio's datetime_i64 is not nullable: -1 (no transaction) is written as the instant
                       # 1 ms before the epoch, which it encodes as -1 again
                       "transaction_start_time": datetime.datetime.fromtimestamp(
                           out["transaction_start_time_ms"] / 1000, datetime.UTC),
                       "producer_id": out["producer_id"], "producer_epoch": out["producer_epoch"],
                       "topics": out["topics"]})
    return {"throttle_time": 0, "transaction_states": states}


@register(66, 0, 2)
def list_transactions(req: Any, ctx: RequestContext) -> dict:
    """KafkaApis.handleListTransactionsRequest: the ids the principal may Describe; unknown state names
    come back in unknown_state_filters (and match nothing); v2's pattern is a regular expression the whole
    id must match (KIP-1152)."""
    states = set(req.state_filters or ())
    unknown = sorted(s for s in states if s not in KNOWN_STATES)
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return {"throttle_time": 0, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
                "unknown_state_filters": unknown, "transaction_states": []}
    pattern = getattr(req, "transactional_id_pattern", None)
    try:
        regex = re.compile(pattern) if pattern else None
    except re.error:
        return {"throttle_time": 0, "error_code": ErrorCode.INVALID_REQUEST, "unknown_state_filters": unknown,
                "transaction_states": []}
    found = [] if unknown and states <= set(unknown) else coordinator.list(
        {int(p) for p in req.producer_id_filters or ()}, states - set(unknown),
        int(getattr(req, "duration_filter", -1)))
    out = [{"transactional_id": m.transactional_id, "producer_id": m.producer_id,
            "transaction_state": m.state.kafka_name} for m in found
           if (regex is None or regex.fullmatch(m.transactional_id))
           and not _denied(ctx, "describe", m.transactional_id)]
    return {"throttle_time": 0, "error_code": 0, "unknown_state_filters": unknown, "transaction_states": out}
