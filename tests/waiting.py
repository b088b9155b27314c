"""Waiting for a state without sleeping for it: tests poll the state itself, bounded, so they hold on a busy
machine as on an idle one."""

from __future__ import annotations

import time
from collections.abc import Callable


def poll_until(condition: Callable[[], object], timeout: float, interval: float = 0.02) -> bool:
    """True as soon as `condition()` is truthy, False once `timeout` seconds passed without it."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def established_connections(port: int) -> int:
    """TCP connections whose local port is `port` (the server's side of its clients' connections) that the
    server has not closed yet: ESTABLISHED, or CLOSE_WAIT (the client closed, the server has not noticed),
    read from /proc/net/tcp and tcp6."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    local, state = fields[1], fields[3]
                    if state in ("01", "08") and int(local.rsplit(":", 1)[1], 16) == port:
                        count += 1
        except FileNotFoundError:
            continue
    return count


def readable(fileobj, timeout: float) -> bool:
    """True once `fileobj` (a socket, a pipe) has something to read or was closed, False after `timeout`
    seconds. poll(), not select(): a test process may hold descriptors numbered past select()'s 1024."""
    import select

    poller = select.poll()
    poller.register(fileobj, select.POLLIN | select.POLLERR | select.POLLHUP)
    return bool(poller.poll(max(0.0, timeout) * 1000))


def closed_by_peer(sock, timeout: float = 60.0) -> bool:
    """True when the other side closes `sock` (end of stream or a reset) within `timeout` seconds, False
    when a byte comes instead; TimeoutError when neither does."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
