"""The `chronolog` command. Each area registers its own commands from its own module, so the layers'
owners never edit one shared file; a module that is absent (an optional extra not installed) is skipped."""

from __future__ import annotations

import importlib
import logging
import sys

import typer

app = typer.Typer(
    name="chronolog",
    help="A Kafka-compatible commit log with time at its centre.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)



def _version(value: bool) -> None:
    if value:
        from chronolog import __version__
        typer.echo(f"chronolog {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show librdkafka's log lines and debug logs."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """A Kafka-compatible commit log with time at its centre."""
    # librdkafka logs every failed connection attempt; without -v only our own one-line errors show.
    logging.getLogger("chronolog.librdkafka").setLevel(logging.DEBUG if verbose else logging.CRITICAL + 1)
    if verbose:
        logging.getLogger().setLevel(logging.DEBUG)


# Modules under chronolog.cli that define `register(app: typer.Typer) -> None`.
COMMAND_MODULES = (
    "serve",       # chronolog serve
    "topics",      # chronolog topics ..., describe-segments
    "timecmds",    # offsets, consume, reset-offsets
    "produce",     # produce (lines of a file, each with the time it carries)
    "groups",      # groups list / describe / delete
    "dumplog",     # dump-log
    "check",       # check (verify a data dir, report corrupt ranges)
    "demo",        # demo (storage-only walk through loghub)
    "pipeline",    # pipeline
    "security",    # users, acls
)


def _register_all() -> None:
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"chronolog.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("chronolog.cli."):
                continue
            raise
        module.register(app)


_register_all()


def main() -> None:
    """Console entry point: one clear line for expected errors, never a traceback."""
    from chronolog.errors import ChronologError

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        app()
    except ChronologError as exc:
        print(f"chronolog: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except Exception as exc:  # a client error no command turned into words: still one line, never a traceback
        from confluent_kafka import KafkaException
        if not isinstance(exc, KafkaException):
            raise
        from chronolog.timetravel.client import kafka_error_text
        print(f"chronolog: error: {kafka_error_text(exc)}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
