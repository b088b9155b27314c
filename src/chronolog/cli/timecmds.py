"""`chronolog offsets`, `consume` and `reset-offsets`: time-based lookup, replay and group rewind."""

from __future__ import annotations

import base64
import contextlib
import json
import sys
from pathlib import Path

import typer

from chronolog.cli.common import (
    TIME_HELP,
    BootstrapOpt,
    CommandConfigOpt,
    DataDirOpt,
    XOpt,
    broker,
    emit_json,
    open_source,
    progress,
    table,
)
from chronolog.cli.fastconsume import write_values
from chronolog.errors import ChronologError
from chronolog.timetravel.client import ClientSource
from chronolog.timetravel.sources import OffsetAtTime, kafka_words, parse_topic_partitions
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


def _deleted_note(a: OffsetAtTime, ts: int) -> str:
    """Kafka answers a time below the log start with the log start offset, silently; a replay tool says
    that the records it would have found may be gone (`OffsetAtTime.deleted_note`)."""
    return a.deleted_note(ts) or ""


def _check_parts(source, topic: str, parts: list[int] | None) -> list[int] | None:
    if isinstance(source, ClientSource):
        return source.check_partitions(topic, parts)
    if parts is not None:
        known = source.partitions(topic)
        missing = [p for p in parts if p not in known]
        if missing:
            raise ChronologError(f"topic {topic!r} has no partition {', '.join(map(str, missing))} "
                                 f"(it has {', '.join(map(str, known))})")
    return parts


def register(app: typer.Typer) -> None:
    @app.command()
    def offsets(
        topic: str,
        time: str = typer.Option(..., "--time", help=TIME_HELP),
        partitions: str | None = typer.Option(None, help="Comma-separated partitions (default: all)."),
        bootstrap_server: str = BootstrapOpt,
        data_dir: str | None = DataDirOpt,
        as_json: bool = typer.Option(False, "--json", help="Print JSON."),
        x: list[str] = XOpt,
        command_config: Path | None = CommandConfigOpt,
        isolation_level: str = typer.Option("read_uncommitted", "--isolation-level", help=ISOLATION_HELP +
                                            " Default read_uncommitted, as Kafka's GetOffsetShell."),
    ) -> None:
        """Per partition: the first offset with timestamp >= TIME and that record's timestamp. A partition
        with nothing at or after TIME says so and gives its end offset (under read_committed: the last
        stable offset, and never an offset at or past it, as ListOffsets answers with isolation_level 1)."""
        ts = parse_time(time)
        isolation = _isolation(isolation_level)
        source = open_source(bootstrap_server, data_dir, x, command_config)
        try:
            answers = source.offsets_for_time(topic, ts, _check_parts(source, topic, _parts(partitions)),
                                              isolation=isolation)
        finally:
            source.close()
        rows = [{"partition": a.partition, "offset": a.offset, "timestamp": a.timestamp if a.found else None,
                 "time": format_time(a.timestamp) if a.found else None, "found": a.found,
                 "start_offset": a.start_offset, "end_offset": a.end_offset,
                 "note": "; ".join(n for n in (_deleted_note(a, ts),
                                               "" if a.found else "no record at or after T: end offset") if n)}
                for a in answers.values()]
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
        from_: str | None = typer.Option(None, "--from", help="Start of the window (inclusive). " + TIME_HELP
                                         + " Default with --follow: the end (only new records)."),
        to: str | None = typer.Option(None, "--to", help="End of the window (exclusive). Default: no end."),
        group: str | None = typer.Option(None, help="Commit the read positions for this (empty) group."),
        fmt: str = typer.Option("text", "--format", help="text (time, partition@offset, key=, headers=, value) "
                                "| json (one object a line with key and headers) | raw (each value and a newline, byte for byte as "
                                "kcat -C prints them)"),
        partitions: str | None = typer.Option(None, help="Comma-separated partitions (default: all)."),
        follow: bool = typer.Option(False, "--follow", "-f", help="Keep reading new records (tail -f) until "
                                    "Ctrl-C, --max-messages or --timeout-ms."),
        max_messages: int | None = typer.Option(None, "--max-messages", min=1,
                                                help="Stop after printing this many records."),
        timeout_ms: int | None = typer.Option(None, "--timeout-ms", min=1, help="With --follow: stop when no "
                                              "record came for this long (kafka-console-consumer's --timeout-ms)."),
        bootstrap_server: str = BootstrapOpt,
        data_dir: str | None = DataDirOpt,
        as_json: bool = typer.Option(False, "--json", help="Same as --format json."),
        x: list[str] = XOpt,
        command_config: Path | None = CommandConfigOpt,
        isolation_level: str = typer.Option("read_committed", "--isolation-level", help=ISOLATION_HELP +
                                            " Default read_committed: a replayed window holds what consumers "
                                            "of committed data saw."),
    ) -> None:
        """Every record with FROM <= timestamp < TO, from every partition, exactly once: partition after
        partition (in partition order), each in offset order. Reads from the first offset at/after FROM to the end offset seen at start, so a late
        (out-of-order) CreateTime record below TO is printed even after records >= TO. Under
        read_committed (the default) the end is the last stable offset and records of aborted transactions
        are left out; transaction markers are never printed. With --follow it then keeps printing new
        records of the window as they arrive."""
        isolation = _isolation(isolation_level)
        if from_ is None and not follow:
            raise ChronologError("give --from (the window's start), or --follow to print new records")
        t1 = parse_time(from_) if from_ is not None else None
        t2 = parse_time(to) if to else None
        if t1 is not None and t2 is not None and t2 <= t1:
            raise ChronologError("--to must be after --from")
        if timeout_ms is not None and not follow:
            raise ChronologError("--timeout-ms goes with --follow")
        fmt = "json" if as_json else fmt
        if fmt not in ("text", "json", "raw"):
            raise ChronologError("--format is text, json or raw")
        if follow and data_dir is not None:
            raise ChronologError("--follow reads new records from a broker: use --bootstrap-server")
        source = open_source(bootstrap_server, data_dir, x, command_config)
        positions: dict[int, int] = {}
        printed = 0

        def show(p: int, rec) -> bool:
            """Print rec if it is in the window; False once --max-messages is reached."""
            nonlocal printed
            if (t1 is None or rec.timestamp >= t1) and (t2 is None or rec.timestamp < t2):
                _print_record(topic, p, rec, fmt)
                printed += 1
            return max_messages is None or printed < max_messages

        try:
            parts = _check_parts(source, topic, _parts(partitions)) or source.partitions(topic)
            if t1 is None:
                starts = {p: OffsetAtTime(p, hi, -1, False, lo, hi)
                          for p in parts for lo, hi in [source.watermarks(topic, p, isolation=isolation)]}
            else:
                starts = source.offsets_for_time(topic, t1, parts, isolation=isolation)
            for a in starts.values():
                note = _deleted_note(a, t1) if t1 is not None else ""
                if note:
                    typer.echo(f"chronolog: warning: {topic}-{a.partition}: {note}", err=True)
            total = sum(max(0, a.end_offset - a.offset) for a in starts.values())
            going = True
            from chronolog.timetravel.arrow import raw_fetcher_for, window_columns  # the columnar decoder
            fetcher = raw_fetcher_for(source, isolation) if fmt == "raw" else None
            with progress(f"reading {topic}", total, quiet=fmt != "text" or not sys.stdout.isatty()) as tick:
                for p, a in sorted(starts.items()):
                    positions[p] = a.offset
                    if not going or not a.found:
                        positions[p] = a.end_offset if going else a.offset
                        continue
                    if fmt == "raw":
                        chunks = window_columns(source, topic, p, a.offset, a.end_offset, t1, t2,
                                                isolation=isolation, names=("value",), fetcher=fetcher)
                        if chunks is not None:
                            printed, last = write_values(chunks, printed, max_messages)
                            going = max_messages is None or printed < max_messages
                            positions[p] = a.end_offset if going else last + 1
                            continue
                    for rec in _window_records(source, topic, p, a.offset, a.end_offset, t1, t2,
                                               isolation=isolation):
                        tick()
                        positions[p] = rec.offset + 1
                        going = show(p, rec)
                        if not going:
                            break
                    else:
                        positions[p] = a.end_offset
            sys.stdout.flush()
            if fetcher is not None:
                fetcher.close()
            if follow and going:
                _follow(source, topic, positions, show, timeout_ms, isolation)
            if group:
                if not isinstance(source, ClientSource):
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
        to_group_position_at: str | None = typer.Option(
            None, "--to-group-position-at", help="Where the group itself was at this time (its commits in "
            "__consumer_offsets): undoes a bad deploy. " + TIME_HELP),
        execute: bool = typer.Option(False, "--execute", help="Commit the new offsets."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Only show them (the default)."),
        bootstrap_server: str = BootstrapOpt,
        as_json: bool = typer.Option(False, "--json"),
        x: list[str] = XOpt,
        command_config: Path | None = CommandConfigOpt,
    ) -> None:
        """Rewind or move a consumer group, like kafka-consumer-groups.sh --reset-offsets. Refused while
        the group has active members. A partition with no record after the time goes to its end offset."""
        chosen = [x for x in (to_datetime, by_duration, to_offset, shift_by, to_group_position_at) if x is not None]
        chosen += [x for x in (to_earliest, to_latest) if x]
        if len(chosen) != 1:
            raise ChronologError("choose exactly one of --to-datetime, --by-duration, --to-earliest, --to-latest, "
                                 "--to-offset, --shift-by, --to-group-position-at")
        position_at = parse_time(to_group_position_at) if to_group_position_at is not None else None
        if execute and dry_run:
            raise ChronologError("--execute and --dry-run exclude each other")
        name, parts = parse_topic_partitions(topic)
        source = broker(bootstrap_server, x, command_config)
        try:
            parts = source.check_partitions(name, parts)
            state, members = source.group_state(group)
            if members:
                raise ChronologError(f"group {group} has {members} active member(s) (state {state}); stop its "
                                     "consumers first")
            current = source.committed(group, name, parts)
            targets: dict[int, tuple[int, str]] = {}
            if to_datetime is not None or by_duration is not None:
                ts = parse_time(to_datetime) if to_datetime is not None else now_ms() - parse_duration(by_duration)
                for p, a in source.offsets_for_time(name, ts, parts).items():
                    targets[p] = (a.offset, "; ".join(n for n in (
                        _deleted_note(a, ts), "" if a.found else "no record at or after T: end offset") if n))
            if position_at is not None:
                from chronolog.timetravel.group_history import group_events, positions_at
                then = positions_at(group_events(source, group), position_at, name)
            for p in parts:
                low, high = source.watermarks(name, p)
                if position_at is not None:
                    pos = then.get((name, p))
                    if pos is None:
                        continue  # no commit then: left as it is
                    targets[p] = (min(max(pos.offset, low), high),
                                  f"committed {format_time(pos.committed_at)}"
                                  + ("" if low <= pos.offset <= high else "; clamped"))
                elif to_earliest:
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


def _follow(source: ClientSource, topic: str, positions: dict[int, int], show, timeout_ms: int | None,
            isolation: str = "read_uncommitted") -> None:
    """Tail the partitions from `positions` (updated as records are printed) until Ctrl-C, `show` says
    stop, or nothing came for `timeout_ms`, with a consumer of that isolation level."""
    import time as _time

    from confluent_kafka import KafkaError, TopicPartition

    from chronolog.records import Record

    consumer = source._consumer(isolation)
    consumer.assign([TopicPartition(topic, p, o) for p, o in positions.items()])
    idle_since = _time.monotonic()
    try:
        while True:
            msg = consumer.poll(0.5)
            if msg is None or (msg.error() and msg.error().code() == KafkaError._PARTITION_EOF):
                if timeout_ms is not None and (_time.monotonic() - idle_since) * 1000 >= timeout_ms:
                    return
                continue
            if msg.error():  # a broker restart is not one: librdkafka reconnects on its own (tested)
                raise ChronologError(f"reading {topic}-{msg.partition()}: {kafka_words(msg.error())}")
            idle_since = _time.monotonic()
            positions[msg.partition()] = msg.offset() + 1
            rec = Record(msg.offset(), msg.timestamp()[1], msg.key(), msg.value(),
                         tuple((k, v) for k, v in (msg.headers() or [])))
            going = show(msg.partition(), rec)
            sys.stdout.flush()
            if not going:
                return
    except KeyboardInterrupt:
        return
    finally:
        # Stopping anyway: an error of the unassign (librdkafka interrupted by the Ctrl-C mid-call) must not
        # replace the stop with an error line and exit status 2.
        with contextlib.suppress(Exception):
            consumer.unassign()


def _text(b: bytes | None) -> str:
    return "" if b is None else b.decode("utf-8", "replace")


def _window_records(*args, **kwargs):
    from chronolog.timetravel.arrow import window_records  # the columnar decoder (records.columns)
    return window_records(*args, **kwargs)


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
                                     "key": enc(rec.key), "headers": [[k, enc(v)] for k, v in rec.headers or ()],
                                     "value": enc(rec.value)}) + "\n")
    else:
        extra = f" key={_text(rec.key)}" if rec.key is not None else ""
        if rec.headers:
            extra += " headers=" + ",".join(f"{k}:{_text(v)}" for k, v in rec.headers)
        sys.stdout.write(f"{format_time(rec.timestamp)} {topic}-{partition}@{rec.offset}{extra} {_text(rec.value)}\n")
