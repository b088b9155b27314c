"""`chronolog serve`: the broker."""

from __future__ import annotations

import logging
from pathlib import Path

import typer

from chronolog.errors import ChronologError


def parse_configs(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ChronologError(f"--config takes key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def register(app: typer.Typer) -> None:
    @app.command()
    def serve(
        data_dir: Path = typer.Option(..., "--data-dir", help="Where partitions live (created if missing)."),
        host: str = typer.Option("127.0.0.1", help="Listen address (loopback unless explicitly allowed)."),
        port: int = typer.Option(9092, help="Listen port (0: any free port)."),
        config: list[str] = typer.Option([], "--config", "-c",
                                          help="Broker config key=value, Kafka's names (repeatable)."),
    ) -> None:
        """Run the Kafka-compatible broker until SIGTERM or Ctrl-C."""
        from chronolog.server.broker import serve as run

        # Disk incidents are logged from INFO up: "writes resumed" belongs beside the ERROR that said they stopped.
        logging.getLogger("chronolog.logdir").setLevel(logging.INFO)

        run(data_dir, host, port, parse_configs(config))
