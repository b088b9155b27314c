"""The end of a command read without typer (`cli.fastconsume`, `cli.fastproduce`): once its output is
flushed, the process ends at once (`os._exit`) instead of tearing down every module and object, which
costs a short command a tenth of its time. Only when this process is the command itself: never inside
a test run, under coverage, a debugger or a profiler, which call main() in-process or save their data
at exit."""

from __future__ import annotations

import os
import sys


def finish(code: int = 0) -> None:
    """Exit with `code` now if this process is the `chronolog` command; else return (the caller goes on
    as before). A stdout that cannot take the last bytes is left to the normal exit."""
    main = sys.modules.get("__main__")
    if getattr(main, "__file__", None) is None or "pytest" in sys.modules or "coverage" in sys.modules \
            or sys.gettrace() is not None or sys.getprofile() is not None:  # a tracer or profiler saves at exit
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    os._exit(code)
