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


def request_frame(api_key: int, version: int, corr: int, body) -> bytes:
    """A size-prefixed request of a kio request entity, with a v1 header (client id "test"; the versions sent
    this way have no flexible header)."""
    import io

    from kio.serial import entity_writer
    out = io.BytesIO()
    entity_writer(type(body))(out, body)
    payload = struct.pack(">hhih", api_key, version, corr, 4) + b"test" + out.getvalue()
    return struct.pack(">i", len(payload)) + payload


def decode_response(api_key: int, version: int, frame: bytes):
    """The kio response entity in `frame` (as recv_frame returns it), past its v0 header's correlation id."""
    from kio.index import load_response_schema
    from kio.serial import entity_reader
    return entity_reader(load_response_schema(api_key, version))(frame, 4)[0]
