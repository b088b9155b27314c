"""Lines whose time cannot be read are named or refused, and an interrupted load continues where it stopped
(issue #40): Ctrl-C prints the exact command to go on, and that command makes the topic hold every line
exactly once (only lines the broker acknowledged count as done)."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time

from confluent_kafka import Consumer, TopicPartition

from tests.cli.conftest import assert_one_line_error, chronolog
from tests.cli.test_produce_bytes import values


def _lines(n: int) -> list[bytes]:
    return [f"2024-06-14T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z line {i} {'x' * (i % 50)}".encode()
            for i in range(n)]


def _high(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=15)[1]
    finally:
        c.close()


def test_ctrl_c_then_the_printed_command_gives_every_line_once(cli_broker):
    b = cli_broker.bootstrap
    assert chronolog("topics", "create", "resumed", "-c", "retention.ms=-1", "-b", b).rc == 0
    lines = _lines(120_000)
    data = b"".join(line + b"\n" for line in lines)
    first = data.index(b"\n", len(data) // 6) + 1  # sent and acknowledged before the Ctrl-C for sure
    proc = subprocess.Popen([sys.executable, "-m", "chronolog.cli.main", "produce", "resumed", "-", "--time-field",
                             "1", "-b", b], stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        proc.stdin.write(data[:first])
        proc.stdin.flush()
        want = data[:first].count(b"\n")
        deadline = time.monotonic() + 60
        while _high(b, "resumed") < want:
            assert time.monotonic() < deadline, "the first lines were not sent while stdin stayed open"
            time.sleep(0.05)

        def rest() -> None:  # the rest streams in while the Ctrl-C comes: it lands part way through a block
            try:
                for at in range(first, len(data), 64 * 1024):
                    proc.stdin.write(data[at:at + 64 * 1024])
                    proc.stdin.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass

        writer = threading.Thread(target=rest)
        writer.start()
        while _high(b, "resumed") == want:  # some of the streamed lines are in: it is mid-way
            assert time.monotonic() < deadline
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        writer.join(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = err.decode()
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert "before Ctrl-C" in err
    m = re.search(r"continue with: (.+)$", err, re.M)
    assert m, err
    command = shlex.split(m.group(1))
    assert command[0] == "chronolog" and command[-2] == "--skip-lines"
    done = int(command[-1])
    assert want <= done < len(lines) and done == _high(b, "resumed")  # the count is what the topic holds
    r = chronolog(*command[1:], stdin=data.decode())
    assert r.rc == 0, r.err
    assert f"produced {len(lines) - done} record(s) from stdin to resumed after skipping {done} line(s)" in r.err
    got = values(b, "resumed")
    assert [v for v, _ in got] == lines  # every line, once, in order
    assert got[-1][1] == 1718323200000 + (len(lines) - 1) % 86400 * 1000


def test_unreadable_lines_are_named_and_counted(cli_broker):
    b = cli_broker.bootstrap
    assert chronolog("topics", "create", "named", "-b", b).rc == 0
    text = "".join(f"2024-06-14T15:00:{i % 60:02d}Z ok {i}\n" if i % 10 else f"bad {i}\n" for i in range(1, 101))
    r = chronolog("produce", "named", "--time-field", "1", "-b", b, stdin=text)
    assert r.rc == 0, r.err
    assert "10 line(s) without a readable time took the previous line's time (line 10: 'bad 10', line 20: " \
           "'bad 20', line 30: 'bad 30', line 40: 'bad 40', line 50: 'bad 50', and 5 more)" in r.err


def test_require_time_refuses_the_line_and_says_how_to_continue(cli_broker):
    b = cli_broker.bootstrap
    assert chronolog("topics", "create", "strict", "-c", "retention.ms=-1", "-b", b).rc == 0
    text = "2024-06-14T15:00:00Z a\n2024-06-14T15:00:01Z b\nnot a time\n2024-06-14T15:00:02Z c\n"
    r = chronolog("produce", "strict", "--time-field", "1", "--require-time", "-b", b, stdin=text)
    assert_one_line_error(r, "line 3 of stdin has no readable time: 'not a time'", "2 record(s) before it are sent",
                          "chronolog produce strict --time-field 1 --require-time -b " + b + " --skip-lines 3")
    assert [v for v, _ in values(b, "strict")] == [b"2024-06-14T15:00:00Z a", b"2024-06-14T15:00:01Z b"]
    r = chronolog("produce", "strict", "--time-field", "1", "--require-time", "-b", b, "--skip-lines", "3",
                  stdin=text)
    assert r.rc == 0, r.err
    assert [v for v, _ in values(b, "strict")][-1] == b"2024-06-14T15:00:02Z c"


def test_require_time_at_a_first_line_sends_nothing(cli_broker):
    b = cli_broker.bootstrap
    assert chronolog("topics", "create", "strict-first", "-b", b).rc == 0
    r = chronolog("produce", "strict-first", "--time-field", "1", "--require-time", "-b", b,
                  stdin="\n\nno time\n2024-06-14T15:00:00Z a\n")
    assert_one_line_error(r, "line 3 of stdin has no readable time: 'no time'", "0 record(s) before it are sent",
                          "--skip-lines 3")
    assert values(b, "strict-first") == []


def test_lines_before_the_first_time_take_it(cli_broker):
    b = cli_broker.bootstrap
    assert chronolog("topics", "create", "early", "-b", b).rc == 0
    r = chronolog("produce", "early", "--time-field", "1", "-b", b, stdin="header\n\n2024-06-14T15:00:00Z a\n")
    assert r.rc == 0, r.err
    assert values(b, "early") == [(b"header", 1718377200000), (b"", 1718377200000),
                                  (b"2024-06-14T15:00:00Z a", 1718377200000)]


def test_a_batch_sent_again_is_written_once(cli_broker):
    """What the batch producer does when an answer is lost: the same batch again, with its sequence. The
    broker keeps one copy (KIP-98), so a retry never duplicates lines."""
    from array import array
    from itertools import accumulate

    from chronolog.records.encode import encode_batches
    from chronolog.timetravel.batchsend import BatchSender
    b = cli_broker.bootstrap
    assert chronolog("topics", "create", "again", "-b", b).rc == 0
    items = [b"a", b"b", b"c"]
    sender = BatchSender(b, "again")
    try:
        batches = encode_batches(3, None, (None, array("i", accumulate(map(len, items), initial=0)),
                                           b"".join(items), 0), None, None, 1718377200000, 1_000_000,
                                 producer=sender.producer(0, 3))
        sender.send({0: batches})
        sender.send({0: batches})  # as a retry after a lost answer would
        more = encode_batches(1, None, (None, array("i", [0, 1]), b"d", 0), None, None, 1718377200000, 1_000_000,
                              producer=sender.producer(0, 1))
        sender.send({0: more})
    finally:
        sender.close()
    assert [v for v, _ in values(b, "again")] == [b"a", b"b", b"c", b"d"]
