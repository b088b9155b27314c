"""`chronolog serve` read without the CLI framework, so a broker starts in a fraction of the time.

Only a command line this module fully understands is run here: `serve` followed by the options of
`chronolog.cli.serve` (`--data-dir`, `--host`, `--port`, `--config/-c`, `--console-port`, each as `--opt value` or
`--opt=value`). Anything else (help, an unknown option, a missing value, a bad port) returns False and the
caller hands the command line to typer, whose help and error messages stay the only ones users see.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from chronolog.config import parse_pairs
from chronolog.errors import ChronologError

_OPTIONS = {"--data-dir": "data_dir", "--host": "host", "--port": "port", "--config": "config", "-c": "config",
            "--console-port": "console_port"}


def parse_configs(items: list[str]) -> dict[str, str]:
    return parse_pairs(items, "--config")


def parse(argv: list[str]) -> dict | None:
    """The serve options of `argv` (which starts with "serve"), or None where typer should read it."""
    if not argv or argv[0] != "serve":
        return None
    values: dict = {"host": "127.0.0.1", "port": 9092, "config": []}
    rest = argv[1:]
    i = 0
    while i < len(rest):
        arg = rest[i]
        name, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        key = _OPTIONS.get(name)
        if key is None:
            return None
        if eq:
            value = inline
            i += 1
        elif i + 1 < len(rest):
            value = rest[i + 1]
            i += 2
        else:
            return None
        if key == "config":
            values["config"].append(value)
        elif key in ("port", "console_port"):
            try:
                values[key] = int(value)
            except ValueError:
                return None
        else:
            values[key] = value
    if "data_dir" not in values:
        return None
    return values


def start(data_dir: Path, host: str, port: int, configs: dict[str, str], console_port: int | None = None) -> None:
    """What `serve` does, however its command line was read: check the data dir, log at INFO, run (with the
    web console on 127.0.0.1:`console_port` beside it; its modules are imported only then)."""
    if data_dir.exists() and not data_dir.is_dir():
        raise ChronologError(f"data dir {data_dir} is not a directory")
    from chronolog.server.broker import serve

    if console_port is not None:
        from chronolog.console.embed import start_beside_broker
        start_beside_broker(data_dir, host, port, configs, console_port)

    # A broker logs at INFO, as Kafka's server.log does: retention's deletions ("Deleting segment ...
    # due to log retention time ...ms breach") must show without -v. A lower level (-v) is kept.
    ours = logging.getLogger("chronolog")
    if ours.getEffectiveLevel() > logging.INFO:
        ours.setLevel(logging.INFO)
    configure_logging(os.environ.get(LOG_CONFIG_ENV))
    serve(data_dir, host, port, configs)


LOG_CONFIG_ENV = "CHRONOLOG_LOG_CONFIG"


def configure_logging(path: str | None) -> None:
    """An operator's logging configuration on top of the INFO default, as Kafka reads log4j.properties
    (`KAFKA_LOG4J_OPTS`): a `.json` file is a `logging.config.dictConfig`, any other a `fileConfig` (INI).
    It can route a logger to a file of its own, e.g. the authorizer's audit trail (`chronolog.authorizer`)."""
    if not path:
        return
    import configparser
    import json
    import logging.config

    try:
        if path.endswith(".json"):
            with open(path, encoding="utf-8") as f:
                config = json.load(f)
            config.setdefault("disable_existing_loggers", False)
            logging.config.dictConfig(config)
        else:
            if not os.path.isfile(path):
                raise OSError(f"no such file: {path}")
            logging.config.fileConfig(path, disable_existing_loggers=False)
    except (OSError, ValueError, KeyError, TypeError, RuntimeError, configparser.Error) as exc:
        raise ChronologError(f"{LOG_CONFIG_ENV}={path}: invalid logging configuration: {exc}") from None


def run(argv: list[str]) -> bool:
    """Serve if `argv` is a plain serve command line (True once the broker stopped), else False."""
    values = parse(argv)
    if values is None:
        return False
    start(Path(values["data_dir"]), values["host"], values["port"], parse_configs(values["config"]),
          values.get("console_port"))
    return True
