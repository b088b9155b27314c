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

from chronolog.lazy import wrap_first_import

_PHANTOM = "kio.static._phantom"  # the one kio module that imports hypothesis when it can


def _without_hypothesis(run, module) -> None:
    """Runs kio's `_PHANTOM` while `import hypothesis` raises ImportError (unless hypothesis was imported
    meanwhile: kio then registers its strategies as usual)."""
    if "hypothesis" in sys.modules:
        run()
        return
    sys.modules["hypothesis"] = None  # type: ignore[assignment]  # makes `import hypothesis` raise ImportError
    try:
        run()
    finally:
        del sys.modules["hypothesis"]


if "hypothesis" not in sys.modules and _PHANTOM not in sys.modules:
    wrap_first_import(_PHANTOM, _without_hypothesis)
