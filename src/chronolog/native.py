"""The optional C extensions, behind one contract.

Each C module has a pure-Python twin with its answers, so a missing compiler at install time, or
CHRONOLOG_PURE_PYTHON=1 (for tests and benchmarks of the Python paths), only costs speed:

- every C module is loaded through `load_native`, so that the one switch turns all of them off;
- a C function that leaves a case to its Python twin returns None, and only None (the Python code then
  answers, or raises the error the input deserves); where None is an answer of the twin, the C function
  answers with another value its caller maps (documented at the caller).
"""

from __future__ import annotations

import importlib
import os

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (a raw consume's start has no use for it)
if TYPE_CHECKING:
    from typing import Any

PURE_PYTHON_ENV = "CHRONOLOG_PURE_PYTHON"


def pure_python() -> bool:
    """Whether the C extensions are switched off (CHRONOLOG_PURE_PYTHON set, and not to "0")."""
    return os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0")


def load_native(module: str, name: str | None = None) -> Any:
    """The extension `module` (or its attribute `name`) if it was built and is not switched off, else None."""
    if pure_python():
        return None
    try:
        found = importlib.import_module(module)
    except ImportError:
        return None
    return found if name is None else getattr(found, name, None)
