"""The fault admin API: program a running test broker's faults from another process (an app under test
started as a subprocess, a Spark job, a Node or JVM test) with plain HTTP and JSON, as Toxiproxy's API does.

Loopback only: the server binds 127.0.0.1 and answers no other peer. It changes how the broker answers
every client, so it is never part of `chronolog serve`; only `chronolog.testing` starts it.

    GET    /faults                   everything programmed: rules, paused partitions, clock, refusing, unhit
    POST   /faults/errors            {"api": "Produce", "error": "NOT_LEADER_OR_FOLLOWER", "count": 2,
                                      "topic": null, "partition": null, "client_id": null}  -> the rule
    POST   /faults/latency           {"api": "Fetch", "ms": 300, "count": null, "client_id": null} -> the rule
    POST   /faults/close             {"api": "Produce", "count": 1, "client_id": null}  -> the rule
    DELETE /faults/<id>              remove one rule               -> {"removed": true}
    DELETE /faults                   remove everything (rules, pauses, clock, refusal) -> the state
    POST   /connections/drop         close every client connection -> {"closed": 3}
    POST   /connections/refuse       {"seconds": 2.0, "drop_existing": true}
    POST   /connections/accept
    POST   /partitions/pause         {"topic": "orders", "partition": 0}
    POST   /partitions/resume        {"topic": "orders", "partition": 0}
    POST   /clock                    {"advance_ms": -86400000} or {"offset_ms": 0} -> {"clock_offset_ms": ...}

A bad request answers 400 with {"error": "<one line>"}; an unknown path 404.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

MAX_BODY = 64 * 1024


class AdminError(Exception):
    """The admin API refused a request (its one-line reason)."""


class AdminServer:
    """The HTTP side, served on the broker's own loop; each call runs in a worker thread because the
    Faults methods wait for that loop."""

    def __init__(self, faults: Any, loop: asyncio.AbstractEventLoop, host: str = "127.0.0.1", port: int = 0) -> None:
        if not _loopback(host):
            raise ValueError(f"the fault admin API listens on loopback only, not {host!r}")
        self.faults = faults
        self.loop = loop
        self.host = host
        self.port = port
        self._server: asyncio.base_events.Server | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> AdminServer:
        async def start() -> asyncio.base_events.Server:
            return await asyncio.start_server(self._serve, self.host, self.port)
        self._server = asyncio.run_coroutine_threadsafe(start(), self.loop).result(30)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return

        async def stop() -> None:
            server.close()
        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(30)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            peer = writer.get_extra_info("peername") or ("?",)
            if not _loopback(str(peer[0])):
                return
            status, answer = await self._one(reader)
            body = json.dumps(answer).encode()
            writer.write(f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            writer.close()

    async def _one(self, reader: asyncio.StreamReader) -> tuple[int, Any]:
        request_line = (await asyncio.wait_for(reader.readline(), 30)).decode("latin-1").split()
        if len(request_line) != 3:
            return 400, {"error": "malformed request line"}
        method, path = request_line[0].upper(), request_line[1].split("?")[0].rstrip("/") or "/"
        length = 0
        while True:
            line = (await asyncio.wait_for(reader.readline(), 30)).decode("latin-1").strip()
            if not line:
                break
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        if not 0 <= length <= MAX_BODY:
            return 400, {"error": f"body of {length} bytes; at most {MAX_BODY}"}
        raw = await asyncio.wait_for(reader.readexactly(length), 30) if length else b""
        try:
            args = json.loads(raw) if raw.strip() else {}
        except ValueError as exc:
            return 400, {"error": f"body is not JSON: {exc}"}
        if not isinstance(args, dict):
            return 400, {"error": "body must be a JSON object"}
        call = self._route(method, path, args)
        if call is None:
            return 404, {"error": f"no such endpoint: {method} {path}"}
        try:
            return 200, await asyncio.to_thread(call)
        except TypeError as exc:
            return 400, {"error": f"bad arguments: {exc}"}
        except Exception as exc:  # a refused fault: one line back to the caller
            return 400, {"error": str(exc).splitlines()[0] if str(exc) else type(exc).__name__}

    def _route(self, method: str, path: str, args: dict) -> Callable[[], Any] | None:
        f = self.faults
        routes: dict[tuple[str, str], Callable[[], Any]] = {
            ("GET", "/faults"): f.state,
            ("DELETE", "/faults"): lambda: (f.clear(), f.state())[1],
            ("POST", "/faults/errors"): lambda: f.push_errors(**args).describe(),
            ("POST", "/faults/latency"): lambda: f.add_latency(**args).describe(),
            ("POST", "/faults/close"): lambda: f.close_on(**args).describe(),
            ("POST", "/connections/drop"): lambda: {"closed": f.drop_connections()},
            ("POST", "/connections/refuse"): lambda: (f.refuse_connections(**args), f.state())[1],
            ("POST", "/connections/accept"): lambda: (f.accept_connections(), f.state())[1],
            ("POST", "/partitions/pause"): lambda: (f.pause(**args), f.state())[1],
            ("POST", "/partitions/resume"): lambda: (f.resume(**args), f.state())[1],
            ("POST", "/clock"): lambda: {"clock_offset_ms": _clock(f, **args)},
        }
        if (method, path) in routes:
            return routes[(method, path)]
        if method == "DELETE" and path.startswith("/faults/") and path[len("/faults/"):].isdigit():
            rule_id = int(path[len("/faults/"):])
            return lambda: {"removed": f.remove(rule_id)}
        return None


def _clock(faults: Any, advance_ms: int | None = None, offset_ms: int | None = None) -> int:
    if (advance_ms is None) == (offset_ms is None):
        raise ValueError("give one of advance_ms or offset_ms")
    if offset_ms is not None:
        faults.set_clock_offset(int(offset_ms))
        return faults.clock_offset_ms
    return faults.move_clock(int(advance_ms))


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found"}


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class FaultsClient:
    """The admin API from Python, with the same methods as the in-process `TestBroker.faults`."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _call(self, method: str, path: str, body: dict | None = None) -> Any:
        data = None if body is None else json.dumps({k: v for k, v in body.items() if v is not None}).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            try:
                reason = json.loads(exc.read()).get("error", exc.reason)
            except ValueError:
                reason = exc.reason
            raise AdminError(reason) from None

    def state(self) -> dict:
        return self._call("GET", "/faults")

    def unhit(self) -> list[str]:
        """Why each rule that never fired did not (Faults.unhit)."""
        return self.state()["unhit"]

    def push_errors(self, api: str | int, error: str | int, count: int = 1, *, topic: str | None = None,
                    partition: int | None = None, client_id: str | None = None) -> dict:
        return self._call("POST", "/faults/errors", {"api": api, "error": error, "count": count, "topic": topic,
                                                     "partition": partition, "client_id": client_id})

    def add_latency(self, api: str | int | None, ms: int, count: int | None = None, *,
                    client_id: str | None = None) -> dict:
        return self._call("POST", "/faults/latency", {"api": api, "ms": ms, "count": count, "client_id": client_id})

    def close_on(self, api: str | int | None, count: int = 1, *, client_id: str | None = None) -> dict:
        return self._call("POST", "/faults/close", {"api": api, "count": count, "client_id": client_id})

    def remove(self, rule: dict | int) -> bool:
        rule_id = rule["id"] if isinstance(rule, dict) else int(rule)
        return self._call("DELETE", f"/faults/{rule_id}")["removed"]

    def clear(self) -> None:
        self._call("DELETE", "/faults")

    def drop_connections(self) -> int:
        return self._call("POST", "/connections/drop", {})["closed"]

    def refuse_connections(self, seconds: float | None = None, *, drop_existing: bool = True) -> None:
        self._call("POST", "/connections/refuse", {"seconds": seconds, "drop_existing": drop_existing})

    def accept_connections(self) -> None:
        self._call("POST", "/connections/accept", {})

    def pause(self, topic: str, partition: int = 0) -> None:
        self._call("POST", "/partitions/pause", {"topic": topic, "partition": partition})

    def resume(self, topic: str, partition: int = 0) -> None:
        self._call("POST", "/partitions/resume", {"topic": topic, "partition": partition})

    def move_clock(self, ms: int) -> int:
        return self._call("POST", "/clock", {"advance_ms": ms})["clock_offset_ms"]

    def set_clock_offset(self, ms: int) -> None:
        self._call("POST", "/clock", {"offset_ms": ms})
