"""`chronolog produce` read without the CLI framework, as `cli.fastserve` reads `serve`: typer and the other
commands' modules cost more CPU than loading a 20 MB log does.

Only a command line this module fully understands is run here: `produce TOPIC [FILE]` with the options of
`chronolog.cli.produce`, each as `--opt value` or `--opt=value`, without -X or --command-config, on a stderr
that is not a terminal (a terminal gets typer's progress bar). Anything else (help, an unknown option, a bad number) returns False
and typer reads it, so help and error messages have one source.
"""

from __future__ import annotations

import sys

# option -> (parameter, kind): str, int, list (repeatable) or flag
_OPTIONS = {"--time-field": ("time_field", str), "--time-regex": ("time_regex", str),
            "--time-format": ("time_format", str), "--year": ("year", int), "--timezone": ("timezone", str),
            "--field-separator": ("field_separator", str), "-F": ("field_separator", str),
            "--key-field": ("key_field", str), "--key-separator": ("key_separator", str),
            "-K": ("key_separator", str), "--header": ("header", list), "-H": ("header", list),
            "--partition": ("partition", int), "-p": ("partition", int), "--skip-lines": ("skip_lines", int),
            "--skip-blank": ("skip_blank", bool), "--require-time": ("require_time", bool),
            "--bootstrap-server": ("bootstrap", str), "-b": ("bootstrap", str), "-X": ("x", list),
            "--command-config": ("command_config", str)}


def parse(argv: list[str]) -> dict | None:
    """The produce options of `argv` (which starts with "produce"), or None where typer should read it."""
    if not argv or argv[0] != "produce":
        return None
    values: dict = {"header": [], "x": [], "bootstrap": "127.0.0.1:9092"}
    positional: list[str] = []
    rest = argv[1:]
    i = 0
    while i < len(rest):
        arg = rest[i]
        i += 1
        if arg == "-" or not arg.startswith("-"):
            positional.append(arg)
            continue
        name, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if name not in _OPTIONS:
            return None
        key, kind = _OPTIONS[name]
        if kind is bool:
            if eq:
                return None
            values[key] = True
            continue
        if eq:
            value = inline
        elif i < len(rest):
            value, i = rest[i], i + 1
        else:
            return None
        if kind is list:
            values[key].append(value)
        elif kind is int:
            if not value.isdigit():
                return None
            values[key] = int(value)
        else:
            values[key] = value
    if not 1 <= len(positional) <= 2:
        return None
    values["topic"] = positional[0]
    values["file"] = positional[1] if len(positional) > 1 else "-"
    return values


def run(argv: list[str]) -> bool:
    """Produce if `argv` is a plain produce command line (exits with its code), else False."""
    if sys.stderr.isatty():
        return False
    values = parse(argv)
    if values is None:
        return False
    if values.pop("x") or values.pop("command_config", None):  # client configs: typer's path reads them
        return False
    from chronolog.timetravel.lineload import load
    code = load(values.pop("topic"), values.pop("file"), {"bootstrap.servers": values.pop("bootstrap")}, **values)
    from chronolog.cli.fastexit import finish
    finish(code)
    if code:
        sys.exit(code)
    return True
