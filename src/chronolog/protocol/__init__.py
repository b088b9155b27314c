"""The Kafka wire protocol, sans I/O.

Before any of its modules imports kio: kio registers a hypothesis strategy for each of its primitive types
whenever hypothesis can be imported, and importing hypothesis costs 50-100 ms, a third of a broker's start
in an environment that has it (any project with hypothesis among its test tools). A broker has no use for
those strategies, so unless this process already imported hypothesis, kio's types are imported as if
hypothesis were absent; hypothesis itself stays importable afterwards."""


from __future__ import annotations

import sys

if "hypothesis" not in sys.modules and "kio.static._phantom" not in sys.modules:
    sys.modules["hypothesis"] = None  # type: ignore[assignment]  # makes `import hypothesis` raise ImportError
    try:
        import kio.static._phantom  # noqa: F401
        import kio.static.primitive  # noqa: F401
    finally:
        del sys.modules["hypothesis"]
