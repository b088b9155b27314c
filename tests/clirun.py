"""The `chronolog` command as a user meets it: main() (its error handling and logging), its output, its exit
code.

`chronolog(...)` runs main() in this process: a Python start per command cost a second or more, and the
tests here check the command's logic, not the interpreter. What a separate process would show is kept:
stdout and stderr are captured at the file descriptors too (librdkafka writes there from C), logging goes
to stderr as main() sets it up, and an uncaught exception ends in a traceback and exit code 1.
`chronolog_process(...)` runs the real `python -m chronolog.cli.main`, for the few tests that must see a
separate process (signals, imports at start, the real entry point).
"""

from __future__ import annotations

import io
import logging
import os
import signal
import subprocess
import sys
import tempfile
import traceback
import types
from dataclasses import dataclass


@dataclass
class Run:
    rc: int
    out: str
    err: str


def chronolog_process(*args: str, stdin: str | None = None, timeout: float = 120) -> Run:
    p = subprocess.run([sys.executable, "-m", "chronolog.cli.main", *args], capture_output=True, text=True,
                       input=stdin, timeout=timeout)
    return Run(p.returncode, p.stdout, p.stderr)


def _exit_code(exc: SystemExit, err: io.TextIOBase) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=err)  # as the interpreter does with sys.exit("text")
    return 1


def chronolog(*args: str, stdin: str | None = None, timeout: float = 120) -> Run:
    """`chronolog *args` through main(), in this process. `timeout` is for the process runner's signature:
    here the test's own timeout bounds a hung command."""
    from chronolog.cli.main import main

    sys.stdout.flush()
    sys.stderr.flush()
    saved_streams = sys.argv, sys.stdin, sys.stdout, sys.stderr
    saved_main = sys.modules["__main__"]
    saved_signals = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE)}
    loggers = [logging.getLogger(), *(lg for lg in logging.root.manager.loggerDict.values()
                                      if isinstance(lg, logging.Logger))]
    saved_levels = [(lg, lg.level) for lg in loggers]
    saved_fds = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile() as fd_out, tempfile.TemporaryFile() as fd_err:
        out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
        err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace", write_through=True)
        # main()'s logging.basicConfig adds nothing when the root logger has handlers (pytest's): this is
        # the handler it would add, writing to this run's stderr.
        handler = logging.StreamHandler(err)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        try:
            os.dup2(fd_out.fileno(), 1)
            os.dup2(fd_err.fileno(), 2)
            sys.argv = ["chronolog", *args]
            sys.stdin = io.TextIOWrapper(io.BytesIO((stdin or "").encode()), encoding="utf-8")
            sys.stdout, sys.stderr = out, err
            # click names the program after __main__'s package; the installed script has none.
            sys.modules["__main__"] = types.ModuleType("__main__")
            root.addHandler(handler)
            root.setLevel(logging.WARNING)
            try:
                main()
                rc = 0
            except SystemExit as exc:
                rc = _exit_code(exc, err)
            except BaseException:  # noqa: BLE001  (a process would print the traceback and exit 1)
                traceback.print_exc(file=err)
                rc = 1
        finally:
            root.removeHandler(handler)
            for lg, level in saved_levels:
                lg.setLevel(level)
            sys.argv, sys.stdin, sys.stdout, sys.stderr = saved_streams
            sys.modules["__main__"] = saved_main
            for s, h in saved_signals.items():
                signal.signal(s, h)
            os.dup2(saved_fds[0], 1)
            os.dup2(saved_fds[1], 2)
            os.close(saved_fds[0])
            os.close(saved_fds[1])
        fd_out.seek(0)
        fd_err.seek(0)
        return Run(rc, fd_out.read().decode(errors="replace") + out.buffer.getvalue().decode(),
                   fd_err.read().decode(errors="replace") + err.buffer.getvalue().decode(errors="replace"))


def assert_one_line_error(r: Run, *expect: str) -> str:
    """Non-zero exit, exactly one line on stderr, no traceback, no librdkafka log line."""
    lines = [ln for ln in r.err.splitlines() if ln.strip()]
    assert r.rc != 0, (r.out, r.err)
    assert len(lines) == 1 and lines[0].startswith("chronolog: error: "), r.err
    assert "Traceback" not in r.err + r.out
    for text in expect:
        assert text in lines[0], lines[0]
    return lines[0]


def chronolog_completed(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """`chronolog(...)` in subprocess.run's shape (returncode, stdout, stderr), for tests written against it."""
    r = chronolog(*args, stdin=stdin)
    return subprocess.CompletedProcess(["chronolog", *args], r.rc, r.out, r.err)
