"""The console's web front itself (Starlette on uvicorn, Jinja2 templates): a timeline page really goes out
while it is being counted, blocking work stays off the event loop, every printed value is escaped, errors
of the HTTP layer are one-line pages, and without the `console` extra the commands say how to install it."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading

import pytest

from tests.console.conftest import get
from tests.waiting import poll_until


def test_the_timeline_page_is_sent_while_it_is_counted(data_copy):
    """Chunk by chunk as the server sends it: the line of partition 0 goes out before partition 1 is
    counted, and the chart's data only after both (the counting is still to do when the first lines leave)."""
    from chronolog.console.app import Console, Target
    from chronolog.console.render import Renderer
    from chronolog.console.web import _chunks
    target = Target(str(data_copy))
    page = Console(target).timeline("late", {"step": ["60000"]})
    assert page.stream and page.status == 200
    chunks = _chunks(Renderer(target.where).stream(page))
    sent: list[str] = []
    for chunk in chunks:
        sent.append(chunk.decode())
        if "counting partition 0 (1 of 2)" in sent[-1]:
            assert "view" not in page.context["state"]  # nothing counted yet: this line went out first
        if "counting partition 1 (2 of 2)" in sent[-1]:
            assert "view" not in page.context["state"]
    where = {word: next(i for i, c in enumerate(sent) if word in c) for word in
             ("<header>", "counting partition 0", "counting partition 1", 'id="timeline-data"')}
    assert where["<header>"] < where["counting partition 0"] < where["counting partition 1"] \
        < where['id="timeline-data"']
    assert "view" in page.context["state"] and "</html>" in sent[-1]


@pytest.mark.timeout(120)
def test_a_page_that_blocks_does_not_hold_up_the_others():
    """A page whose broker accepts the connection and never answers blocks its worker thread (librdkafka
    waits up to its connection timeout: the tools' 15 s by default, 5 s here through the console's client
    configs, far longer than the two local requests made meanwhile); the static file and the error page
    still answer meanwhile, so the event loop is free. Then the blocked page ends as a one-line 502 naming
    that timeout and the server keeps serving."""
    from chronolog.console.app import Target
    from chronolog.console.server import start_background
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    accepted = threading.Event()
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = silent.accept()
            except OSError:
                return
            held.append(conn)
            accepted.set()

    threading.Thread(target=accept, daemon=True).start()
    bootstrap = f"127.0.0.1:{silent.getsockname()[1]}"
    server = start_background(Target(None, bootstrap, {"socket.connection.setup.timeout.ms": "5000"}), "127.0.0.1", 0)
    try:
        assert poll_until(lambda: server.started, 30, interval=0.05)
        port = server.servers[0].sockets[0].getsockname()[1]
        base = f"http://127.0.0.1:{port}"
        blocked: dict = {}
        t = threading.Thread(target=lambda: blocked.update(answer=get(base + "/")), daemon=True)
        t.start()
        assert accepted.wait(30), "the page never reached the broker"
        assert get(base + "/static/console.css")[0] == 200
        assert get(base + "/nowhere")[0] == 404
        assert "answer" not in blocked  # the blocked page was still waiting while those were answered
        t.join(60)
        status, page = blocked["answer"]
        assert status == 502 and 'role="alert"' in page and "Traceback" not in page
        assert "no answer within 5 s" in page, page
        assert get(base + "/static/console.css")[0] == 200
    finally:
        server.should_exit = True
        silent.close()
        for conn in held:
            conn.close()


def test_values_are_escaped_in_every_page(loaded, broker_console):
    """A group's name is any string: one that is markup shows as text (Jinja2's autoescape)."""
    from tests.console.test_console_groups import commit_at_end
    name = "<script>alert('x')</script>&\""
    commit_at_end(loaded.broker.bootstrap, name, "late", {0: 1})
    status, page = get(broker_console.url("/groups"))
    assert status == 200 and "<script>alert" not in page
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&#34;" in page
    status, page = get(broker_console.url("/groups/%3Cscript%3Ealert('x')%3C%2Fscript%3E%26%22"))
    assert status == 200 and "<script>alert" not in page and "group &lt;script&gt;" in page


def test_http_errors_are_one_line_pages_and_pages_carry_the_security_headers(dir_console):
    import urllib.request
    status, page = get(dir_console.url("/"), {"x": "1"})  # a POST where there is no form
    assert status == 405 and "POST is not supported at /" in page and "Traceback" not in page
    req = urllib.request.Request(dir_console.url("/groups/g/rewind"), data=b"x" * (65 << 10))
    try:
        urllib.request.urlopen(req, timeout=30)
        raise AssertionError("an oversized form was taken")
    except urllib.error.HTTPError as exc:
        assert exc.code == 413 and "a form is at most 65536 bytes" in exc.read().decode()
    with urllib.request.urlopen(dir_console.url("/"), timeout=30) as resp:
        assert resp.headers["X-Frame-Options"] == "DENY"
        assert "frame-ancestors 'none'" in resp.headers["Content-Security-Policy"]
        assert resp.headers["Content-Type"] == "text/html; charset=utf-8"
    with urllib.request.urlopen(dir_console.url("/static/vendor/uplot/uPlot.iife.min.js"), timeout=30) as resp:
        assert resp.read().startswith(b"/*! https://github.com/leeoniya/uPlot (v1.6.32) */")


@pytest.mark.parametrize("args", [["console", "--data-dir", "{d}"], ["serve", "--data-dir", "{d}", "--console-port", "0"]])
def test_without_the_console_extra_the_command_says_how_to_install_it(tmp_path, args):
    """starlette made unimportable (as when the extra is not installed): one line, exit 2, nothing served."""
    code = ("import sys\nsys.modules['starlette'] = None\nsys.argv = ['chronolog'] + sys.argv[1:]\n"
            "from chronolog.cli.main import main\nmain()\n")
    argv = [a.replace("{d}", str(tmp_path / "d")) for a in args]
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL)
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert "the console needs starlette: pip install 'chronolog[console]'" in lines[0]
