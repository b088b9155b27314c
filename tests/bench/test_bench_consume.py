"""`python -m bench consume` in a tiny setting: the race with kcat runs to its table and the outputs agree
byte for byte, so that a change to consume, the broker or the bench cannot break `make bench` unseen."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed")
def test_bench_consume_runs_in_a_tiny_setting():
    env = {**os.environ, "CHRONOLOG_BENCH_CONSUME_LINES": "3000", "CHRONOLOG_BENCH_CONSUME_BIG": "0"}
    proc = subprocess.run([sys.executable, "-m", "bench", "consume"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    out = proc.stdout
    assert proc.returncode == 0 and "bench consume failed" not in out, out + proc.stderr
    rows = [line for line in out.splitlines() if line.startswith(("window:", "empty window"))]
    assert len(rows) == 3 and all(row.rstrip().endswith("yes") for row in rows), out
