"""A segment's recovery: one pass over its `.log` that rebuilds both indexes and, when recovering,
validates every batch and cuts a torn tail (Kafka's `LogSegment.recover` and `sanityCheck`). The base class
of `storage.segment.LogSegment`, as `storage.minima.SegmentMinimaTracking` is: it uses the segment's files,
`batches_from`, `pread` and `_record_corrupt`.
"""

from __future__ import annotations

import logging
import os

from chronolog.errors import CorruptMessageError, InvalidRecordError, KafkaError
from chronolog.native import load_native
from chronolog.storage.corruption import find_next_valid_batch
from chronolog.storage.index import IndexCorruptError, TimestampOffset

log = logging.getLogger("chronolog.storage.segment")  # the segment's own logger: its lines keep their name


class SegmentRecovery:
    """Recovery of a `LogSegment` (its base class): `sanity_check`, `rebuild_indexes`, `recover`."""

    def sanity_check(self) -> None:
        self.offset_index.sanity_check()
        self.time_index.sanity_check()
        if self.offset_index.entries and self.offset_index.last_entry().position > self.size:
            raise IndexCorruptError(f"index {self.offset_index.path} points past the end of the log")

    def rebuild_indexes(self) -> int:
        """Rebuild both indexes from the log without truncating anything; returns the valid bytes."""
        return self._scan(truncate=False)

    def recover(self) -> int:
        """Validate every batch, rebuild the indexes and truncate a torn tail (`LogSegment.recover`).
        Corruption followed by valid batches is kept and recorded in `corrupt_ranges` instead of ending
        the log there (see `storage.corruption`); a segment that is not the last is never truncated.
        Returns the number of bytes truncated."""
        valid = self._scan(truncate=True)
        if valid < self.size and not self.is_last:
            self._record_corrupt(valid, self.size, self._scan_next_offset, self._offset_limit_after - 1)
            return 0
        truncated = self.size - valid
        if truncated > 0:
            log.warning("segment %s: truncating %d invalid bytes at position %d", self.log_path, truncated, valid)
            os.ftruncate(self._fd, valid)
            self.size = valid
        if not self.corrupt_ranges:  # every batch was validated
            self._checked = [[0, valid]]
        return truncated

    def _scan(self, truncate: bool) -> int:
        """One pass over the log: rebuild both indexes and return the end of the last valid batch. With
        `truncate` (recovery) every batch is validated and invalid bytes followed by a valid batch are
        recorded as a corrupt range and stepped over."""
        self._rebuild_needed = False
        self.offset_index.reset()
        self.time_index.reset()
        self.corrupt_ranges = []
        self._max_ts = TimestampOffset(-1, -1)
        valid = 0
        last_entry = 0
        expected = self.base_offset
        start = 0
        native = _native_clean_run if truncate and self.time_index_style != "max_record" and self._fd >= 0 else None
        while True:
            if native is not None:
                # The valid v2 batches from `start`, walked in C with the same checks and bookkeeping as the
                # loop below; the loop carries on from where C stopped (anything C does not judge itself).
                oi, ti = self.offset_index, self.time_index
                stop, last_entry, max_ts, max_off, expected, points = native(
                    self._fd, start, self.size, self.base_offset, self.index_interval_bytes, last_entry,
                    self._max_ts.timestamp, self._max_ts.offset, expected,
                    oi.max_entries - oi.entries, ti.max_entries - 1 - ti.entries)
                for last_offset, position, ts, off in points:
                    self.offset_index.append(last_offset, position)
                    self.time_index.maybe_append(ts, off)
                if stop > start:
                    self._max_ts = TimestampOffset(max_ts, max_off)
                    start = valid = stop
            try:
                for pos, batch in self.batches_from(start, resync=False):
                    if truncate:
                        batch.validate()
                    if not 0 <= batch.last_offset - self.base_offset <= 0x7FFFFFFF:
                        raise CorruptMessageError(f"offset {batch.last_offset} outside segment {self.base_offset}")
                    if batch.base_offset < expected and truncate:
                        # Offsets only grow in a segment; a batch going back could only be damage, and its
                        # timestamps must not become the running max (every later index entry would fail).
                        raise CorruptMessageError(f"batch offsets {batch.base_offset}-{batch.last_offset} go back "
                                                  f"before {expected}")
                    max_ts = self._max_ts
                    if batch.max_timestamp > max_ts.timestamp:
                        max_ts = TimestampOffset(batch.max_timestamp, self._index_offset_for(batch))
                    if pos - last_entry > self.index_interval_bytes:
                        self.offset_index.append(batch.last_offset, pos)
                        self.time_index.maybe_append(max_ts.timestamp, max_ts.offset)
                        last_entry = pos
                    self._max_ts = max_ts  # (a batch whose index entries were refused is invalid: not counted)
                    valid = pos + batch.size_in_bytes
                    expected = max(expected, batch.last_offset + 1)
            except (CorruptMessageError, InvalidRecordError, KafkaError) as exc:
                if not truncate:
                    raise
                log.warning("segment %s: invalid batch at position %d: %s", self.log_path, valid, exc)
            if not truncate or valid >= self.size:
                break
            nxt = find_next_valid_batch(self.pread, valid + 1, self.size, expected,
                                        self.base_offset + 0x7FFFFFFF)
            if nxt is None:
                break  # nothing valid follows: a torn tail
            self._record_corrupt(valid, nxt[0], expected, nxt[1].base_offset - 1)
            start = valid = nxt[0]
        self._scan_next_offset = expected
        # Like LogSegment.recover: the final time-index entry a normal close would have written; and
        # bytesSinceLastIndexEntry is left alone (0 on a freshly opened segment).
        if self._max_ts.timestamp >= 0:
            self.time_index.maybe_append(self._max_ts.timestamp, self._max_ts.offset, skip_full_check=True)
        return valid


# `_headers.clean_run` (C): recovery's walk over valid v2 batches (`LogSegment._scan`).
_native_clean_run = load_native("chronolog.storage._headers", "clean_run")
