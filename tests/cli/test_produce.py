"""`chronolog produce` against the real broker: each line's own time becomes its CreateTime, and a window
replayed by time returns exactly the lines whose time is in it (the ground truth is in the file)."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta, timezone

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from chronolog.timetravel.syslog import parse_syslog_line
from chronolog.timetravel.timefmt import format_time
from tests.cli.conftest import assert_one_line_error, chronolog

MONTHS = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split()


def apache_log(n: int, seed: int = 19) -> tuple[list[str], list[int]]:
    """An Apache access log (not syslog): times in several zones, out of order by up to 10 minutes, and
    every 50th line without a time (it takes the previous line's). Returns the lines and each line's
    true timestamp."""
    rng = random.Random(seed)
    base = datetime(2015, 12, 31, 22, 0, tzinfo=UTC)  # crosses a year boundary
    lines, truth = [], []
    for i in range(n):
        if i % 50 == 49:
            lines.append(f"-- malformed line {i} --")
            truth.append(truth[-1])
            continue
        t = base + timedelta(seconds=7 * i + rng.randint(-600, 600), milliseconds=0)
        zone = timezone(timedelta(hours=rng.choice([-5, 0, 2])))
        local = t.astimezone(zone)
        stamp = f"{local.day:02d}/{MONTHS[local.month - 1]}/{local.year}:{local:%H:%M:%S %z}"
        lines.append(f'10.0.{i % 7}.{i % 250} - - [{stamp}] "GET /item/{i} HTTP/1.1" 200 {rng.randint(10, 9999)}')
        truth.append(int(t.timestamp() * 1000))
    return lines, truth


def _consume_json(bootstrap: str, topic: str, *args: str) -> list[dict]:
    r = chronolog("consume", topic, *args, "--format", "json", "-b", bootstrap)
    assert r.rc == 0, r.err
    return [json.loads(line) for line in r.out.splitlines()]


def test_non_syslog_file_with_its_own_time_replays_windows_exactly(cli_broker, tmp_path):
    lines, truth = apache_log(3000)
    path = tmp_path / "access.log"
    path.write_text("\n".join(lines) + "\n")
    b = cli_broker.bootstrap
    assert chronolog("topics", "create", "access", "--partitions", "2", "-c", "retention.ms=-1", "-b", b).rc == 0
    r = chronolog("produce", "access", str(path), "--time-regex", r"\[([^\]]+)\]", "--time-format",
                  "%d/%b/%Y:%H:%M:%S %z", "--key-field", "1", "-b", b)
    assert r.rc == 0, r.err
    assert "produced 3000 record(s)" in r.err and "60 line(s) without a readable time" in r.err
    assert "line 50: '-- malformed line 49 --'" in r.err and "and 55 more" in r.err  # the first five named
    assert "retention" not in r.err  # retention.ms=-1: no warning
    for t1, t2 in ((truth[0] + 3_600_000, truth[0] + 3 * 3_600_000), (truth[100], truth[100] + 600_000),
                   (min(truth), max(truth) + 1)):
        got = _consume_json(b, "access", "--from", str(t1), "--to", str(t2))
        want = sorted(line for line, ts in zip(lines, truth, strict=True) if t1 <= ts < t2)
        assert len(got) == len(want) > 0
        assert sorted(g["value"] for g in got) == want
        assert all(t1 <= g["timestamp"] < t2 for g in got)
    by_value = {g["value"]: g for g in _consume_json(b, "access", "--from", "2015-01-01")}
    assert len(by_value) == 3000
    for line, ts in zip(lines, truth, strict=True):
        assert by_value[line]["timestamp"] == ts
        if not line.startswith("--"):
            assert by_value[line]["key"] == line.split()[0]


def test_syslog_from_stdin_matches_the_syslog_reader(cli_broker, shared_data):
    text = (shared_data / "loghub" / "Linux_2k.log").read_text()
    b = cli_broker.bootstrap
    assert chronolog("topics", "create", "linux", "-c", "retention.ms=-1", "-b", b).rc == 0
    r = chronolog("produce", "linux", "-", "--time-format", "syslog", "--year", "2024", "-b", b, stdin=text)
    assert r.rc == 0, r.err
    t1, t2 = 1_720_000_000_000, 1_721_000_000_000  # a window inside the file's span
    want = [line for line in text.splitlines() if (p := parse_syslog_line(line, 2024)) and t1 <= p.timestamp < t2]
    got = _consume_json(b, "linux", "--from", str(t1), "--to", str(t2))
    assert [g["value"] for g in got] == want and len(want) > 10


def test_json_lines_keys_headers_and_partition(cli_broker, tmp_path):
    b = cli_broker.bootstrap
    assert chronolog("topics", "create", "events", "--partitions", "3", "-b", b).rc == 0
    rows = [{"ts": 1_700_000_000_000 + i * 1000, "user": f"u{i % 3}", "n": i} for i in range(30)]
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = chronolog("produce", "events", str(path), "--time-field", "ts", "--time-format", "epoch_ms", "--key-field",
                  "user", "-H", "source=test", "-H", "run=1", "--partition", "2", "-b", b)
    assert r.rc == 0, r.err
    got = _consume_json(b, "events", "--from", "2023-01-01")
    assert [(g["partition"], g["timestamp"], g["key"], g["headers"]) for g in got] == \
        [(2, row["ts"], row["user"], [["source", "test"], ["run", "1"]]) for row in rows]
    text = chronolog("consume", "events", "--from", "2023-01-01", "--max-messages", "1", "-b", b).out
    assert text == f"{format_time(rows[0]['ts'])} events-2@0 key=u0 headers=source:test,run:1 {json.dumps(rows[0])}\n"


def test_key_separator_like_kcat_and_send_time_without_a_time_option(cli_broker):
    b = cli_broker.bootstrap
    assert chronolog("topics", "create", "kv", "-b", b).rc == 0
    before = int(datetime.now(UTC).timestamp() * 1000)
    assert chronolog("produce", "kv", "-K", ":", "-b", b, stdin="a:1\nb:2:3\nnokey\n").rc == 0
    got = _consume_json(b, "kv", "--from", str(before - 60_000))
    assert [(g["key"], g["value"]) for g in got] == [("a", "1"), ("b", "2:3"), (None, "nokey")]
    assert all(g["timestamp"] >= before - 60_000 for g in got)


def test_epoch_seconds_given_as_ms_warn_with_both_readings(cli_broker):
    b = cli_broker.bootstrap
    assert chronolog("topics", "create", "secs", "-c", "retention.ms=-1", "-b", b).rc == 0
    r = chronolog("produce", "secs", "--time-field", "1", "--time-format", "epoch_ms", "-b", b,
                  stdin="1718377200 a\n1718377201 b\n")
    assert r.rc == 0
    assert "1718377200 was read as epoch milliseconds (1970-01-20T21:19:37.200Z)" in r.err
    assert "2024-06-14T15:00:00.000Z" in r.err and "epoch_s" in r.err


def test_old_records_into_default_retention_warn(cli_broker):
    b = cli_broker.bootstrap
    assert chronolog("topics", "create", "short", "-b", b).rc == 0
    r = chronolog("produce", "short", "--time-field", "1", "-b", b, stdin="2015-03-01T10:00:00Z old\n")
    assert r.rc == 0
    assert "older than the topic's retention.ms=604800000" in r.err and "retention.ms=-1" in r.err


@pytest.fixture(scope="module")
def refused_topic(cli_broker) -> str:
    """The topic the refused inputs name, made once for all of them (`topics create` is tested above)."""
    admin = AdminClient({"bootstrap.servers": cli_broker.bootstrap})
    admin.create_topics([NewTopic("refused", 1, 1)])["refused"].result(15)
    return "refused"


@pytest.mark.parametrize("args, stdin, words", [
    (["--time-field", "1"], "no time here\nnor here\n", "no line of stdin has a readable time"),
    (["--time-field", "0"], "x\n", "numbered from 1"),
    (["--time-regex", "("], "x\n", "--time-regex"),
    (["--time-regex", "x"], "x\n", "needs a group"),
    (["--time-field", "1", "--time-format", "%H:%M"], "10:00\n", "has no year"),
    (["--time-field", "1", "--time-format", "what"], "x\n", "--time-format 'what'"),
    (["--time-field", "1", "--year", "2024"], "x\n", "--year is for"),
    (["--time-format", "epoch_ms"], "x\n", "need --time-field or --time-regex"),
    (["--time-field", "1", "--timezone", "Mars/Olympus"], "x\n", "not a zone name"),
    (["--partition", "9"], "x\n", "no partition 9"),
])
def test_bad_input_is_refused_and_nothing_sent(refused_topic, cli_broker, args, stdin, words):
    b = cli_broker.bootstrap
    assert_one_line_error(chronolog("produce", "refused", *args, "-b", b, stdin=stdin), words)
    consumer = Consumer({"bootstrap.servers": b, "group.id": "t"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition("refused", 0), timeout=15) == (0, 0)
    finally:
        consumer.close()


def test_missing_topic_is_refused_with_the_retention_hint(cli_broker):
    r = chronolog("produce", "not-there", "-b", cli_broker.bootstrap, stdin="x\n")
    assert_one_line_error(r, "'not-there' not found", "topics create not-there", "retention.ms=-1")


def test_ctrl_c_delivers_what_was_read_and_exits_130(cli_broker):
    import os
    import signal
    import subprocess
    import sys
    import time
    b = cli_broker.bootstrap
    assert chronolog("topics", "create", "interrupted", "-b", b).rc == 0
    proc = subprocess.Popen([sys.executable, "-m", "chronolog.cli.main", "produce", "interrupted", "-", "-b", b],
                            stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    consumer = Consumer({"bootstrap.servers": b, "group.id": "t"})
    try:
        proc.stdin.write("one\ntwo\nthree\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 30
        while consumer.get_watermark_offsets(TopicPartition("interrupted", 0), timeout=15)[1] < 3:
            assert time.monotonic() < deadline, "the lines were not sent while stdin stayed open"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
    finally:
        consumer.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "Traceback" not in err
    assert "produced 3 record(s) from stdin to interrupted before Ctrl-C" in err


def test_kcat_reads_the_times_produce_wrote(cli_broker, tmp_path):
    """Another client (kcat, librdkafka in C) sees each line's own time as the record's CreateTime."""
    import shutil
    import subprocess
    kcat = shutil.which("kcat")
    if kcat is None:
        pytest.skip("kcat not installed")
    b = cli_broker.bootstrap
    assert chronolog("topics", "create", "bykcat", "-c", "retention.ms=-1", "-b", b).rc == 0
    lines, truth = apache_log(200, seed=7)
    r = chronolog("produce", "bykcat", "--time-regex", r"\[([^\]]+)\]", "--time-format", "%d/%b/%Y:%H:%M:%S %z",
                  "-b", b, stdin="\n".join(lines) + "\n")
    assert r.rc == 0, r.err
    out = subprocess.run([kcat, "-C", "-b", b, "-t", "bykcat", "-p", "0", "-o", "beginning", "-e", "-q",
                          "-f", "%T %s\n"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    got = [(int(line.split(" ", 1)[0]), line.split(" ", 1)[1]) for line in out.stdout.splitlines()]
    assert got == list(zip(truth, lines, strict=True))
