"""`chronolog consume --format raw` of a window, read without the CLI framework: what `kcat -C -o s@T1 -o e@T2
-e` does, so it should start about as fast (typer, pydantic and rich cost more than the read of a 10 MB
window; measured in bench/bench_consume.py).

Only a command line this module fully understands is run here: `consume TOPIC --from T1 [--to T2] --format raw`
with `--bootstrap-server/-b`, `--partitions`, `--isolation-level` and `--max-messages` (each as `--opt value` or
`--opt=value`). Anything else (help, other formats, -X, --data-dir, --group, --follow, a value it cannot read)
returns False and the caller hands the command line to typer (`cli.timecmds`), whose help and error messages
stay the only ones users see. The writing itself (`write_values`) is shared with the typer command.
"""

from __future__ import annotations

import os
import sys
from itertools import pairwise

from chronolog.native import load_native

_OPTIONS = {"--from": "from_", "--to": "to", "--format": "fmt", "--bootstrap-server": "bootstrap", "-b": "bootstrap",
            "--partitions": "partitions", "--isolation-level": "isolation", "--max-messages": "max_messages"}


def parse(argv: list[str]) -> dict | None:
    """The options of a plain raw `consume` command line, or None where typer should read it."""
    if len(argv) < 2 or argv[0] != "consume" or argv[1].startswith("-"):
        return None
    values: dict = {"topic": argv[1], "bootstrap": "127.0.0.1:9092", "to": None, "partitions": None,
                    "isolation": "read_committed", "max_messages": None}
    rest = argv[2:]
    seen: set[str] = set()
    i = 0
    while i < len(rest):
        name, eq, inline = rest[i].partition("=") if rest[i].startswith("--") else (rest[i], "", "")
        key = _OPTIONS.get(name)
        if key is None or key in seen:
            return None
        seen.add(key)
        if eq:
            value, i = inline, i + 1
        elif i + 1 < len(rest):
            value, i = rest[i + 1], i + 2
        else:
            return None
        values[key] = value
    if values.get("fmt") != "raw" or "from_" not in values or values["isolation"] not in ("read_committed",
                                                                                          "read_uncommitted"):
        return None
    try:
        if values["partitions"] is not None:
            values["partitions"] = [int(p) for p in values["partitions"].split(",")]
        if values["max_messages"] is not None:
            values["max_messages"] = int(values["max_messages"])
            if values["max_messages"] < 1:
                return None
    except ValueError:
        return None
    del values["fmt"]
    return values


def run(argv: list[str]) -> bool:
    """Run a plain raw `consume` command line; False (nothing done) for anything else."""
    opts = parse(argv)
    if opts is None:
        return False
    try:
        consume_raw(**opts)
        from chronolog.cli.fastexit import finish
        finish(0)
    except BrokenPipeError:
        # the reader went away (`| head`): stop without a word, exit status 1, as click does for typer's commands
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
        sys.exit(1)
    return True


def consume_raw(topic: str, bootstrap: str, from_: str, to: str | None, partitions: list[int] | None,
                isolation: str, max_messages: int | None) -> None:
    """What `chronolog consume --format raw` does for this window (see `cli.timecmds.consume`), spoken on
    the wire by the raw fetcher alone: Metadata, each leader's ListOffsets in one round trip, then Fetch
    (librdkafka's clients cost 0.1-0.2 s of threads and connection setup before the first record)."""
    from chronolog.errors import ChronologError
    from chronolog.protocol.fetch_client import READ_COMMITTED, READ_UNCOMMITTED
    from chronolog.timetravel.arrow import broker_columns
    from chronolog.timetravel.fetcher import RawFetcher
    from chronolog.timetravel.timefmt import parse_time

    t1 = parse_time(from_)
    t2 = parse_time(to) if to else None
    if t2 is not None and t2 <= t1:
        raise ChronologError("--to must be after --from")
    # answers of 1 MiB with the next one under way meanwhile, as `timetravel.arrow.raw_fetcher_for` reads
    fetcher = RawFetcher(bootstrap, max_bytes=1 << 20, isolation_level=READ_COMMITTED
                         if isolation == "read_committed" else READ_UNCOMMITTED)
    fetcher.prefetch = True
    try:
        parts = fetcher.partitions(topic)
        if partitions is not None:  # the client module's imports are paid only when partitions are named
            from chronolog.timetravel.client import checked_partitions
            parts = checked_partitions(topic, parts, partitions)
        starts = fetcher.offsets_for_time(topic, t1, parts)
        for a in starts.values():
            note = a.deleted_note(t1)
            if note:
                print(f"chronolog: warning: {topic}-{a.partition}: {note}", file=sys.stderr)
        printed = 0
        hi = None if t2 is None else t2 - 1
        for p, a in starts.items():
            if not a.found:
                continue
            chunks = broker_columns(fetcher, topic, p, a.offset, a.end_offset, lo=t1, hi=hi, names=("value",))
            printed, _last = write_values(chunks, printed, max_messages)
            if max_messages is not None and printed >= max_messages:
                break
        sys.stdout.flush()
    finally:
        fetcher.close()


def write_values(chunks, printed: int, max_messages: int | None) -> tuple[int, int]:
    """Write each record's value and a newline (kcat -C's default output, byte for byte) to stdout, a
    chunk of columns at a time: one join and one write per chunk, no Python object per record. Returns
    (records printed so far, offset of the last one written, -1 if none); stops at `max_messages`."""
    out = sys.stdout.buffer
    last = -1
    try:
        for cols in chunks:
            n = cols.rows if max_messages is None else min(cols.rows, max_messages - printed)
            if n <= 0:
                break
            write_all(out, value_lines(cols.values, n))
            printed += n
            last = memoryview(cols.offsets).cast("q")[n - 1]
            if max_messages is not None and printed >= max_messages:
                break
    finally:
        getattr(chunks, "close", lambda: None)()  # a stop before the end: the read-ahead is waited for now
    return printed, last


def write_all(out, data: bytes) -> None:
    """`out.write(data)` to the end: a buffered stdout may take only part of a large write (a full disk
    takes what fits) and say so only by its count; the next write raises the error (ENOSPC, EIO)."""
    view = memoryview(data)
    while view:
        view = view[out.write(view):]


def value_lines(values: tuple, n: int, delimiter: bytes = b"\n") -> bytes:
    """The first `n` values of a decoded binary column (validity, int32 ends, data, null count: the
    `records.columns` layout), each followed by `delimiter`; a null value (a tombstone) is empty, as kcat
    prints it. One copy in C (`_columns.join_values`), no Python object per record."""
    _valid, offs, data, _nulls = values
    if _join_values is not None:
        joined = _join_values(offs, data, n, delimiter)
        if joined is not None:
            return joined
    return py_value_lines(values, n, delimiter)


def py_value_lines(values: tuple, n: int, delimiter: bytes = b"\n") -> bytes:
    """The Python twin of `_columns.join_values`."""
    _valid, offs, data, _nulls = values
    ends = memoryview(offs).cast("i")[:n + 1]
    blob = bytes(data)
    parts = [blob[a:b] for a, b in pairwise(ends)]
    parts.append(b"")
    return delimiter.join(parts)


_join_values = load_native("chronolog.records._columns", "join_values")
