"""Consumer groups through the console against a real broker: lag, and a rewind to a time that goes through
`chronolog reset-offsets` (preview, then a confirmed POST with the CSRF token); refused while the group has
members, without the token, and in --read-only mode. A broker that goes away is a message, not a crash;
`serve --console-port` runs the console beside the broker."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.brokerproc import BrokerProcess, free_port
from tests.console.conftest import LATE_BASE, ConsoleProcess, csrf_of, get, wait_http
from tests.subprocs import stop
from tests.waiting import poll_until

STATE = 'state <b id="state">{}</b>'


def committed(bootstrap: str, group: str, topic: str, parts: int) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(parts)])
    result = admin.list_consumer_group_offsets([req], request_timeout=15)[group].result(15)
    return {tp.partition: tp.offset for tp in result.topic_partitions}


def commit_at_end(bootstrap: str, group: str, topic: str, ends: dict[int, int]) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in ends.items()], asynchronous=False)
    finally:
        c.close()


def rows_of(page: str, table_id: str) -> list[list[str]]:
    body = page.split(f'<table id="{table_id}">', 1)[1].split("</table>", 1)[0]
    return [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", body)[1:]]


def test_rewind_previews_then_commits_offsets_of_the_time(loaded, broker_console):
    bootstrap = loaded.broker.bootstrap
    stamps = loaded.truth["late"]
    ends = {p: len(s) for p, s in stamps.items()}
    commit_at_end(bootstrap, "replayer", "late", ends)
    status, page = get(broker_console.url("/groups"))
    assert status == 200 and '<a href="/groups/replayer">replayer</a>' in page
    status, page = get(broker_console.url("/groups/replayer"))
    assert status == 200 and STATE.format("EMPTY") in page
    assert [(r[0], int(r[1]), int(r[2]), int(r[4])) for r in rows_of(page, "offsets")] == \
        [("late", p, ends[p], 0) for p in sorted(ends)]
    token = csrf_of(page)
    when = 1_700_001_000_000  # 2023-11-14T22:30:00Z
    want = {p: next(o for o, ts in enumerate(s) if ts >= when) for p, s in stamps.items()}

    # a form without the token (another site's page posting here) changes nothing
    status, page = get(broker_console.url("/groups/replayer/rewind"),
                       {"topic": "late", "time": str(when), "action": "apply"})
    assert status == 403 and "CSRF" in page
    assert committed(bootstrap, "replayer", "late", 2) == ends

    status, page = get(broker_console.url("/groups/replayer/rewind"),
                       {"csrf": token, "topic": "late", "time": "2023-11-14T22:30:00Z", "action": "preview"})
    assert status == 200, page
    assert [(int(r[1]), int(r[2]), int(r[3])) for r in rows_of(page, "rewind")] == \
        [(p, ends[p], want[p]) for p in sorted(want)]
    assert committed(bootstrap, "replayer", "late", 2) == ends  # a preview commits nothing
    assert f'name="time" value="{when}"' in page  # the confirmation carries the resolved time

    status, page = get(broker_console.url("/groups/replayer/rewind"),
                       {"csrf": token, "topic": "late", "time": str(when), "action": "apply"})
    assert status == 200, page
    assert "rewound to 2023-11-14T22:30:00.000Z" in page
    assert committed(bootstrap, "replayer", "late", 2) == want
    assert [(int(r[1]), int(r[2]), int(r[4])) for r in rows_of(page, "offsets")] == \
        [(p, want[p], ends[p] - want[p]) for p in sorted(want)]


def test_rewind_is_refused_while_the_group_has_members(loaded, broker_console):
    bootstrap = loaded.broker.bootstrap
    ends = {p: len(s) for p, s in loaded.truth["late"].items()}
    commit_at_end(bootstrap, "busy", "late", ends)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "busy", "enable.auto.commit": False,
                  "session.timeout.ms": 6000})
    c.subscribe(["late"])
    try:
        assert poll_until(lambda: (c.poll(0.2), bool(c.assignment()))[1], 30)
        status, page = get(broker_console.url("/groups/busy"))
        assert STATE.format("STABLE") in page and '<table id="members">' in page
        status, page = get(broker_console.url("/groups/busy/rewind"),
                           {"csrf": csrf_of(page), "topic": "late", "time": str(LATE_BASE), "action": "apply"})
        assert status == 400 and "active member" in page and "stop its consumers first" in page
        assert committed(bootstrap, "busy", "late", 2) == ends
    finally:
        c.close()


def test_read_only_console_shows_no_rewind_and_refuses_posts(loaded, tmp_path):
    commit_at_end(loaded.broker.bootstrap, "ro", "late", {0: 5, 1: 5})
    console = ConsoleProcess("--bootstrap-server", loaded.broker.bootstrap, "--read-only", log=tmp_path / "ro.log")
    try:
        status, page = get(console.url("/groups/ro"))
        assert status == 200 and "--read-only" in page and 'name="csrf"' not in page
        status, page = get(console.url("/groups/ro/rewind"), {"csrf": "x", "topic": "late", "time": str(LATE_BASE),
                                                              "action": "apply"})
        assert status == 403 and "--read-only: rewinding is turned off" in page
        assert committed(loaded.broker.bootstrap, "ro", "late", 2) == {0: 5, 1: 5}
    finally:
        console.stop()


def test_a_broker_that_goes_away_is_a_message_and_the_console_keeps_serving(tmp_path):
    broker = BrokerProcess(tmp_path / "data").start()
    console = ConsoleProcess("--bootstrap-server", broker.bootstrap, log=tmp_path / "c.log")
    try:
        assert get(console.url("/"))[0] == 200
        broker.stop()
        for path in ("/", "/groups", "/topics/x"):
            status, page = get(console.url(path))
            assert status == 502 and "cannot connect" in page and "Traceback" not in page, page
        broker.start()
        assert get(console.url("/"))[0] == 200
    finally:
        console.stop()
        broker.stop()


def test_console_command_line_errors_are_one_line(tmp_path):
    for args, words in ((["--bootstrap-server", f"127.0.0.1:{free_port()}"], "cannot connect"),
                        (["--data-dir", str(tmp_path / "missing")], "does not exist"),
                        ([], "give --bootstrap-server")):
        p = subprocess.run([sys.executable, "-m", "chronolog.cli.main", "console", *args, "--port", "0"],
                           capture_output=True, text=True, timeout=60)
        lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
        assert p.returncode == 2 and len(lines) == 1 and words in lines[0], p.stderr


@pytest.mark.timeout(120)
def test_serve_with_console_port_serves_both(tmp_path):
    port, console_port = free_port(), free_port()
    log = open(tmp_path / "serve.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "chronolog.cli.main", "serve", "--data-dir", str(tmp_path / "d"),
                             "--port", str(port), "--console-port", str(console_port)],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{console_port}/", proc)
        bootstrap = f"127.0.0.1:{port}"
        producer = Producer({"bootstrap.servers": bootstrap})
        for i in range(30):
            producer.produce("beside", value=b"%d" % i, timestamp=LATE_BASE + i * 1000)
        assert producer.flush(30) == 0
        commit_at_end(bootstrap, "g", "beside", {0: 30})
        status, page = get(f"http://127.0.0.1:{console_port}/api/topics/beside/timeline?step=10000")
        assert status == 200 and json.loads(page)["totals"] == [10, 10, 10] and json.loads(page)["exact"]
        status, page = get(f"http://127.0.0.1:{console_port}/groups/g")
        assert status == 200 and STATE.format("EMPTY") in page
    finally:
        stop(proc)
        log.close()
    assert proc.returncode == 0, (tmp_path / "serve.log").read_text()[-2000:]


def test_serve_without_console_port_imports_no_console_module(tmp_path):
    code = ("import sys\n"
            "from chronolog.cli import fastserve\n"
            "import chronolog.server.broker as b\n"
            "b.serve = lambda *a: print(sorted(m for m in sys.modules if m.startswith('chronolog.console')))\n"
            f"assert fastserve.run(['serve', '--data-dir', {str(tmp_path)!r}])\n"
            "from chronolog.cli.fastserve import parse\n"
            "assert parse(['serve', '--data-dir', 'd', '--console-port=8081'])['console_port'] == 8081\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_group_name_with_a_slash_and_a_space(loaded, broker_console):
    import html
    commit_at_end(loaded.broker.bootstrap, "team/replay x", "late", {0: 7, 1: 9})
    status, page = get(broker_console.url("/groups"))
    link = re.search(r'<a href="([^"]+)">team/replay x</a>', page)
    assert status == 200 and link and link[1] == "/groups/team%2Freplay%20x"
    status, page = get(broker_console.url(html.unescape(link[1])))
    assert status == 200 and "group team/replay x" in page
    assert [(int(r[1]), int(r[2])) for r in rows_of(page, "offsets")] == [(0, 7), (1, 9)]
