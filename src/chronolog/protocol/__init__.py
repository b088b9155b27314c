"""The Kafka wire protocol, sans I/O.

Before any of its modules imports kio: kio registers a hypothesis strategy for each of its primitive types
whenever hypothesis can be imported, and importing hypothesis costs 50-100 ms, a third of a broker's start
in an environment that has it (any project with hypothesis among its test tools). A broker has no use for
those strategies, so unless this process already imported hypothesis when kio is first imported, kio's types
are imported as if hypothesis were absent; hypothesis itself stays importable afterwards.

kio is not imported here but on its first use (a finder below wraps the import of its module that looks for
hypothesis): `consume --format raw` speaks the wire with `fetch_client` alone and starts without kio's types
(a sixth of that command's start)."""


from __future__ import annotations

import sys

_PHANTOM = "kio.static._phantom"  # the one kio module that imports hypothesis when it can


class _WithoutHypothesis:
    """kio's own loader of `_PHANTOM`, run while `import hypothesis` raises ImportError."""

    def __init__(self, loader) -> None:
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        if "hypothesis" in sys.modules:  # imported meanwhile: kio registers its strategies as usual
            self.loader.exec_module(module)
            return
        sys.modules["hypothesis"] = None  # type: ignore[assignment]  # makes `import hypothesis` raise ImportError
        try:
            self.loader.exec_module(module)
        finally:
            del sys.modules["hypothesis"]

    def __getattr__(self, name: str):  # get_source and the like, for tracebacks
        return getattr(self.loader, name)


class _PhantomFinder:
    """Finds `_PHANTOM` as the path finder does, with the loader above; then leaves `sys.meta_path`."""

    @staticmethod
    def find_spec(fullname: str, path=None, target=None):
        if fullname != _PHANTOM:
            return None
        sys.meta_path.remove(_PhantomFinder)
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _WithoutHypothesis(spec.loader)
        return spec


if "hypothesis" not in sys.modules and _PHANTOM not in sys.modules:
    sys.meta_path.insert(0, _PhantomFinder)
