"""The examples of docs/testing.md, each a complete test file, run as a user would run them: in pytest,
with the plugin. An example whose library is not installed is skipped; Quix Streams comes from its own
directory beside the venv (`make quixdeps`: it pins an older confluent-kafka), Spark's only where the suite
runs Spark. The Quix example must raise no warning of Quix's own (a deprecated argument)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

import chronolog
from tests.testing.conftest import python_path

SRC = Path(chronolog.__file__).resolve().parents[1]
DOC = SRC.parent / "docs" / "testing.md"
PLUGIN = ["-p", "no:chronolog", "-p", "chronolog.testing.plugin"]
QUIX_LIB = Path(sys.prefix) / "quix-lib"  # `make quixdeps`


def examples() -> dict[str, str]:
    blocks = re.findall(r"```python\n(# (test_\w+\.py)\n.*?)```", DOC.read_text(), flags=re.S)
    return {name: code for code, name in blocks}


def test_the_doc_has_the_five_examples():
    assert sorted(examples()) == ["test_aiokafka_app.py", "test_confluent_app.py", "test_kafka_python_app.py",
                                  "test_quix_app.py", "test_spark_job.py"]


@pytest.mark.compat
@pytest.mark.parametrize("name, needs", [
    ("test_confluent_app.py", "confluent_kafka"),
    ("test_aiokafka_app.py", "aiokafka"),
    ("test_kafka_python_app.py", "kafka"),
    ("test_quix_app.py", "quixstreams"),
    pytest.param("test_spark_job.py", "pyspark", marks=[pytest.mark.spark, pytest.mark.slow]),
])
def test_doc_example_passes(pytester, monkeypatch, name, needs):
    first = [QUIX_LIB] if needs == "quixstreams" and (QUIX_LIB / needs).is_dir() else []
    if not first:
        pytest.importorskip(needs)
    monkeypatch.setenv("PYTHONPATH", python_path(*first, SRC))
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\n")
    pytester.makepyfile(**{name[:-3]: examples()[name]})
    result = pytester.runpytest_subprocess(*PLUGIN, timeout=300)
    result.assert_outcomes(passed=1)
    if needs == "quixstreams":  # Quix 3.28 warns of app.run(sdf): the example uses what is current
        own = [line for line in result.outlines if "quixstreams/" in line and "Warning" in line]
        assert not own, own


@pytest.mark.compat
def test_doc_unittest_example_passes(tmp_path):
    import subprocess
    import sys

    (code,) = re.findall(r"```python\n(import unittest\n.*?)```", DOC.read_text(), flags=re.S)
    (tmp_path / "test_orders_unittest.py").write_text(code)
    done = subprocess.run([sys.executable, "-m", "unittest", "test_orders_unittest"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": python_path(SRC)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Ran 1 test" in done.stderr
