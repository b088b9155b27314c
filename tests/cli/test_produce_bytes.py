"""`chronolog produce` keeps every byte of a line (issue #40): invalid UTF-8, NUL bytes and the `\\r` of a CRLF
ending stay in the record's value; only the `\\n` goes. Blank lines are records (or, with --skip-blank,
counted). Read back three ways: librdkafka (confluent-kafka), kcat, and `chronolog consume --format raw`."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.cli.conftest import chronolog

# invalid UTF-8, NUL bytes, CRLF endings, blank lines (LF and CRLF), a lone \r inside, and a last line without \n
AWKWARD = (b"2024-06-14T15:00:00Z plain\r\n"
           b"2024-06-14T15:00:01Z \xff\xfe not utf-8 \x00 with a NUL\r\n"
           b"\n"
           b"\r\n"
           b"2024-06-14T15:00:02Z \x00\x00\x00\n"
           b"no time here \xc3\x28\n"
           b"2024-06-14T15:00:03Z a\rb \xe2\x82\xac\n"
           b"2024-06-14T15:00:04Z last line, no newline")


def values(bootstrap: str, topic: str) -> list[tuple[bytes, int]]:
    """Every record's value and timestamp of partition 0, read by librdkafka."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bytes", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    try:
        high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=15)[1]
        c.assign([TopicPartition(topic, 0, 0)])
        out = []
        while len(out) < high:
            msg = c.poll(10)
            assert msg is not None, f"{len(out)} of {high} records read"
            assert msg.error() is None, msg.error()
            out.append((msg.value(), msg.timestamp()[1]))
        return out
    finally:
        c.close()


@pytest.fixture(scope="module")
def awkward_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("bytes") / "awkward.log"
    path.write_bytes(AWKWARD)
    return path


def test_every_byte_round_trips(cli_broker, awkward_file):
    b = cli_broker.bootstrap
    assert chronolog("topics", "create", "exact", "-c", "retention.ms=-1", "-b", b).rc == 0
    r = chronolog("produce", "exact", str(awkward_file), "--time-field", "1", "-b", b)
    assert r.rc == 0, r.err
    lines = AWKWARD.split(b"\n")
    assert "produced 8 record(s)" in r.err and "1 blank line(s) sent as empty records" in r.err
    got = values(b, "exact")
    assert [v for v, _ in got] == lines
    # each line's own time; the blank lines and the one without a time take the previous line's
    t0 = 1718377200000
    assert [ts for _, ts in got] == [t0, t0 + 1000, t0 + 1000, t0 + 1000, t0 + 2000, t0 + 2000, t0 + 3000, t0 + 4000]
    assert "2 line(s) without a readable time" in r.err and "line 4: '\\r'" in r.err
    assert "line 6: 'no time here \\\\xc3(" in r.err  # named, its bytes shown escaped

    kcat = shutil.which("kcat")
    if kcat is not None:  # a C client reads the same bytes (-D "" -f %s: values only, nothing added)
        out = subprocess.run([kcat, "-C", "-b", b, "-t", "exact", "-p", "0", "-o", "beginning", "-e", "-q",
                              "-f", "%s\n"], capture_output=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout == AWKWARD + b"\n"

    out = subprocess.run([sys.executable, "-m", "chronolog.cli.main", "consume", "exact", "--from", "2000-01-01",
                          "--format", "raw", "-b", b], capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout == AWKWARD + b"\n"


def test_kcat_written_file_and_produce_agree(cli_broker, awkward_file):
    """kcat -P of the same file, for comparison: it keeps the \\r and the bytes too, but drops blank lines."""
    kcat = shutil.which("kcat")
    if kcat is None:
        pytest.skip("kcat not installed")
    b = cli_broker.bootstrap
    for topic in ("bykcat-p", "byproduce-p"):
        assert chronolog("topics", "create", topic, "-b", b).rc == 0
    out = subprocess.run([kcat, "-P", "-b", b, "-t", "bykcat-p", "-p", "0", "-l", str(awkward_file)],
                         capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    r = chronolog("produce", "byproduce-p", str(awkward_file), "--skip-blank", "-b", b)
    assert r.rc == 0, r.err
    assert "produced 7 record(s)" in r.err and "1 blank line(s) skipped" in r.err
    assert [v for v, _ in values(b, "byproduce-p")] == [v for v, _ in values(b, "bykcat-p")] == \
        [line for line in AWKWARD.split(b"\n") if line]


def test_keys_split_on_bytes(cli_broker, tmp_path):
    b = cli_broker.bootstrap
    assert chronolog("topics", "create", "kbytes", "-b", b).rc == 0
    path = tmp_path / "kv"
    path.write_bytes(b"k\xff:v\x00\r\n:empty key\nnokey\n")
    assert chronolog("produce", "kbytes", str(path), "-K", ":", "-b", b).rc == 0
    c = Consumer({"bootstrap.servers": b, "group.id": "kb", "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition("kbytes", 0, 0)])
        got = [c.poll(10) for _ in range(3)]
    finally:
        c.close()
    assert [(m.key(), m.value()) for m in got] == [(b"k\xff", b"v\x00\r"), (b"", b"empty key"), (None, b"nokey")]


def test_client_settings_go_through_librdkafka_with_the_same_bytes(cli_broker, awkward_file):
    """-X settings the batch path does not honour are sent by librdkafka (typer's path): the same records."""
    b = cli_broker.bootstrap
    assert chronolog("topics", "create", "exact-x", "-b", b).rc == 0
    r = chronolog("produce", "exact-x", str(awkward_file), "--time-field", "1", "-X", "acks=all", "-H", "h=1", "-b", b)
    assert r.rc == 0, r.err
    assert "produced 8 record(s)" in r.err
    got = values(b, "exact-x")
    assert [v for v, _ in got] == AWKWARD.split(b"\n")
    assert [ts for _, ts in got][-1] == 1718377204000


def test_headers_on_the_batch_path(cli_broker, tmp_path):
    b = cli_broker.bootstrap
    assert chronolog("topics", "create", "hdrs", "-b", b).rc == 0
    r = chronolog("produce", "hdrs", "-H", "a=1", "-H", "b=\xe9", "-b", b, stdin="x\ny\n")
    assert r.rc == 0, r.err
    c = Consumer({"bootstrap.servers": b, "group.id": "h", "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition("hdrs", 0, 0)])
        got = [c.poll(10) for _ in range(2)]
    finally:
        c.close()
    assert [(m.value(), m.headers()) for m in got] == [(b"x", [("a", b"1"), ("b", "\xe9".encode())]),
                                                       (b"y", [("a", b"1"), ("b", "\xe9".encode())])]
