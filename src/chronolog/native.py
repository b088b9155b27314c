"""The optional C extensions: each has a pure-Python twin with exactly its answers, so a missing compiler
at install time, or CHRONOLOG_PURE_PYTHON=1 (for tests and benchmarks of the Python paths), only costs
speed."""

from __future__ import annotations

import importlib
import os
from typing import Any


def load_native(module: str, name: str) -> Any:
    """`module.name` if the extension was built and not switched off, else None."""
    if os.environ.get("CHRONOLOG_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError:
        return None
