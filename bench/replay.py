"""A client's ceiling for consuming: the broker's answers recorded once, then replayed from memory.

A consume benchmark's rate is the client's work per record plus the broker's work per request, one after
the other (librdkafka has one Fetch in flight per broker). To tell the two apart, a proxy between the
client and a broker records every response keyed by its request (correlation id left out); a later run of
the same client against a server that only looks the request up and sends the recorded bytes back shows
how fast that client goes when the broker costs almost nothing, as librdkafka's mock broker does for
producing. The recording broker must advertise the proxy's address, or the client would fetch from the
broker directly after its first Metadata request.
"""

from __future__ import annotations

import socket
import struct
import threading

from tests.frames import recv_frame


def _key(request: bytes) -> bytes:
    """A request without its correlation id (bytes 4-8: after the API key and version)."""
    return request[:4] + request[8:]


def _send_parts(sock: socket.socket, head: bytes, body: bytes) -> None:
    """head and body in one system call where the socket takes them at once (no copy, one wakeup)."""
    sent = sock.sendmsg([head, body])
    if sent < len(head):
        sock.sendall(head[sent:])
        sent = len(head)
    if sent - len(head) < len(body):
        sock.sendall(memoryview(body)[sent - len(head):])


class ResponseReplay:
    """Listens on `port` in front of the broker at `upstream_port`. While `recording`, every request is
    forwarded and its answer kept; afterwards a known request is answered from memory, and one never seen
    (a client that happens to ask in another order) is forwarded and kept as before (counted in
    `forwarded`), so the broker must stay up until `close`."""

    def __init__(self, port: int, upstream_port: int) -> None:
        self.port = port
        self.upstream_port = upstream_port
        self.recording = True
        self.answers: dict[bytes, bytes] = {}
        self.forwarded = 0
        self._server = socket.create_server(("127.0.0.1", port))
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        # shutdown first: a close alone leaves the accepting thread blocked and the port still listening
        try:
            self._server.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._server.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        upstream = None
        try:
            while True:
                request = recv_frame(conn)
                key = _key(request)
                body = None if self.recording else self.answers.get(key)
                if body is None:
                    if upstream is None:
                        upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
                        upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    upstream.sendall(struct.pack(">i", len(request)) + request)
                    body = recv_frame(upstream)[4:]
                    self.answers[key] = body
                    if not self.recording:
                        self.forwarded += 1
                _send_parts(conn, struct.pack(">i", len(body) + 4) + request[4:8], body)
        except (EOFError, OSError):
            pass
        finally:
            conn.close()
            if upstream is not None:
                upstream.close()
