"""Modules imported, and objects made, when first used. A broker's start imports only what answering its first clients needs
(issue #26); code for rare requests (ACLs, SASL), compression and the like is imported on its first use."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


class LazyModule:
    """Stands for the module `name`: it is imported when one of its attributes is first read. Given the
    namespace it was assigned in (`into`, a module's `globals()`, and the name it has there), it puts the module
    itself there on that first read, so later reads cost nothing; otherwise each read asks `importlib` again
    (a dict lookup once imported): fine where calls are rare."""

    def __init__(self, name: str, into: dict[str, Any] | None = None, as_name: str | None = None) -> None:
        self._name = name
        self._into = into
        self._as = as_name or name

    def __getattr__(self, attr: str) -> Any:
        module = importlib.import_module(self._name)
        if self._into is not None and self._into.get(self._as) is self:
            self._into[self._as] = module
        return getattr(module, attr)


class LazyObject:
    """Stands for the object `make()` returns, made when one of its attributes is first read (the broker's SCRAM
    credentials store, needed only by SASL listeners and the credentials admin APIs)."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._made: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._made is None:
            self._made = self._make()
        return getattr(self._made, name)
