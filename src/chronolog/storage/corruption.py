"""Corruption inside a segment, as opposed to a torn tail.

Kafka's `LogLoader` treats the first invalid batch of a segment it recovers as the end of the log: it truncates
there and deletes every later segment. With replication that is safe (followers fetch the rest again from the
leader); on a single node it would throw away acknowledged data that is intact on disk. chronolog instead
resynchronises on the next batch that is fully valid, remembers the bytes in between as a `CorruptRange` with
the offsets they held, logs it, and keeps serving everything else. Readers skip the range as they skip the
offset gaps of a compacted topic. Only a tail with nothing valid after it is truncated (a torn write).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from chronolog.errors import ChronologError
from chronolog.records.batch import HEADER_SIZE, LOG_OVERHEAD, RecordBatch

_MAGIC_AT = 16
_SEARCH_CHUNK = 4 << 20
_MAX_BATCH = 0x7FFFFFFF


@dataclass(frozen=True)
class CorruptRange:
    """Bytes [start, end) of a segment that hold no valid batch; they covered offsets
    [first_offset, last_offset] (empty when first_offset > last_offset: garbage that held no offsets)."""

    segment_base: int
    start: int
    end: int
    first_offset: int
    last_offset: int

    def describe(self) -> str:
        offsets = (f"offsets {self.first_offset}-{self.last_offset}" if self.first_offset <= self.last_offset
                   else "no offsets")
        return (f"segment {self.segment_base:020d}.log bytes {self.start}-{self.end} "
                f"({self.end - self.start} bytes, {offsets}) are corrupt")


def find_next_valid_batch(pread: Callable[[int, int], bytes], start: int, size: int, min_offset: int,
                          max_offset: int) -> tuple[int, RecordBatch] | None:
    """The first position >= `start` holding a complete v2 batch with a matching CRC whose offsets lie in
    [min_offset, max_offset]; None when there is none before `size`.

    Candidates are found by the magic byte and filtered by length and base offset before the CRC is
    computed, so a zero-filled hole or random garbage is crossed at C speed."""
    pos = start
    while pos + HEADER_SIZE <= size:
        chunk_end = min(size, pos + _SEARCH_CHUNK + HEADER_SIZE)
        chunk = pread(pos, chunk_end - pos)
        limit = len(chunk) - HEADER_SIZE  # last candidate index whose header fits in this chunk
        j = _MAGIC_AT
        while True:
            j = chunk.find(b"\x02", j)
            cand = j - _MAGIC_AT
            if j < 0 or cand > limit:
                break
            found = _candidate(pread, chunk, cand, pos + cand, size, min_offset, max_offset)
            if found is not None:
                return pos + cand, found
            j += 1
        pos += max(1, limit + 1)
    return None


def _candidate(pread, chunk: bytes, i: int, position: int, size: int, min_offset: int,
               max_offset: int) -> RecordBatch | None:
    base_offset, length = struct.unpack_from(">qi", chunk, i)
    total = LOG_OVERHEAD + length
    if length < HEADER_SIZE - LOG_OVERHEAD or length > _MAX_BATCH or position + total > size:
        return None
    if not min_offset <= base_offset <= max_offset:
        return None
    data = chunk[i:i + total] if i + total <= len(chunk) else pread(position, total)
    try:
        batch = RecordBatch(data, 0)
        batch.validate()
    except ChronologError:
        return None
    if batch.last_offset > max_offset:
        return None
    return batch


def verify_segment(segment) -> tuple[list[CorruptRange], int]:
    """Check every batch of a segment (sizes, magic, CRC, offsets) without changing anything: the corrupt
    ranges found, and the size of a torn tail (bytes recovery would truncate; only in the last segment)."""
    base = segment.base_offset
    ranges = list(segment.corrupt_ranges)
    expected, valid, start = base, 0, 0
    while True:
        try:
            for pos, batch in segment.batches_from(start, resync=False):
                batch.validate()
                if not 0 <= batch.last_offset - base <= _MAX_BATCH:
                    raise ChronologError(f"offset {batch.last_offset} outside segment {base}")
                valid = pos + batch.size_in_bytes
                expected = max(expected, batch.last_offset + 1)
        except ChronologError:
            pass
        if valid >= segment.size:
            return sorted(set(ranges), key=lambda r: r.start), 0
        known = next((r for r in ranges if r.start == valid), None)
        if known is not None:
            start = valid = known.end
            continue
        nxt = find_next_valid_batch(segment.pread, valid + 1, segment.size, expected, base + _MAX_BATCH)
        if nxt is None:
            if segment.is_last:
                return sorted(set(ranges), key=lambda r: r.start), segment.size - valid
            ranges.append(CorruptRange(base, valid, segment.size, expected, segment._offset_limit_after - 1))
            return sorted(set(ranges), key=lambda r: r.start), 0
        ranges.append(CorruptRange(base, valid, nxt[0], expected, nxt[1].base_offset - 1))
        start = valid = nxt[0]


# -- spans of a segment already checked (headers or CRCs), so that no reader checks them again --------
def span_end(spans, position: int) -> int:
    """The end of the span of `spans` (sorted, apart) holding `position`; -1 when none does."""
    for a, b in spans:
        if a <= position <= b:
            return b
        if a > position:
            break
    return -1


def add_span(spans, start: int, end: int, most: int) -> list[list[int]]:
    """`spans` with [start, end) merged in; beyond `most` spans the shortest is forgotten."""
    out = []
    for a, b in spans:
        if b < start or a > end:  # apart from [start, end)
            out.append([a, b])
        else:  # touching or overlapping: one span
            start, end = min(a, start), max(b, end)
    out.append([start, end])
    out.sort()
    if len(out) > most:
        out.remove(min(out, key=lambda s: s[1] - s[0]))
    return out
