"""Modules imported, and objects made, when first used. A broker's start imports only what answering its first clients needs
(issue #26); code for rare requests (ACLs, SASL), compression and the like is imported on its first use."""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # typing is not imported at run time: `consume --format raw` reads records without it
if TYPE_CHECKING:
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


def package_names(package: str, where: dict[str, str], namespace: dict[str, Any]) -> tuple[Callable, Callable]:
    """A package's PEP 562 `__getattr__` and `__dir__`: each name of `where` is read from its module (the
    value: a module of `package`) when first asked for, then kept in `namespace`, the package's globals."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(where))

    return __getattr__, __dir__


def wrap_first_import(name: str, wrap: Callable[[Callable[[], None], Any], None]) -> None:
    """Run the module `name`, at its first import, inside `wrap(run, module)`: `run()` executes the module
    with its own loader. A finder put first on `sys.meta_path` finds it as the path finder does, wraps its
    loader, and leaves the path: later imports cost nothing. (kio imported as if hypothesis were absent; the
    CLI's log format set right after `logging` is imported, by whichever command first imports it.)"""
    import sys
    from importlib.machinery import PathFinder

    class Wrapped:
        def __init__(self, loader: Any) -> None:
            self.loader = loader

        def create_module(self, spec: Any) -> Any:
            return self.loader.create_module(spec)

        def exec_module(self, module: Any) -> None:
            wrap(lambda: self.loader.exec_module(module), module)

        def __getattr__(self, attr: str) -> Any:  # get_source and the like, for tracebacks
            return getattr(self.loader, attr)

    class Finder:
        @staticmethod
        def find_spec(fullname: str, path: Any = None, target: Any = None) -> Any:
            if fullname != name:
                return None
            sys.meta_path.remove(Finder)
            spec = PathFinder.find_spec(fullname, path)
            if spec is not None and spec.loader is not None:
                spec.loader = Wrapped(spec.loader)
            return spec

    sys.meta_path.insert(0, Finder)
