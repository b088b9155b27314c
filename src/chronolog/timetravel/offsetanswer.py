"""The answer to "which offset holds time T" in each partition, as both sources (`timetravel.sources`) and the
raw fetcher (`timetravel.fetcher`) give it: a module of its own so that a reader that speaks the wire
imports no storage code to hold it."""

from __future__ import annotations

# a namedtuple, not a dataclass: `consume --format raw` starts without dataclasses (inspect behind them) or typing
from collections import namedtuple


class OffsetAtTime(namedtuple("OffsetAtTime", "partition offset timestamp found start_offset end_offset")):
    """In `partition`: `offset`, the first offset with timestamp >= T, or the end offset when there is none;
    `timestamp`, that record's timestamp (-1 when none); `found`; the log's `start_offset` and `end_offset`."""

    __slots__ = ()

    def deleted_note(self, ts: int) -> str | None:
        """Why the answer for time `ts` may miss records: the ones below the log start offset were deleted
        (by retention.ms / retention.bytes, or DeleteRecords) and could have been at or after `ts`. None
        when nothing was deleted or the answer lies after the log start. Both sources fill the fields the
        same way (the broker's ListOffsets answer and its low watermark), so every tool says the same."""
        if self.start_offset <= 0:
            return None
        if not self.found and self.start_offset >= self.end_offset:
            return f"every record deleted by retention (log start offset {self.start_offset})"
        if self.found and self.offset == self.start_offset and ts < self.timestamp:
            return f"T is before the log start: earlier records deleted by retention (log start offset " \
                   f"{self.start_offset})"
        return None
