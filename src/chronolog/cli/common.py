"""Shared pieces of the CLI: where answers come from, tables or JSON, progress only on a terminal."""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from chronolog.errors import ChronologError

BOOTSTRAP_HELP = "Kafka-protocol broker, HOST:PORT (chronolog or Apache Kafka)."
DATA_DIR_HELP = ("Read a data dir (ours or a copy of Kafka's log dir) instead of a broker: a local path or a URI "
                 "pyarrow can open (file://, s3://bucket/prefix, gs://, hdfs://).")
TIME_HELP = ("ISO-8601 (2024-06-14T15:00:00Z; a time without a zone is UTC), epoch ms, or relative "
             "('2h ago', '-90m', 'now').")

BootstrapOpt = typer.Option("127.0.0.1:9092", "--bootstrap-server", "-b", help=BOOTSTRAP_HELP)
DataDirOpt = typer.Option(None, "--data-dir", help=DATA_DIR_HELP)
XOpt = typer.Option([], "-X", help="librdkafka client config key=value (repeatable), as kcat -X: "
                    "security.protocol=SASL_SSL, sasl.mechanism=SCRAM-SHA-512, ssl.ca.location=ca.pem ...")
CommandConfigOpt = typer.Option(None, "--command-config", help="A properties file of client configs "
                                "(key=value lines, as Kafka's tools take it); -X wins over it.")


def console() -> Console:
    out = Console()
    return out if out.is_terminal else Console(width=160)


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=1, default=str) + "\n")


def table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    t = Table(title=title)
    for col in columns:
        t.add_column(col)
    for row in rows:
        t.add_row(*("-" if v is None else str(v) for v in row))
    console().print(t)


@contextmanager
def progress(description: str, total: int | None, quiet: bool):
    """A rich progress bar on a terminal; nothing when piped or with --json."""
    if quiet or not sys.stderr.isatty():
        yield lambda n=1: None
        return
    from rich.progress import Progress
    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n=1: bar.advance(task, n)


def client_conf(bootstrap: str, x: list[str], command_config: Path | None) -> dict:
    from chronolog.timetravel.client import client_config
    return client_config(bootstrap, x, command_config)


def open_source(bootstrap: str, data_dir: str | None, x: list[str] | None = None,
                command_config: Path | None = None):
    """A data dir when one is given, else the broker through the tools' client (`timetravel.client`)."""
    if data_dir is not None:
        if x or command_config:
            raise ChronologError("-X and --command-config are client configs: they go with --bootstrap-server, "
                                 "not --data-dir")
        from chronolog.timetravel.opener import open_data_dir
        return open_data_dir(data_dir)
    return broker(bootstrap, x, command_config)


def broker(bootstrap: str, x: list[str] | None = None, command_config: Path | None = None):
    from chronolog.timetravel.client import ClientSource
    return ClientSource(bootstrap, client_conf(bootstrap, x or [], command_config))


def writable_file(path: Path, option: str) -> Path:
    """An output file whose folder exists: one line instead of matplotlib's traceback."""
    path = Path(path)
    if not path.parent.is_dir():
        raise ChronologError(f"{option} {path}: folder {path.parent} does not exist")
    if path.is_dir():
        raise ChronologError(f"{option} {path} is a folder; give a file name such as {path / 'out.png'}")
    return path


def data_dir_or_none(path: Path | None) -> Path | None:
    return Path(path) if path is not None else None
