"""What the Produce path needs to know of a transactional batch, read from its header alone."""

from __future__ import annotations

import struct

_BATCH_HEAD = struct.Struct(">qiibIhiqqqhii")  # the v2 record batch header, 61 bytes


def transactional_batch(records: bytes | memoryview | None) -> tuple[int, int] | None:
    """(producer id, epoch) when a Produce partition's records are a transactional v2 batch, else None
    (ProduceRequest.hasTransactionalRecords looks at each batch's isTransactional bit)."""
    if not records or len(records) < _BATCH_HEAD.size:
        return None
    h = _BATCH_HEAD.unpack_from(records, 0)
    if h[3] != 2 or not h[5] & 0x10:
        return None
    return h[9], h[10]
