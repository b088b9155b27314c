"""The console's server: uvicorn running the Starlette app of `console.web`, on a socket bound here (so a
port in use is one line before anything starts). Binds 127.0.0.1 unless told otherwise."""

from __future__ import annotations

import logging
import socket
import threading

from chronolog.console.app import Target

LOG = logging.getLogger("chronolog.console")


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def make_server(target: Target, host: str = "127.0.0.1", port: int = 8080):
    """(uvicorn server, its bound socket). uvicorn's own logging setup is off (log_config=None): inside a
    broker (`serve --console-port`) the broker's logging stays as it is."""
    import uvicorn

    from chronolog.console.web import create_app, is_loopback
    sock = _bind(host, port)
    config = uvicorn.Config(create_app(target, loopback_only=is_loopback(host)), log_config=None,
                            access_log=False, lifespan="off", ws="none", server_header=False, log_level="warning",
                            timeout_graceful_shutdown=5)  # a page stuck on a broker does not hold up a stop
    return uvicorn.Server(config), sock


def serve_forever(target: Target, host: str = "127.0.0.1", port: int = 8080) -> None:
    server, sock = make_server(target, host, port)
    print(f"chronolog console on http://{host}:{sock.getsockname()[1]}/ ({target.where})", flush=True)
    try:
        server.run(sockets=[sock])  # SIGINT/SIGTERM: uvicorn finishes the requests in flight, then returns
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()


def start_background(target: Target, host: str = "127.0.0.1", port: int = 8080):
    """Beside a broker (`chronolog serve --console-port`): uvicorn's event loop runs in a daemon thread
    (uvicorn installs no signal handlers outside the main thread; the broker keeps its own)."""
    server, sock = make_server(target, host, port)
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="chronolog-console", daemon=True).start()
    LOG.info("chronolog console on http://%s:%d/ (%s)", host, sock.getsockname()[1], target.where)
    return server
