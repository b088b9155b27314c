"""The transaction coordinator (KIP-98, Kafka's `TransactionCoordinator` / `TransactionStateManager`), for
one broker.

Each transactional id's state (server.txn_log.TxnMetadata) lives in memory and, durably, in the internal
topic `__transaction_state` (partition `abs(hashCode(id)) % transaction.state.log.num.partitions`),
written through our own PartitionLog in Kafka's TransactionLogKey/Value schemas before a state change is
acknowledged. States and transitions are Kafka's:

    Empty/CompleteCommit/CompleteAbort --AddPartitions/AddOffsets--> Ongoing
    Ongoing --EndTxn(commit)--> PrepareCommit --markers written--> CompleteCommit
    Ongoing --EndTxn(abort), timeout, fencing--> PrepareAbort --markers written--> CompleteAbort
    InitProducerId of an Ongoing transaction: PrepareEpochFence (epoch bumped) -> PrepareAbort -> ...

Kafka's coordinator answers EndTxn once PrepareCommit/PrepareAbort is logged and sends the markers to the
partition leaders afterwards (TransactionMarkerChannelManager). Here every partition is local, so the
markers are appended (PartitionLog.append_control), the group's pending transactional offsets applied or
dropped, and CompleteCommit/CompleteAbort logged before EndTxn is answered. After a crash, loading the
topic finds the last state of each id: a PrepareCommit/PrepareAbort is completed (markers again; a marker
for a partition whose transaction already ended changes nothing a reader sees), an Ongoing transaction
stays open for its producer to end, or for the timeout to abort, as in Kafka.

Transaction version 2 (KIP-890 part 2, finalized in ApiVersions): a client's EndTxn v5 bumps the epoch
at every commit and abort (TransactionMetadata.prepareAbortOrCommit) and the markers carry the bumped
epoch, which fences the old one on every partition; the answer names the new epoch, or, once the epochs
ran out, a new producer id with epoch 0 (nextProducerId, taken on at completion). Produce v12+ and
TxnOffsetCommit v5+ add their partitions themselves (AddPartitionsToTxnManager with ADD_PARTITION), and
an abort of a transaction that added nothing is allowed. Clients of version 1 (EndTxn v4 and below,
librdkafka) keep version 1's rules. An epoch fence (InitProducerId, a timeout) bumps once, with either
version: its abort markers carry epoch + 1 (measured on Kafka 4.4).

InitProducerId for an id with an Ongoing transaction aborts it (epoch fence) and answers
CONCURRENT_TRANSACTIONS, as Kafka does: the client retries, and the retry bumps the epoch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from chronolog.config import BrokerConfig
from chronolog.errors import (
    ErrorCode,
    KafkaError,
    KafkaStorageErrorError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from chronolog.protocol.txn_batches import TRANSACTION_VERSION
from chronolog.records.batch import SimpleRecord
from chronolog.records.batch_builder import build_batch
from chronolog.server.txn_log import (
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TRANSACTION_STATE_TOPIC,
    TxnMetadata,
    TxnState,
    key_bytes,
    partition_for,
    read_key,
    read_value,
    value_bytes,
)

log = logging.getLogger(__name__)

CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
COORDINATOR_EPOCH = 0  # the leader epoch of our one __transaction_state replica
TRANSACTIONAL_ID_NOT_FOUND = 105  # Errors.TRANSACTIONAL_ID_NOT_FOUND (KIP-664)
ENDED = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


def _now() -> int:
    return int(time.time() * 1000)


class TransactionCoordinator:
    """The state machine and its durable log. Methods run on the event loop thread and return Kafka error
    codes; nothing here touches a socket."""

    def __init__(self, log_manager: Any, config: BrokerConfig, producer_ids: Iterable[int], groups: Any = None,
                 on_markers: Callable[[], None] | None = None, clock: Callable[[], int] = _now) -> None:
        self.logs = log_manager
        self.config = config
        self.producer_ids = producer_ids
        self.groups = groups  # the GroupCoordinator (transactional offset commits)
        self.on_markers = on_markers  # wakes read_committed long polls once markers moved an LSO
        self.clock = clock
        self.txns: dict[str, TxnMetadata] = {}
        self.num_partitions = int(config["transaction.state.log.num.partitions"])
        self._timers: list[asyncio.Task] = []
        self.offline: set[int] = set()  # partitions that could not be opened at start (`offline_id`)
        # the finalized transaction.version: TransactionLogValue v1 from level 1 on
        self.transaction_version = TRANSACTION_VERSION

    # -- lifecycle --------------------------------------------------------------------------------------
    async def start(self) -> None:
        self.load()
        self._timers = [
            asyncio.create_task(self._every(int(self.config["transaction.abort.timed.out.transaction.cleanup"
                                                            ".interval.ms"]), self.abort_timed_out)),
            asyncio.create_task(self._every(int(self.config["transaction.remove.expired.transaction.cleanup"
                                                            ".interval.ms"]), self.expire_transactional_ids)),
        ]

    async def stop(self) -> None:
        for task in self._timers:
            task.cancel()
        for task in self._timers:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._timers = []

    async def _every(self, interval_ms: int, job: Callable[[], Any]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000.0)
            try:
                job()
            except Exception:
                log.exception("transaction coordinator: %s failed", getattr(job, "__name__", job))

    def _ensure_topic(self) -> None:
        """`__transaction_state` is created on first use (Kafka creates it on the first FindCoordinator or
        InitProducerId for a transactional id), never deleted by retention (retention.ms=-1; we have no
        compaction: `load` rewrites the live records when the log has grown, see `_rewrite`)."""
        if self.logs.has_topic(TRANSACTION_STATE_TOPIC):
            return
        with contextlib.suppress(TopicAlreadyExistsError):
            self.logs.create_topic(TRANSACTION_STATE_TOPIC, self.num_partitions, {
                "retention.ms": "-1", "retention.bytes": "-1", "compression.type": "uncompressed",
                "segment.bytes": str(self.config["transaction.state.log.segment.bytes"])})
            log.info("created %s with %d partitions", TRANSACTION_STATE_TOPIC, self.num_partitions)

    def ensure_ready(self) -> None:
        """Called by FindCoordinator(TRANSACTION) and InitProducerId: the topic exists from then on."""
        self._ensure_topic()

    @property
    def log_value_version(self) -> int:
        """TransactionVersion.transactionLogValueVersion: v1 (flexible) once transaction.version is 1+."""
        return 1 if self.transaction_version >= 1 else 0

    def state_partition(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    def offline_id(self, transactional_id: str) -> bool:
        """The id's partition could not be opened at start: its state was not loaded (as GroupCoordinator.offline)."""
        return bool(self.offline) and self.state_partition(transactional_id) in self.offline

    def _write(self, meta: TxnMetadata | None, transactional_id: str) -> None:
        """Append the id's new state (None: its tombstone) to its __transaction_state partition; the
        in-memory state changes only once that append returned (TransactionStateManager.appendTransactionToLog)."""
        self._ensure_topic()
        plog = self.logs.get_log(TRANSACTION_STATE_TOPIC, self.state_partition(transactional_id))
        value = None if meta is None else value_bytes(meta, self.log_value_version)
        now = self.clock()
        plog.append(build_batch([SimpleRecord(now, key_bytes(transactional_id), value)]), now=now, origin_client=False)
        if meta is None:
            self.txns.pop(transactional_id, None)
        else:
            self.txns[transactional_id] = meta

    # -- loading ------------------------------------------------------------------------------------------
    def load(self) -> None:
        """TransactionStateManager.loadTransactionsForTxnTopicPartition: the last record of each id wins;
        transactions caught in PrepareCommit/PrepareAbort are completed."""
        if not self.logs.has_topic(TRANSACTION_STATE_TOPIC):
            return
        self.num_partitions = self.logs.topics()[TRANSACTION_STATE_TOPIC]
        for p in range(self.num_partitions):
            try:
                plog = self.logs.get_log(TRANSACTION_STATE_TOPIC, p)
            except KafkaStorageErrorError as exc:
                self.offline.add(p)
                log.error("%s; its transactional ids have no coordinator until the next start", exc)
                continue
            records = 0
            for rec in plog.read_records(plog.log_start_offset):
                records += 1
                if rec.key is None:
                    continue
                try:
                    txn_id = read_key(rec.key)
                    if txn_id is None:
                        continue
                    meta = read_value(txn_id, rec.value)
                except (KafkaError, UnicodeDecodeError) as exc:
                    log.warning("%s-%d: skipping an unreadable record at offset %d: %s", TRANSACTION_STATE_TOPIC,
                                p, rec.offset, exc)
                    continue
                if meta is None:
                    self.txns.pop(txn_id, None)
                else:
                    old = self.txns.get(txn_id)
                    if old is not None and old.producer_id == meta.producer_id and old.producer_epoch != meta.producer_epoch:
                        meta.last_producer_epoch = old.producer_epoch
                    self.txns[txn_id] = meta
            live = sum(1 for t in self.txns if self.state_partition(t) == p)
            if records > 2 * live + 1000:
                self._rewrite(plog, p)
        for meta in list(self.txns.values()):
            if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                log.info("transactional id %s: completing its %s after a restart", meta.transactional_id,
                         meta.state.kafka_name)
                try:
                    self._complete(meta)
                except Exception:  # left in Prepare*: abort_timed_out's run completes it again
                    log.exception("transactional id %s: completing its %s failed", meta.transactional_id,
                                  meta.state.kafka_name)
            elif meta.state in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE):
                self.txns.pop(meta.transactional_id, None)  # never logged by Kafka; nothing to resume
        log.info("loaded %d transactional ids from %s", len(self.txns), TRANSACTION_STATE_TOPIC)

    def _rewrite(self, plog: Any, partition: int) -> None:
        """Our stand-in for the log cleaner: the live record of every id of this partition is appended
        again and everything before it dropped (delete-records), so loading stays proportional to the ids."""
        live = [m for t, m in self.txns.items() if self.state_partition(t) == partition]
        if not live:
            return
        start = plog.log_end_offset
        now = self.clock()
        plog.append(build_batch([SimpleRecord(now, key_bytes(m.transactional_id), value_bytes(m, self.log_value_version))
                                 for m in live]),
                    now=now, origin_client=False)
        plog.flush()
        plog.delete_records_before(start)
        log.info("%s-%d: rewrote %d live records from offset %d", TRANSACTION_STATE_TOPIC, partition, len(live),
                 start)

    # -- InitProducerId -----------------------------------------------------------------------------------
    def init_producer_id(self, transactional_id: str, timeout_ms: int, expected_pid: int = NO_PRODUCER_ID,
                         expected_epoch: int = NO_PRODUCER_EPOCH) -> tuple[int, int, int]:
        """TransactionCoordinator.handleInitProducerId: (error, producer id, epoch)."""
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        if not 0 < timeout_ms <= int(self.config["transaction.max.timeout.ms"]):
            log.info("InitProducerId for %s: transaction.timeout.ms %d is not in (0, transaction.max.timeout.ms "
                     "%d]", transactional_id, timeout_ms, self.config["transaction.max.timeout.ms"])
            return ErrorCode.INVALID_TRANSACTION_TIMEOUT, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        expected = None
        if expected_pid != NO_PRODUCER_ID or expected_epoch != NO_PRODUCER_EPOCH:
            if expected_pid == NO_PRODUCER_ID or expected_epoch == NO_PRODUCER_EPOCH:
                return ErrorCode.INVALID_REQUEST, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
            expected = (expected_pid, expected_epoch)
        self._ensure_topic()
        meta = self.txns.get(transactional_id)
        if meta is None:
            meta = TxnMetadata(transactional_id, next(self.producer_ids), timeout_ms=timeout_ms,
                               last_update_ms=self.clock())
        if expected is not None and not (
                meta.producer_epoch == NO_PRODUCER_EPOCH or expected[0] == meta.producer_id
                or (expected[0] == meta.previous_producer_id and expected[1] >= MAX_EPOCH - 1)):
            return ErrorCode.PRODUCER_FENCED, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        if meta.state == TxnState.ONGOING:
            # TransactionCoordinator.handleInitProducerId: PrepareEpochFence, the abort, then a retriable error
            error = self._fence_and_abort(meta)
            return error or ErrorCode.CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        now = self.clock()
        new = meta.copy()
        new.timeout_ms, new.last_update_ms, new.start_ms = timeout_ms, now, -1
        new.state, new.partitions = TxnState.EMPTY, set()
        if meta.epoch_exhausted and (expected is None or expected[1] == meta.producer_epoch):
            # TransactionMetadata.prepareProducerIdRotation: a new id once the epochs run out.
            new.previous_producer_id, new.producer_id = meta.producer_id, next(self.producer_ids)
            new.producer_epoch = 0
            new.last_producer_epoch = meta.producer_epoch if expected is not None else NO_PRODUCER_EPOCH
        else:
            # TransactionMetadata.prepareIncrementProducerEpoch
            bumped = meta.producer_epoch + 1
            if expected is None:
                new.producer_epoch, new.last_producer_epoch = bumped, NO_PRODUCER_EPOCH
            elif meta.producer_epoch == NO_PRODUCER_EPOCH or expected[1] == meta.producer_epoch:
                new.producer_epoch, new.last_producer_epoch = bumped, meta.producer_epoch
            elif expected[1] == meta.last_producer_epoch:  # a retry of the bump it never heard about
                new.producer_epoch, new.last_producer_epoch = meta.producer_epoch, meta.last_producer_epoch
            else:
                return ErrorCode.PRODUCER_FENCED, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        self._write(new, transactional_id)
        log.info("initialized transactional id %s with producer id %d and epoch %d on partition %s-%d",
                 transactional_id, new.producer_id, new.producer_epoch, TRANSACTION_STATE_TOPIC,
                 self.state_partition(transactional_id))
        return 0, new.producer_id, new.producer_epoch

    def _fence_and_abort(self, meta: TxnMetadata) -> int:
        """TransactionMetadata.prepareFenceProducerEpoch, then the abort with the bumped epoch: markers of a
        higher epoch fence the old producer on every partition of its transaction."""
        if meta.producer_epoch >= MAX_EPOCH:
            log.error("transactional id %s: cannot fence producer epoch %d", meta.transactional_id, meta.producer_epoch)
            return ErrorCode.UNKNOWN_SERVER_ERROR
        new = meta.copy()
        if not meta.has_failed_epoch_fence:
            # the epoch before the fence stays the last one (measured on Kafka 4.4): an InitProducerId
            # expecting it is answered the fenced epoch, as a retry of a bump it never heard about
            new.producer_epoch, new.last_producer_epoch = meta.producer_epoch + 1, meta.producer_epoch
        return self._prepare_end(new, commit=False)

    # -- AddPartitionsToTxn / AddOffsetsToTxn -------------------------------------------------------------
    def _check_producer(self, transactional_id: str, producer_id: int, epoch: int) -> tuple[int, TxnMetadata | None]:
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST, None
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, None
        if meta.producer_epoch != epoch:
            return ErrorCode.PRODUCER_FENCED, None
        if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS, None
        return 0, meta

    def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                       partitions: set[tuple[str, int]], client_version: int = 0) -> int:
        """TransactionCoordinator.handleAddPartitionsToTransaction (one error for all partitions); a client of
        transaction version 2 adds them through Produce / TxnOffsetCommit (`client_version` 2)."""
        error, meta = self._check_producer(transactional_id, producer_id, epoch)
        if error:
            log.info("AddPartitionsToTxn for %s (producer %d epoch %d): %s", transactional_id, producer_id, epoch,
                     ErrorCode(error).name)
            return error
        if meta.state == TxnState.ONGOING and partitions <= meta.partitions:
            return 0
        now = self.clock()
        new = meta.copy()
        if meta.state in ENDED:
            new.start_ms, new.partitions = now, set()
        new.state, new.last_update_ms = TxnState.ONGOING, now
        new.partitions |= partitions
        new.client_version = client_version  # TransactionMetadata.prepareAddPartitions
        self._write(new, transactional_id)
        return 0

    def verify_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                          partitions: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """handleVerifyPartitionsInTransaction (AddPartitionsToTxn v4+ verify_only): each partition's error,
        TRANSACTION_ABORTABLE for one not in the transaction (the broker that asked maps it for its client)."""
        error, meta = self._check_producer(transactional_id, producer_id, epoch)
        if error:
            return {tp: error for tp in partitions}
        return {tp: 0 if tp in meta.partitions else ErrorCode.TRANSACTION_ABORTABLE for tp in partitions}

    def offsets_partition(self, group_id: str) -> tuple[str, int]:
        """The group's `__consumer_offsets` partition (the group coordinator's count once the topic exists)."""
        if self.groups is not None and hasattr(self.groups, "partition_for"):
            return CONSUMER_OFFSETS_TOPIC, self.groups.partition_for(group_id)
        return CONSUMER_OFFSETS_TOPIC, partition_for(group_id, int(self.config["offsets.topic.num.partitions"]))

    def add_offsets(self, transactional_id: str, producer_id: int, epoch: int, group_id: str,
                    client_version: int = 0) -> int:
        """handleAddOffsetsToTxn: the group's __consumer_offsets partition joins the transaction."""
        return self.add_partitions(transactional_id, producer_id, epoch, {self.offsets_partition(group_id)},
                                   client_version)

    def check_produce(self, transactional_id: str | None, producer_id: int, epoch: int, topic: str,
                      partition: int) -> int:
        """Kafka's produce-side verification (KIP-890 part 1, transaction.partition.verification.enable):
        a transactional batch is appended only to a partition its transaction added. 0, or the error."""
        if not transactional_id:
            return ErrorCode.INVALID_TXN_STATE
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if epoch < meta.producer_epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if meta.producer_epoch != epoch or meta.state != TxnState.ONGOING or (topic, partition) not in meta.partitions:
            return ErrorCode.INVALID_TXN_STATE
        return 0

    def offsets_producer(self, producer_id: int, epoch: int, group_id: str) -> int | None:
        """What the group's offsets partition says of a TxnOffsetCommit's producer before Kafka asks the
        coordinator (ReplicaManager, UnifiedLog.maybeStartTransactionVerification): INVALID_PRODUCER_EPOCH for
        an epoch older than the one the partition knows; 0 while it has this producer's transaction open at
        this epoch (nothing verified, whatever transactional id the request names); None: verify."""
        try:
            plog = self.logs.get_log(*self.offsets_partition(group_id))
        except KafkaError:
            return None
        entry = plog.producers.producers.get(producer_id)
        if entry is None:
            return None
        if epoch < entry.epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        return 0 if entry.epoch == epoch and producer_id in plog.producers.ongoing else None

    def check_offset_commit(self, transactional_id: str, producer_id: int, epoch: int, group_id: str) -> int:
        """TxnOffsetCommit's producer checks: its id and epoch, and the group's offsets partition in the
        ongoing transaction (AddOffsetsToTxn first), as the offsets log's producer state and Kafka's
        verification would refuse it (the empty id: INVALID_REQUEST, handleVerifyPartitionsInTransaction)."""
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        return self.verify_partitions(transactional_id, producer_id, epoch, {self.offsets_partition(group_id)}
                                      ).popitem()[1]

    # -- EndTxn -------------------------------------------------------------------------------------------
    def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> int:
        """EndTxn of a transaction version 1 client: the error alone (the id and epoch do not change)."""
        return self.end_transaction(transactional_id, producer_id, epoch, commit)[0]

    def end_transaction(self, transactional_id: str, producer_id: int, epoch: int, commit: bool,
                        client_version: int = 0) -> tuple[int, int, int]:
        """TransactionCoordinator.handleEndTransaction: (error, producer id, epoch to go on with). Version 2
        (EndTxn v5+) bumps the epoch; version 1 needs the epoch to match and keeps it."""
        fail = NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        if not transactional_id:
            return (ErrorCode.INVALID_REQUEST, *fail)
        meta = self.txns.get(transactional_id)
        if meta is None:
            return (ErrorCode.INVALID_PRODUCER_ID_MAPPING, *fail)
        if client_version >= 2:
            return self._end_v2(meta, producer_id, epoch, commit, client_version)
        if meta.producer_id != producer_id:
            return (ErrorCode.INVALID_PRODUCER_ID_MAPPING, *fail)
        if meta.producer_epoch != epoch:
            return (ErrorCode.PRODUCER_FENCED, *fail)
        state = meta.state
        if state == TxnState.ONGOING:
            new = meta.copy()
            new.client_version = client_version
            error = self._prepare_end(new, commit)
            return (error, *fail) if error else (0, producer_id, epoch)
        if state == TxnState.COMPLETE_COMMIT and commit or state == TxnState.COMPLETE_ABORT and not commit:
            return 0, producer_id, epoch  # a retry of an EndTxn that completed
        if state == TxnState.PREPARE_COMMIT and commit or state == TxnState.PREPARE_ABORT and not commit:
            return (ErrorCode.CONCURRENT_TRANSACTIONS, *fail)
        return (self._invalid(transactional_id, state, commit), *fail)

    @staticmethod
    def _invalid(transactional_id: str, state: TxnState, commit: bool) -> int:
        log.info("EndTxn(%s) for %s in state %s: INVALID_TXN_STATE", "commit" if commit else "abort",
                 transactional_id, state.kafka_name)
        return ErrorCode.INVALID_TXN_STATE

    def _end_v2(self, meta: TxnMetadata, producer_id: int, epoch: int, commit: bool,
                client_version: int) -> tuple[int, int, int]:
        """TransactionCoordinator.endTransaction for transaction version 2. A retry of an EndTxn that bumped
        the epoch carries the epoch before the bump (or, after an overflow, the previous producer id at
        MAX-1) and is answered with the current id and epoch; with the current epoch it is the next EndTxn:

            state           abort: retry / current     commit: retry / current
            Empty           PRODUCER_FENCED / bump     PRODUCER_FENCED / INVALID_TXN_STATE
            CompleteAbort   ok / bump                  INVALID_TXN_STATE / INVALID_TXN_STATE
            CompleteCommit  INVALID_TXN_STATE / bump   ok / INVALID_TXN_STATE
        """
        fail = NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        state = meta.state
        retry_on_overflow = (meta.previous_producer_id == producer_id and epoch == MAX_EPOCH - 1
                             and meta.producer_epoch == 0)
        retry_on_bump = meta.producer_epoch == epoch + 1
        if state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            valid = retry_on_bump
        elif state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            valid = retry_on_bump or retry_on_overflow or epoch == meta.producer_epoch
        else:
            valid = epoch == meta.producer_epoch
        if meta.producer_id != producer_id and not retry_on_overflow:
            return (ErrorCode.INVALID_PRODUCER_ID_MAPPING, *fail)
        if not valid:
            return (ErrorCode.PRODUCER_FENCED, *fail)
        retry = retry_on_bump or retry_on_overflow
        if state == TxnState.ONGOING:
            return self._end_with_bump(meta, commit, client_version, no_partitions=False)
        if state == TxnState.COMPLETE_COMMIT:
            if commit:
                return (0, meta.producer_id, meta.producer_epoch) if retry else \
                    (self._invalid(meta.transactional_id, state, commit), *fail)
            return (self._invalid(meta.transactional_id, state, commit), *fail) if retry else \
                self._end_with_bump(meta, False, client_version, no_partitions=True)
        if state == TxnState.COMPLETE_ABORT:
            if commit:
                return (self._invalid(meta.transactional_id, state, commit), *fail)
            return (0, meta.producer_id, meta.producer_epoch) if retry else \
                self._end_with_bump(meta, False, client_version, no_partitions=True)
        if state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            same = (state == TxnState.PREPARE_COMMIT) == commit
            return (ErrorCode.CONCURRENT_TRANSACTIONS if same else self._invalid(meta.transactional_id, state, commit),
                    *fail)
        if state == TxnState.EMPTY and not commit:
            return self._end_with_bump(meta, False, client_version, no_partitions=True)
        return (self._invalid(meta.transactional_id, state, commit), *fail)

    def _end_with_bump(self, meta: TxnMetadata, commit: bool, client_version: int,
                       no_partitions: bool) -> tuple[int, int, int]:
        """prepareAbortOrCommit with an epoch bump (a new producer id to move to once the epoch is
        exhausted), the markers written with the bumped epoch, then prepareComplete."""
        new = meta.copy()
        if meta.epoch_exhausted:
            new.next_producer_id = next(self.producer_ids)
        new.producer_epoch, new.last_producer_epoch = meta.producer_epoch + 1, meta.producer_epoch
        new.client_version = client_version
        if no_partitions:  # an abort with nothing added: its start time is now
            new.start_ms, new.partitions = self.clock(), set()
        error = self._prepare_end(new, commit)
        if error:
            return error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        done = self.txns[meta.transactional_id]
        return 0, done.producer_id, done.producer_epoch

    def _prepare_end(self, new: TxnMetadata, commit: bool) -> int:
        new.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        new.last_update_ms = self.clock()
        self._write(new, new.transactional_id)
        self._complete(new)
        return 0

    def _complete(self, meta: TxnMetadata) -> None:
        """Markers to every partition of the transaction (TransactionMarkerChannelManager), the group's
        pending offsets applied or dropped, then CompleteCommit/CompleteAbort logged."""
        commit = meta.state == TxnState.PREPARE_COMMIT
        for topic, partition in sorted(meta.partitions):
            if topic == CONSUMER_OFFSETS_TOPIC:
                continue
            try:
                plog = self.logs.get_log(topic, partition)
                plog.append_control(meta.producer_id, meta.producer_epoch, commit, COORDINATOR_EPOCH, now=self.clock())
            except UnknownTopicOrPartitionError:
                log.info("transactional id %s: %s-%d is gone; no marker written", meta.transactional_id, topic,
                         partition)
            except KafkaError as exc:
                # Kafka retries a marker until it is written or the partition is gone; a refused marker
                # here (an older epoch than the partition knows) cannot become writable by retrying.
                log.warning("transactional id %s: %s marker for %s-%d refused: %s", meta.transactional_id,
                            "commit" if commit else "abort", topic, partition, exc)
        if self.groups is not None:
            # the markers of the offsets partitions: appended by the group coordinator, which owns them
            self.groups.complete_transaction(meta.producer_id, commit, meta.producer_epoch,
                                             {p for t, p in meta.partitions if t == CONSUMER_OFFSETS_TOPIC})
        done = meta.copy()
        done.state = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        done.partitions = set()
        if meta.next_producer_id != NO_PRODUCER_ID:
            # prepareComplete after an overflow: the new id with epoch 0; the last epoch stays MAX-1, the one
            # the client saw
            done.previous_producer_id, done.producer_id = meta.producer_id, meta.next_producer_id
            done.producer_epoch, done.next_producer_id = 0, NO_PRODUCER_ID
        done.last_update_ms = self.clock()
        self._write(done, meta.transactional_id)
        if self.on_markers is not None:
            self.on_markers()

    # -- timers -------------------------------------------------------------------------------------------
    def abort_timed_out(self) -> int:
        """TransactionStateManager.timedOutTransactions + abortTimedOutTransactions: an Ongoing transaction
        older than its transaction.timeout.ms is aborted with a fenced (bumped) epoch. A transaction left in
        PrepareCommit/PrepareAbort because writing its markers failed is completed again (Kafka's marker
        channel retries until the markers are written)."""
        now = self.clock()
        aborted = 0
        for meta in list(self.txns.values()):
            if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                log.info("transactional id %s: completing its %s again", meta.transactional_id, meta.state.kafka_name)
                try:
                    self._complete(meta)
                except Exception:
                    log.exception("transactional id %s: completing its %s failed again", meta.transactional_id,
                                  meta.state.kafka_name)
            elif meta.state == TxnState.ONGOING and meta.start_ms + meta.timeout_ms < now:
                log.info("aborting the transaction of %s (producer %d epoch %d): older than its timeout of %d ms",
                         meta.transactional_id, meta.producer_id, meta.producer_epoch, meta.timeout_ms)
                if not self._fence_and_abort(meta):
                    aborted += 1
        return aborted

    def expire_transactional_ids(self) -> int:
        """TransactionStateManager.removeExpiredTransactionalIds: ids without a transaction, unused for
        transactional.id.expiration.ms, get a tombstone."""
        expiration = int(self.config["transactional.id.expiration.ms"])
        now = self.clock()
        expired = [m for m in self.txns.values() if m.state in ENDED and m.last_update_ms + expiration <= now]
        for meta in expired:
            log.info("transactional id %s expired (unused for %d ms)", meta.transactional_id, expiration)
            self._write(None, meta.transactional_id)
        return len(expired)

    # -- admin --------------------------------------------------------------------------------------------
    def describe(self, transactional_id: str) -> dict:
        """handleDescribeTransactions."""
        out: dict = {"transactional_id": transactional_id, "error_code": 0, "transaction_state": "",
                     "transaction_timeout_ms": 0, "transaction_start_time_ms": -1, "producer_id": -1,
                     "producer_epoch": -1, "topics": []}
        if not transactional_id:
            out["error_code"] = ErrorCode.INVALID_REQUEST
            return out
        meta = self.txns.get(transactional_id)
        if meta is None or meta.state == TxnState.DEAD:
            out["error_code"] = TRANSACTIONAL_ID_NOT_FOUND
            return out
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(meta.partitions):
            by_topic.setdefault(topic, []).append(partition)
        out.update(transaction_state=meta.state.kafka_name, transaction_timeout_ms=meta.timeout_ms,
                   transaction_start_time_ms=meta.start_ms, producer_id=meta.producer_id,
                   producer_epoch=meta.producer_epoch,
                   topics=[{"topic": t, "partitions": ps} for t, ps in by_topic.items()])
        return out

    def list(self, producer_ids: set[int], states: set[str], min_duration_ms: int = -1) -> list[TxnMetadata]:
        """TransactionStateManager.listTransactionStates: filters by producer id, state name and, KIP-994,
        transactions running longer than a duration."""
        now = self.clock()
        out = []
        for meta in self.txns.values():
            if producer_ids and meta.producer_id not in producer_ids:
                continue
            if states and meta.state.kafka_name not in states:
                continue
            if min_duration_ms >= 0 and (meta.state != TxnState.ONGOING or now - meta.start_ms <= min_duration_ms):
                continue
            out.append(meta)
        return out
