"""One blocking Kafka-protocol connection, for the clients that speak the wire themselves instead of
through librdkafka: the raw Fetch loop of the Arrow reader (`timetravel.fetcher`) and the Spark sink's
Produce path (`spark.native_writer`), over plain TCP (PLAINTEXT); and the share and streams group requests,
which also take TLS and SASL configs (`timetravel.secure_connection`). ApiVersions first, one request in
flight: the callers send a request and wait for its answer before the next.

A connection that cannot be made, breaks or times out raises `ConnectionLost`, a `ChronologError` that
says "a new connection may do better": the sink retries on it, the reader reports it in one line.
"""

from __future__ import annotations

import select
import socket
import struct
from collections.abc import Callable, Iterable

from chronolog.errors import ChronologError
from chronolog.protocol import fetch_client as fc

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (a raw consume does not)
if TYPE_CHECKING:
    from typing import TypeVar

    T = TypeVar("T")


class ConnectionLost(ChronologError):
    """The connection could not be made, broke or timed out."""


def servers(bootstrap: str) -> list[tuple[str, int]]:
    """`host:port[,host:port...]` (IPv6 hosts in brackets) as (host, port) pairs, or a one-line error."""
    out = []
    for item in bootstrap.split(","):
        item = item.strip()
        if not item:
            continue
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise ChronologError(f"bootstrap server {item!r} is not HOST:PORT")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ChronologError("no bootstrap servers given")
    return out


class Connection:
    """A connected socket that has asked the broker its API versions (`versions`); with `security` (client
    configs naming a `security.protocol` other than PLAINTEXT) over TLS and/or SASL-authenticated."""

    def __init__(self, host: str, port: int, timeout: float, client_id: str, security: dict | None = None) -> None:
        self.where = f"{host}:{port}"
        proto = "plaintext"
        if security:
            from chronolog.timetravel.secure_connection import security_protocol
            proto = security_protocol(security)
        try:
            # an ASCII name as bytes: getaddrinfo encodes a str with the idna codec, whose import (stringprep,
            # unicodedata) costs a raw consume a tenth of its start; the name is the same either way
            self.sock = socket.create_connection((host.encode() if host.isascii() else host, port), timeout=timeout)
        except OSError as exc:
            raise ConnectionLost(f"cannot connect to {self.where}: {exc.strerror or exc}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id
        self.correlation = 0
        if proto != "plaintext":
            self._secure(host, proto, security or {})
        else:
            self.versions = self.call([fc.api_versions_request(self.next_id(), client_id)], fc.read_api_versions)

    def _secure(self, host: str, proto: str, conf: dict) -> None:
        """TLS, ApiVersions and SASL as Kafka's client orders them; one line (and the socket closed) if any fails."""
        from chronolog.timetravel.secure_connection import authenticate, wrap_tls
        try:
            if proto.endswith("ssl"):
                try:
                    self.sock = wrap_tls(self.sock, host, conf)
                except OSError as exc:  # ssl.SSLError included: a bad CA, a name that does not match
                    raise ConnectionLost(f"TLS to {self.where} failed: {exc}") from None
            self.versions = self.call([fc.api_versions_request(self.next_id(), self.client_id)],
                                      fc.read_api_versions)
            if proto.startswith("sasl"):
                authenticate(self, conf)
        except BaseException:
            self.sock.close()
            raise

    def next_id(self) -> int:
        """The correlation id of the next request (take it when building the request)."""
        self.correlation += 1
        return self.correlation

    def send(self, pieces: Iterable[bytes]) -> None:
        """A request's bytes, in pieces (a Produce request's batches are sent as they are, not joined)."""
        try:
            for piece in pieces:
                self.sock.sendall(piece)
        except OSError as exc:
            raise ConnectionLost(f"{self.where}: {exc}") from None

    def call(self, pieces: Iterable[bytes], reader: Callable[[bytes, int], T]) -> T:
        """Send the request built with the last `next_id()` and read its answer with
        `reader(frame, correlation id)`."""
        cid = self.correlation
        self.send(pieces)
        return self.receive(reader, cid)

    def receive(self, reader: Callable[[bytes, int], T], correlation_id: int) -> T:
        """The next answer, read with `reader(frame, correlation_id)`: after `send` of requests built one
        after another, their answers come in the same order (Kafka answers a connection in order), so a
        caller can send several before reading any (one round trip for all)."""
        try:
            (size,) = struct.unpack(">i", self._exactly(4))
            frame = self._exactly(size)
        except (OSError, EOFError) as exc:
            raise ConnectionLost(f"{self.where}: {exc or 'timed out'}") from None
        return reader(frame, correlation_id)

    def _exactly(self, n: int) -> bytes:
        """`n` bytes: the first `recv`'s when the frame is whole in the socket's buffer (a Fetch answer read
        ahead often is: no zeroed buffer, no copy of a MB); otherwise the rest is received into one buffer.
        Not `recv(n - got)` per piece: each allocates the whole remainder anew, and the page faults of those
        multi-MB buffers cost a Spark read of 30 MB more system CPU than this copy (issue #37's A/B)."""
        first = self.sock.recv(n)
        got = len(first)
        if got == n:
            return first
        if not got:
            raise EOFError(f"connection closed after 0 of {n} bytes")
        buf = bytearray(n)
        buf[:got] = first
        view = memoryview(buf)
        while got < n:
            k = self.sock.recv_into(view[got:])
            if not k:
                raise EOFError(f"connection closed after {got} of {n} bytes")
            got += k
        return bytes(buf)

    def alive(self) -> bool:
        """Whether an idle connection can take a request: with no request outstanding nothing should be
        readable, so a readable socket is one the broker closed (or one in an unknown state)."""
        try:
            poller = select.poll()  # not select(): no limit on the descriptor's number
            poller.register(self.sock, select.POLLIN | select.POLLERR | select.POLLHUP)
            return not poller.poll(0)
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        self.sock.close()


__all__ = ["Connection", "ConnectionLost", "servers"]
