"""Minimum record timestamps of a segment, per chunk of batches, kept in a sidecar file.

Kafka's indexes know each segment's *largest* timestamp only. A reader that must prove "no record below T
lies after offset O" (the Spark source's exact end offset) needs minima, which otherwise cost a scan of
every record's timestamp delta. The broker already knows each batch's minimum when it validates an append,
so the segment keeps the minima of runs of batches ("chunks", about `CHUNK_BYTES` each) as it grows and
writes them to `<base>.chronolog-minima` when the segment stops being active and on a clean close.

The file is a claim about a *prefix* of the `.log` file, bytes [0, covered_end): appends after it do not
make it wrong, they are scanned by the reader. It is trusted only after validation against the `.log`
file: its own CRC, the segment's base offset, the file being at least `covered_end` long, the header
(base offset, CRC) of every chunk's first batch and of the last covered batch (plus that batch's length,
which must end exactly at `covered_end`). Anything else — a missing, torn, stale or foreign file — makes the
reader scan, which is always exact. A minimum is only ever used as a lower bound, so records that vanish
later (a corrupt range that readers step over) cannot make it wrong; records that appear or change under
a claim are what the header checks catch, and the log's own truncation and deletion remove the file first.

Apache Kafka ignores the file: `LogLoader` only looks at `.log`, `.index`, `.timeindex`, `.txnindex`,
`.snapshot` and the `.deleted` / `.cleaned` / `.swap` suffixes (`LogLoader.loadSegmentFiles`,
`removeTempFilesAndCollectSwapFiles`). A Kafka broker that deletes or rewrites the segment leaves the file
behind; the header checks reject it, and chronolog removes orphans when it opens the directory.

Layout (big-endian, like Kafka's files): magic `CLMN`, version u16, unused u16, base offset i64,
covered_end i64, last batch position i64, last batch base offset i64, last batch length i32 (the
batchLength field + 12), last batch CRC u32, chunk count u32, then per chunk: position i64, first batch
base offset i64, first batch CRC u32, minimum timestamp i64; finally a CRC-32C of everything before it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from chronolog.diskio import pwrite_all
from chronolog.errors import CorruptMessageError, InvalidRecordError, KafkaError
from chronolog.native import load_native
from chronolog.records import AnyBatch, LegacyBatch, crc32c
from chronolog.records.batch import COMPRESSION_MASK

log = logging.getLogger("chronolog.storage.segment")

MINIMA_SUFFIX = ".chronolog-minima"
CHUNK_BYTES = 256 << 10  # a reader refining inside a chunk scans at most this much (plus one append)

_MAGIC = b"CLMN"
_VERSION = 1
_HEAD = struct.Struct(">4sHHqqqqiII")
_CHUNK = struct.Struct(">qqIq")
_CRC = struct.Struct(">I")
_BATCH_START = struct.Struct(">qiibI")  # baseOffset, batchLength, partitionLeaderEpoch, magic, crc


@dataclass(frozen=True, slots=True)
class Chunk:
    position: int
    base_offset: int      # of the chunk's first batch
    crc: int              # of the chunk's first batch (header check)
    min_timestamp: int


@dataclass
class SegmentMinima:
    """Chunk minima of bytes [0, covered_end) of one segment. Built by `add` as whole batches are appended
    (or by a scan), serialised with `to_bytes`, checked against the `.log` file with `matches`."""

    base_offset: int
    chunks: list[Chunk] = field(default_factory=list)
    covered_end: int = 0
    last: tuple[int, int, int, int] | None = None  # position, base offset, size in bytes, CRC of the last batch

    def add_one(self, position: int, header, size: int, min_timestamp: int) -> bool:
        """The append fast path: one v2 batch of `size` bytes whose first bytes (as written) are `header`.
        False when that is not what it is (the caller then tries `add`)."""
        if size < 61 or position != self.covered_end:
            return False
        base, length, _epoch, magic, crc = _BATCH_START.unpack_from(header, 0)
        if size != 12 + length or magic != 2:
            return False
        tail = self.chunks[-1] if self.chunks else None
        if tail is None or position - tail.position >= CHUNK_BYTES:
            self.chunks.append(Chunk(position, base, crc, min_timestamp))
        elif min_timestamp < tail.min_timestamp:
            self.chunks[-1] = Chunk(tail.position, tail.base_offset, tail.crc, min_timestamp)
        self.covered_end = position + size
        self.last = (position, base, size, crc)
        return True

    def add(self, position: int, data: bytes | bytearray | memoryview, min_timestamp: int) -> bool:
        """Account for whole v2 batches `data` appended at `position`, whose records' smallest timestamp is
        `min_timestamp`. False when they cannot be tracked (not contiguous, not v2): the caller drops the
        tracker and readers scan this segment."""
        n = len(data)
        if n >= 61 and position == self.covered_end and self.add_one(position, data, n, min_timestamp):
            return True
        first = last = None
        pos = 0
        while pos < n:
            if n - pos < _BATCH_START.size:
                return False
            base, length, _epoch, magic, crc = _BATCH_START.unpack_from(data, pos)
            size = 12 + length
            if magic != 2 or size < 61 or pos + size > n:
                return False
            if first is None:
                first = (base, crc)
            last = (position + pos, base, size, crc)
            pos += size
        if first is None:
            return position == self.covered_end
        return self.extend(position, first[0], first[1], last, min_timestamp)

    def extend(self, position: int, first_base: int, first_crc: int, last: tuple[int, int, int, int],
               min_timestamp: int) -> bool:
        """Account for the batches from `position` (first batch's base offset and CRC) to the end of
        `last` (position, base offset, size, CRC), whose smallest timestamp is `min_timestamp`."""
        if position != self.covered_end:
            return False
        tail = self.chunks[-1] if self.chunks else None
        if tail is None or position - tail.position >= CHUNK_BYTES:
            self.chunks.append(Chunk(position, first_base, first_crc, min_timestamp))
        elif min_timestamp < tail.min_timestamp:
            self.chunks[-1] = Chunk(tail.position, tail.base_offset, tail.crc, min_timestamp)
        self.covered_end = last[0] + last[2]
        self.last = last
        return True

    def extend_run(self, stop: int, tail_min: int, chunks: list[tuple[int, int, int, int]],
                   last: tuple[int, int, int, int] | None) -> None:
        """Account for a run of batches from `covered_end` to `stop` as `extend` would have, batch by batch:
        the tail chunk's minimum now `tail_min`, then the new `chunks` (position, base offset, CRC,
        minimum); `last` is the run's last batch (None: an empty run). What `_headers.minima_run` returns."""
        if last is None:
            return
        if self.chunks and tail_min != self.chunks[-1].min_timestamp:
            tail = self.chunks[-1]
            self.chunks[-1] = Chunk(tail.position, tail.base_offset, tail.crc, tail_min)
        self.chunks.extend(Chunk(*c) for c in chunks)
        self.covered_end = stop
        self.last = last

    def copy(self) -> SegmentMinima:
        return SegmentMinima(self.base_offset, list(self.chunks), self.covered_end, self.last)

    @property
    def min_timestamp(self) -> int | None:
        return min((c.min_timestamp for c in self.chunks), default=None)

    def truncate(self, size: int, pread) -> bool:
        """Forget everything at or after byte `size` (the segment was truncated there, at a batch
        boundary). A chunk cut in two keeps its minimum, still a lower bound for what is left. False when
        the new last batch cannot be found (the caller drops the tracker)."""
        self.chunks = [c for c in self.chunks if c.position < size]
        self.covered_end = min(self.covered_end, size)
        if not self.chunks:
            self.covered_end, self.last = 0, None
            return size == 0
        pos, last = self.chunks[-1].position, None
        while pos < self.covered_end:
            head = pread(pos, _BATCH_START.size)
            if len(head) < _BATCH_START.size:
                return False
            base, length, _epoch, magic, crc = _BATCH_START.unpack(head)
            if magic != 2 or length < 49:
                return False
            last = (pos, base, 12 + length, crc)
            pos += 12 + length
        if pos != self.covered_end or last is None:
            return False
        self.last = last
        return True

    # -- the file -----------------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        last = self.last or (0, 0, 0, 0)
        out = bytearray(_HEAD.pack(_MAGIC, _VERSION, 0, self.base_offset, self.covered_end, last[0], last[1],
                                   last[2], last[3], len(self.chunks)))
        for c in self.chunks:
            out += _CHUNK.pack(c.position, c.base_offset, c.crc, c.min_timestamp)
        out += _CRC.pack(crc32c(out))
        return bytes(out)

    @classmethod
    def from_bytes(cls, raw: bytes, base_offset: int) -> SegmentMinima | None:
        """None for anything that is not a whole, self-consistent file for this base offset."""
        if len(raw) < _HEAD.size + _CRC.size or _CRC.unpack_from(raw, len(raw) - 4)[0] != crc32c(raw[:-4]):
            return None
        magic, version, _unused, base, covered_end, lpos, lbase, lsize, lcrc, count = _HEAD.unpack_from(raw, 0)
        if magic != _MAGIC or version != _VERSION or base != base_offset:
            return None
        if len(raw) != _HEAD.size + count * _CHUNK.size + _CRC.size:
            return None
        chunks = [Chunk(*fields) for fields in _CHUNK.iter_unpack(raw[_HEAD.size:len(raw) - 4])]
        if (count == 0) != (covered_end == 0):
            return None
        last = (lpos, lbase, lsize, lcrc) if count else None
        if last is not None and lpos + lsize != covered_end:
            return None
        positions = [c.position for c in chunks]
        if positions != sorted(set(positions)) or (chunks and (positions[0] != 0 or positions[-1] > lpos)):
            return None
        return cls(base_offset, chunks, covered_end, last)

    def matches(self, pread, log_size: int) -> bool:
        """Whether the `.log` file (read through `pread`, `log_size` bytes) still holds the batches this
        claim was made about: the first batch of every chunk and the last covered batch, same base
        offsets and CRCs at the same positions."""
        if log_size < self.covered_end:
            return False
        checks = [(c.position, c.base_offset, c.crc, None) for c in self.chunks]
        if self.last is not None:
            checks.append((self.last[0], self.last[1], self.last[3], self.last[2]))
        for pos, base, crc, size in checks:
            head = pread(pos, _BATCH_START.size)
            if len(head) < _BATCH_START.size:
                return False
            h = _BATCH_START.unpack(head)
            if h[0] != base or h[4] != crc or h[3] != 2 or (size is not None and 12 + h[1] != size):
                return False
        return True


def minima_path(directory: Path, base_offset: int) -> Path:
    return Path(directory) / f"{base_offset:020d}{MINIMA_SUFFIX}"


def write_minima(path: Path, minima: SegmentMinima) -> None:
    """Write the sidecar over the old one in place. Not fsynced, not renamed: the file's own CRC covers
    every byte, so a file torn by a crash or read half-rewritten fails it and readers scan instead, as for a
    missing one. A temporary file renamed over the old one (or the old one removed first) frees the old
    file's blocks, which on a file system mounted with online discard costs milliseconds per file: most of
    a clean stop of thousands of partitions. A failed write removes the file: none is claimed."""
    data = minima.to_bytes()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    except OSError as exc:
        exc.filename = exc.filename or str(path)
        raise
    try:
        pwrite_all(fd, data, 0, path)
        if os.fstat(fd).st_size > len(data):
            os.ftruncate(fd, len(data))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    finally:
        os.close(fd)


def read_minima(path: Path, base_offset: int, pread, log_size: int) -> SegmentMinima | None:
    """The sidecar of a segment if it exists and still describes the `.log` file; None otherwise."""
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    found = SegmentMinima.from_bytes(raw, base_offset)
    if found is None or not found.matches(pread, log_size):
        return None
    return found


# -- a segment's minima (`LogSegment`'s base class SegmentMinimaTracking) -----------------------------
# `_headers.minima_run` (C): `_extend_by_scan`'s walk over uncompressed v2 batches, with `scan_timestamps` (C)
# reading their records as `RecordBatch.scan_timestamps` does.
_native_minima_run = load_native("chronolog.storage._headers", "minima_run")
_native_scan = load_native("chronolog.records._walk", "scan_timestamps")

_NO_TS = -(2**63)  # a batch whose timestamps cannot be read: lower than anything, so nothing is proven past it
_NO_RECORDS = 2**63 - 1  # a batch without records (compaction can leave one): no record is below anything


class MinEntry(NamedTuple):
    """Bytes [position, end) of a segment, from the batch based at `first_offset`, whose records are all
    at or after `min_timestamp`; `batches` is 1 for a single batch, 0 for a chunk of one or more."""

    position: int
    end: int
    first_offset: int
    min_timestamp: int
    batches: int


def _batch_min(batch: AnyBatch) -> int | None:
    """Smallest timestamp a reader sees in the batch; None when it has no records."""
    if isinstance(batch, LegacyBatch):
        return min((r.timestamp for r in batch.records()), default=None)
    if batch.records_count <= 0:
        return None
    if batch.timestamp_type == 1:
        return batch.max_timestamp  # LogAppendTime: every record reads as the batch's max timestamp
    try:
        return batch.scan_timestamps()[0]
    except (InvalidRecordError, CorruptMessageError, KafkaError):
        return _NO_TS


class ReaderMinimaCache:
    """Minima that read-only segments scanned, kept by file so that a planner that queries the same files
    again does not scan them again; validated like a sidecar before use. Bounded by chunks held, least
    recently used first out. One per owner of logs (`storage.time_lookup.LogCaches`)."""

    MAX_CHUNKS = 1 << 18  # ~64 GiB of segments remembered, some tens of MB

    def __init__(self) -> None:
        self._minima: OrderedDict[tuple, SegmentMinima] = OrderedDict()
        self._lock = threading.Lock()
        self._chunks = 0

    def remember(self, seg: SegmentMinimaTracking, minima: SegmentMinima) -> None:
        with self._lock:
            key = seg._reader_key()
            old = self._minima.pop(key, None)
            if old is not None:
                self._chunks -= len(old.chunks)
            self._minima[key] = minima
            self._chunks += len(minima.chunks)
            while self._chunks > self.MAX_CHUNKS and len(self._minima) > 1:
                _key, dropped = self._minima.popitem(last=False)
                self._chunks -= len(dropped.chunks)

    def best(self, seg: SegmentMinimaTracking, from_file: SegmentMinima | None) -> SegmentMinima | None:
        """The sidecar or what was scanned before, whichever covers more and still matches."""
        if seg.writable:
            return from_file
        with self._lock:
            key = seg._reader_key()
            cached = self._minima.get(key)
            if cached is not None:
                self._minima.move_to_end(key)
        if cached is not None and (from_file is None or cached.covered_end > from_file.covered_end) \
                and cached.matches(seg.pread, seg.size):
            return cached
        return from_file


STANDALONE_READER_MINIMA = ReaderMinimaCache()  # for segments of logs opened outside a log manager


class SegmentMinimaTracking:
    """The minima side of `LogSegment` (its base class): tracking the minima of a writable segment as it
    grows, its sidecar file, and the minima a reader gets (`time_minima`). Uses the segment's `dir`,
    `base_offset`, `size`, `writable`, `pread`, `batches_from` and `corrupt_ranges`."""

    reader_minima: ReaderMinimaCache = STANDALONE_READER_MINIMA
    _minima: SegmentMinima | None = None   # writable segments: chunk minima tracked as batches are appended
    _minima_on_disk = False                # the sidecar file says what `_minima` says
    _minima_view: tuple[int, list[MinEntry]] | None = None

    def min_timestamp(self) -> int | None:
        """Smallest record timestamp in the segment (None when empty). It lets a reader prove that no
        record below a time lies after some offset, which the max-based time index cannot; see
        `time_minima`."""
        entries = self.time_minima()
        return min((e.min_timestamp for e in entries), default=None)

    @property
    def minima_path(self) -> Path:
        return minima_path(self.dir, self.base_offset)

    def start_minima(self, *, rebuild: bool = False) -> None:
        """Begin tracking minima of a writable segment: an empty one starts empty; an existing one takes
        its sidecar when it still matches the file (scanning any tail it does not cover), or with `rebuild`
        (after recovery) scans the whole segment. Otherwise the segment stays untracked and gets no
        sidecar: readers scan it, which is exact."""
        if self.size == 0:
            self._minima, self._minima_on_disk = SegmentMinima(self.base_offset), False
            self.minima_path.unlink(missing_ok=True)
            return
        if rebuild:
            self.minima_path.unlink(missing_ok=True)  # written again from the scan (roll, clean close)
        found = None if rebuild else read_minima(self.minima_path, self.base_offset, self.pread, self.size)
        if found is None and not rebuild:
            self._minima = None
            return
        on_disk = found is not None and found.covered_end == self.size
        self._minima = self._extend_by_scan(found or SegmentMinima(self.base_offset))
        self._minima_on_disk = on_disk and self._minima is not None

    def resume_minima(self) -> None:
        """`start_minima` for a segment that is becoming the active one (at open, or after truncation
        made an inactive segment the last), unless it already tracks them."""
        if self._minima is None:
            self.start_minima()

    def _extend_by_scan(self, minima: SegmentMinima) -> SegmentMinima | None:
        """`minima` extended over the batches after its covered end, read from the file; None when they
        cannot be described (legacy batches, corruption)."""
        if self.corrupt_ranges:
            return None
        native = _native_minima_run if self._fd >= 0 and _native_scan is not None else None
        while minima.covered_end < self.size:
            if native is not None:  # the uncompressed batches in C, up to one it leaves to the loop below
                tail = minima.chunks[-1] if minima.chunks else None
                minima.extend_run(*native(self._fd, minima.covered_end, self.size, CHUNK_BYTES, _native_scan,
                                          -1 if tail is None else tail.position,
                                          0 if tail is None else tail.min_timestamp))
                if minima.covered_end >= self.size:
                    break
            for pos, batch in self.batches_from(minima.covered_end, resync=False):
                if isinstance(batch, LegacyBatch):
                    return None
                low = _batch_min(batch)
                last = (pos, batch.base_offset, batch.size_in_bytes, batch.crc)
                if not minima.extend(pos, batch.base_offset, batch.crc, last, _NO_RECORDS if low is None else low):
                    return None
                if native is not None and not batch.attributes & COMPRESSION_MASK:
                    break  # back to C (a run of compressed batches stays here)
            else:
                break  # nothing more can be read
        return minima if minima.covered_end == self.size else None

    def write_minima(self) -> None:
        """Persist the tracked minima (at roll, recovery and clean close); a no-op when untracked, when the
        file already says the same, or for read-only segments."""
        if not self.writable or self._minima is None or self._minima_on_disk:
            return
        if self._minima.covered_end != self.size:
            self._minima = None  # bytes reached the file some other way: stop claiming anything
            self.minima_path.unlink(missing_ok=True)
            return
        try:
            write_minima(self.minima_path, self._minima)
            self._minima_on_disk = True
        except OSError as exc:  # a missing sidecar costs readers a scan, never an answer
            log.warning("segment %s: cannot write %s: %s", self.log_path, self.minima_path.name, exc)

    def drop_minima_file(self) -> None:
        """Remove the sidecar before the file shrinks (truncation), so no crash leaves a claim about bytes
        that are gone."""
        if self.writable:
            self.minima_path.unlink(missing_ok=True)
            self._minima_on_disk = False
        self._minima_view = None

    def truncate_minima(self) -> None:
        """After truncation to `self.size`: keep the minima of what is left (a cut chunk keeps its
        minimum, still a lower bound)."""
        if self._minima is not None and not self._minima.truncate(self.size, self.pread):
            self._minima = None
        self._minima_on_disk = False
        self._minima_view = None

    def time_minima(self) -> list[MinEntry]:
        """The segment's bytes as consecutive runs with the smallest record timestamp of each: chunks from
        the tracked minima or the validated sidecar, then one entry per batch for the tail they do not
        cover. Read-only segments also remember a scanned tail in this process (validated like a sidecar),
        so a planner that queries the same files again does not scan them again."""
        view = self._minima_view
        if view is not None and view[0] == self.size:
            return view[1]
        known = self._minima
        if known is None or known.covered_end > self.size:
            known = self.reader_minima.best(self, self._read_sidecar())
        entries: list[MinEntry] = []
        if known is not None:
            # (no chunks: every batch is empty, as the log cleaner leaves some: nothing to describe)
            ends = [c.position for c in known.chunks[1:]] + ([known.covered_end] if known.chunks else [])
            entries = [MinEntry(c.position, end, c.base_offset, c.min_timestamp, 0)
                       for c, end in zip(known.chunks, ends, strict=True)]
        start = known.covered_end if known is not None else 0
        grown = None if self.writable else known.copy() if known is not None else SegmentMinima(self.base_offset)
        for pos, batch in self.batches_from(start):
            low = _batch_min(batch)
            if low is not None:
                entries.append(MinEntry(pos, pos + batch.size_in_bytes, batch.base_offset, low, 1))
            if grown is not None and (isinstance(batch, LegacyBatch) or not grown.extend(
                    pos, batch.base_offset, batch.crc, (pos, batch.base_offset, batch.size_in_bytes, batch.crc),
                    _NO_RECORDS if low is None else low)):
                grown = None
        if grown is not None and not self.corrupt_ranges and grown.covered_end > start:
            self.reader_minima.remember(self, grown)
        self._minima_view = (self.size, entries)
        return entries

    def _read_sidecar(self) -> SegmentMinima | None:
        return read_minima(self.minima_path, self.base_offset, self.pread, self.size)

    def _reader_key(self) -> tuple:
        """Names this segment's file in the cache of scanned minima (`ReaderMinimaCache`)."""
        st = os.fstat(self._fd)
        return (str(self.log_path), st.st_dev, st.st_ino, self.base_offset)

    def batch_minima(self, position: int, end: int) -> Iterator[tuple[int, int]]:
        """(base offset, smallest timestamp) of each batch in bytes [position, end), last batch first;
        a batch's records are scanned only when the caller gets that far."""
        batches = [batch for _pos, batch in self.batches_from(position, end)]
        for batch in reversed(batches):
            low = _batch_min(batch)
            if low is not None:
                yield batch.base_offset, low
