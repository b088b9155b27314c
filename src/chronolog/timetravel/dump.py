"""Reading segment files for people, as Kafka's `DumpLogSegments` does, and verifying indexes against
their `.log` (accepting both Kafka <= 3.7 time-index offsets and 3.8+'s batch last offsets)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from chronolog.errors import ChronologError, CorruptMessageError, InvalidRecordError
from chronolog.records import iter_batches
from chronolog.storage import OffsetIndex, TimeIndex
from chronolog.storage.index import IndexCorruptError


@dataclass
class Mismatch:
    file: str
    entry: int
    problem: str


def base_offset_of(path: Path) -> int:
    try:
        return int(path.stem)
    except ValueError:
        raise ChronologError(f"{path.name}: segment files are named <20-digit base offset>.<suffix>") from None


def log_batches(path: Path, *, torn_tail_ok: bool = False) -> Iterator[tuple[int, object]]:
    """(position, batch) of a `.log` file. Bytes after the last whole batch are an error, unless
    `torn_tail_ok`: index verification against the live segment of a running broker may read a batch
    that is still being written, and stops before it as Kafka's `FileRecords` iteration does."""
    data = path.read_bytes()
    pos = 0
    try:
        for batch in iter_batches(data):
            yield pos, batch
            pos += batch.size_in_bytes
    except (CorruptMessageError, InvalidRecordError) as exc:
        raise ChronologError(f"{path.name}: unreadable at position {pos}: {exc}") from None
    if pos != len(data) and not torn_tail_ok:
        raise ChronologError(f"{path.name}: {len(data) - pos} trailing bytes after position {pos} (a torn batch)")


def verify_offset_index(index_path: Path) -> list[Mismatch]:
    log_path = index_path.with_suffix(".log")
    base = base_offset_of(index_path)
    idx = OffsetIndex(index_path, base, writable=False)
    by_pos = {pos: batch for pos, batch in log_batches(log_path, torn_tail_ok=True)}
    out = []
    prev = -1
    for i in range(idx.entries):
        offset, position = idx.entry(i)
        batch = by_pos.get(position)
        if batch is None:
            out.append(Mismatch(index_path.name, i, f"offset {offset} -> position {position}: no batch starts there"))
        elif batch.last_offset != offset:
            out.append(Mismatch(index_path.name, i, f"index offset {offset}, log batch last offset {batch.last_offset} "
                                                    f"at position {position}"))
        if offset <= prev:
            out.append(Mismatch(index_path.name, i, f"offset {offset} not above previous {prev}"))
        prev = offset
    return out


def verify_time_index(index_path: Path) -> list[Mismatch]:
    log_path = index_path.with_suffix(".log")
    base = base_offset_of(index_path)
    idx = TimeIndex(index_path, base, writable=False)
    batches = [b for _pos, b in log_batches(log_path, torn_tail_ok=True)]
    out = []
    prev = None
    running = -1
    bi = 0
    for i in range(idx.entries):
        ts, offset = idx.entry(i)
        while bi < len(batches) and batches[bi].last_offset < offset:
            running = max(running, batches[bi].max_timestamp)
            bi += 1
        if bi == len(batches) or batches[bi].base_offset > offset:
            out.append(Mismatch(index_path.name, i, f"offset {offset} is not in the log"))
            continue
        batch = batches[bi]
        holder = offset == batch.last_offset or any(
            r.offset == offset and r.timestamp == ts for r in batch.records())
        if batch.max_timestamp != ts or not holder:
            out.append(Mismatch(index_path.name, i, f"entry ({ts}, {offset}): the batch holding offset {offset} has "
                                                    f"max timestamp {batch.max_timestamp}"))
        elif max(running, batch.max_timestamp) != ts:
            out.append(Mismatch(index_path.name, i, f"entry ({ts}, {offset}) is not the segment's running max "
                                                    f"({max(running, batch.max_timestamp)})"))
        if prev is not None and ts <= prev:
            out.append(Mismatch(index_path.name, i, f"timestamp {ts} not above previous {prev}"))
        prev = ts
    return out


def index_sanity(path: Path) -> list[Mismatch]:
    base = base_offset_of(path)
    cls = TimeIndex if path.suffix == ".timeindex" else OffsetIndex
    try:
        cls(path, base, writable=False).sanity_check()
    except IndexCorruptError as exc:
        return [Mismatch(path.name, -1, str(exc))]
    return []
