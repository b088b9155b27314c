"""The offset map of the log cleaner: Kafka's `SkimpyOffsetMap` (key hash -> the key's last offset, bounded by
`log.cleaner.dedupe.buffer.size`), in C (records/_clean.c) where the extension is built and not switched
off, else in Python. Both maps hold the same offsets (without a hash collision), so both cleanings keep
the same records."""

from __future__ import annotations

import hashlib
import os
import sys

from chronolog.errors import KafkaError
from chronolog.native import load_native
from chronolog.records.batch import record_spans
from chronolog.records.compression import compress, decompress

_native = load_native("chronolog.records._clean")
_ENTRY_BYTES = 24  # SkimpyOffsetMap: a 16-byte MD5 and an 8-byte offset per slot
# What the C map's chunk walks (`map_chunk`, `filter_chunk`) say when they stop (records/_clean.c)
MORE, PYTHON, BUDGET, END, FULL = range(5)


class OffsetMap:
    """Kafka's `SkimpyOffsetMap`: MD5 of each key -> the last offset seen for it, sized by memory
    (`log.cleaner.dedupe.buffer.size` / 24 bytes a slot) and filled to `load_factor` of its slots."""

    def __init__(self, memory: int, load_factor: float = 0.9) -> None:
        self.slots = memory // _ENTRY_BYTES
        self.max_entries = int(self.slots * load_factor)
        if self.max_entries < 1:
            raise KafkaError("offset map is too small to fit in even a single message: increase "
                             "log.cleaner.dedupe.buffer.size")
        self._map: dict[bytes, int] = {}
        self.latest_offset = -1
        self.peak_bytes = 0

    def __len__(self) -> int:
        return len(self._map)

    @property
    def full(self) -> bool:
        return len(self._map) >= self.max_entries

    def put(self, key: bytes, offset: int) -> None:
        self._map[hashlib.md5(key).digest()] = offset
        self.latest_offset = offset

    def put_digest(self, digest: bytes, offset: int) -> None:
        self._map[digest] = offset
        self.latest_offset = offset

    def get_digest(self, digest: bytes) -> int:
        return self._map.get(digest, -1)

    def get(self, key: bytes) -> int:
        return self._map.get(hashlib.md5(key).digest(), -1)

    def clear(self) -> None:
        self._note_memory()
        self._map.clear()
        self.latest_offset = -1

    def _note_memory(self) -> None:
        # The dict, its 16-byte digests (49 bytes as Python objects) and the offsets (small ints are
        # shared, the others 32 bytes each).
        used = sys.getsizeof(self._map) + len(self._map) * (49 + 32)
        self.peak_bytes = max(self.peak_bytes, used)

    @property
    def utilization(self) -> float:
        return len(self._map) / self.slots if self.slots else 0.0

    def map_body(self, body, count: int, base: int, start: int) -> tuple[bool, int]:
        return map_records(self, body, count, base, start)

    def kept_spans(self, body, count: int, base: int, retain_deletes: bool) -> tuple[int, list, bool]:
        return kept_records(self, body, count, base, retain_deletes)


def map_records(omap, body, count: int, base: int, start: int) -> tuple[bool, int]:
    """Puts the keyed records at or after `start` of a records section into `omap`; (the map filled,
    records mapped before it did). The C map's `map_body` does the same; the walk's error for a bad body."""
    mapped = 0
    for off_delta, _t, _s, _e, kstart, klen, _vl in record_spans(body, count):
        if klen >= 0 and base + off_delta >= start:
            if omap.full:
                return True, mapped
            omap.put(bytes(body[kstart:kstart + klen]), base + off_delta)
        mapped += 1
    return False, mapped


def kept_records(omap, body, count: int, base: int, retain_deletes: bool) -> tuple[int, list, bool]:
    """(records, the spans of those that stay, whether a tombstone stays) of a records section: a record
    stays when it is past the map or the last of its key (a tombstone only while `retain_deletes`); a
    record without a key goes. The C map's `kept_spans` does the same."""
    spans = record_spans(body, count)
    latest = omap.latest_offset
    kept = []
    tombstones = False
    for span in spans:
        offset = base + span[0]
        klen, vlen = span[5], span[6]
        if offset > latest:
            keep = True
        elif klen < 0:
            keep = False
        else:
            keep = offset >= omap.get(bytes(body[span[4]:span[4] + klen])) and (vlen >= 0 or retain_deletes)
        if keep:
            kept.append(span)
            tombstones = tombstones or vlen < 0
    return len(spans), kept, tombstones


def new_offset_map(memory: int, load_factor: float = 0.9, native: bool | None = None):
    """The C map (128-bit hashes in an open-addressing table bounded by `memory`) where the extension loads
    and `native` is not False, else the Python one (MD5 -> offset in a dict)."""
    if native is False or _native is None:
        if native:
            raise KafkaError("the log cleaner's C extension is not built")
        return OffsetMap(memory, load_factor)
    if int(memory // _ENTRY_BYTES * load_factor) < 1:
        raise KafkaError("offset map is too small to fit in even a single message: increase "
                         "log.cleaner.dedupe.buffer.size")
    omap = _native.OffsetMap(memory, load_factor, int.from_bytes(os.urandom(8), "little"))
    # compressed batches in C too, through the records layer's codecs (the same limits, errors and bytes
    # as the Python path)
    omap.set_codecs(decompress, compress)
    return omap


def note_memory(omap) -> None:
    """The Python map's peak memory, noted (the C map notes its own)."""
    if isinstance(omap, OffsetMap):
        omap._note_memory()
