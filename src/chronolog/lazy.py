"""Modules imported when first used. A broker's start imports only what answering its first clients needs
(issue #26); code for rare requests (ACLs, SASL), compression and the like is imported on its first use."""

from __future__ import annotations

import importlib
from typing import Any


class LazyModule:
    """Stands for the module `name`: it is imported when one of its attributes is first read. Each read asks
    `importlib` again (a dict lookup once imported), so use it where calls are rare, or keep what it gives."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)
