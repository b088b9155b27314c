"""Counting this process's open files under one directory: a test that checks that its own files were
closed counts only those, since other tests' threads (a broker, Spark's gateway, a cache) may open or close
descriptors of their own at the same moment."""

from __future__ import annotations

import os
from pathlib import Path


def open_files_under(root: str | os.PathLike[str]) -> int:
    """How many of this process's descriptors are open on a file under `root`."""
    prefix = str(Path(root).resolve()) + os.sep
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed between the listing and the look
            continue
        if target.startswith(prefix):
            count += 1
    return count
