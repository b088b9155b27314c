"""Shallow iteration over a buffer of batches, as a `.log` file or a produce/fetch payload holds them."""

from __future__ import annotations

import struct
from collections.abc import Iterator

from chronolog.errors import CorruptMessageError
from chronolog.records.batch import HEADER_SIZE, LOG_OVERHEAD, Record, RecordBatch
from chronolog.records.legacy import V0_MIN, LegacyBatch

AnyBatch = RecordBatch | LegacyBatch


def iter_batches(buffer, position: int = 0, end: int | None = None) -> Iterator[AnyBatch]:
    """Yield each complete batch from `position`; stop silently at a truncated tail (a fetch may end
    mid-batch, a crash may leave one) but raise `CorruptMessageError` for a size or magic that cannot be
    right (`FileLogInputStream.nextBatch`)."""
    buf = buffer if isinstance(buffer, memoryview) else memoryview(buffer)
    limit = len(buf) if end is None else min(end, len(buf))
    pos = position
    while limit - pos >= LOG_OVERHEAD:
        (size,) = struct.unpack_from(">i", buf, pos + 8)
        if size < V0_MIN:
            raise CorruptMessageError(f"batch at position {pos} has size {size}, below the minimum")
        if limit - pos < LOG_OVERHEAD + size or limit - pos < 17:
            return
        magic = buf[pos + 16]
        if magic == 2:
            if size < HEADER_SIZE - LOG_OVERHEAD:
                raise CorruptMessageError(f"v2 batch at position {pos} has size {size}, below the header")
            yield RecordBatch(buf, pos)
        elif magic in (0, 1):
            yield LegacyBatch(buf, pos)
        else:
            raise CorruptMessageError(f"unknown magic {magic} at position {pos}")
        pos += LOG_OVERHEAD + size


class MemoryRecords:
    """A buffer of batches: shallow iteration, the size of its complete prefix, and deep records."""

    def __init__(self, buffer) -> None:
        self.buffer = buffer if isinstance(buffer, memoryview) else memoryview(buffer)

    def batches(self) -> Iterator[AnyBatch]:
        return iter_batches(self.buffer)

    @property
    def valid_bytes(self) -> int:
        return sum(b.size_in_bytes for b in self.batches())

    def records(self) -> Iterator[Record]:
        for batch in self.batches():
            yield from batch.records()

    def __len__(self) -> int:
        return len(self.buffer)
