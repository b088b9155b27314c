"""`chronolog console`: the time-first web console (see docs/console.md)."""

from __future__ import annotations

from pathlib import Path

import typer

from chronolog.cli.common import CommandConfigOpt, XOpt, client_conf
from chronolog.errors import ChronologError


def register(app: typer.Typer) -> None:
    @app.command()
    def console(
        bootstrap_server: str | None = typer.Option(None, "--bootstrap-server", "-b", help=(
            "Kafka-protocol broker, HOST:PORT (chronolog or Apache Kafka): topics, and consumer groups with "
            "their rewind.")),
        data_dir: str | None = typer.Option(None, "--data-dir", help=(
            "Read a data dir (ours or a copy of Kafka's log dir, a local path or a URI pyarrow opens) for "
            "topics, timelines, records and segments: exact timelines with late records placed. With "
            "--bootstrap-server too, groups come from the broker.")),
        host: str = typer.Option("127.0.0.1", help="Listen address (loopback by default)."),
        port: int = typer.Option(8080, help="Listen port (0: any free port)."),
        read_only: bool = typer.Option(False, "--read-only", help="Turn off writes (rewinding groups)."),
        x: list[str] = XOpt,
        command_config: Path | None = CommandConfigOpt,
    ) -> None:
        """Serve the web console until Ctrl-C."""
        from chronolog.console import check_installed
        check_installed()
        from chronolog.console.app import Target
        from chronolog.console.server import serve_forever

        if bootstrap_server is None and data_dir is None:
            raise ChronologError("give --bootstrap-server HOST:PORT, --data-dir DIR, or both")
        if bootstrap_server is None and (x or command_config):
            raise ChronologError("-X and --command-config are client configs: they go with --bootstrap-server")
        conf = {}
        if bootstrap_server is not None:
            conf = client_conf(bootstrap_server, x, command_config)
            from chronolog.timetravel.client import probe
            probe(bootstrap_server)
        if data_dir is not None:
            from chronolog.timetravel.opener import open_data_dir
            open_data_dir(data_dir).close()  # a missing data dir is one line now, not an error on every page
        if host not in ("127.0.0.1", "localhost", "::1"):
            typer.echo(f"chronolog: warning: the console has no login; on {host} anyone who can reach the port "
                       "reads every topic" + ("" if read_only else " and can rewind groups (see --read-only)"),
                       err=True)
        try:
            serve_forever(Target(data_dir, bootstrap_server, conf, read_only), host, port)
        except OSError as exc:
            raise ChronologError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
