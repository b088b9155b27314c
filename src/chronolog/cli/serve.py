"""`chronolog serve`: the broker. A plain serve command line is read by `chronolog.cli.fastserve` without
typer (a faster start); this is the typer command for help, errors and the rest. Both run `fastserve.start`."""

from __future__ import annotations

from pathlib import Path

import typer

from chronolog.cli.fastserve import parse_configs, start


def register(app: typer.Typer) -> None:
    @app.command()
    def serve(
        data_dir: Path = typer.Option(..., "--data-dir", help="Where partitions live (created if missing)."),
        host: str = typer.Option("127.0.0.1", help="Listen address (loopback unless explicitly allowed)."),
        port: int = typer.Option(9092, help="Listen port (0: any free port)."),
        config: list[str] = typer.Option([], "--config", "-c",
                                          help="Broker config key=value, Kafka's names (repeatable)."),
        console_port: int | None = typer.Option(None, "--console-port",
                                                help="Also serve the web console on 127.0.0.1 at this port."),
    ) -> None:
        """Run the Kafka-compatible broker until SIGTERM or Ctrl-C."""
        start(data_dir, host, port, parse_configs(config), console_port)
