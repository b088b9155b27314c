"""The console's librdkafka clients live and die in the request that made them: every broker source a page
opens is closed (its consumers closed, its AdminClient destroyed) in one of the server's worker threads, also
when the browser goes away before or while a streamed timeline is sent, never later by the garbage collector
in whatever thread it runs (a librdkafka thread included, where destroying a client can crash the process:
the console died once of SIGSEGV in a suite run). A closed source refuses any further use."""

from __future__ import annotations

import os
import random
import socket
import threading

import anyio
import pytest

from tests.waiting import poll_until

ABORT = b"\x01\x00\x00\x00\x00\x00\x00\x00"  # SO_LINGER on, 0 s: close() sends a reset, as a killed browser


@pytest.fixture
def spied(monkeypatch):
    """Every ClientSource the console makes: (source, the thread that closed it first) pairs."""
    from chronolog.timetravel import client

    made: list[list] = []
    lock = threading.Lock()

    class Spy(client.ClientSource):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            with lock:
                made.append([self, None])

        def close(self) -> None:
            with lock:
                entry = next(e for e in made if e[0] is self)
                if entry[1] is None:
                    entry[1] = threading.current_thread()
            super().close()

    monkeypatch.setattr(client, "ClientSource", Spy)
    return made


def _request(port: int, path: str, mode: str) -> str:
    """A GET of `path`: read whole ("full"), cut by a reset once the first streamed chunk arrived ("cut"),
    or right after the request was sent ("gone")."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
        if mode == "gone":
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, ABORT)
            return "gone"
        got = b""
        while chunk := s.recv(65536):
            got += chunk
            if mode == "cut" and b"<!--flush-->" in got:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, ABORT)
                return "cut"
        return got.split(b" ", 2)[1].decode()


@pytest.mark.timeout(120)
def test_every_client_is_closed_in_a_worker_thread_under_concurrent_and_cut_requests(loaded, spied):
    """Four browsers at once, 60 requests: pages, timelines read whole, cut mid-stream or left before the
    first byte. Every source made is closed, each in an AnyIO worker thread (not the event loop's, not a
    thread the interpreter did not start), and every whole page answers 200."""
    from chronolog.console.app import Target
    from chronolog.console.server import make_server

    server, sock = make_server(Target(bootstrap=loaded.broker.bootstrap), "127.0.0.1", 0)
    port = sock.getsockname()[1]
    loop = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="console-loop")
    loop.start()
    paths = [("/", "full"), ("/topics/spike", "full"), ("/topics/spike", "cut"), ("/topics/late", "gone"),
             ("/topics/late?count=exact", "cut"), ("/topics/linux?buckets=7", "gone"),
             ("/topics/late/records?from=1700000000000&to=1700000600000", "full"), ("/api/topics/late/timeline", "full")]
    answers: list[str] = []
    failed: list[BaseException] = []

    def browser(n: int) -> None:
        rng = random.Random(n)
        try:
            for _ in range(15):
                answers.append(_request(port, *rng.choice(paths)))
        except BaseException as exc:  # said by the assertion below
            failed.append(exc)

    try:
        assert poll_until(lambda: server.started, 30)
        browsers = [threading.Thread(target=browser, args=(i,)) for i in range(4)]
        for b in browsers:
            b.start()
        for b in browsers:
            b.join(90)
        assert not failed, failed[:1]
        assert len(answers) == 60 and set(answers) <= {"200", "cut", "gone"}, sorted(set(answers))
        assert {"cut", "gone"} <= set(answers)
        # a page whose browser left is closed once its work is done: wait for those, bounded
        assert poll_until(lambda: all(closer is not None for _s, closer in list(spied)), 60), \
            f"{sum(c is None for _s, c in spied)} of {len(spied)} sources never closed"
    finally:
        server.should_exit = True
        loop.join(30)
    closers = {closer for _s, closer in spied}
    # a thread the interpreter did not start (librdkafka's, running an admin result's callback) shows as a
    # dummy thread: the garbage collector's doing; the event loop must not block on closing either
    assert not [c for c in closers if isinstance(c, threading._DummyThread)]
    assert loop not in closers and threading.main_thread() not in closers
    assert all("worker" in c.name.lower() for c in closers), {c.name for c in closers}
    assert len(spied) >= 60 - answers.count("gone")


def test_a_timeline_left_before_its_first_byte_closes_its_clients(loaded, spied):
    """The browser is gone before the streamed page starts: its counting generator never starts, so its
    `finally` never runs; the response closes the page's clients itself, in a worker thread."""
    from chronolog.console.app import Target
    from chronolog.console.web import create_app

    app = create_app(Target(bootstrap=loaded.broker.bootstrap))
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/topics/late", "raw_path": b"/topics/late",
             "query_string": b"", "headers": [(b"host", b"127.0.0.1")], "scheme": "http",
             "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 1), "root_path": "", "http_version": "1.1",
             "asgi": {"version": "3.0", "spec_version": "2.3"}}
    anyio.run(app, scope, receive, send)
    assert len(spied) == 1
    source, closer = spied[0]
    assert closer is not None and closer is not threading.main_thread(), "the page's clients were left open"
    assert source._admin is None and not source._consumers


def test_a_closed_source_refuses_to_be_used(loaded):
    """Its AdminClient is destroyed at close, and no new consumer is made after it."""
    from chronolog.errors import ChronologError
    from chronolog.timetravel.client import ClientSource

    source = ClientSource(loaded.broker.bootstrap)
    assert source.partitions("late") == [0, 1]
    admin = source.admin
    source.close()
    source.close()  # again: nothing
    with pytest.raises(RuntimeError):  # the handle itself is destroyed, not left to the garbage collector
        admin.list_topics(timeout=1)
    for use in (lambda: source.admin, lambda: source.consumer, lambda: source.partitions("late")):
        with pytest.raises(ChronologError, match="closed"):
            use()


CYCLE = """
import concurrent.futures, gc, sys, time
gc.set_threshold(5, 1, 1)  # the collector runs often, so in whichever thread allocates next
from chronolog.timetravel.sources import BrokerSource
start = time.monotonic()
for i in range(40):
    if time.monotonic() - start > 60:  # a loaded machine: enough rounds were run
        break
    source = BrokerSource(sys.argv[1])
    source.me = source  # a reference cycle, as a traceback or an abandoned generator makes one
    pending = source.admin.describe_cluster(request_timeout=10)  # still in flight when the page gives up
    source.close()
    del source
    # answered (or refused: destroyed) in the admin's own background thread; a request not yet sent when
    # the client went is purged unanswered ("Purging 2 unserved events"), its future never done
    concurrent.futures.wait([pending], timeout=20)
print("survived")
"""


def test_a_closed_source_in_a_reference_cycle_cannot_be_destroyed_in_librdkafka_s_thread(loaded):
    """An admin request's answer runs Python in librdkafka's background thread, and the collector may run
    there. When close() left the AdminClient to the collector, a source in a reference cycle was destroyed
    in that very thread and librdkafka aborted the process ("rd_kafka_destroy() called from librdkafka
    owned thread", confluent-kafka-python #2129), every run; close() now destroys it in the caller's thread."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", CYCLE, loaded.broker.bootstrap], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONFAULTHANDLER": "1"})
    assert done.returncode == 0 and "survived" in done.stdout, (done.returncode, done.stderr[-2000:])


class _Listed:
    """An AdminClient whose ListGroups answers are given: each a ListConsumerGroupsResult's errors."""

    def __init__(self, answers: list[list]) -> None:
        self.answers, self.asked = answers, 0

    def list_consumer_groups(self, request_timeout: float):
        from concurrent.futures import Future

        from confluent_kafka.admin import ListConsumerGroupsResult
        done: Future = Future()
        done.set_result(ListConsumerGroupsResult(valid=[], errors=self.answers[min(self.asked, len(self.answers) - 1)]))
        self.asked += 1
        return done

    def list_topics(self, timeout: float) -> None:
        """`_retrying`'s metadata refresh between tries."""


def _source_with(admin, bootstrap: str):
    from chronolog.timetravel.sources import BrokerSource
    source = BrokerSource.__new__(BrokerSource)
    source.bootstrap, source.timeout, source._admin, source._consumers = bootstrap, 1.0, admin, {}
    return source


def test_a_broker_error_in_the_groups_list_is_retried_or_one_line_never_a_dead_worker(loaded):
    """Over a cluster losing its coordinator, ListGroups answers with a KafkaError in its `errors`: raised
    as such it matched no `except` (KafkaError derives from no exception class), killed the server's worker
    thread and left the request unanswered. A moving coordinator is asked again; any other error is one line."""
    from confluent_kafka import KafkaError

    from chronolog.console.facts import list_groups
    from chronolog.errors import ChronologError

    def in_a_worker(admin) -> dict:
        """list_groups in a thread of its own, as the server runs it: what it returned or raised, nothing when
        what it raised killed the thread."""
        out: dict = {}

        def run() -> None:
            try:
                out["rows"] = list_groups(_source_with(admin, loaded.broker.bootstrap))
            except Exception as exc:
                out["error"] = exc

        worker = threading.Thread(target=run)
        worker.start()
        worker.join(60)
        return out

    moving = _Listed([[KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS)], []])
    assert in_a_worker(moving) == {"rows": []} and moving.asked == 2
    refused = in_a_worker(_Listed([[KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED)]]))
    assert isinstance(refused.get("error"), ChronologError) and "list groups" in str(refused["error"]), refused
