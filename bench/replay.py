"""A client's ceiling for consuming: the broker's answers recorded once, then replayed from memory.

A consume benchmark's rate is the client's work per record plus the broker's work per request, one after
the other (librdkafka has one Fetch in flight per broker). To tell the two apart, a proxy between the
client and a broker records every response keyed by its request (correlation id left out); a later run of
the same client against a server that only looks the request up and sends the recorded bytes back shows
how fast that client goes when the broker costs almost nothing, as librdkafka's mock broker does for
producing. The recording broker must advertise the proxy's address, or the client would fetch from the
broker directly after its first Metadata request.

`python -m bench.replay PORT UPSTREAM_PORT` runs the server in a process of its own (for a client that is
a Python loop too: the two would share one GIL, and the client's CPU could not be told from the server's),
driven by lines on stdin: `replay` ends a recording, `record` starts another (of another client),
`counts` prints the answers given from memory and the requests forwarded (API key:count) so far.
"""

from __future__ import annotations

import socket
import struct
import sys
import threading
import time
from collections import Counter

from tests.frames import recv_frame


def _key(request: bytes) -> bytes:
    """A request without its correlation id (bytes 4-8: after the API key and version)."""
    return request[:4] + request[8:]


FETCH = 1
HELD_MAX_BYTES = 1024  # a Fetch answer this small holds no records: the broker held it at the log end


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
    `forwarded`), so the broker must stay up until `close`. A Fetch answered without records is held as
    long as the broker held it (its fetch.max.wait at the log end): answered at once, a client at the
    log end would spin, Fetch after empty Fetch, on the CPU its own loop needs."""

    def __init__(self, port: int, upstream_port: int) -> None:
        self.port = port
        self.upstream_port = upstream_port
        self.recording = True
        self.answers: dict[bytes, bytes] = {}
        self.held: dict[bytes, float] = {}  # seconds, of the Fetches the broker answered without records
        self.forwarded_apis: Counter[int] = Counter()  # the forwarded, by API key
        self.answered = 0  # from memory
        self._server = socket.create_server(("127.0.0.1", port))
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def forwarded(self) -> int:
        return self.forwarded_apis.total()

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
                recording = self.recording  # as the request came (a long poll may end after the switch)
                body = None if recording else self.answers.get(key)
                if body is None:
                    if upstream is None:
                        upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
                        upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    asked = time.perf_counter()
                    upstream.sendall(struct.pack(">i", len(request)) + request)
                    body = recv_frame(upstream)[4:]
                    (api,) = struct.unpack_from(">h", request)
                    if api == FETCH and len(body) < HELD_MAX_BYTES:
                        self.held[key] = min(time.perf_counter() - asked, 1.0)
                    self.answers[key] = body
                    if not recording:
                        self.forwarded_apis[api] += 1
                else:
                    self.answered += 1
                    if key in self.held:
                        time.sleep(self.held[key])
                _send_parts(conn, struct.pack(">i", len(body) + 4) + request[4:8], body)
        except (EOFError, OSError):
            pass
        finally:
            conn.close()
            if upstream is not None:
                upstream.close()


def main(argv: list[str]) -> None:
    replay = ResponseReplay(int(argv[0]), int(argv[1]))
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() in ("record", "replay"):
            replay.recording = line.strip() == "record"
        elif line.strip() == "counts":
            print(replay.answered, *(f"{key}:{n}" for key, n in replay.forwarded_apis.items()), flush=True)
            continue
        print("ok", flush=True)
    replay.close()


if __name__ == "__main__":
    main(sys.argv[1:])
