"""One share-partition (KIP-932): a share group's view of one topic partition, as Kafka's
`SharePartition` keeps it.

Offsets below the share-partition start offset (SPSO, `start`) are done. Offsets in `[start, end)` are in
flight, each in one state: AVAILABLE (to deliver, again), ACQUIRED (delivered to one member under an
acquisition lock that expires), ACKNOWLEDGED (accepted) or ARCHIVED (rejected, a gap, data of an aborted
transaction under read_committed, or delivered `share.delivery.count.limit` times). Transaction markers
are acquired like records, as Kafka 4.4 acquires them (the client acknowledges them). Offsets from `end` on were never delivered. A fetch
acquires AVAILABLE offsets first (redeliveries), then new ones, whole batches at a time; the start moves
over every leading ACKNOWLEDGED or ARCHIVED offset.

The state is written by server/share_state.py after every acknowledgement and start-offset change, before
the answer: acquired records come back AVAILABLE after a restart (Kafka's share coordinator persists the
same: state batches, never acquisitions).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from chronolog.errors import ErrorCode

# RecordState ids (Kafka's org.apache.kafka.server.share.fetch.RecordState)
AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4
# AcknowledgeType (KIP-932, KIP-1222's RENEW); 0 is a gap (an offset with no record)
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
STATE_NAMES = {AVAILABLE: "Available", ACQUIRED: "Acquired", ACKNOWLEDGED: "Acknowledged", ARCHIVED: "Archived"}


@dataclass
class InFlight:
    state: int
    count: int  # delivery count: how many times it was acquired
    member: str | None = None  # the member holding its acquisition lock
    deadline: float = 0.0  # when the lock expires (time.monotonic seconds)


class AckError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Batch:
    """What acquisition needs of a record batch read from the log."""
    base: int
    last: int
    control: bool = False
    aborted: bool = False  # a transactional batch of an aborted transaction (share.isolation.level=read_committed)


class SharePartition:
    def __init__(self, start: int, records: dict[int, InFlight] | None = None, end: int | None = None) -> None:
        self.start = start
        self.records: dict[int, InFlight] = dict(records or {})
        self.end = max(end if end is not None else start, max(self.records, default=start - 1) + 1, start)

    # -- reading -------------------------------------------------------------------------------------------
    def first_acquirable(self) -> int:
        """Where the next fetch reads from: the lowest AVAILABLE in-flight offset, else the end."""
        return min((o for o, r in self.records.items() if r.state == AVAILABLE), default=self.end)

    def in_flight(self) -> int:
        return self.end - self.start

    def has_available(self) -> bool:
        return any(r.state == AVAILABLE for r in self.records.values())

    def next_deadline(self) -> float | None:
        return min((r.deadline for r in self.records.values() if r.state == ACQUIRED), default=None)

    # -- acquisition ------------------------------------------------------------------------------------
    def acquire(self, member: str, batches: list[Batch], *, max_records: int, lock_s: float, now: float,
                max_in_flight: int, strict: bool = False) -> list[tuple[int, int, int]]:
        """SharePartition.acquire: AVAILABLE offsets and new ones of the batches read, whole batches until
        `max_records` are taken (`strict`: exactly up to it, share acquire mode record_limit), never past
        `max_in_flight` offsets after the start. Returns (first, last, delivery count) ranges."""
        taken: list[int] = []
        counts: dict[int, int] = {}
        for batch in batches:
            if len(taken) >= max_records:
                break
            if batch.base >= self.end and self.end - self.start >= max_in_flight:
                break  # SharePartition.maxInFlightRecords (group.share.partition.max.record.locks)
            for off in range(batch.base, batch.last + 1):
                if off < self.start or (strict and len(taken) >= max_records):
                    continue
                if off >= self.end:
                    for gap in range(self.end, off):  # offsets compaction removed: nothing to deliver
                        self.records[gap] = InFlight(ARCHIVED, 0)
                    self.end = off + 1
                    if batch.aborted:
                        self.records[off] = InFlight(ARCHIVED, 0)
                        continue
                    rec = self.records[off] = InFlight(AVAILABLE, 0)
                else:
                    rec = self.records.get(off)
                    if rec is None or rec.state != AVAILABLE:
                        continue
                    if batch.aborted:
                        rec.state = ARCHIVED
                        continue
                rec.state, rec.count, rec.member, rec.deadline = ACQUIRED, rec.count + 1, member, now + lock_s
                taken.append(off)
                counts[off] = rec.count
        self._advance()
        return _ranges(taken, counts)

    # -- acknowledgement --------------------------------------------------------------------------------
    def acknowledge(self, member: str, batches: list[tuple[int, int, list[int]]], *, limit: int, lock_s: float,
                    now: float) -> None:
        """SharePartition.acknowledge: every offset named must be ACQUIRED by this member (else
        INVALID_RECORD_STATE and nothing changes); ACCEPT acknowledges, RELEASE makes it available again
        (archived once delivered `limit` times), REJECT and GAP archive, RENEW restarts the lock."""
        changes: list[tuple[InFlight, int]] = []
        for first, last, types in batches:
            if last < first or not types or (len(types) != 1 and len(types) != last - first + 1):
                raise AckError(ErrorCode.INVALID_REQUEST, f"invalid acknowledgement batch {first}-{last}")
            for i, off in self._offsets(first, last, types):
                kind = types[0] if len(types) == 1 else types[i]
                if kind not in (GAP, ACCEPT, RELEASE, REJECT, RENEW):
                    raise AckError(ErrorCode.INVALID_REQUEST, f"unknown acknowledge type {kind}")
                if off < self.start:  # done already: Kafka ignores it (no in-flight batch to find)
                    continue
                rec = self.records.get(off)
                if rec is None:
                    if kind == GAP:
                        continue
                    raise AckError(ErrorCode.INVALID_RECORD_STATE, f"offset {off} is not in flight")
                if rec.state != ACQUIRED and not (kind == GAP and rec.state == ARCHIVED):
                    raise AckError(ErrorCode.INVALID_RECORD_STATE,
                                   f"offset {off} is {STATE_NAMES[rec.state]}, not acquired")
                if rec.member != member and rec.state == ACQUIRED:
                    raise AckError(ErrorCode.INVALID_RECORD_STATE, f"offset {off} is acquired by another member")
                changes.append((rec, kind))
        for rec, kind in changes:
            if kind == ACCEPT:
                rec.state = ACKNOWLEDGED
            elif kind == RELEASE:
                rec.state = ARCHIVED if rec.count >= limit else AVAILABLE
            elif kind == RENEW:
                rec.deadline = now + lock_s
                continue
            else:
                rec.state = ARCHIVED
            rec.member, rec.deadline = None, 0.0
        self._advance()

    def _offsets(self, first: int, last: int, types: list[int]) -> list[tuple[int, int]]:
        """(index, offset) of a batch to look at, in order, bounded by what is in flight: a batch of one
        type may span any range (0 to 2^63-1); past the records held only GAP goes on (skipped), any
        other type stops at the first offset not in flight."""
        if len(types) != 1:
            return list(enumerate(range(first, last + 1)))  # one type per offset: as long as the request
        if types[0] == GAP:
            return [(0, o) for o in sorted(o for o in self.records if max(first, self.start) <= o <= last)]
        low = max(first, self.start)
        return [(0, o) for o in range(first, min(low - 1, last) + 1)][:1] + [
            (0, o) for o in range(low, min(last, low + len(self.records)) + 1)]

    def expire(self, now: float, limit: int) -> bool:
        """Acquisition locks run out (SharePartition.AcquisitionLockTimerTask): back to AVAILABLE, or
        ARCHIVED when delivered `limit` times. True when anything changed."""
        return self._release(lambda rec: rec.deadline <= now, limit)

    def release_member(self, member: str, limit: int) -> bool:
        """SharePartition.releaseAcquiredRecords: a member that left or closed its session gives its
        records back."""
        return self._release(lambda rec: rec.member == member, limit)

    def _release(self, which: Callable[[InFlight], bool], limit: int) -> bool:
        """The acquired records `which` picks become AVAILABLE again (ARCHIVED when delivered `limit` times)."""
        changed = False
        for rec in self.records.values():
            if rec.state == ACQUIRED and which(rec):
                rec.state = ARCHIVED if rec.count >= limit else AVAILABLE
                rec.member, rec.deadline = None, 0.0
                changed = True
        if changed:
            self._advance()
        return changed

    def move_start(self, offset: int) -> None:
        """The log start moved past the start (retention, DeleteRecords), or an admin reset it."""
        if offset > self.start:
            for off in [o for o in self.records if o < offset]:
                del self.records[off]
            self.start = offset
            self.end = max(self.end, offset)

    def _advance(self) -> None:
        while self.start < self.end:
            rec = self.records.get(self.start)
            if rec is None or rec.state not in (ACKNOWLEDGED, ARCHIVED):
                break
            del self.records[self.start]
            self.start += 1
        if self.start == self.end:
            self.records.clear()

    # -- persistence --------------------------------------------------------------------------------------
    def snapshot(self) -> dict:
        """What the state store keeps: the start, the end, and runs of (first, last, state, count); an
        acquired offset is kept AVAILABLE (a lock does not outlive the broker)."""
        runs: list[list[int]] = []
        for off in sorted(self.records):
            rec = self.records[off]
            state = AVAILABLE if rec.state == ACQUIRED else rec.state
            if runs and runs[-1][1] == off - 1 and runs[-1][2] == state and runs[-1][3] == rec.count:
                runs[-1][1] = off
            else:
                runs.append([off, off, state, rec.count])
        return {"start": self.start, "end": self.end, "runs": runs}

    @classmethod
    def from_snapshot(cls, snap: dict) -> SharePartition:
        records = {off: InFlight(state, count) for first, last, state, count in snap.get("runs", ())
                   for off in range(first, last + 1)}
        return cls(int(snap["start"]), records, int(snap.get("end", snap["start"])))

    def summary(self) -> tuple[int, int]:
        """(start offset, records in flight not yet done) for DescribeShareGroupOffsets' lag."""
        done = sum(1 for r in self.records.values() if r.state in (ACKNOWLEDGED, ARCHIVED))
        return self.start, done


def _ranges(offsets: list[int], counts: dict[int, int]) -> list[tuple[int, int, int]]:
    out: list[list[int]] = []
    for off in sorted(offsets):
        if out and out[-1][1] == off - 1 and out[-1][2] == counts[off]:
            out[-1][1] = off
        else:
            out.append([off, off, counts[off]])
    return [(a, b, c) for a, b, c in out]
