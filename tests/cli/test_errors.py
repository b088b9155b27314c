"""Every listed mistake of a new user ends in one line and a non-zero exit; read-only tools never create
a topic; an epoch in seconds where milliseconds are expected is named both ways."""

from __future__ import annotations

import json
import socket
import threading

import pytest

from tests.brokerproc import free_port
from tests.cli.conftest import assert_one_line_error, chronolog


@pytest.fixture(scope="module")
def tb(cli_broker):
    r = chronolog("topics", "create", "tb", "--partitions", "3", "-b", cli_broker.bootstrap)
    assert r.rc == 0, r.err
    return cli_broker.bootstrap


def test_unknown_partition_is_one_line(tb):
    r = chronolog("reset-offsets", "--group", "g", "--topic", "tb:7", "--to-earliest", "-b", tb)
    assert_one_line_error(r, "no partition 7", "0..2")
    r = chronolog("offsets", "tb", "--time", "now", "--partitions", "1,5", "-b", tb)
    assert_one_line_error(r, "no partition 5")


@pytest.mark.parametrize("args", [["topics", "create", "x"], ["topics", "list"], ["topics", "describe", "x"],
                                  ["topics", "alter", "x", "--config", "retention.ms=1"], ["topics", "delete", "x"],
                                  ["offsets", "x", "--time", "now"], ["consume", "x", "--from", "now"],
                                  ["consume", "x", "--from", "now", "--follow"],
                                  ["reset-offsets", "--group", "g", "--topic", "x", "--to-earliest"],
                                  ["groups", "list"], ["groups", "describe", "g"], ["groups", "delete", "g"],
                                  ["sql", "-t", "x", "select 1"], ["produce", "x", "FILE"]],
                         ids=lambda a: " ".join(a[:2]) + (" --follow" if "--follow" in a else ""))
def test_broker_down_fails_at_once_without_librdkafka_lines(tmp_path, args):
    """Issue 18's last rule: a command whose broker is not there prints one clear line on stderr, never
    librdkafka's own log lines (`%3|...|FAIL|...`), which go to Python logging (shown only with -v)."""
    dead = f"127.0.0.1:{free_port()}"
    r = chronolog(*[str(tmp_path / "nothing") if a == "FILE" else a for a in args], "-b", dead)
    assert_one_line_error(r, "cannot connect to " + dead, "Connection refused")
    assert "rdkafka" not in r.err and "%3|" not in r.err and "FAIL|" not in r.err


@pytest.mark.parametrize("text, words", [("99999999999999999999", "after year 9999"),
                                          ("1900-01-01", "before 1970"),
                                          ("2024-13-45", "cannot read"),
                                          ("100000 days ago", "before 1970")])
def test_times_out_of_range_are_one_line(tb, text, words):
    assert_one_line_error(chronolog("offsets", "tb", "--time", text, "-b", tb), words)
    assert_one_line_error(chronolog("consume", "tb", "--from", text, "-b", tb), words)


def test_ten_digit_epoch_warns_with_both_readings(tb):
    r = chronolog("offsets", "tb", "--time", "1718377200", "-b", tb, "--json")
    assert r.rc == 0, r.err
    assert json.loads(r.out)["timestamp"] == 1718377200  # read as Kafka reads it: milliseconds
    assert "1970-01-20T21:19:37.200Z" in r.err and "2024-06-14T15:00:00.000Z" in r.err
    r = chronolog("offsets", "tb", "--time", "1718377200000", "-b", tb)
    assert r.rc == 0 and "seconds" not in r.err


def test_plot_into_missing_folder_is_one_line(tmp_path):
    (tmp_path / "d").mkdir()
    r = chronolog("describe-segments", "tb", "--data-dir", str(tmp_path / "d"), "--plot",
                  str(tmp_path / "no" / "such" / "x.png"))
    assert_one_line_error(r, "does not exist")


def test_read_only_commands_never_create_topics(tb):
    cases = {"typo-offsets": ["offsets", "typo-offsets", "--time", "now"],
             "typo-consume": ["consume", "typo-consume", "--from", "now"],
             "typo-describe": ["topics", "describe", "typo-describe"],
             "typo-reset": ["reset-offsets", "--group", "g", "--topic", "typo-reset", "--to-earliest"],
             "typo-groups": ["reset-offsets", "--group", "g", "--topic", "typo-groups:0", "--to-latest",
                             "--execute"]}
    for name, args in cases.items():
        assert_one_line_error(chronolog(*args, "-b", tb), f"topic {name!r} not found")
    listed = json.loads(chronolog("topics", "list", "-b", tb, "--json").out)
    assert not [t for t in listed if t.startswith("typo")], listed


def test_bad_client_config_is_one_line(tb, tmp_path):
    assert_one_line_error(chronolog("topics", "list", "-b", tb, "-X", "no.such.property=1"), "no.such.property")
    assert_one_line_error(chronolog("topics", "list", "-b", tb, "-X", "novalue"), "-X takes key=value")
    assert_one_line_error(chronolog("topics", "list", "-b", tb, "--command-config", str(tmp_path / "none")),
                          "cannot read --command-config")


def test_version():
    r = chronolog("--version")
    assert r.rc == 0 and r.out.startswith("chronolog 0.")


def test_librdkafka_logs_only_with_verbose(tb):
    quiet = chronolog("topics", "list", "-b", tb, "-X", "debug=broker")
    assert quiet.rc == 0 and quiet.err == ""
    loud = chronolog("-v", "topics", "list", "-b", tb, "-X", "debug=broker")
    assert loud.rc == 0 and "chronolog.librdkafka" in loud.err


def test_broker_that_drops_connections_gives_one_line_without_librdkafka_lines():
    """Past the TCP probe: a port that accepts and at once closes every connection (not a Kafka broker)
    makes librdkafka log a FAIL line per attempt; they go to Python logging (shown with -v), and the
    terminal gets one line. The connection timeout is 3 s (`-X`), not the tools' 15 s: librdkafka meets the
    dropped connection, and logs it, within its first attempt."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(50)
    stop = threading.Event()

    def drop() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.close()
    thread = threading.Thread(target=drop, daemon=True)
    thread.start()
    try:
        r = chronolog("topics", "list", "-b", f"127.0.0.1:{server.getsockname()[1]}",
                      "-X", "socket.connection.setup.timeout.ms=3000")
    finally:
        stop.set()
        server.close()
    assert_one_line_error(r, "cannot reach", "no answer within 3 s")
    assert "%3|" not in r.err and "FAIL|" not in r.err
