"""The `chronolog` command. Each area registers its own commands from its own module, so the layers'
owners never edit one shared file; a module that is absent (an optional extra not installed) is skipped.

Start time matters for `chronolog serve`: a broker started by a test fixture or a developer many times a day
should not pay for the CLI framework (typer validates options through pydantic: about 80 ms of imports),
the time-travel tools, Spark or plotting. So a plain `serve` command line is read by `chronolog.cli.fastserve`
without typer; anything it does not recognise (help, a mistake) goes through typer as before, so help and
error messages have one source; `produce` likewise (`chronolog.cli.fastproduce`), so a load is not
slower than the file it reads, and `consume --format raw` (`chronolog.cli.fastconsume`), as fast to start as
kcat -C. `from chronolog.cli.main import app` builds the full app when first asked.
"""

from __future__ import annotations

import importlib
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at start
if TYPE_CHECKING:
    from typing import Any

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
    "quotas",      # quotas describe / alter (client quotas)
    "console",     # console (the web console)
    "sql",         # sql (DuckDB over a time window; the sql extra)
)

_app: Any = None


def _build_app() -> Any:
    global _app
    if _app is not None:
        return _app
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

    import logging

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

    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"chronolog.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("chronolog.cli."):
                continue
            raise
        module.register(app)
    _app = app
    return app


def __getattr__(name: str) -> Any:
    """`app`, the typer application with every command (PEP 562: built when first asked for)."""
    if name == "app":
        return _build_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """Console entry point: one clear line for expected errors, never a traceback."""
    from chronolog.errors import ChronologError

    _when_imported("logging", _log_format)
    try:
        # Each fast path is imported only for its own command (each reads nothing else): a `serve` does not
        # pay for the produce and consume modules at its start.
        argv = sys.argv[1:]
        command = argv[0] if argv else ""
        handled = False
        if command == "produce":
            from chronolog.cli import fastproduce
            handled = fastproduce.run(argv)
        elif command == "consume":
            from chronolog.cli import fastconsume
            handled = fastconsume.run(argv)
        elif command == "serve":
            from chronolog.cli import fastserve
            handled = fastserve.run(argv)
        if not handled:
            _build_app()()
    except ChronologError as exc:
        print(f"chronolog: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except OSError as exc:  # the output could not be written (a full disk, a reader gone): one line
        _output_failed(exc)
    except Exception as exc:  # a client error no command turned into words: still one line, never a traceback
        from confluent_kafka import KafkaException
        if not isinstance(exc, KafkaException):
            raise
        from chronolog.timetravel.client import kafka_error_text
        print(f"chronolog: error: {kafka_error_text(exc)}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)


def _log_format(logging: Any) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


def _when_imported(name: str, then: Any) -> None:
    """Call `then(module)` once the module `name` is imported: now if it is, else right after its first import.
    The log format is set this way, so a command whose path never logs (`consume --format raw`) does not
    import `logging` (with re, traceback, threading: a quarter of that command's start), and one that does
    prints its lines as every other command does."""
    if name in sys.modules:
        then(sys.modules[name])
        return
    from chronolog.lazy import wrap_first_import

    def run_then(run: Any, module: Any) -> None:
        run()
        then(module)

    wrap_first_import(name, run_then)


def _output_failed(exc: OSError) -> None:
    """Exit 1 after an OSError no command turned into words: silently when the reader went away (`| head`,
    as click does), else with one line naming the error. Standard output is pointed at /dev/null first,
    so the exit's own flush of what is still buffered cannot fail again."""
    import os

    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    if not isinstance(exc, BrokenPipeError):
        where = f": {exc.filename}" if exc.filename else ""
        print(f"chronolog: error: {exc.strerror or exc}{where} (errno {exc.errno})", file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
    main()
