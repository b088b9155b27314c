"""The raw fetcher (`chronolog consume`'s reader) when its broker goes away: one broker that stops answering
is an error at once, in one line that says what to do, not a wait (there is no other broker to take over);
a leader that dies in a cluster is waited for (tests/timetravel/test_tools_leaders_move.py)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from chronolog.errors import ChronologError
from chronolog.timetravel.connection import ConnectionLost
from chronolog.timetravel.fetcher import RawFetcher
from tests.brokerproc import BrokerProcess, free_port
from tests.clirun import assert_one_line_error, chronolog


@pytest.fixture
def broker(tmp_path):
    proc = BrokerProcess(tmp_path / "data").start()
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    admin.create_topics([NewTopic("t", 1, 1)])["t"].result(15)
    p = Producer({"bootstrap.servers": proc.bootstrap})
    for i in range(10):
        p.produce("t", b"v%d" % i, partition=0)
    assert p.flush(15) == 0
    yield proc
    proc.stop()


def test_a_single_broker_that_dies_is_an_error_at_once(broker):
    fetcher = RawFetcher(broker.bootstrap, timeout=5)
    try:
        assert fetcher.fetch("t", 0, 0).high_watermark == 10
        broker.kill()
        started = time.monotonic()
        with pytest.raises(ConnectionLost) as err:
            fetcher.fetch("t", 0, 0)
        assert time.monotonic() - started < 5  # not the 60 s a moving leader is given
        assert "is the broker running?" in str(err.value) and "\n" not in str(err.value)
    finally:
        fetcher.close()


def test_errors_name_the_problem_and_what_to_do(broker):
    fetcher = RawFetcher(broker.bootstrap, timeout=5)
    try:
        with pytest.raises(ChronologError, match="topic 'nope' not found"):
            fetcher.fetch("nope", 0, 0)
        with pytest.raises(ChronologError, match="out of range .* Run it again"):
            fetcher.fetch("t", 0, 1000)
    finally:
        fetcher.close()
    dead = f"127.0.0.1:{free_port()}"
    for args in (["offsets", "t", "--time", "2024-01-01T00:00:00Z"], ["consume", "t", "--from", "2024-01-01"]):
        run = chronolog(*args, "--bootstrap-server", dead)
        assert_one_line_error(run)
        assert "is the broker running?" in run.err


def test_an_end_offset_that_went_back_is_waited_for_then_said(broker):
    """A read planned to offset 15 of a partition whose high watermark is 10 (a new leader that has not caught
    up, or an unclean election lost records) waits, then fails in one line: never a short read that looks
    whole."""
    from chronolog.timetravel.arrow import broker_columns
    fetcher = RawFetcher(broker.bootstrap, timeout=5, retry_for=0.5)
    try:
        started = time.monotonic()
        with pytest.raises(ChronologError, match="end offset stayed at 10, below the 15") as err:
            list(broker_columns(fetcher, "t", 0, 0, 15))
        assert time.monotonic() - started >= 0.5 and "\n" not in str(err.value)
        assert sum(len(c) for c in broker_columns(fetcher, "t", 0, 0, 10)) == 10  # the end where it was planned
    finally:
        fetcher.close()
