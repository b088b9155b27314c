"""`chronolog produce TOPIC [FILE|-]`: lines to records, as kafka-console-producer and `kcat -P` do, plus
what they cannot: each record's CreateTime taken from its own line, so that a file of old logs can be
replayed by time exactly (kcat and the console producer stamp every record with the time of sending)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from chronolog.cli.common import BootstrapOpt, CommandConfigOpt, XOpt, client_conf, progress
from chronolog.errors import ChronologError
from chronolog.timetravel.client import consumer_client, producer_client, topic_metadata
from chronolog.timetravel.linetime import FORMATS_HELP, LineReader
from chronolog.timetravel.timefmt import format_time, now_ms

# Lines before the first readable time wait for it (they take its time); bounded so that a file with no
# readable time at all is refused before anything is sent.
MAX_WAITING = 100_000


def _retention_ms(conf: dict, topic: str) -> int | None:
    """The topic's retention.ms (None when it cannot be read): records older than it are deleted by the
    broker's next retention pass (Kafka deletes by record timestamp, KIP-32), so loading old logs into
    a topic with the default 7 days loses them a few minutes later."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource
    try:
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        admin = AdminClient(conf)  # alive until the future resolves
        described = admin.describe_configs([resource])[resource].result(15)
        return int(described["retention.ms"].value)
    except (KafkaException, KeyError, ValueError, TypeError):
        return None


def _headers(items: list[str]) -> list[tuple[str, bytes]]:
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ChronologError(f"--header takes key=value, got {item!r}")
        out.append((key, value.encode()))
    return out


def _open_input(file: str) -> tuple[object, int | None, str]:
    if file == "-":
        return sys.stdin.buffer, None, "stdin"
    path = Path(file)
    if path.is_dir():
        raise ChronologError(f"{file} is a folder: give a file, or - for stdin")
    try:
        return open(path, "rb"), os.path.getsize(path), path.name  # noqa: SIM115 (closed by the caller)
    except OSError as exc:
        raise ChronologError(f"cannot read {file}: {exc.strerror or exc}") from None


def register(app: typer.Typer) -> None:
    @app.command()
    def produce(
        topic: str,
        file: str = typer.Argument("-", help="A file of lines, or - (stdin)."),
        time_field: str | None = typer.Option(None, "--time-field", help="Where the line's time is: field N or "
                                              "N-M (1-based, as cut -f) or a JSON field name (JSON lines)."),
        time_regex: str | None = typer.Option(None, "--time-regex", help="A regex whose group 'time' (or group "
                                              "1) is the line's time."),
        time_format: str | None = typer.Option(None, "--time-format", help=f"How to read it: {FORMATS_HELP}. "
                                               "Default: iso. 'syslog' alone finds the syslog time itself."),
        year: int | None = typer.Option(None, "--year", help="Year for times without one (syslog)."),
        timezone: str | None = typer.Option(None, "--timezone", help="Zone of times without one (default UTC)."),
        field_separator: str | None = typer.Option(None, "--field-separator", "-F",
                                                   help="Field separator (default: runs of whitespace)."),
        key_field: str | None = typer.Option(None, "--key-field", help="The record key: field N or a JSON name."),
        key_separator: str | None = typer.Option(None, "--key-separator", "-K",
                                                 help="KEY<sep>VALUE lines, as kcat -K / parse.key=true."),
        header: list[str] = typer.Option([], "--header", "-H", help="key=value header on every record."),
        partition: int | None = typer.Option(None, "--partition", "-p", min=0,
                                             help="Write every record to this partition (default: by key)."),
        bootstrap_server: str = BootstrapOpt,
        x: list[str] = XOpt,
        command_config: Path | None = CommandConfigOpt,
    ) -> None:
        """Send each line of FILE (or stdin) as one record, optionally with the line's own time as the
        record's timestamp. A line without a readable time takes the previous line's (lines before the
        first readable time take that one's); a file with none is refused before anything is sent."""
        reader = LineReader(time_field=time_field, time_regex=time_regex, time_format=time_format, year=year,
                            timezone=timezone, key_field=key_field, key_separator=key_separator,
                            field_separator=field_separator)
        hdrs = _headers(header)
        conf = client_conf(bootstrap_server, x, command_config)
        # batch.size 16 KB as Kafka's Java producer (kafka-console-producer): librdkafka's 1 MB batches would
        # put days of an old log into one batch, which the time index can only point at as a whole.
        producer = producer_client(conf, **{"linger.ms": 50, "enable.idempotence": True, "batch.size": 16384})
        probe = consumer_client(conf, **{"group.id": "chronolog-produce"})
        try:
            meta = topic_metadata(probe, bootstrap_server, topic, 15)
        except ChronologError as exc:
            raise ChronologError(f"{exc}: create it first (chronolog topics create {topic} -c retention.ms=-1 "
                                 "keeps old records)") from None
        finally:
            probe.close()
        if partition is not None and partition not in meta.partitions:
            raise ChronologError(f"topic {topic!r} has no partition {partition} (it has {len(meta.partitions)})")
        retention = _retention_ms(conf, topic) if reader.timed else None
        stream, size, name = _open_input(file)
        failures: list[str] = []
        sent = unreadable = 0
        interrupted = False
        oldest: int | None = None
        warned = False
        waiting: list = []
        last_ts: int | None = None

        def delivered(err, _msg) -> None:
            if err is not None:
                failures.append(err.str())

        def send(key: bytes | None, value: bytes, ts: int | None) -> None:
            nonlocal sent, oldest, warned
            kwargs = {"key": key, "value": value, "on_delivery": delivered}
            if ts is not None:
                kwargs["timestamp"] = ts
                oldest = ts if oldest is None else min(oldest, ts)
                if retention is not None and retention >= 0 and not warned and ts < now_ms() - retention:
                    warned = True
                    typer.echo(f"chronolog: warning: {topic}: a record from {format_time(ts)} is older than the "
                               f"topic's retention.ms={retention}; the broker deletes such records on its next "
                               f"retention check. Keep them: chronolog topics alter {topic} -c retention.ms=-1",
                               err=True)
            if hdrs:
                kwargs["headers"] = hdrs
            if partition is not None:
                kwargs["partition"] = partition
            while True:
                try:
                    producer.produce(topic, **kwargs)
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    producer.poll(0.5)
            producer.poll(0)
            sent += 1
            if failures:
                raise ChronologError(f"produce to {topic} failed: {failures[0]}")

        try:
            with progress(f"producing {name}", size, quiet=size is None) as tick:
                for raw in stream:
                    tick(len(raw))
                    line = raw.decode("utf-8", "replace").rstrip("\r\n")
                    if not line:
                        continue
                    parsed = reader(line)
                    if not reader.timed:
                        send(parsed.key, parsed.value, None)
                        continue
                    if parsed.timestamp is None:
                        unreadable += 1
                        if last_ts is None:
                            if len(waiting) >= MAX_WAITING:
                                raise ChronologError(f"no readable time in the first {MAX_WAITING} lines of "
                                                     f"{name}: nothing sent; check --time-field/--time-regex "
                                                     "and --time-format")
                            waiting.append(parsed)
                            continue
                    else:
                        last_ts = parsed.timestamp
                        for early in waiting:
                            send(early.key, early.value, last_ts)
                        waiting.clear()
                    send(parsed.key, parsed.value, last_ts)
        except KeyboardInterrupt:  # what was sent is delivered (flush below), then exit 130 as a shell expects
            interrupted = True
        finally:
            if stream is not sys.stdin.buffer:
                stream.close()
            left = producer.flush(60)
        if reader.timed and last_ts is None and waiting:
            raise ChronologError(f"no line of {name} has a readable time ({len(waiting)} lines): nothing sent; "
                                 "check --time-field/--time-regex and --time-format")
        if left or failures:
            raise ChronologError(f"produce to {topic} failed: {failures[0] if failures else f'{left} unsent'}")
        if reader.parse_time is not None and reader.parse_time.seconds_as_ms is not None:
            text = reader.parse_time.seconds_as_ms
            typer.echo(f"chronolog: warning: {text} was read as epoch milliseconds ({format_time(int(text))}); as "
                       f"epoch seconds it is {format_time(int(text) * 1000)}: use --time-format epoch_s for that",
                       err=True)
        note = f" ({unreadable} without a readable time took the previous line's)" if unreadable else ""
        since = f", oldest record time {format_time(oldest)}" if oldest is not None else ""
        typer.echo(f"produced {sent} record(s) from {name} to {topic}{since}{note}"
                   + (" before Ctrl-C" if interrupted else ""), err=True)
        if interrupted:
            raise typer.Exit(130)


