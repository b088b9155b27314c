"""`Connection.receive` of a frame that arrives in pieces: the whole frame, and one line when the broker closes
mid-frame (the path a multi-MB Fetch answer takes when it is not yet whole in the socket's buffer)."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from chronolog.timetravel.connection import Connection, ConnectionLost


def _connection(sock: socket.socket) -> Connection:
    conn = Connection.__new__(Connection)  # no broker: only the socket and the name the errors use
    conn.sock, conn.where = sock, "test:0"
    return conn


def _send_in_pieces(sock: socket.socket, data: bytes, piece: int, close: bool) -> threading.Thread:
    def run() -> None:
        for i in range(0, len(data), piece):
            sock.sendall(data[i:i + piece])
        if close:
            sock.close()
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_frame_in_pieces_is_whole() -> None:
    ours, theirs = socket.socketpair()
    payload = bytes(range(256)) * 8192  # 2 MiB: more than a socket buffer holds, so it comes in pieces
    sender = _send_in_pieces(theirs, struct.pack(">i", len(payload)) + payload, 65536, close=False)
    try:
        got = _connection(ours).receive(lambda frame, cid: frame, 0)
    finally:
        sender.join(10)
        ours.close()
        theirs.close()
    assert type(got) is bytes and got == payload


@pytest.mark.parametrize("sent", [0, 1000])
def test_a_frame_cut_short_is_one_line(sent: int) -> None:
    ours, theirs = socket.socketpair()
    sender = _send_in_pieces(theirs, struct.pack(">i", 5000) + b"x" * sent, 100, close=True)
    try:
        with pytest.raises(ConnectionLost, match=f"connection closed after {sent} of 5000 bytes"):
            _connection(ours).receive(lambda frame, cid: frame, 0)
    finally:
        sender.join(10)
        ours.close()
