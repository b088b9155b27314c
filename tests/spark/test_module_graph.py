"""The spark package's modules import one another without a circle: the option types live in
`spark.ranges`, below `source`, `planning`, `reading`, `stream` and `sink`."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import chronolog.spark
from tests.test_import_layers import circles

PACKAGE = Path(chronolog.spark.__file__).parent
MODULES = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")


def _imports(module: str) -> set[str]:
    """Every `chronolog.spark.X` module that `module` imports, at the top or inside a function (a lazy
    import is still an edge: it only hides a circle until the function runs)."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            if name.startswith("chronolog.spark."):
                stem = name.split(".")[2]
                if stem in MODULES and stem != module:
                    out.add(stem)
    return out


def test_no_import_circle():
    graph = {m: _imports(m) for m in MODULES}
    assert circles(graph) == []  # (tests/test_import_layers.py holds every package to this)
    # The shared types have one home, which imports none of its users.
    assert graph["ranges"] <= {"options"}
    for user in ("source", "planning", "reading", "stream"):
        assert "ranges" in graph[user], user


@pytest.mark.parametrize("module", MODULES)
def test_each_module_imports_alone(module):
    """Each module imported first, in a fresh interpreter (an import circle that ran at the top would
    fail here on a partly initialised module)."""
    done = subprocess.run([sys.executable, "-c", f"import chronolog.spark.{module}"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_planning_interpreters_import_little():
    """Spark plans each query in fresh interpreters (the source's `schema()`, then `partitions()`): the
    first needs no pyarrow, and kio's import in the planner must not pull in hypothesis (and pytest, trio)."""
    code = ("import sys, chronolog.spark.source; before = 'pyarrow' in sys.modules; "
            "import chronolog.spark.planning; print(before, 'hypothesis' in sys.modules, 'pytest' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "False", "False"]
