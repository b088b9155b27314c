"""`chronolog demo`: load the loghub syslog samples into a data dir, each line's syslog time as its
CreateTime, then show the segments' time ranges and answer a few lookups by time."""

from __future__ import annotations

import re
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from chronolog.config import BrokerConfig
from chronolog.errors import ChronologError
from chronolog.records import SimpleRecord, build_batch
from chronolog.storage import LogManager
from chronolog.timetravel.syslog import parse_syslog_line
from chronolog.timetravel.timefmt import format_time

DEFAULT_INPUT = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "loghub"
BATCH_LINES = 50
# retention.ms=-1: the samples are years old, and the default 7 days (by record time) would delete them
# as soon as a broker serves this data dir.
DEMO_TOPIC_CONFIG = {"segment.bytes": "65536", "index.interval.bytes": "4096", "retention.ms": "-1"}


def topic_name_for(path: Path) -> str:
    return re.sub(r"[^a-zA-Z0-9._-]", "-", path.stem.lower())


NO_SYSLOG_TIME = ("no line of {name} has a syslog time (RFC 3164: 'Jun 14 15:16:01 host prog[pid]: msg'); "
                  "load other lines with their own time through a broker: chronolog produce TOPIC {name} "
                  "--time-regex ... --time-format ...")


def read_syslog_file(path: Path, year: int) -> tuple[list[tuple[int, str]], int]:
    """(timestamp, line) for every non-empty line and the count without a readable time; such a line takes
    the previous line's time (the first readable time for lines before it). A file with none is refused:
    its records would all carry no time, and every lookup by time would miss them."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = [line.rstrip("\n") for line in f if line.strip()]
    except OSError as exc:
        raise ChronologError(f"cannot read {path}: {exc.strerror or exc}") from None
    stamps = [parsed.timestamp if (parsed := parse_syslog_line(line, year)) else None for line in lines]
    first = next((ts for ts in stamps if ts is not None), None)
    if first is None:
        raise ChronologError(NO_SYSLOG_TIME.format(name=path.name))
    out, last = [], first
    for ts, line in zip(stamps, lines, strict=True):
        last = ts if ts is not None else last
        out.append((last, line))
    return out, sum(ts is None for ts in stamps)


def load_file(manager: LogManager, path: Path, year: int) -> tuple[str, int, int]:
    """Write one syslog file as a fresh topic (an existing one is replaced, so reruns give the same log).
    Returns (topic, lines, lines without a readable time)."""
    topic = topic_name_for(path)
    lines, unparsed = read_syslog_file(path, year)
    if manager.has_topic(topic):
        manager.delete_topic(topic)
    manager.create_topic(topic, 1, DEMO_TOPIC_CONFIG)
    plog = manager.get_log(topic, 0)
    for i in range(0, len(lines), BATCH_LINES):
        plog.append(build_batch([SimpleRecord(ts, None, line.encode()) for ts, line in lines[i:i + BATCH_LINES]]))
    return topic, len(lines), unparsed


def report(manager: LogManager, topic: str, console: Console) -> None:
    plog = manager.get_log(topic, 0)
    table = Table(title=f"{topic}-0: {plog.log_end_offset} records in {len(plog.segments)} segments")
    for col in ("base offset", "bytes", "first batch max ts (roll base)", "largest timestamp", "time index entries"):
        table.add_column(col, justify="right")
    for seg in plog.segments:
        table.add_row(str(seg.base_offset), str(seg.size), format_time(seg.first_batch_timestamp()),
                      format_time(seg.max_timestamp_so_far), str(seg.time_index.entries))
    console.print(table)
    first = plog.offset_for_timestamp(-2)
    last = plog.offset_for_timestamp(-3)
    records = {r.offset: r for r in plog.read_records(0)}
    lo = min(r.timestamp for r in records.values())
    hi = last.timestamp
    lookups = Table(title=f"{topic}: first record at or after T")
    for col in ("T", "offset", "record time", "line"):
        lookups.add_column(col)
    for frac in (0.0, 0.25, 0.5, 0.75, 1.0):
        target = lo + int((hi - lo) * frac) + (1 if 0 < frac < 1 else 0)
        found = plog.offset_for_timestamp(target)
        line = records[found.offset].value.decode()[:60] if found else "(nothing at or after T)"
        lookups.add_row(format_time(target), str(found.offset if found else plog.log_end_offset),
                        format_time(found.timestamp if found else None), line)
    console.print(lookups)
    console.print(f"earliest offset {first.offset}, max timestamp {format_time(last.timestamp)} at offset "
                  f"{last.offset}, end offset {plog.log_end_offset}")


def register(app: typer.Typer) -> None:
    @app.command()
    def demo(
        data_dir: Path = typer.Option(Path("var/demo"), "--data-dir", help="Data dir to write (created)."),
        input_dir: Path = typer.Option(DEFAULT_INPUT, "--input", help="Folder of syslog *.log files."),
        year: int = typer.Option(2024, help="Year of the syslog times (syslog lines carry none); UTC."),
    ) -> None:
        """Load syslog samples with their syslog times as CreateTime; show segments and lookups by time."""
        files = sorted(Path(input_dir).glob("*.log"))
        if not files:
            raise ChronologError(f"no *.log files in {input_dir}")
        for path in files:  # refuse unreadable input before writing anything
            read_syslog_file(path, year)
        console = Console() if Console().is_terminal else Console(width=150)
        manager = LogManager(data_dir, BrokerConfig())
        manager.startup(background=False)
        try:
            for path in files:
                topic, lines, unparsed = load_file(manager, path, year)
                console.print(f"[bold]{path.name}[/] -> topic [bold]{topic}[/]: {lines} lines"
                              + (f" ({unparsed} without a readable time took the previous line's)" if unparsed else ""))
                report(manager, topic, console)
        finally:
            manager.shutdown()
