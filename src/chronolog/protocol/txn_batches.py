"""What the Produce path needs to know of a transactional batch, read from its header alone, and the
transaction version this broker finalizes."""

from __future__ import annotations

import struct

_BATCH_HEAD = struct.Struct(">qiibIhiqqqhii")  # the v2 record batch header, 61 bytes

# The `transaction.version` feature level ApiVersions finalizes (KIP-890 part 2, Kafka's TransactionVersion):
# 2 is an epoch bump at the end of every transaction and partitions added by Produce v12+ / TxnOffsetCommit
# v5+; a Java 4.x producer uses it only when it sees it finalized.
TRANSACTION_VERSION = 2
TRANSACTION_VERSION_FEATURE = "transaction.version"
# Produce v12+ and TxnOffsetCommit v5+ add their partitions to the transaction themselves
# (AddPartitionsToTxnManager.produceRequestVersionToTransactionSupportedOperation: ADD_PARTITION).
PRODUCE_ADDS_PARTITIONS = 12
TXN_OFFSET_COMMIT_ADDS_PARTITION = 5
END_TXN_BUMPS_EPOCH = 5  # TransactionVersion.transactionVersionForEndTxn: v5+ is transaction version 2


def transactional_batch(records: bytes | memoryview | None) -> tuple[int, int] | None:
    """(producer id, epoch) when a Produce partition's records are a transactional v2 batch, else None
    (ProduceRequest.hasTransactionalRecords looks at each batch's isTransactional bit)."""
    if not records or len(records) < _BATCH_HEAD.size:
        return None
    h = _BATCH_HEAD.unpack_from(records, 0)
    if h[3] != 2 or not h[5] & 0x10:
        return None
    return h[9], h[10]
