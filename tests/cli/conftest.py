"""The real `chronolog` command as a subprocess (main(): its error handling and logging as a user meets
them) and one broker per module."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

import pytest

from tests.brokerproc import BrokerProcess


@dataclass
class Run:
    rc: int
    out: str
    err: str


def chronolog(*args: str, stdin: str | None = None, timeout: float = 120) -> Run:
    p = subprocess.run([sys.executable, "-m", "chronolog.cli.main", *args], capture_output=True, text=True,
                       input=stdin, timeout=timeout)
    return Run(p.returncode, p.stdout, p.stderr)


def assert_one_line_error(r: Run, *expect: str) -> str:
    """Non-zero exit, exactly one line on stderr, no traceback, no librdkafka log line."""
    lines = [ln for ln in r.err.splitlines() if ln.strip()]
    assert r.rc != 0, (r.out, r.err)
    assert len(lines) == 1 and lines[0].startswith("chronolog: error: "), r.err
    assert "Traceback" not in r.err + r.out
    for text in expect:
        assert text in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def cli_broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("cli") / "data").start()
    yield proc
    proc.stop()
