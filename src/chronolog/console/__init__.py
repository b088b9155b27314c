"""A time-first web console: a topic's records over time, a window's records, segments on a time axis,
consumer groups with their lag, and a group rewound to a time. Starlette served by uvicorn, Jinja2 templates
and a vendored chart (uPlot), all from the `console` extra (see docs/console.md); imported only by
`chronolog console` and `chronolog serve --console-port`."""

from __future__ import annotations

from importlib.util import find_spec

NEEDS = ("starlette", "uvicorn", "jinja2")


def check_installed() -> None:
    """One line naming the extra when a package of it is missing (the console's modules import them)."""
    from chronolog.errors import ChronologError
    missing = [name for name in NEEDS if find_spec(name) is None]
    if missing:
        raise ChronologError(f"the console needs {', '.join(missing)}: pip install 'chronolog[console]'")
