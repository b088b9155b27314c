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


def _read_exact(sock: socket.socket, size: int) -> bytearray:
    data = bytearray(size)
    view = memoryview(data)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:])
        if n == 0:
            raise EOFError
        got += n
    return data


def _read_frame(sock: socket.socket) -> bytearray:
    return _read_exact(sock, struct.unpack(">i", _read_exact(sock, 4))[0])


def _key(request: bytearray) -> bytes:
    """A request without its correlation id (bytes 4-8: after the API key and version)."""
    return bytes(request[:4]) + bytes(request[8:])


def _send_parts(sock: socket.socket, head: bytes, body: bytes) -> None:
    """head and body in one system call where the socket takes them at once (no copy, one wakeup)."""
    sent = sock.sendmsg([head, body])
    if sent < len(head):
        sock.sendall(head[sent:])
        sent = len(head)
    if sent - len(head) < len(body):
        sock.sendall(memoryview(body)[sent - len(head):])


class ResponseReplay:
    """Listens on `port`; `record(upstream)` forwards each connection's requests to the broker at
    `upstream` and keeps its answers, `replay()` answers the requests it knows from memory (an unknown one
    closes the connection and is counted in `missing`)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.answers: dict[bytes, bytes] = {}
        self.missing = 0
        self._upstream: int | None = None
        self._server = socket.create_server(("127.0.0.1", port))
        threading.Thread(target=self._accept, daemon=True).start()

    def record(self, upstream_port: int) -> None:
        self._upstream = upstream_port

    def replay(self) -> None:
        self._upstream = None

    def close(self) -> None:
        self._server.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            target = self._proxy if self._upstream is not None else self._answer
            threading.Thread(target=target, args=(conn,), daemon=True).start()

    def _proxy(self, conn: socket.socket) -> None:
        with conn, socket.create_connection(("127.0.0.1", self._upstream)) as upstream:
            upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                while True:
                    request = _read_frame(conn)
                    upstream.sendall(struct.pack(">i", len(request)) + request)
                    response = _read_frame(upstream)
                    self.answers[_key(request)] = bytes(response[4:])
                    conn.sendall(struct.pack(">i", len(response)) + response)
            except (EOFError, OSError):
                pass

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                while True:
                    request = _read_frame(conn)
                    body = self.answers.get(_key(request))
                    if body is None:  # e.g. the Fetch a client had in flight when the recording run ended
                        self.missing += 1
                        return
                    _send_parts(conn, struct.pack(">i", len(body) + 4) + request[4:8], body)
            except (EOFError, OSError):
                pass
