"""`python -m bench produce` in a tiny setting: the race with kcat -P runs to its table and both topics read
back as the file, so a change to produce cannot break `make bench` unseen."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_bench_produce_runs_and_compares_bytes():
    if shutil.which("kcat") is None:
        pytest.skip("kcat not installed")
    env = {**os.environ, "CHRONOLOG_BENCH_PRODUCE_LINES": "3000"}
    proc = subprocess.run([sys.executable, "-m", "bench", "produce"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    out = proc.stdout
    assert proc.returncode == 0 and "bench produce failed" not in out, out + proc.stderr
    rows = {line.split("  ")[0]: line for line in out.splitlines()}
    assert "ratio kcat / chronolog (>= 0.5 target)" in rows
    assert rows["values byte for byte as the file (both)"].split()[-1] == "yes"
    assert rows["chronolog's timestamps = each line's syslog time"].split()[-1] == "yes"
