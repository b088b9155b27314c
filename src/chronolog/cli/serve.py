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
        if data_dir.exists() and not data_dir.is_dir():
            raise ChronologError(f"data dir {data_dir} is not a directory")
        from chronolog.server.broker import serve as run

        # A broker logs at INFO, as Kafka's server.log does: retention's deletions ("Deleting segment ...
        # due to log retention time ...ms breach") must show without -v. A lower level (-v) is kept.
        ours = logging.getLogger("chronolog")
        if ours.getEffectiveLevel() > logging.INFO:
            ours.setLevel(logging.INFO)
        run(data_dir, host, port, parse_configs(config))
