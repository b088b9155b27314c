"""`python -m bench kafka` in its tiny setting: the race with Apache Kafka 4.4 runs to its table, so that a
change to the broker, the Kafka fixture or the clients cannot break `make bench` unseen."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from chronolog.testing.kafka import kafka_available

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_bench_kafka_runs_in_its_tiny_setting():
    reason = kafka_available()
    if reason:
        pytest.skip(f"Apache Kafka cannot run here: {reason}")
    env = {**os.environ, "CHRONOLOG_BENCH_KAFKA": "tiny"}
    proc = subprocess.run([sys.executable, "-m", "bench", "kafka"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=480)
    out = proc.stdout
    assert proc.returncode == 0 and "bench kafka failed" not in out, out + proc.stderr
    lines = out.splitlines()
    for label in ("exec -> first Metadata", "produce 3,000 x 1 KiB", "  broker CPU per GB produced",
                  "  client ceiling", "  client CPU per GB consumed", "the broker alone: raw Produce",
                  "the broker alone: raw Fetch", "kafka-consumer-perf-test", "ListOffsets by time p50", "SIGKILL, 4 MiB",
                  "SIGKILL, 20 partitions", "  exec -> the last partition's record fetched"):
        assert any(line.startswith(label) for line in lines), (label, out)
    if shutil.which("kcat"):  # librdkafka from C beside the Python client
        for label in ("produce 3,000 x 1 KiB, kcat -P", "consume 3 MB, kcat -C -e"):
            assert any(line.startswith(label) for line in lines), (label, out)
    # the consume loops' ceilings (confluent-kafka, the perf tool, kcat): answered from memory, nearly all
    ceilings = [line for line in lines if line.startswith("  client ceiling: the same consume loop")]
    assert len(ceilings) == (3 if shutil.which("kcat") else 2), out
    for line in lines:
        if "answered from memory" in line:
            answered, forwarded = re.search(r"from memory (\d+), forwarded (\d+)", line).groups()
            assert int(forwarded) <= max(2, int(answered) // 10), line
    exact = next(line for line in out.splitlines() if "answers equal to brute force" in line).split()
    assert exact[-5:-3] == ["20", "20"], out  # both brokers answer every late lookup exactly
