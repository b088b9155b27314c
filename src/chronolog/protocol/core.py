"""ApiVersions, Metadata, Produce, Fetch, ListOffsets and OffsetForLeaderEpoch (InitProducerId and the
other transaction APIs: protocol.transactions).

Versions are Kafka 4.4's (tests/protocol/test_api_versions.py compares them with a live broker's):
Produce is advertised from v0 but v0-2 are refused (Kafka 4.0, KAFKA-18659) because librdkafka < 2.11
turns compression off when Produce's minimum is above 0. Produce v13 and Fetch v13+ name topics by id
(KIP-516): ids are resolved to names (`BrokerState.topic_name`), unknown ones answer UNKNOWN_TOPIC_ID.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import os
import re
import struct
import time
import uuid
from typing import Any, NamedTuple

from chronolog.errors import (
    CorruptMessageError,
    ErrorCode,
    FencedLeaderEpochError,
    InvalidRecordError,
    InvalidRequiredAcksError,
    InvalidTopicExceptionError,
    KafkaError,
    OffsetOutOfRangeError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
)
from chronolog.protocol import codec
from chronolog.protocol.fetch_plan import FetchPlan
from chronolog.protocol.operations import NOT_ASKED, TOPIC, authorized, cluster_operations
from chronolog.protocol.registry import FEATURES, HANDLERS, RequestContext, register
from chronolog.protocol.topic_ids import uuid_of
from chronolog.protocol.txn_batches import PRODUCE_ADDS_PARTITIONS, TRANSACTION_VERSION, transactional_batch
from chronolog.storage.basics import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    LEADER_EPOCH,
    FoundTimestamp,
)
from chronolog.storage.manager import validate_topic_name

INTERNAL_TOPICS: frozenset[str] = frozenset({"__transaction_state", "__consumer_offsets"})
READ_COMMITTED = 1  # isolation_level (IsolationLevel.READ_COMMITTED)


def ms(value: Any) -> int:
    return int(value.total_seconds() * 1000) if isinstance(value, datetime.timedelta) else int(value)


def topic_uuid(ctx: RequestContext, name: str) -> uuid.UUID:
    return uuid_of(ctx.log_manager.topic_id(name))


def error_of(exc: Exception) -> int:
    """The wire code for an exception: its own, KAFKA_STORAGE_ERROR for an I/O error that reached the handler
    (Kafka's `ReplicaManager` answers any `KafkaStorageException` so), else UNKNOWN_SERVER_ERROR."""
    if isinstance(exc, KafkaError):
        return exc.code
    return ErrorCode.KAFKA_STORAGE_ERROR if isinstance(exc, OSError) else ErrorCode.UNKNOWN_SERVER_ERROR


def check_leader_epoch(current: Any) -> None:
    """Partition.checkCurrentLeaderEpoch: a client's current leader epoch (-1: none given) against ours, which
    is always LEADER_EPOCH (0) on one node: older is FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH."""
    epoch = -1 if current is None else int(current)
    if epoch == -1:
        return
    if epoch < LEADER_EPOCH:
        raise FencedLeaderEpochError(f"current leader epoch {epoch} is older than the leader's {LEADER_EPOCH}")
    if epoch > LEADER_EPOCH:
        raise UnknownLeaderEpochError(f"current leader epoch {epoch} is newer than the leader's {LEADER_EPOCH}")


# -- ApiVersions -------------------------------------------------------------------------------------
# ApiVersionsRequest.isValid (KIP-511): the client's software name and version, from v3.
_SOFTWARE_NAME = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")

# v4 only lets SupportedFeatures' min version be 0 (KAFKA-17011). v5 (KIP-1242) names the cluster and node
# the client means to reach (schema in newer_schemas: kio has none yet).
@register(18, 0, 5)
def api_versions(req: Any, ctx: RequestContext) -> dict:
    if ctx.api_version >= 3 and not all(_SOFTWARE_NAME.fullmatch(getattr(req, f) or "") for f in (
            "client_software_name", "client_software_version")):
        return {"error_code": ErrorCode.INVALID_REQUEST, "api_keys": [], "throttle_time": 0}
    if ctx.api_version >= 5:
        # As Kafka 4.4 answers (measured): the two ids come together or not at all (INVALID_REQUEST), and
        # ids of another cluster or node ask the client to bootstrap again (a stale address).
        cluster_id, node_id = req.cluster_id, int(req.node_id)
        if (cluster_id is None) != (node_id == -1):
            return {"error_code": ErrorCode.INVALID_REQUEST, "api_keys": [], "throttle_time": 0}
        if cluster_id is not None and (cluster_id != ctx.state.cluster_id or node_id != ctx.state.node_id):
            return {"error_code": ErrorCode.REBOOTSTRAP_REQUIRED, "api_keys": [], "throttle_time": 0}
    keys = [{"api_key": k, "min_version": h.min_version, "max_version": h.max_version}
            for k, h in sorted(HANDLERS.items())]
    out = {"error_code": 0, "api_keys": keys, "throttle_time": 0}
    if FEATURES:  # ApiVersionsResponse.createApiVersionsResponse: below v4, supported features from 0 are left out
        out["supported_features"] = [{"name": n, "min_version": lo, "max_version": hi}
                                     for n, (lo, hi, _) in sorted(FEATURES.items()) if ctx.api_version >= 4 or lo > 0]
        out["finalized_features"] = [{"name": n, "min_version_level": level, "max_version_level": level}
                                     for n, (_, _, level) in sorted(FEATURES.items())]
        out["finalized_features_epoch"] = 1
    return out


# -- Metadata ----------------------------------------------------------------------------------------
def _topic_metadata(ctx: RequestContext, name: str, error: int = 0, operations: bool = False) -> dict:
    partitions = []
    if not error:
        count = ctx.log_manager.topics()[name]
        partitions = [{"error_code": 0, "partition_index": p, "leader_id": ctx.state.node_id,
                       "leader_epoch": LEADER_EPOCH, "replica_nodes": [ctx.state.node_id],
                       "isr_nodes": [ctx.state.node_id], "offline_replicas": []} for p in range(count)]
    return {"error_code": error, "name": name, "topic_id": topic_uuid(ctx, name) if not error else uuid.UUID(int=0),
            "is_internal": name in INTERNAL_TOPICS, "partitions": partitions,
            "topic_authorized_operations": authorized(ctx, "topic", name, TOPIC) if operations and not error
            else NOT_ASKED}


def _create_internal(ctx: RequestContext, name: str) -> None:
    """AutoTopicCreationManager: an internal topic asked for by name is created by its coordinator, with
    the coordinator's partition count and configs (never `num.partitions`)."""
    if name == "__transaction_state" and ctx.state.transactions is not None:
        ctx.state.transactions.ensure_ready()
    elif name == "__consumer_offsets" and ctx.coordinator is not None:
        ctx.coordinator.store.ensure_topic()
    else:
        raise KafkaError(f"{name} is not available", code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


@register(3, 0, 13)
def metadata(req: Any, ctx: RequestContext) -> dict:
    """v13 adds a top-level error code (KIP-1102: REBOOTSTRAP_REQUIRED, which one node never needs)."""
    manager = ctx.log_manager
    requested = req.topics
    topic_ops = bool(getattr(req, "include_topic_authorized_operations", False))  # v8+ (KIP-430)
    if requested is None or (ctx.api_version == 0 and not requested):
        names = [n for n in sorted(manager.topics()) if ctx.allowed("describe", "topic", n, log_if_denied=False)]
        topics = [_topic_metadata(ctx, n, operations=topic_ops) for n in names]
    elif ctx.api_version < 12 and any(getattr(t, "topic_id", None) or t.name is None for t in requested):
        # v10-11 have the fields, but Kafka resolves ids (and takes null names) only from v12: INVALID_REQUEST
        # for every topic
        topics = [{"error_code": ErrorCode.INVALID_REQUEST, "name": t.name or "", "partitions": []} for t in requested]
    else:
        topics = []
        auto = bool(getattr(req, "allow_auto_topic_creation", True)) and \
            bool(ctx.broker_config["auto.create.topics.enable"])
        by_id = [t.topic_id for t in requested if getattr(t, "topic_id", None)]
        if by_id:  # v12+ (KIP-516; KIP-848 clients): any id, and every topic is asked for by id, names ignored
            requested = [t for t in requested if getattr(t, "topic_id", None)]
            requested = [t for k, t in enumerate(requested) if t.topic_id not in by_id[:k]]
        else:  # a topic named twice is answered once (KafkaApis: a set of names)
            names = [t.name for t in requested]
            requested = [t for k, t in enumerate(requested) if t.name not in names[:k]]
        for t in requested:
            name = t.name
            topic_id = getattr(t, "topic_id", None)
            if by_id:
                name = ctx.state.topic_name(topic_id)
                if name is None or not ctx.allowed("describe", "topic", name):
                    topics.append({"error_code": ErrorCode.UNKNOWN_TOPIC_ID, "name": None, "topic_id": topic_id,
                                   "partitions": []})
                    continue
            if not ctx.allowed("describe", "topic", name):
                topics.append({"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "name": name, "partitions": []})
                continue
            if not manager.has_topic(name):
                if auto and ctx.allowed("create", "topic", name):
                    try:
                        if name in INTERNAL_TOPICS:
                            _create_internal(ctx, name)
                        else:
                            manager.create_topic(name, int(ctx.broker_config["num.partitions"]))
                    except InvalidTopicExceptionError:
                        topics.append({"error_code": ErrorCode.INVALID_TOPIC_EXCEPTION, "name": name,
                                       "partitions": []})
                        continue
                    except KafkaError as exc:
                        if not manager.has_topic(name):  # not made (KAFKA_STORAGE_ERROR on a full disk)
                            topics.append({"error_code": exc.code, "name": name, "partitions": []})
                            continue
                    # Kafka 4.4 answers UNKNOWN_TOPIC_OR_PARTITION while its controller creates the topic; we
                    # are ready at once (docs/differences.md).
                else:
                    # KafkaApis.getTopicMetadata: a name Topic.validate refuses is INVALID_TOPIC_EXCEPTION even
                    # when nothing would be created
                    try:
                        validate_topic_name(name)
                        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    except InvalidTopicExceptionError:
                        code = ErrorCode.INVALID_TOPIC_EXCEPTION
                    topics.append({"error_code": code, "name": name, "partitions": []})
                    continue
            topics.append(_topic_metadata(ctx, name, operations=topic_ops))
    node = ctx.state.node_id
    return {"throttle_time": 0, "error_code": 0,
            "brokers": [{"node_id": node, "host": ctx.advertised_host, "port": ctx.advertised_port, "rack": None}],
            "cluster_id": ctx.state.cluster_id, "controller_id": node, "topics": topics,
            "cluster_authorized_operations": cluster_operations(  # v8-10 (KIP-430)
                ctx, bool(getattr(req, "include_cluster_authorized_operations", False)))}


# -- Produce -----------------------------------------------------------------------------------------
def _next_batch_size(view: memoryview, pos: int) -> int | None:
    """`ByteBufferLogInputStream.nextBatchSize`: the size of the batch at `pos`, None when too few bytes
    remain for one (the batch iterator ends there); a size below a v0 record's overhead or a magic above 2
    is corrupt."""
    remaining = len(view) - pos
    if remaining < 12:
        return None
    (size,) = struct.unpack_from(">i", view, pos + 8)
    if size < 14:
        raise CorruptMessageError(f"Record size {size} is less than the minimum record overhead (14)")
    if remaining < 17:
        return None
    magic = struct.unpack_from(">b", view, pos + 16)[0]
    if magic < 0 or magic > 2:
        raise CorruptMessageError(f"Invalid magic found in record: {magic}")
    return size + 12 if remaining >= size + 12 else None


def validate_records(version: int, records: Any) -> int:
    """ProduceRequest.validateRecords (v3+, the versions we read): exactly one batch per partition, of magic
    2, and no zstd before v7, as Kafka's batch iterator sees them: a truncated batch is no batch, a bad size
    or magic is corrupt. KafkaApis answers these per partition, before the log sees the bytes. Returns the
    batch's size: bytes after it too few for another batch are dropped (UnifiedLog.trimInvalidBytes)."""
    view = memoryview(records or b"").cast("B")
    size = _next_batch_size(view, 0)
    if size is None:
        raise InvalidRecordError(f"Produce requests with version {version} must have at least one record batch "
                                 "per partition")
    if view[16] != 2:  # the magic byte sits at offset 16 in v0/v1 messages and v2 batches alike
        raise InvalidRecordError(f"Produce requests with version {version} are only allowed to contain record "
                                 "batches with magic version 2")
    if version < 7 and len(view) > 22 and view[22] & 0x07 == 4:  # attributes: the codec bits; 4 is zstd
        raise KafkaError(f"Produce requests with version {version} are not allowed to use ZStandard compression",
                         code=ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)
    if _next_batch_size(view, size) is not None:
        raise InvalidRecordError(f"Produce requests with version {version} are only allowed to contain exactly "
                                 "one record batch per partition")
    return size


class _ProduceTopic(NamedTuple):
    topic_id: Any
    partition_data: list


def _produce_topics(req: Any, ctx: RequestContext) -> list[tuple[str | None, _ProduceTopic]]:
    """(name, topic data) of each topic of a Produce request; v13 names topics by id (KIP-516), resolved
    here, None for an id that names no topic (KafkaApis.handleProduceRequest: UNKNOWN_TOPIC_ID). A partition
    named twice is one entry of KafkaApis' map: the last one's records, in the first one's place, answered
    once; consecutive partitions of a topic are one topic of the answer."""
    wanted: dict[tuple[Any, int], tuple[str | None, Any, Any]] = {}
    for t in req.topic_data:
        topic_id = getattr(t, "topic_id", None)
        name = ctx.state.topic_name(topic_id) if ctx.api_version >= 13 else t.name
        key = topic_id if ctx.api_version >= 13 else t.name
        for pd in t.partition_data:
            wanted[(key, int(pd.index))] = (name, topic_id, pd)
    grouped: list[tuple[str | None, _ProduceTopic]] = []
    last = None
    for (key, _), (name, topic_id, pd) in wanted.items():
        if last != key or not grouped:
            grouped.append((name, _ProduceTopic(topic_id, [])))
            last = key
        grouped[-1][1].partition_data.append(pd)
    return grouped


# ReplicaManager.appendToLocalLog answers these with LogAppendInfo.UNKNOWN_LOG_APPEND_INFO (log start -1).
_NO_APPEND_INFO = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.CORRUPT_MESSAGE,
                             ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.UNKNOWN_TOPIC_ID})


# ReplicaManager's post-verification callback: retriable coordinator errors become NOT_ENOUGH_REPLICAS (which
# every client retries without a metadata refresh); AddPartitionsToTxnManager: PRODUCER_FENCED becomes
# INVALID_PRODUCER_EPOCH, what producers expect from a Produce.
_ADD_ERRORS = {ErrorCode.CONCURRENT_TRANSACTIONS: ErrorCode.NOT_ENOUGH_REPLICAS,
               ErrorCode.COORDINATOR_NOT_AVAILABLE: ErrorCode.NOT_ENOUGH_REPLICAS,
               ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: ErrorCode.NOT_ENOUGH_REPLICAS,
               ErrorCode.NOT_COORDINATOR: ErrorCode.NOT_ENOUGH_REPLICAS,
               ErrorCode.PRODUCER_FENCED: ErrorCode.INVALID_PRODUCER_EPOCH}


def _add_to_transaction(ctx: RequestContext, txn_id: str | None, batch: tuple[int, int], topic: str,
                        partition: int) -> None:
    """Produce v12+ (KIP-890 part 2, AddPartitionsToTxnManager with ADD_PARTITION): the broker adds the
    partition to the producer's transaction before appending; raises the error the partition answers."""
    if not txn_id:
        raise KafkaError("a transactional batch needs a transactional id", code=ErrorCode.INVALID_TXN_STATE)
    try:
        error = ctx.state.transactions.add_partitions(txn_id, batch[0], batch[1], {(topic, partition)},
                                                      TRANSACTION_VERSION)
    except Exception as exc:  # the state write failed: as a coordinator that cannot answer
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        detail = str(exc)
    else:
        detail = ""
    if error:
        code = _ADD_ERRORS.get(error, error)
        if code == ErrorCode.NOT_ENOUGH_REPLICAS:
            message = ("Unable to verify the partition has been added to the transaction. Underlying error: "
                       f"{ErrorCode(error).name} {detail}".rstrip())
        elif code == ErrorCode.INVALID_TXN_STATE:
            message = "Partition was not added to the transaction"
        else:
            message = f"adding the partition to the transaction failed ({ErrorCode(error).name})"
        raise KafkaError(message, code=code)


@register(0, 0, 13, parse_min=3)
def produce(req: Any, ctx: RequestContext) -> dict | None:
    acks = int(req.acks)
    responses = []
    appended = False
    txn_id = getattr(req, "transactional_id", None)
    topic_data = _produce_topics(req, ctx)
    transactional = {(name, pd.index): batch for name, t in topic_data for pd in t.partition_data
                     if (batch := transactional_batch(pd.records)) is not None}
    # KafkaApis.handleProduceRequest: transactional records need Write on their transactional id.
    txn_denied = bool(transactional) and (txn_id is None or not ctx.allowed("write", "transactional_id", txn_id))
    for name, data in topic_data:
        parts = []
        for pd in data.partition_data:
            result = {"index": pd.index, "error_code": 0, "base_offset": -1, "log_append_time": -1,
                      "log_start_offset": -1, "record_errors": [], "error_message": None}
            try:
                if name is None:
                    raise KafkaError(f"no topic has id {data.topic_id}", code=ErrorCode.UNKNOWN_TOPIC_ID)
                if acks not in (0, 1, -1):
                    raise InvalidRequiredAcksError(f"acks={acks}")
                if txn_denied:
                    raise KafkaError("not authorized to write as this transactional id",
                                     code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                if not ctx.allowed("write", "topic", name):
                    raise KafkaError("not authorized to write", code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                if name in INTERNAL_TOPICS:  # ReplicaManager.appendRecords: only coordinators write these
                    raise KafkaError(f"cannot append to internal topic {name}", code=ErrorCode.INVALID_TOPIC_EXCEPTION)
                plog = ctx.log_manager.get_log(name, pd.index)
                size = validate_records(ctx.api_version, pd.records)
                batch = transactional.get((name, pd.index))
                if batch is not None and ctx.api_version >= PRODUCE_ADDS_PARTITIONS \
                        and ctx.state.transactions is not None:
                    _add_to_transaction(ctx, txn_id, batch, name, pd.index)
                elif batch is not None and ctx.state.transactions is not None \
                        and ctx.broker_config["transaction.partition.verification.enable"]:
                    # ReplicaManager.appendRecords with transaction verification (KIP-890 part 1): a
                    # transactional batch only for a partition its ongoing transaction added.
                    refused = ctx.state.transactions.check_produce(txn_id, batch[0], batch[1], name, pd.index)
                    if refused:
                        raise KafkaError("Partition was not added to the transaction"
                                         if refused == ErrorCode.INVALID_TXN_STATE else
                                         f"transactional produce refused ({ErrorCode(refused).name})", code=refused)
                # An idempotent producer's retry is answered with its first write's offset and not written
                # again; a sequence gap or a fenced epoch raises (the partition's producer state, kept
                # across restarts by `storage.producers`).
                try:
                    records = pd.records if len(pd.records) == size else memoryview(pd.records)[:size]
                    info = plog.append(records)
                except Exception as exc:
                    # ReplicaManager.appendToLocalLog: a refused append answers the partition's log start
                    # offset (processFailedRecord), except for the errors it answers with no append info
                    if error_of(exc) not in _NO_APPEND_INFO:
                        result["log_start_offset"] = plog.log_start_offset
                    raise
                appended = appended or not info.duplicate
                result.update(base_offset=info.first_offset, log_append_time=info.log_append_time,
                              log_start_offset=info.log_start_offset)
            except Exception as exc:  # every partition gets its own error code
                result.update(error_code=error_of(exc), error_message=str(exc)[:500], record_errors=[
                    {"batch_index": i, "batch_index_error_message": m} for i, m in getattr(exc, "record_errors", ())])
            parts.append(result)
        responses.append({"name": name, "topic_id": data.topic_id, "partition_responses": parts})
    if appended and ctx.state.data_waiters is not None:
        ctx.state.data_waiters.notify()
    if acks == 0:
        return None  # no response at all for acks=0
    return {"responses": responses, "throttle_time": 0}


# -- Fetch -------------------------------------------------------------------------------------------
# Record ranges at least this large are answered as file regions (sendfile on plain TCP); smaller ones are
# read with one pread and written with the response: for a few batches that costs less than a separate send
# of the framing, a dup of the descriptor and the sendfile (docs/benchmarks-history.md, "The zero-copy
# threshold").
ZERO_COPY_MIN_BYTES = 64 * 1024


def _fetch_once(req: Any, ctx: RequestContext) -> tuple[list[dict], int, list]:
    """One pass over the requested partitions: the response values with each partition's byte range
    found but not read (`found`: (values, log, ReadSlice)), and the bytes they add up to."""
    remaining = int(req.max_bytes) if getattr(req, "max_bytes", None) is not None else 2**31 - 1
    committed = int(getattr(req, "isolation_level", 0)) == READ_COMMITTED
    total = 0
    responses = []
    found = []
    for name, topic_id, asked in _fetch_partitions(req, ctx):
        parts = []
        for p in asked:
            out = {"partition_index": p.partition, "error_code": 0, "high_watermark": -1,
                   "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": None,
                   "preferred_read_replica": -1, "records": b""}
            try:
                if name is None:  # KafkaApis.handleFetchRequest: an id the metadata cache does not know
                    raise KafkaError(f"no topic has id {topic_id}", code=ErrorCode.UNKNOWN_TOPIC_ID)
                if not ctx.allowed("read", "topic", name):
                    raise KafkaError("not authorized to read", code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                plog = ctx.log_manager.get_log(name, p.partition)
                check_leader_epoch(getattr(p, "current_leader_epoch", -1))  # v9+ (KIP-320)
                hw, lso = plog.high_watermark, plog.last_stable_offset
                out.update(high_watermark=hw, last_stable_offset=lso, log_start_offset=plog.log_start_offset)
                limit = min(int(p.partition_max_bytes), remaining)
                fetch_offset = int(p.fetch_offset)
                last_epoch = int(getattr(p, "last_fetched_epoch", -1))  # v12+ (KIP-595 divergence detection)
                if last_epoch >= 0:
                    # Partition.fetchRecords: the end of the last fetched epoch decides first; past it the
                    # answer is that epoch's end (diverging_epoch), no records and no error
                    if last_epoch > LEADER_EPOCH:
                        raise OffsetOutOfRangeError(f"no end offset for the last fetched epoch {last_epoch}")
                    if plog.log_start_offset <= plog.log_end_offset < fetch_offset:
                        out["diverging_epoch"] = {"epoch": LEADER_EPOCH, "end_offset": plog.log_end_offset}
                        parts.append(out)
                        continue
                if fetch_offset < plog.log_start_offset or fetch_offset > plog.log_end_offset:
                    # LocalLog.read checks the range whatever the byte limit leaves to read
                    raise OffsetOutOfRangeError(f"fetch offset {fetch_offset} is outside "
                                                f"[{plog.log_start_offset}, {plog.log_end_offset}]")
                if committed:
                    # KIP-98 (LocalLog.read with FetchIsolation.TXN_COMMITTED): data up to the last stable
                    # offset, with the aborted transactions the fetched range overlaps.
                    out["aborted_transactions"] = []
                if limit > 0 or total == 0:
                    piece = plog.read(fetch_offset, max(limit, 0), max_offset=lso if committed else None,
                                      min_one_message=total == 0)
                    if piece is not None:
                        found.append((out, plog, piece))
                        total += piece.size
                        remaining -= piece.size
                        if committed:
                            upper = getattr(piece, "next_offset", None) or lso
                            out["aborted_transactions"] = [
                                {"producer_id": pid, "first_offset": first}
                                for pid, first in plog.aborted_transactions(fetch_offset, upper)]
            except OffsetOutOfRangeError as exc:
                out["error_code"] = exc.code
            except UnknownTopicOrPartitionError as exc:
                out["error_code"] = exc.code
            except Exception as exc:
                out["error_code"] = error_of(exc)
            parts.append(out)
        responses.append({"topic": name, "topic_id": topic_id, "partitions": parts})
    return responses, total, found


def _fetch_partitions(req: Any, ctx: RequestContext) -> list[tuple[str | None, Any, list]]:
    """(name, topic id, partitions) to answer, in the request's order: FetchRequest.fetchData keeps one
    entry per topic partition (a partition asked for again replaces the first, in its place), and the
    answer lists consecutive partitions of a topic under one topic. From v13 topics are named by id
    (KIP-516): the name is None for an unknown id."""
    by_id = ctx.api_version >= 13
    wanted: dict[tuple[Any, int], tuple[str | None, Any, Any]] = {}
    for t in req.topics:
        name = ctx.state.topic_name(t.topic_id) if by_id else t.topic
        key = t.topic_id if by_id else t.topic
        for p in t.partitions:
            wanted[(key, int(p.partition))] = (name, t.topic_id if by_id else None, p)
    grouped: list[tuple[str | None, Any, list]] = []
    last = None
    for (key, _), (name, topic_id, p) in wanted.items():
        if last != key or not grouped:
            grouped.append((name, topic_id, []))
            last = key
        grouped[-1][2].append(p)
    return grouped


def _records_of(plog: Any, piece: Any) -> bytes | codec.FileRegion:
    """A found range as a partition's records: a small one read now with one `pread`, a large one a
    FileRegion over a `dup` of the segment's descriptor, taken under the log's lock (segments are closed
    under it), so retention deleting the segment before the response is sent cannot pull the file away.
    A segment deleted since the range was found gives no records; the next fetch says why."""
    if piece.size < ZERO_COPY_MIN_BYTES or getattr(piece._segment, "remote", False):
        return piece.read_bytes()  # small, or a tiered segment's range (from the tier's cache, no descriptor)
    with plog.lock:
        fd = piece.fileno()
        return codec.FileRegion(os.dup(fd), piece.position, piece.size) if fd >= 0 else b""


def _attach_records(found: list) -> None:
    for out, plog, piece in found:
        try:
            out["records"] = _records_of(plog, piece)
        except Exception as exc:
            out.update(error_code=error_of(exc), records=b"")


def planned_fetch(ctx: RequestContext, plan: FetchPlan, fetch_offset: int) -> bytes | codec.ResponseParts | None:
    """The answer to a connection's planned Fetch (see protocol.fetch_plan) at `fetch_offset` when it is
    records ready to send, decided as `fetch` decides for one partition; None for anything else (an
    error, a deleted segment, less than min_bytes: a long poll), which the caller hands to `fetch`."""
    try:
        if not ctx.allowed("read", "topic", plan.topic):
            return None
        if plan.topic_id is not None and ctx.state.topic_name(plan.topic_id) != plan.topic:
            return None  # the topic was deleted (or made again, under a new id) since the plan was made
        plog = ctx.log_manager.get_log(plan.topic, plan.partition)
        if plog.remote is not None and fetch_offset < plog.local_log_start_offset:
            return None  # a tiered offset: `fetch` reads it off the loop
        hw, lso, log_start = plog.high_watermark, plog.last_stable_offset, plog.log_start_offset
        piece = plog.read(fetch_offset, plan.limit, min_one_message=True)
        if piece is None or piece.size < plan.min_bytes:
            return None
        records = _records_of(plog, piece)
    except Exception:
        return None
    if not records:
        return None
    return plan.response(ctx.correlation_id, hw, log_start, records, lso)


@register(1, 4, 18)
async def fetch(req: Any, ctx: RequestContext) -> dict:
    """Long poll (`max.wait.ms`, `min.bytes`), whole batches straight from the segment file, at least one
    batch for the first partition with data even past `max.bytes` (KIP-74). Ranges are found on each pass
    and read (or handed over as file regions, see codec.encode_fetch_response) only once, for the answer."""
    wait_ms = ms(req.max_wait)
    deadline = time.monotonic() + wait_ms / 1000.0
    min_bytes = int(req.min_bytes)
    tiered = _reads_tier(req, ctx)
    while True:
        responses, total, found = await asyncio.to_thread(_fetch_once, req, ctx) if tiered else _fetch_once(req, ctx)
        left = deadline - time.monotonic()
        errors = any(p["error_code"] for t in responses for p in t["partitions"])
        if total >= min_bytes or left <= 0 or errors or ctx.state.data_waiters is None:
            break
        await ctx.state.data_waiters.wait(left)
    if tiered:
        await asyncio.to_thread(_attach_records, found)
    else:
        _attach_records(found)
    return {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": responses}


def _reads_tier(req: Any, ctx: RequestContext) -> bool:
    """Whether a fetch offset lies in a partition's tiered segments (KIP-405): such a fetch is served in a
    thread, as Kafka's `RemoteLogReader` pool serves it, so a slow tier never holds up the loop."""
    if getattr(ctx.log_manager, "remote_logs", None) is None:
        return False
    by_id = ctx.api_version >= 13
    for t in req.topics:
        name = ctx.state.topic_name(t.topic_id) if by_id else t.topic
        for p in t.partitions:
            try:
                plog = ctx.log_manager.get_log(name, int(p.partition))
            except Exception:
                continue
            if plog.remote is not None and int(p.fetch_offset) < plog.local_log_start_offset:
                return True
    return False


# -- ListOffsets -------------------------------------------------------------------------------------
# ReplicaManager.timestampMinSupportedVersion: a special timestamp only from the version that defines it
# (latest -1 and earliest -2 from v1, max timestamp -3 from v7, earliest local -4 from v8, latest tiered -5
# from v9, earliest pending upload -6 from v11, KIP-1023); others, or older versions, answer
# UNSUPPORTED_VERSION for the partition.
_SPECIAL_TIMESTAMP_MIN_VERSION = {-1: 1, -2: 1, -3: 7, -4: 8, -5: 9, -6: 11}
# The tiered-storage specials (KIP-1005, KIP-1023): without remote storage Kafka's UnifiedLog answers them
# with no offset (-1, timestamp -1, leader epoch -1) and no error; -5 of a tiered topic is its last tiered
# offset (the log answers it), -6 (delayed upload) always none here.
_TIERED_TIMESTAMPS = frozenset({-6})


# v10 adds timeout_ms (KIP-1075), which bounds waits on remote storage: none here.
@register(2, 1, 11)
def list_offsets(req: Any, ctx: RequestContext) -> dict | Any:
    """Every requested partition is answered (seed 001's empty answers crashed clients): a timestamp with
    no record at or after it gives offset -1 / timestamp -1, as Kafka does. A partition asked for twice
    answers INVALID_REQUEST once, after the topic's other partitions (KafkaApis: the set
    ListOffsetsRequest.duplicatePartitions, answered last). A lookup that may read tiered segments
    (KIP-405) is answered in a thread: the coroutine returned is awaited by the dispatcher."""
    if _looks_up_tier(req, ctx):
        return asyncio.to_thread(_list_offsets, req, ctx)
    return _list_offsets(req, ctx)


def _looks_up_tier(req: Any, ctx: RequestContext) -> bool:
    """Whether a lookup by time (or -3) is asked of a partition with tiered segments below its local ones."""
    if getattr(ctx.log_manager, "remote_logs", None) is None:
        return False
    for t in req.topics:
        for p in t.partitions:
            timestamp = int(p.timestamp)
            if timestamp < 0 and timestamp != -3:  # -3: max timestamp, over the tier too
                continue
            try:
                plog = ctx.log_manager.get_log(t.name, int(p.partition_index))
            except Exception:
                continue
            if plog.remote is not None and plog.log_start_offset < plog.local_log_start_offset:
                return True
    return False


def _list_offsets(req: Any, ctx: RequestContext) -> dict:
    seen = collections.Counter((t.name, int(p.partition_index)) for t in req.topics for p in t.partitions)
    answered: set[tuple[str, int]] = set()
    committed = int(getattr(req, "isolation_level", 0)) == READ_COMMITTED
    topics = []
    for t in req.topics:
        parts = []
        duplicated = []
        for p in t.partitions:
            if seen[(t.name, int(p.partition_index))] > 1:
                if (t.name, int(p.partition_index)) not in answered:
                    answered.add((t.name, int(p.partition_index)))
                    duplicated.append({"partition_index": p.partition_index, "error_code": ErrorCode.INVALID_REQUEST,
                                       "timestamp": -1, "offset": -1, "leader_epoch": -1})
                continue
            out = {"partition_index": p.partition_index, "error_code": 0, "timestamp": -1, "offset": -1,
                   "leader_epoch": -1}
            try:
                if not ctx.allowed("describe", "topic", t.name):
                    raise KafkaError("not authorized", code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                timestamp = int(p.timestamp)
                if timestamp < 0 and ctx.api_version < _SPECIAL_TIMESTAMP_MIN_VERSION.get(timestamp, 1 << 15):
                    raise KafkaError(f"timestamp {timestamp} needs a later ListOffsets version",
                                     code=ErrorCode.UNSUPPORTED_VERSION)
                plog = ctx.log_manager.get_log(t.name, p.partition_index)
                check_leader_epoch(getattr(p, "current_leader_epoch", -1))  # v4+ (KIP-320)
                if timestamp in _TIERED_TIMESTAMPS:
                    found = None
                elif committed and timestamp == LATEST_TIMESTAMP:
                    # Partition.fetchOffsetForTimestamp: read_committed's latest is the last stable offset...
                    found = FoundTimestamp(-1, plog.last_stable_offset, LEADER_EPOCH)
                else:
                    found = plog.offset_for_timestamp(timestamp)
                    # ...and a lookup by time never answers an offset at or past it (earliest ones excepted).
                    if found is not None and committed and found.offset >= plog.last_stable_offset and \
                            timestamp not in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
                        found = None
                if found is not None:
                    out.update(timestamp=found.timestamp, offset=found.offset, leader_epoch=found.leader_epoch)
            except Exception as exc:
                out["error_code"] = error_of(exc)
            parts.append(out)
        topics.append({"name": t.name, "partitions": parts + duplicated})
    return {"throttle_time": 0, "topics": topics}


# -- OffsetForLeaderEpoch ----------------------------------------------------------------------------
@register(23, 2, 4)
def offset_for_leader_epoch(req: Any, ctx: RequestContext) -> dict:
    """One constant leader epoch (0) forever: any epoch <= 0 ends at the log end offset."""
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            out = {"error_code": 0, "partition": p.partition, "leader_epoch": LEADER_EPOCH, "end_offset": -1}
            try:
                plog = ctx.log_manager.get_log(t.topic, p.partition)
                check_leader_epoch(getattr(p, "current_leader_epoch", -1))  # v2+ (KIP-320)
                if int(p.leader_epoch) > LEADER_EPOCH:
                    out.update(leader_epoch=-1, end_offset=-1)
                else:
                    out["end_offset"] = plog.log_end_offset
            except Exception as exc:
                out["error_code"] = error_of(exc)
            parts.append(out)
        topics.append({"topic": t.topic, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}
