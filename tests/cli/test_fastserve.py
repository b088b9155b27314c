"""`chronolog serve` is read without typer when the command line is plain (a faster start); these tests hold
the two readings together: same options, same defaults, and anything unusual left to typer."""

from __future__ import annotations

import subprocess
import sys

import typer.main

from chronolog.cli import fastserve
from chronolog.cli.main import app


def _serve_params() -> dict:
    command = typer.main.get_command(app).commands["serve"]
    return {p.name: p for p in command.params}


def test_the_fast_reading_knows_exactly_the_serve_options_and_defaults():
    params = _serve_params()
    names = {opt for p in params.values() for opt in p.opts}
    assert names == set(fastserve._OPTIONS)
    defaults = fastserve.parse(["serve", "--data-dir", "d"])
    assert defaults == {"data_dir": "d", "host": params["host"].default, "port": params["port"].default,
                        "config": []}


def test_plain_command_lines_are_read_and_others_left_to_typer():
    assert fastserve.parse(["serve", "--data-dir=d", "-c", "a=b", "--config", "x=1", "--port=0", "--host", "::1"]) == {
        "data_dir": "d", "host": "::1", "port": 0, "config": ["a=b", "x=1"]}
    for argv in (["serve"], ["serve", "--help"], ["serve", "--data-dir"], ["serve", "--data-dir", "d", "--bogus"],
                 ["serve", "--data-dir", "d", "--port", "x"], ["topics", "list"], [], ["serve", "d"]):
        assert fastserve.parse(argv) is None, argv


def test_serve_without_the_framework_imports_neither_typer_nor_hypothesis(tmp_path):
    """The start-time contract: a broker started by `chronolog serve` imports neither the CLI framework nor
    hypothesis (kio would register strategies with it), both of which cost a large part of a start."""
    code = ("import sys, threading\n"
            "from chronolog.cli import fastserve\n"
            "import chronolog.server.broker as b\n"
            "b.serve = lambda *a: print(sorted(m for m in ('typer', 'hypothesis', 'pydantic', 'pyspark') "
            "if m in sys.modules))\n"
            f"assert fastserve.run(['serve', '--data-dir', {str(tmp_path)!r}])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
