"""Blocking reads of size-prefixed Kafka frames over a plain or TLS socket, for the tests and benchmarks
that talk to a broker without a client library."""

from __future__ import annotations

import struct


def recv_exactly(sock, n: int) -> bytes:
    """`n` bytes; EOFError if the connection closes first. (A loop, not MSG_WAITALL: TLS sockets take no
    flags.)"""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if not k:
            raise EOFError(f"connection closed after {got} of {n} bytes")
        got += k
    return bytes(buf)


def recv_frame(sock) -> bytes:
    """One frame without its size prefix."""
    (size,) = struct.unpack(">i", recv_exactly(sock, 4))
    return recv_exactly(sock, size) if size > 0 else b""
