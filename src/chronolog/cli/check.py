"""`chronolog check`: verify every batch and producer snapshot of a data dir (or a copy of a Kafka log dir)
without changing it, and report corrupt ranges with the offsets they held. Exit code 1 when anything is
wrong."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path

import typer

from chronolog.cli.common import emit_json, progress
from chronolog.errors import ChronologError, KafkaError
from chronolog.storage import PartitionLog
from chronolog.storage.corruption import verify_segment
from chronolog.storage.producers import CorruptSnapshotError, ProducerStates
from chronolog.timetravel.opener import open_data_dir


def _partitions(data_dir: str, topic: str | None) -> list[tuple[str, Callable[[], PartitionLog]]]:
    """(name, opener) of every partition under a data dir given as a local path or a URI, each opened
    read-only (through the filesystem pyarrow finds for a URI) when its turn comes."""
    if "://" not in data_dir and not Path(data_dir).is_dir():
        raise ChronologError(f"{data_dir} is not a directory")
    source = open_data_dir(data_dir)
    found = []
    for name in [topic] if topic is not None else sorted(source.topics()):
        try:
            partitions = source.partitions(name)
        except KafkaError:
            continue
        found += [(source.name if source.single else f"{name}-{p}", functools.partial(source.log, name, p))
                  for p in partitions]
    return found


def _check_snapshots(name: str, plog: PartitionLog) -> list[dict]:
    """Producer snapshots (`<offset>.snapshot`, Kafka's ProducerSnapshot format) that fail to parse: a bad
    CRC, version or length. The broker would delete such a file and fall back to an older one or the log."""
    problems = []
    for file_name, data in plog.producer_snapshot_files():
        try:
            ProducerStates.from_bytes(data)
        except CorruptSnapshotError as exc:
            problems.append({**_problem(name, file_name, "corrupt snapshot"), "error": str(exc)})
    return problems


def _problem(partition: str, file_name: str, problem: str, start: int | None = None, end: int | None = None,
             first_offset: int | None = None, last_offset: int | None = None) -> dict:
    """One row of the report (the same keys for every kind, as `--json` prints them)."""
    return {"partition": partition, "segment": file_name, "start": start, "end": end,
            "first_offset": first_offset, "last_offset": last_offset, "problem": problem}


def register(app: typer.Typer) -> None:
    @app.command("check")
    def check(
        data_dir: str = typer.Option(..., "--data-dir", help="A chronolog data dir or a copy of a Kafka log dir: "
                                     "a local path or a URI pyarrow can open (file://, s3://bucket/prefix, ...)."),
        topic: str | None = typer.Option(None, "--topic", help="Only this topic."),
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """Verify sizes, magic, CRCs and offsets of every batch, and every producer snapshot; report corrupt
        byte ranges, torn tails and corrupt snapshots."""
        dirs = _partitions(data_dir, topic)
        if not dirs:
            raise ChronologError(f"no partition directories under {data_dir}" + (f" for topic {topic!r}" if topic else ""))
        report = []
        bad = 0
        with progress("checking", len(dirs), as_json) as advance:
            for name, open_log in dirs:
                plog = open_log()
                try:
                    for seg in plog.segments:
                        ranges, torn = verify_segment(seg)
                        for r in ranges:
                            report.append(_problem(name, seg.log_path.name, "corrupt", r.start, r.end,
                                                   r.first_offset, r.last_offset))
                        if torn:
                            report.append(_problem(name, seg.log_path.name, "torn tail", seg.size - torn, seg.size))
                    report += _check_snapshots(name, plog)
                finally:
                    plog.close()
                advance()
        bad = len(report)
        if as_json:
            emit_json({"partitions": len(dirs), "problems": report, "ok": not bad})
        else:
            for p in report:
                if p["problem"] == "corrupt snapshot":
                    sys.stdout.write(f"{p['partition']}/{p['segment']}: corrupt producer snapshot ({p['error']}); "
                                     "a broker deletes it at start and rebuilds that state from the log\n")
                    continue
                offsets = (f"offsets {p['first_offset']}-{p['last_offset']}" if p["first_offset"] is not None
                           and p["first_offset"] <= p["last_offset"] else "no offsets")
                where = f"{p['partition']}/{p['segment']} bytes {p['start']}-{p['end']}"
                what = ("torn tail (recovery truncates it)" if p["problem"] == "torn tail"
                        else f"corrupt, {offsets} unreadable")
                sys.stdout.write(f"{where}: {what}\n")
            sys.stdout.write(f"{len(dirs)} partition(s) checked: "
                             f"{'OK' if not bad else f'{bad} problem(s)'}\n")
        if bad:
            raise typer.Exit(1)
