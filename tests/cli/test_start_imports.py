"""What `chronolog consume --format raw` imports before its first record: a window of a few MB is read in
less time than the interpreter takes to import logging, dataclasses (with inspect), kio's types or the CLI
framework, so the command must start without them (bench/bench_consume.py races kcat -C on it). Each test
runs a real process, as a user starts the command."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.brokerproc import BrokerProcess

# Modules the raw consume path has no use for, each a few ms of a 50-100 ms command.
HEAVY = ("logging", "dataclasses", "inspect", "ast", "typing", "threading", "asyncio", "kio", "typer", "click", "pydantic",
         "rich", "confluent_kafka", "pyarrow", "hypothesis", "chronolog.records.batch",
         "chronolog.records.compression", "chronolog.timetravel.client", "encodings.idna")

# main() as the console script runs it, then the imported modules of that list on stderr's last line.
_RUN = ("import sys\n"
        "from chronolog.cli.main import main\n"
        "sys.argv = ['chronolog', *sys.argv[1:]]\n"
        "try:\n"
        "    main()\n"
        "finally:\n"
        "    sys.stdout.flush()\n"
        f"    print(sorted(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)\n")

T0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def lines_topic(tmp_path_factory):
    from confluent_kafka import Producer

    proc = BrokerProcess(tmp_path_factory.mktemp("start") / "data").start()
    try:
        p = Producer({"bootstrap.servers": proc.bootstrap, "linger.ms": 5})
        for i in range(300):
            p.produce("lines", f"line {i} \xe9".encode() + b"\xff", partition=0, timestamp=T0 + i * 1000)
        assert p.flush(30) == 0
        yield proc.bootstrap
    finally:
        proc.stop()


def _consume(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _RUN, "consume", *args], capture_output=True, timeout=120)


def test_raw_consume_imports_nothing_heavy(lines_topic):
    out = _consume("lines", "--from", str(T0 + 100_000), "--to", str(T0 + 200_000), "--format", "raw",
                   "-b", lines_topic)
    assert out.returncode == 0, out.stderr
    assert out.stdout == b"".join(f"line {i} \xe9".encode() + b"\xff\n" for i in range(100, 200))
    assert out.stderr.decode().splitlines()[-1] == "[]"


def test_a_warning_on_the_raw_path_keeps_the_log_format(lines_topic):
    """`--from` of ten digits is read as milliseconds with a warning: logging is imported then, and its line
    has the format every command's log lines have (set when logging is first imported)."""
    out = _consume("lines", "--from", "1700000000", "--format", "raw", "-b", lines_topic, "--max-messages", "2")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "line 0 \xe9".encode() + b"\xff\n" + "line 1 \xe9".encode() + b"\xff\n"
    first = out.stderr.decode().splitlines()[0]
    assert first.startswith("WARNING chronolog.time: 1700000000 read as epoch milliseconds"), first


def test_other_commands_still_log_in_that_format(tmp_path):
    """A path through typer imports logging early; its lines are formatted as before."""
    out = subprocess.run([sys.executable, "-c", _RUN, "offsets", "t", "--time", "1700000000", "-b",
                          "127.0.0.1:1"], capture_output=True, timeout=120)
    assert b"WARNING chronolog.time: 1700000000 read as epoch milliseconds" in out.stderr, out.stderr


def test_produce_imports_nothing_heavy(lines_topic, tmp_path):
    """`chronolog produce --time-format syslog` (bench/bench_produce.py races kcat -P on it) starts without
    the modules above but `threading` (the next block is read while one is sent): no dataclasses, typing,
    records.batch or compression, whose imports cost more than the C line scanner takes for 20 MB."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": lines_topic})
    for f in admin.create_topics([NewTopic("produced", 1, 1)]).values():
        f.result(30)
    file = tmp_path / "syslog.log"
    file.write_bytes(b"Mar  1 00:00:01 combo sshd[1]: one\nMar  1 00:00:02 combo sshd[2]: two\n")
    out = subprocess.run([sys.executable, "-c", _RUN, "produce", "produced", str(file), "--time-format", "syslog",
                          "--year", "2024", "-b", lines_topic], capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "produced 2 record(s)" in out.stderr.decode()
    assert out.stderr.decode().splitlines()[-1] == "['threading']"
