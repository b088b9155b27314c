"""The console's HTTP shell: the standard library's threading HTTP server around `console.app.Console`.
A thread per request; nothing here knows a page. Binds 127.0.0.1 unless told otherwise."""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from chronolog.console.app import Console, Target

LOG = logging.getLogger("chronolog.console")
MAX_FORM_BYTES = 64 << 10


class _Handler(BaseHTTPRequestHandler):
    server_version = "chronolog-console"
    console: Console  # set on the subclass made per server
    loopback_only = True

    def _host_allowed(self) -> bool:
        """On a loopback address only loopback names may be asked for: a page of another site whose name
        was made to resolve to 127.0.0.1 (DNS rebinding) would otherwise read the console, CSRF token
        included."""
        if not self.loopback_only:
            return True
        host = (self.headers.get("Host") or "").strip().lower()
        name = host[1:].split("]")[0] if host.startswith("[") else host.rsplit(":", 1)[0]
        return name in ("127.0.0.1", "localhost", "::1") or name.startswith("127.")

    def _answer(self, method: str) -> None:
        if not self._host_allowed():
            self.send_error(403, "this console answers only to loopback host names")
            return
        path, _, query = self.path.partition("?")
        form = b""
        if method == "POST":
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if not 0 <= length <= MAX_FORM_BYTES:
                self.send_error(413 if length > MAX_FORM_BYTES else 400)
                return
            form = self.rfile.read(length)
        resp = self.console.handle(method, path, query, form)
        self.send_response(resp.status)
        self.send_header("Content-Type", resp.content_type)
        streamed = not isinstance(resp.body, bytes)
        if streamed:  # HTTP/1.0 (this server's protocol): the body ends when the connection closes
            self.send_header("Connection", "close")
        else:
            self.send_header("Content-Length", str(len(resp.body)))
        # Pages must not be framed by another site (a click-jacked "commit these offsets").
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; "
                         "frame-ancestors 'none'")
        self.send_header("X-Content-Type-Options", "nosniff")
        for k, v in resp.headers.items():
            self.send_header(k, v)
        self.end_headers()
        if not streamed:
            if method != "HEAD":
                self.wfile.write(resp.body)
            return
        chunks = iter(resp.body)
        try:
            for chunk in chunks:
                if method != "HEAD":
                    self.wfile.write(chunk)
                    self.wfile.flush()
        except OSError:  # the browser went away: stop building the page
            pass
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()

    def do_GET(self) -> None:  # noqa: N802 (the standard library's names)
        self._answer("GET")

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer("HEAD")

    def do_POST(self) -> None:  # noqa: N802
        self._answer("POST")

    def log_message(self, format: str, *args) -> None:  # noqa: A002
        LOG.debug("%s %s", self.address_string(), format % args)


def make_server(target: Target, host: str = "127.0.0.1", port: int = 8080) -> ThreadingHTTPServer:
    loopback = host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")
    handler = type("ConsoleHandler", (_Handler,), {"console": Console(target), "loopback_only": loopback})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


def serve_forever(target: Target, host: str = "127.0.0.1", port: int = 8080) -> None:
    server = make_server(target, host, port)
    print(f"chronolog console on http://{host}:{server.server_address[1]}/ ({target.where})", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def start_background(target: Target, host: str = "127.0.0.1", port: int = 8080) -> ThreadingHTTPServer:
    """Beside a broker (`chronolog serve --console-port`): the server runs in a daemon thread."""
    server = make_server(target, host, port)
    threading.Thread(target=server.serve_forever, name="chronolog-console", daemon=True).start()
    LOG.info("chronolog console on http://%s:%d/ (%s)", host, server.server_address[1], target.where)
    return server
