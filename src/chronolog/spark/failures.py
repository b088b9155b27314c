"""The source's and the sink's errors as the user's one line, not a Python traceback inside Spark's.

Spark runs every method of a Python data source in a Python worker (planning ones too: `schema`, `reader`,
`partitions`, `writer`), and a worker's exception reaches the driver as text: the worker writes the whole
traceback (`pyspark.util.handle_worker_exception`) and the JVM wraps it in its own error
(`[PYTHON_DATA_SOURCE_ERROR] Failed to plan Python data source read: Traceback ...` in an
AnalysisException, `An exception was thrown from the Python worker` in a PythonException). The clear
message was the traceback's last line, 8-14 lines down.

Two halves:
- in the worker, `one_line` / `one_line_iter` around each method Spark calls: an expected error (a
  `ChronologError`) is written without its traceback (the worker's own switch, `SPARK_HIDE_TRACEBACK`,
  read when the exception is written; the worker exits after it), so any client sees one line;
- on the driver (`install`, from `register()`): PySpark's conversion of a JVM error into a Python
  exception (`pyspark.errors.exceptions.captured.convert_exception`) is wrapped so that an error carrying a
  chronolog message is raised with that message as its whole text, as the same PySpark class (and also a
  `ChronologError`), without the worker's traceback.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from chronolog.errors import ChronologError

F = TypeVar("F", bound=Callable[..., Any])

# The last line a worker writes for a chronolog exception: `chronolog.errors.ChronologError: <message>`
# (after Spark's prefix on the same line when the traceback is hidden).
_MESSAGE = re.compile(r"(?:^|: )chronolog(?:\.\w+)*\.[A-Z]\w*: (?P<message>.+?)\s*$", re.MULTILINE)


def _quiet() -> None:
    os.environ["SPARK_HIDE_TRACEBACK"] = "1"


def one_line(fn: F) -> F:
    """A worker-side method whose ChronologError reaches Spark without a traceback."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ChronologError:
            _quiet()
            raise
    return wrapper  # type: ignore[return-value]


def one_line_iter(fn: Callable[..., Iterator]) -> Callable[..., Iterator]:
    """`one_line` for a generator method (the error comes while Spark iterates, not at the call)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            yield from fn(*args, **kwargs)
        except ChronologError:
            _quiet()
            raise
    return wrapper


def chronolog_message(text: str) -> str | None:
    """The chronolog message in the text of a Spark error, None when there is none."""
    found = _MESSAGE.findall(text or "")
    return found[-1] if found else None


@functools.cache
def _one_line_class(cls: type) -> type:
    """`cls` (a PySpark exception class) whose text is the chronolog message, and a ChronologError too;
    its name and module are the PySpark class's, so what a user greps for stays."""
    def __str__(self) -> str:  # noqa: N807
        return self._chronolog_message
    return type(cls.__name__, (cls, ChronologError), {"__str__": __str__, "__module__": cls.__module__,
                                                      "__qualname__": cls.__qualname__})


def _text(exc: BaseException) -> str:
    """What the JVM said (its getMessage, kept by PySpark): for a PythonException it holds the worker's
    text after Spark's prefix, as the AnalysisException of a planning worker does."""
    return getattr(exc, "_desc", "") or ""


def one_line_exception(converted: BaseException) -> BaseException:
    """`converted` (a PySpark exception) as its chronolog message, or unchanged when it carries none."""
    message = chronolog_message(_text(converted))
    if message is None or isinstance(converted, ChronologError):
        return converted
    try:
        converted.__class__ = _one_line_class(type(converted))
    except TypeError:  # a class whose layout forbids it: leave the error as PySpark made it
        return converted
    converted._chronolog_message = message  # type: ignore[attr-defined]
    converted._desc = message  # type: ignore[attr-defined]
    return converted.with_traceback(None)


def install() -> None:
    """Wrap PySpark's conversion of JVM errors (classic PySpark; Spark Connect clients see the worker's
    one line inside Spark's message). Idempotent."""
    try:
        from pyspark.errors.exceptions import captured
    except ImportError:
        return
    original = getattr(captured, "convert_exception", None)
    if original is None or getattr(original, "_chronolog", False):
        return

    @functools.wraps(original)
    def convert_exception(e):
        return one_line_exception(original(e))

    convert_exception._chronolog = True  # type: ignore[attr-defined]
    captured.convert_exception = convert_exception


__all__ = ["chronolog_message", "install", "one_line", "one_line_exception", "one_line_iter"]
