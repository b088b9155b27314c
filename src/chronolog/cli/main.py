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



@app.callback()
def _root() -> None:
    """A Kafka-compatible commit log with time at its centre."""


# Modules under chronolog.cli that define `register(app: typer.Typer) -> None`.
COMMAND_MODULES = (
    "serve",       # chronolog serve
    "topics",      # chronolog topics ..., describe-segments
    "timecmds",    # offsets, consume, reset-offsets
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
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
