"""Ending a process a test started (a worker, a console, a Connect or Faust worker): SIGTERM for a clean
stop, SIGKILL only when it hangs past the bound."""

from __future__ import annotations

import signal
import subprocess


def stop(proc: subprocess.Popen, timeout: float = 30) -> int:
    """SIGTERM `proc` (nothing if it already exited) and wait `timeout` s; then SIGKILL. Its exit code."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(30)
