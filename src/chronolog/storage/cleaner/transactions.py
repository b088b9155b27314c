"""The cleaner's transaction rules (Kafka's `CleanedTransactionMetadata`): records of aborted transactions
go at once, and markers go once their transaction has nothing left in the log."""

from __future__ import annotations

import heapq

from chronolog.records import RecordBatch
from chronolog.records.control import ControlType, control_type_of
from chronolog.storage.txnindex import AbortedTxn


class _AbortedMeta:
    __slots__ = ("txn", "last_observed")

    def __init__(self, txn: AbortedTxn) -> None:
        self.txn = txn
        self.last_observed: int | None = None


class CleanedTransactionMetadata:
    """Kafka's `CleanedTransactionMetadata`: which batches belong to aborted transactions (discarded), and
    which markers may go (a COMMIT whose transaction has no batch left, an ABORT once its batches are
    gone). Retained aborted transactions are written to the cleaned segment's `.txnindex`."""

    def __init__(self) -> None:
        self.ongoing_committed: set[int] = set()
        self.ongoing_aborted: dict[int, _AbortedMeta] = {}
        self._aborted: list[tuple[int, int, AbortedTxn]] = []
        self._seq = 0
        self.cleaned_index: list[AbortedTxn] | None = None

    def add_aborted(self, txns: list[AbortedTxn]) -> None:
        for txn in txns:
            self._seq += 1
            heapq.heappush(self._aborted, (txn.first_offset, self._seq, txn))

    def consume_up_to(self, offset: int) -> None:
        """The aborted transactions that start at or before `offset` become ongoing (read up to there)."""
        while self._aborted and self._aborted[0][0] <= offset:
            txn = heapq.heappop(self._aborted)[2]
            self.ongoing_aborted.setdefault(txn.producer_id, _AbortedMeta(txn))

    def on_control_batch(self, batch: RecordBatch) -> bool:
        """True when the control batch can be discarded (`onControlBatchRead`)."""
        self.consume_up_to(batch.last_offset)
        first = next(iter(batch.records()), None)
        if first is None:
            return True  # an empty control batch was already cleaned
        kind = control_type_of(first.key)
        pid = batch.producer_id
        if kind == ControlType.ABORT:
            meta = self.ongoing_aborted.pop(pid, None)
            if meta is not None and meta.last_observed is not None:
                if self.cleaned_index is not None:
                    self.cleaned_index.append(meta.txn)
                return False
            return True
        if kind == ControlType.COMMIT:
            if pid in self.ongoing_committed:
                self.ongoing_committed.discard(pid)
                return False
            return True
        return False

    def on_batch(self, batch: RecordBatch) -> bool:
        """True when the data batch belongs to an aborted transaction (`onBatchRead`)."""
        self.consume_up_to(batch.last_offset)
        if not batch.is_transactional:
            return False
        meta = self.ongoing_aborted.get(batch.producer_id)
        if meta is not None:
            meta.last_observed = batch.last_offset
            return True
        self.ongoing_committed.add(batch.producer_id)
        return False


