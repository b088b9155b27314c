"""The console beside a broker (`chronolog serve --console-port P`): topics, timelines, records and
segments read the broker's own data dir read-only (readers take no lock, as `chronolog check` or a
Spark `path` read do), consumer groups go through the broker's plain listener on loopback."""

from __future__ import annotations

from pathlib import Path

from chronolog.console import check_installed
from chronolog.errors import ChronologError


def start_beside_broker(data_dir: Path, host: str, port: int, configs: dict[str, str], console_port: int) -> None:
    """Start the console in a daemon thread on 127.0.0.1:`console_port`. Groups are shown when the broker
    has a plain listener the console can name (its --host/--port, no `listeners` config, no port 0)."""
    check_installed()
    from chronolog.console.app import Target
    from chronolog.console.server import start_background

    bootstrap = None
    if "listeners" not in configs and port != 0:
        connect = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
        bootstrap = f"[{connect}]:{port}" if ":" in connect else f"{connect}:{port}"
    try:
        start_background(Target(str(data_dir), bootstrap, {}), "127.0.0.1", console_port)
    except OSError as exc:
        raise ChronologError(f"--console-port {console_port}: {exc.strerror or exc}") from None
