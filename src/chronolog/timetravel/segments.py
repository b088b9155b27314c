"""A topic's segments as tables: per segment its base offset, size, first and largest timestamps, time-index
coverage and how far the log cleaner got; and the lanes that draw them on a time axis. Shared by
`chronolog describe-segments` and the console's segments page."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def cleaner_checkpoints(data_dir: str | Path) -> dict[tuple[str, int], int]:
    """The log cleaner's first dirty offset per partition (`cleaner-offset-checkpoint`) of a local data dir;
    empty for a URI or a dir the cleaner never wrote to."""
    from chronolog.storage.checkpoints import CLEANER_CHECKPOINT, read_checkpoint

    path = Path(data_dir) / CLEANER_CHECKPOINT
    try:
        return read_checkpoint(path) if path.is_file() else {}
    except (OSError, ValueError):
        return {}


def cleaned_state(first_dirty: int | None, base: int, next_base: int | None) -> str | None:
    """'cleaned' for a segment wholly below the cleaner's first dirty offset, 'dirty' for one at or after it,
    'partly' for the one it falls in; None for a partition the cleaner has not cleaned."""
    if first_dirty is None:
        return None
    if base >= first_dirty:
        return "dirty"
    return "cleaned" if next_base is not None and next_base <= first_dirty else "partly"


def segment_rows(source: Any, topic: str, checkpoints: dict[tuple[str, int], int] | None = None) -> list[dict]:
    """One row per segment of `topic` in a data-dir source, partition by partition; `cleaned` from the
    cleaner's checkpoints when given (else None)."""
    checkpoints = checkpoints or {}
    rows = []
    for p in source.partitions(topic):
        segs = source.log(topic, p).segments
        for i, seg in enumerate(segs):
            nxt = segs[i + 1].base_offset if i + 1 < len(segs) else None
            entries = seg.time_index.entries
            rows.append({"partition": p, "base_offset": seg.base_offset, "size": seg.size,
                         "cleaned": cleaned_state(checkpoints.get((topic, p)), seg.base_offset, nxt),
                         "first_timestamp": seg.first_timestamp(), "largest_timestamp": seg.max_timestamp_so_far,
                         "time_index_entries": entries,
                         "time_index_first": seg.time_index.entry(0).timestamp if entries else None,
                         "time_index_last": seg.time_index.last_entry().timestamp if entries else None})
    return rows


def segment_lanes(rows: list[dict]) -> dict[tuple[int, int], int]:
    """Lane of each segment (partition, base offset) inside its partition's band: out-of-order data makes
    segments' time ranges overlap, and a segment never shares a lane with one whose range it overlaps;
    segments that only share a boundary timestamp (in-order data rolled within one second) share a lane
    (greedy interval colouring by start time, the fewest lanes)."""
    lanes: dict[tuple[int, int], int] = {}
    by_part: dict[int, list[dict]] = {}
    for r in rows:
        if r["first_timestamp"] is not None and r["largest_timestamp"] >= 0:
            by_part.setdefault(r["partition"], []).append(r)
    for p, segs in by_part.items():
        ends: list[int] = []  # per lane, the end of its last segment
        for r in sorted(segs, key=lambda r: (min(r["first_timestamp"], r["largest_timestamp"]), r["base_offset"])):
            lo = min(r["first_timestamp"], r["largest_timestamp"])
            hi = max(r["first_timestamp"], r["largest_timestamp"])
            # ranges that only touch (one ends at the ms the next starts) do not overlap: same lane
            lane = next((i for i, end in enumerate(ends) if end <= lo), len(ends))
            if lane == len(ends):
                ends.append(hi)
            else:
                ends[lane] = hi
            lanes[(p, r["base_offset"])] = lane
    return lanes
