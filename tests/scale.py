"""How much of the long-running checks a run does, from one setting: the environment variable
CHRONOLOG_TEST_SCALE, `ci` (the default, what `make test` runs) or `long` (`make test-long`).

The ci value of each count is chosen to still catch the bugs its test was written for (each call site
says which); the long value is the test's full count, for a run before a release or after a change to
the code the test guards. Tests read it through `scaled(ci, long)`, never the variable itself.
"""

from __future__ import annotations

import os
from typing import TypeVar

SCALES = ("ci", "long")
SCALE = os.environ.get("CHRONOLOG_TEST_SCALE", "ci").strip().lower() or "ci"
if SCALE not in SCALES:
    raise ValueError(f"CHRONOLOG_TEST_SCALE={SCALE!r}: use one of {', '.join(SCALES)}")
LONG = SCALE == "long"
T = TypeVar("T")


def scaled(ci: T, long: T) -> T:
    """`long` under CHRONOLOG_TEST_SCALE=long, else `ci`."""
    return long if LONG else ci
