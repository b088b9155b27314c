"""A window's records, one page at a time, merged across partitions by time: the page reads like the
topic's history (partition in a column), not partition 0 to its end and then partition 1 from the start.

Each partition is read in offset order from where the page's cursor left it; the pages merge the
partitions' records by timestamp (a k-way merge of the partitions' heads, as a consumer of several
partitions sees them when it reads by time). Inside a partition offset order stands, so a late record
comes after the records stored before it. The cursor holds a next offset per partition still to read.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from chronolog.records import Record
from chronolog.timetravel.timeline import _read


@dataclass
class MergedPage:
    records: list[tuple[int, Record, str]]  # (partition, record, timestamp type), merged by time
    next_cursor: dict[int, int] | None      # per partition the next offset to read; None at the window's end
    scanned: int


def cursor_text(cursor: dict[int, int]) -> str:
    return ",".join(f"{p}:{o}" for p, o in sorted(cursor.items()))


def parse_cursor(text: str) -> dict[int, int]:
    """'P:O,P:O...' -> {P: O}; ValueError when it is not that."""
    out = {}
    for part in text.split(","):
        p, o = part.split(":")
        p, o = int(p), int(o)
        if p < 0 or o < 0 or p in out:
            raise ValueError(text)
        out[p] = o
    return out


def merged_page(source, topic: str, t1: int, t2: int, ranges: dict[int, tuple[int, int]],
                cursor: dict[int, int] | None, limit: int, scan_budget: int) -> MergedPage:
    """Up to `limit` records with t1 <= timestamp < t2 from `ranges` (per partition offsets [a, b)), from
    `cursor` on (None: the window's start), merged by timestamp. Each partition is read on until it gives
    `limit` records of the window, reaches its range's end or uses its share of `scan_budget`; the merge
    then stops before any partition whose buffer ran out early could hold an earlier record."""
    todo = {p: (max(a, cursor.get(p, b)) if cursor is not None else a, b) for p, (a, b) in ranges.items()}
    todo = {p: ab for p, ab in todo.items() if ab[0] < ab[1]}
    share = max(limit, scan_budget // max(1, len(todo)))
    buffers: dict[int, list[tuple[Record, str]]] = {}
    resume: dict[int, int] = {}   # where a partition continues once its buffer is used up
    ended: dict[int, bool] = {}   # its buffer holds everything of the window up to its range's end
    scanned = 0
    for p, (begin, stop) in sorted(todo.items()):
        got: list[tuple[Record, str]] = []
        position, read = begin, 0
        reader = _read(source, topic, p, begin, stop)
        try:
            for rec, kind in reader:
                read += 1
                position = rec.offset + 1
                if t1 <= rec.timestamp < t2:
                    got.append((rec, kind))
                if len(got) >= limit or read >= share:
                    break
        finally:
            reader.close()  # over a broker the partitions share one consumer: release it before the next
        scanned += read
        buffers[p], resume[p], ended[p] = got, position, position >= stop
    # a partition that used its share of the budget before finding a record of the window blocks the merge
    # (its unread records may be the earliest): this page then only moves the cursor on
    blocked = any(not buf and not ended[p] for p, buf in buffers.items())
    heap = [] if blocked else [(buf[0][0].timestamp, p, buf[0][0].offset, 0) for p, buf in buffers.items() if buf]
    heapq.heapify(heap)
    taken: dict[int, int] = dict.fromkeys(buffers, 0)
    out: list[tuple[int, Record, str]] = []
    while heap and len(out) < limit:
        _ts, p, _off, i = heapq.heappop(heap)
        rec, kind = buffers[p][i]
        out.append((p, rec, kind))
        taken[p] = i + 1
        if i + 1 < len(buffers[p]):
            nxt = buffers[p][i + 1][0]
            heapq.heappush(heap, (nxt.timestamp, p, nxt.offset, i + 1))
        elif not ended[p]:
            break  # this partition's next records are unread: nothing later may be shown before them
    nxt_cursor = {}
    for p, buf in buffers.items():
        if taken[p] < len(buf):
            nxt_cursor[p] = buf[taken[p]][0].offset
        elif not ended[p]:
            nxt_cursor[p] = resume[p]
    return MergedPage(out, nxt_cursor or None, scanned)
