"""`chronolog produce TOPIC [FILE|-]`: lines to records, as kafka-console-producer and `kcat -P` do, plus
what they cannot: each record's CreateTime taken from its own line, so that a file of old logs can be
replayed by time exactly (kcat and the console producer stamp every record with the time of sending).

The loading itself is `timetravel.lineload`; a plain command line is read by `cli.fastproduce` without the
CLI framework (its import is a good part of a load's time), anything else by the options below.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import typer

from chronolog.cli.common import BootstrapOpt, CommandConfigOpt, XOpt, client_conf, progress
from chronolog.timetravel.timefmt import FORMATS_HELP


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
        skip_lines: int = typer.Option(0, "--skip-lines", min=0, help="Skip the first N lines of the input: "
                                       "what an interrupted run prints to continue where it stopped."),
        skip_blank: bool = typer.Option(False, "--skip-blank", help="Send no record for a blank line (as kcat -P); "
                                        "the summary counts them. Default: a blank line is an empty record."),
        require_time: bool = typer.Option(False, "--require-time", help="Stop at a line without a readable time "
                                          "(the lines before it are sent) instead of giving it the previous "
                                          "line's time."),
        bootstrap_server: str = BootstrapOpt,
        x: list[str] = XOpt,
        command_config: Path | None = CommandConfigOpt,
    ) -> None:
        """Send each line of FILE (or stdin) as one record, optionally with the line's own time as the
        record's timestamp. Every byte of the line is the value; only the ending \\n is removed (a \\r before
        it stays, as with kcat -P). A line without a readable time takes the previous line's (lines before
        the first readable time take that one's) and is named in the summary; a file with none is refused
        before anything is sent. Ctrl-C prints the command that continues where it stopped."""
        from chronolog.timetravel.lineload import load
        code = load(topic, file, client_conf(bootstrap_server, x, command_config), time_field=time_field,
                    time_regex=time_regex, time_format=time_format, year=year, timezone=timezone,
                    field_separator=field_separator, key_field=key_field, key_separator=key_separator,
                    header=header, partition=partition, skip_lines=skip_lines, skip_blank=skip_blank,
                    require_time=require_time, progress=_progress)
        if code:
            raise typer.Exit(code)


@contextmanager
def _progress(name: str, size: int | None):
    with progress(f"producing {name}", size, quiet=size is None) as tick:
        yield tick
