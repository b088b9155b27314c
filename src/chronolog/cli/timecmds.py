"""`chronolog offsets`, `consume` and `reset-offsets`: time-based lookup, replay and group rewind."""

from __future__ import annotations

import base64
import json
import sys

import typer

from chronolog.cli.common import TIME_HELP, BootstrapOpt, DataDirOpt, emit_json, progress, table
from chronolog.errors import ChronologError
from chronolog.timetravel.sources import BrokerSource, open_source, parse_topic_partitions
from chronolog.timetravel.timefmt import format_time, now_ms, parse_duration, parse_time

ISOLATION_HELP = ("read_committed: stop at the last stable offset and leave out aborted transactions' records "
                  "(a consumer's isolation.level=read_committed); read_uncommitted: everything written.")


def _isolation(value: str) -> str:
    value = value.strip().lower().replace("-", "_")
    if value not in ("read_committed", "read_uncommitted"):
        raise ChronologError(f"--isolation-level is read_committed or read_uncommitted (got {value!r})")
    return value


def _parts(spec: str | None) -> list[int] | None:
    if not spec:
        return None
    try:
        return [int(p) for p in spec.split(",")]
    except ValueError:
        raise ChronologError(f"--partitions takes numbers like 0,2 (got {spec!r})") from None


def register(app: typer.Typer) -> None:
    @app.command()
    def offsets(
        topic: str,
        time: str = typer.Option(..., "--time", help=TIME_HELP),
        partitions: str | None = typer.Option(None, help="Comma-separated partitions (default: all)."),
        bootstrap_server: str = BootstrapOpt,
        data_dir: str | None = DataDirOpt,
        as_json: bool = typer.Option(False, "--json", help="Print JSON."),
        isolation_level: str = typer.Option("read_uncommitted", "--isolation-level", help=ISOLATION_HELP +
                                            " Default read_uncommitted, as Kafka's GetOffsetShell."),
    ) -> None:
        """Per partition: the first offset with timestamp >= TIME and that record's timestamp. A partition
        with nothing at or after TIME says so and gives its end offset (under read_committed: the last
        stable offset, and never an offset at or past it, as ListOffsets answers with isolation_level 1)."""
        ts = parse_time(time)
        isolation = _isolation(isolation_level)
        source = open_source(bootstrap_server, data_dir)
        try:
            answers = source.offsets_for_time(topic, ts, _parts(partitions), isolation=isolation)
        finally:
            source.close()
        rows = [{"partition": a.partition, "offset": a.offset, "timestamp": a.timestamp if a.found else None,
                 "time": format_time(a.timestamp) if a.found else None, "found": a.found,
                 "end_offset": a.end_offset,
                 "note": "" if a.found else "no record at or after T: end offset"} for a in answers.values()]
        if as_json:
            emit_json({"topic": topic, "time": format_time(ts), "timestamp": ts, "isolation_level": isolation,
                       "partitions": rows})
        else:
            table(f"{topic}: first record at or after {format_time(ts)}",
                  ["partition", "offset", "record time", "end offset", "note"],
                  [[r["partition"], r["offset"], r["time"], r["end_offset"], r["note"]] for r in rows])

    @app.command()
    def consume(
        topic: str,
        from_: str = typer.Option(..., "--from", help="Start of the window (inclusive). " + TIME_HELP),
        to: str | None = typer.Option(None, "--to", help="End of the window (exclusive). Default: no end."),
        group: str | None = typer.Option(None, help="Commit the read positions for this (empty) group."),
        fmt: str = typer.Option("text", "--format", help="text | json | raw"),
        partitions: str | None = typer.Option(None, help="Comma-separated partitions (default: all)."),
        bootstrap_server: str = BootstrapOpt,
        data_dir: str | None = DataDirOpt,
        as_json: bool = typer.Option(False, "--json", help="Same as --format json."),
        isolation_level: str = typer.Option("read_committed", "--isolation-level", help=ISOLATION_HELP +
                                            " Default read_committed: a replayed window holds what consumers "
                                            "of committed data saw."),
    ) -> None:
        """Every record with FROM <= timestamp < TO, from every partition, exactly once, in offset order
        per partition. Reads from the first offset at/after FROM to the end offset seen at start, so a late
        (out-of-order) CreateTime record below TO is printed even after records >= TO. Under
        read_committed (the default) the end is the last stable offset and records of aborted transactions
        are left out; transaction markers are never printed."""
        isolation = _isolation(isolation_level)
        t1 = parse_time(from_)
        t2 = parse_time(to) if to else None
        if t2 is not None and t2 <= t1:
            raise ChronologError("--to must be after --from")
        fmt = "json" if as_json else fmt
        if fmt not in ("text", "json", "raw"):
            raise ChronologError("--format is text, json or raw")
        source = open_source(bootstrap_server, data_dir)
        positions = {}
        try:
            starts = source.offsets_for_time(topic, t1, _parts(partitions), isolation=isolation)
            total = sum(max(0, a.end_offset - a.offset) for a in starts.values())
            with progress(f"reading {topic}", total, quiet=fmt != "text" or not sys.stdout.isatty()) as tick:
                for p, a in starts.items():
                    if not a.found:
                        continue
                    for rec in source.read(topic, p, a.offset, a.end_offset, isolation=isolation):
                        tick()
                        if rec.timestamp >= t1 and (t2 is None or rec.timestamp < t2):
                            _print_record(topic, p, rec, fmt)
                    positions[p] = a.end_offset
            if group:
                if not isinstance(source, BrokerSource):
                    raise ChronologError("--group needs a broker (--bootstrap-server)")
                source.commit(group, topic, positions)
        finally:
            source.close()

    @app.command("reset-offsets")
    def reset_offsets(
        group: str = typer.Option(..., "--group"),
        topic: str = typer.Option(..., "--topic", help="TOPIC or TOPIC:P,P"),
        to_datetime: str | None = typer.Option(None, "--to-datetime", help=TIME_HELP),
        by_duration: str | None = typer.Option(None, "--by-duration", help="Kafka's PnDTnHnMnS, e.g. PT2H."),
        to_earliest: bool = typer.Option(False, "--to-earliest"),
        to_latest: bool = typer.Option(False, "--to-latest"),
        to_offset: int | None = typer.Option(None, "--to-offset"),
        shift_by: int | None = typer.Option(None, "--shift-by"),
        execute: bool = typer.Option(False, "--execute", help="Commit the new offsets."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Only show them (the default)."),
        bootstrap_server: str = BootstrapOpt,
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """Rewind or move a consumer group, like kafka-consumer-groups.sh --reset-offsets. Refused while
        the group has active members. A partition with no record after the time goes to its end offset."""
        chosen = [x for x in (to_datetime, by_duration, to_offset, shift_by) if x is not None]
        chosen += [x for x in (to_earliest, to_latest) if x]
        if len(chosen) != 1:
            raise ChronologError("choose exactly one of --to-datetime, --by-duration, --to-earliest, --to-latest, "
                                 "--to-offset, --shift-by")
        if execute and dry_run:
            raise ChronologError("--execute and --dry-run exclude each other")
        name, parts = parse_topic_partitions(topic)
        source = BrokerSource(bootstrap_server)
        try:
            state, members = source.group_state(group)
            if members:
                raise ChronologError(f"group {group} has {members} active member(s) (state {state}); stop its "
                                     "consumers first")
            parts = parts or source.partitions(name)
            current = source.committed(group, name, parts)
            targets: dict[int, tuple[int, str]] = {}
            if to_datetime is not None or by_duration is not None:
                ts = parse_time(to_datetime) if to_datetime is not None else now_ms() - parse_duration(by_duration)
                for p, a in source.offsets_for_time(name, ts, parts).items():
                    targets[p] = (a.offset, "" if a.found else "no record at or after T: end offset")
            for p in parts:
                low, high = source.watermarks(name, p)
                if to_earliest:
                    targets[p] = (low, "")
                elif to_latest:
                    targets[p] = (high, "")
                elif to_offset is not None:
                    targets[p] = (min(max(to_offset, low), high), "" if low <= to_offset <= high else "clamped")
                elif shift_by is not None:
                    base = current.get(p, -1)
                    base = base if base >= 0 else low
                    want = base + shift_by
                    targets[p] = (min(max(want, low), high), "" if low <= want <= high else "clamped")
            if execute:
                source.commit(group, name, {p: o for p, (o, _n) in targets.items()})
        finally:
            source.close()
        rows = [{"topic": name, "partition": p, "current": current.get(p, -1) if current.get(p, -1) >= 0 else None,
                 "new": o, "note": note} for p, (o, note) in sorted(targets.items())]
        if as_json:
            emit_json({"group": group, "executed": execute, "partitions": rows})
        else:
            table(f"group {group}: {'new offsets committed' if execute else 'dry run (use --execute)'}",
                  ["topic", "partition", "current offset", "new offset", "note"],
                  [[r["topic"], r["partition"], r["current"], r["new"], r["note"]] for r in rows])


def _print_record(topic: str, partition: int, rec, fmt: str) -> None:
    if fmt == "raw":
        sys.stdout.buffer.write((rec.value or b"") + b"\n")
    elif fmt == "json":
        def enc(b: bytes | None):
            if b is None:
                return None
            try:
                return b.decode("utf-8")
            except UnicodeDecodeError:
                return {"base64": base64.b64encode(b).decode()}
        sys.stdout.write(json.dumps({"topic": topic, "partition": partition, "offset": rec.offset,
                                     "timestamp": rec.timestamp, "time": format_time(rec.timestamp),
                                     "key": enc(rec.key), "value": enc(rec.value)}) + "\n")
    else:
        value = (rec.value or b"").decode("utf-8", "replace")
        sys.stdout.write(f"{format_time(rec.timestamp)} {topic}-{partition}@{rec.offset} {value}\n")
