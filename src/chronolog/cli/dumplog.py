"""`chronolog dump-log`: Kafka's kafka-dump-log.sh for `.log`, `.index` and `.timeindex`, with time filters
and index verification."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from chronolog.cli.common import TIME_HELP, emit_json
from chronolog.errors import ChronologError
from chronolog.storage import OffsetIndex, TimeIndex
from chronolog.timetravel.dump import (
    base_offset_of,
    index_sanity,
    log_batches,
    verify_offset_index,
    verify_time_index,
)
from chronolog.timetravel.timefmt import format_time, parse_time


def register(app: typer.Typer) -> None:
    @app.command("dump-log")
    def dump_log(
        paths: list[Path] = typer.Argument(..., help=".log, .index or .timeindex files"),
        verify_index: bool = typer.Option(False, "--verify-index", help="Check every index entry against the .log."),
        index_sanity_check: bool = typer.Option(False, "--index-sanity", help="Only run the index sanity check."),
        from_: str | None = typer.Option(None, "--from", help="Only batches with records at/after this. " + TIME_HELP),
        to: str | None = typer.Option(None, "--to", help="Only records before this. " + TIME_HELP),
        print_data: bool = typer.Option(False, "--print-data", help="Print every record."),
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """Print segment files; exit code 1 when verification finds mismatches."""
        t1 = parse_time(from_) if from_ else None
        t2 = parse_time(to) if to else None
        problems = 0
        output = []
        for path in paths:
            if not path.exists():
                raise ChronologError(f"{path} does not exist")
            if path.suffix == ".log":
                output.append(_dump_log(path, t1, t2, print_data, as_json))
            elif path.suffix in (".index", ".timeindex"):
                if index_sanity_check:
                    found = index_sanity(path)
                elif verify_index:
                    found = verify_offset_index(path) if path.suffix == ".index" else verify_time_index(path)
                else:
                    found = []
                    output.append(_dump_index(path, as_json))
                problems += len(found)
                if index_sanity_check or verify_index:
                    report = {"file": str(path), "mismatches": [m.__dict__ for m in found], "ok": not found}
                    output.append(report)
                    if not as_json:
                        sys.stdout.write(f"{path}: {'OK' if not found else f'{len(found)} mismatch(es)'}\n")
                        for m in found:
                            sys.stdout.write(f"  entry {m.entry}: {m.problem}\n")
            else:
                raise ChronologError(f"{path.name}: expected .log, .index or .timeindex")
        if as_json:
            emit_json(output)
        if problems:
            raise typer.Exit(1)


def _dump_log(path: Path, t1: int | None, t2: int | None, print_data: bool, as_json: bool) -> dict:
    out = {"file": str(path), "base_offset": base_offset_of(path), "batches": []}
    if not as_json:
        sys.stdout.write(f"Dumping {path}\n")
    for pos, batch in log_batches(path):
        if t1 is not None and batch.max_timestamp < t1:
            continue
        recs = list(batch.records()) if print_data or t2 is not None or t1 is not None else []
        if t2 is not None and recs and min(r.timestamp for r in recs) >= t2:
            continue
        info = {"base_offset": batch.base_offset, "last_offset": batch.last_offset, "count": batch.records_count,
                "position": pos, "max_timestamp": batch.max_timestamp, "timestamp_type": batch.timestamp_type.name,
                "size": batch.size_in_bytes, "magic": batch.magic, "compression": batch.compression.name,
                "crc": batch.crc, "is_valid": batch.verify_crc()}
        if print_data:
            info["records"] = [{"offset": r.offset, "timestamp": r.timestamp,
                                "key": None if r.key is None else r.key.decode("utf-8", "replace"),
                                "value": None if r.value is None else r.value.decode("utf-8", "replace")}
                               for r in recs if (t1 is None or r.timestamp >= t1) and (t2 is None or r.timestamp < t2)]
        out["batches"].append(info)
        if not as_json:
            sys.stdout.write(f"baseOffset: {info['base_offset']} lastOffset: {info['last_offset']} count: {info['count']} "
                             f"position: {pos} maxTimestamp: {info['max_timestamp']} ({format_time(info['max_timestamp'])}) "
                             f"size: {info['size']} magic: {info['magic']} compresscodec: {info['compression']} "
                             f"crc: {info['crc']} isvalid: {str(info['is_valid']).lower()}\n")
            for r in info.get("records", []):
                sys.stdout.write(f"| offset: {r['offset']} CreateTime: {r['timestamp']} key: {r['key']} "
                                 f"payload: {r['value']}\n")
    return out


def _dump_index(path: Path, as_json: bool) -> dict:
    base = base_offset_of(path)
    entries = []
    if path.suffix == ".index":
        idx = OffsetIndex(path, base, writable=False)
        for i in range(idx.entries):
            e = idx.entry(i)
            entries.append({"offset": e.offset, "position": e.position})
            if not as_json:
                sys.stdout.write(f"offset: {e.offset} position: {e.position}\n")
    else:
        idx = TimeIndex(path, base, writable=False)
        for i in range(idx.entries):
            e = idx.entry(i)
            entries.append({"timestamp": e.timestamp, "offset": e.offset})
            if not as_json:
                sys.stdout.write(f"timestamp: {e.timestamp} offset: {e.offset}\n")
    return {"file": str(path), "entries": entries}
