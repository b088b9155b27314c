"""The asyncio shell around the sans-I/O protocol: accept connections, read size-prefixed frames, answer
them strictly in order per connection (Kafka mutes a channel until its response is sent), and never let
one client's bytes hurt the broker or another client."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import ipaddress
import logging
import signal
import ssl
import struct
from pathlib import Path

from chronolog.config import BrokerConfig
from chronolog.errors import ChronologError, CorruptMessageError, KafkaError, UnsupportedVersionError
from chronolog.protocol import codec
from chronolog.protocol.registry import HANDLERS, BrokerState, RequestContext
from chronolog.storage import LogManager

log = logging.getLogger(__name__)


def _load_handlers() -> None:
    import chronolog.protocol.core  # noqa: F401  (registers)
    for optional in ("chronolog.protocol.admin", "chronolog.protocol.groups"):
        with contextlib.suppress(ModuleNotFoundError):
            __import__(optional)


class DataSignal:
    """Wakes Fetch long-polls when a produce appended data."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, timeout: float) -> None:
        event = self._event
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)


class Broker:
    def __init__(self, data_dir: Path | str, host: str = "127.0.0.1", port: int = 9092,
                 configs: dict[str, str] | None = None, ssl_context: ssl.SSLContext | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port
        self.config = BrokerConfig(configs or {})
        self.ssl_context = ssl_context
        self._server: asyncio.base_events.Server | None = None
        self.state: BrokerState | None = None
        self._connections: set[asyncio.Task] = set()
        _load_handlers()

    async def start(self) -> None:
        self._check_listener()
        manager = LogManager(self.data_dir, self.config)
        await asyncio.to_thread(manager.startup)
        self.state = BrokerState(manager, self.config, self.host, self.port, data_waiters=DataSignal())
        from chronolog.protocol.core import rebuild_producer_state
        await asyncio.to_thread(rebuild_producer_state, self.state)
        self._server = await asyncio.start_server(self._serve_connection, self.host, self.port,
                                                  ssl=self.ssl_context, limit=1 << 20)
        self.port = self._server.sockets[0].getsockname()[1]
        self.state.port = self.port
        coordinator_cls = _optional_coordinator()
        if coordinator_cls is not None:
            self.state.coordinator = coordinator_cls(self.data_dir / "__consumer_offsets-state", self.config)
            await self.state.coordinator.start()
        log.info("chronolog broker listening on %s:%d, data dir %s", self.host, self.port, self.data_dir)

    def _check_listener(self) -> None:
        """A listener without authentication stays on loopback unless explicitly allowed."""
        try:
            loopback = ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            loopback = self.host == "localhost"
        if not loopback and not self.config["listeners.allow.non.loopback.without.auth"]:
            raise ChronologError(f"refusing to listen on {self.host} without authentication; set "
                                 "listeners.allow.non.loopback.without.auth=true to allow it")

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
        for task in list(self._connections):
            task.cancel()
        if self.state is not None:
            if self.state.coordinator is not None:
                await self.state.coordinator.stop()
            await asyncio.to_thread(self.state.log_manager.shutdown)

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        peer = writer.get_extra_info("peername") or ("?", 0)
        max_request = int(self.config["socket.request.max.bytes"])
        try:
            while True:
                head = await reader.readexactly(4)
                (size,) = struct.unpack(">i", head)
                if size < 8 or size > max_request:  # Kafka's InvalidReceiveException
                    log.warning("closing %s: request size %d outside [8, %d]", peer, size, max_request)
                    return
                frame = await reader.readexactly(size)
                response = await self._handle(frame, peer[0])
                if response:
                    writer.write(response)
                    await writer.drain()
        except ConnectionError as exc:
            log.warning("closing connection from %s: %s", peer, exc)
        except (asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("connection from %s failed", peer)
        finally:
            if task is not None:
                self._connections.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    async def _handle(self, frame: bytes, client_host: str) -> bytes | None:
        """One request to one response frame (None: no response, e.g. acks=0). Framing errors raise
        ConnectionError so the caller closes the connection."""
        api_key, version, correlation_id = codec.peek_header(frame)
        handler = HANDLERS.get(api_key)
        if handler is None:
            raise ConnectionError(f"unknown API key {api_key}")  # Kafka closes the connection too
        if not handler.min_version <= version <= handler.max_version:
            if api_key == codec.API_VERSIONS_KEY:
                return codec.api_versions_error_v0(correlation_id, handler.min_version, handler.max_version)
            raise ConnectionError(f"unsupported version {version} of API {api_key}")
        if handler.parse_min_version is not None and version < handler.parse_min_version:
            raise ConnectionError(f"API {api_key} v{version} is advertised for old clients but not served")
        try:
            request = codec.parse_request(frame)
        except (CorruptMessageError, UnsupportedVersionError) as exc:
            log.warning("closing connection from %s: %s", client_host, exc)
            raise ConnectionError(str(exc)) from None
        ctx = RequestContext(self.state, api_key, version, correlation_id, request.client_id, client_host)
        try:
            result = handler.fn(request.body, ctx)
            if inspect.isawaitable(result):
                result = await result
        except KafkaError as exc:
            log.warning("API %d v%d failed: %s", api_key, version, exc)
            raise ConnectionError(str(exc)) from None
        if result is None:
            return None
        body = codec.build_response(api_key, version, result)
        return codec.encode_response(api_key, version, correlation_id, body)


def _optional_coordinator():
    try:
        from chronolog.server.coordinator import GroupCoordinator
    except ModuleNotFoundError:
        return None
    return GroupCoordinator


async def run_until_signalled(broker: Broker) -> None:
    await broker.start()
    print(f"chronolog serving on {broker.host}:{broker.port} (data dir {broker.data_dir})", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await broker.stop()


def serve(data_dir: Path | str, host: str = "127.0.0.1", port: int = 9092,
          configs: dict[str, str] | None = None) -> None:
    """Run a broker until SIGTERM/SIGINT, then stop cleanly (indexes trimmed, checkpoints written)."""
    asyncio.run(run_until_signalled(Broker(data_dir, host, port, configs)))
