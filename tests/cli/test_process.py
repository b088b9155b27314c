"""The real `chronolog` process, for what the in-process runs (tests/cli/conftest.py) cannot show: the
installed entry point starts, a produce and a consume each in a process of their own agree, and a failure
is one line on the process's own stderr with its exit code."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.brokerproc import free_port
from tests.cli.conftest import assert_one_line_error, chronolog, chronolog_process

BASE = 1_700_000_000_000


def test_help_from_the_installed_script():
    script = shutil.which("chronolog", path=str(Path(sys.executable).parent))
    argv = [script] if script else [sys.executable, "-m", "chronolog.cli.main"]
    p = subprocess.run([*argv, "--help"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    for command in ("serve", "topics", "produce", "consume", "offsets", "dump-log"):
        assert command in p.stdout


def test_produce_then_consume_in_processes_of_their_own(cli_broker):
    b = cli_broker.bootstrap
    assert chronolog("topics", "create", "round", "-b", b).rc == 0
    lines = "".join(f"{BASE + i} line {i}\n" for i in range(5))
    r = chronolog_process("produce", "round", "--time-field", "1", "--time-format", "epoch_ms", "-b", b, stdin=lines)
    assert r.rc == 0 and "produced 5 record(s)" in r.err, r.err
    r = chronolog_process("consume", "round", "--from", str(BASE), "--format", "raw", "-b", b)
    assert r.rc == 0 and r.out == lines, r.err


def test_a_broker_that_is_down_is_one_line_from_the_process():
    dead = f"127.0.0.1:{free_port()}"
    r = chronolog_process("topics", "list", "-b", dead)
    assert_one_line_error(r, "cannot connect to " + dead)
    assert "rdkafka" not in r.err and "%3|" not in r.err


def test_output_to_a_full_disk_is_one_line_and_a_failure(cli_broker):
    """A full disk under stdout (/dev/full) fails the command with one line, in each output format: never
    a traceback, never exit status 0 over output cut short."""
    b = cli_broker.bootstrap
    assert chronolog("topics", "create", "full", "-b", b).rc == 0
    lines = "".join(f"{BASE + i} line {i} {'x' * 200}\n" for i in range(2000))
    assert chronolog_process("produce", "full", "--time-field", "1", "--time-format", "epoch_ms", "-b", b,
                             stdin=lines).rc == 0
    for fmt in ("raw", "text", "json"):
        with open("/dev/full", "w") as full:
            p = subprocess.run([sys.executable, "-m", "chronolog.cli.main", "consume", "full", "--from", str(BASE),
                                "--format", fmt, "-b", b], stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
        assert p.returncode == 1, (fmt, p.stderr)
        assert p.stderr.strip() == "chronolog: error: No space left on device (errno 28)", (fmt, p.stderr)


def test_a_large_write_is_written_to_the_end():
    """A buffered stdout may take part of a large write and say so only by its count (a disk filling up):
    the raw consume writes the rest, so the next write raises the error instead of dropping it."""
    from chronolog.cli.fastconsume import write_all

    class Partial:
        def __init__(self) -> None:
            self.got = bytearray()

        def write(self, view) -> int:
            take = bytes(view[:7])
            self.got += take
            return len(take)

    out = Partial()
    write_all(out, b"0123456789" * 10)
    assert bytes(out.got) == b"0123456789" * 10


def test_a_missing_partition_is_the_same_line_in_each_format(cli_broker):
    """The raw path and the client path check `--partitions` with one function: the same words."""
    b = cli_broker.bootstrap
    assert chronolog("topics", "create", "twoparts", "--partitions", "2", "-b", b).rc == 0
    for fmt in ("raw", "text"):
        r = chronolog_process("consume", "twoparts", "--from", str(BASE), "--partitions", "0,5", "--format", fmt,
                              "-b", b)
        assert_one_line_error(r, "topic 'twoparts' has no partition 5 (it has 0..1)")
