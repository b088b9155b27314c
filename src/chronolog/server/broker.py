"""The asyncio shell around the sans-I/O protocol: accept connections, read size-prefixed frames, answer
them strictly in order per connection (Kafka mutes a channel until its response is sent), and never let
one client's bytes hurt the broker or another client."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import ipaddress
import logging
import os
import signal
import socket
import ssl
import struct
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chronolog.config import BrokerConfig
from chronolog.errors import ChronologError, CorruptMessageError, KafkaError, UnsupportedVersionError
from chronolog.lazy import LazyObject
from chronolog.protocol import codec
from chronolog.protocol.core import INTERNAL_TOPICS, planned_fetch
from chronolog.protocol.fetch_plan import FetchPlan
from chronolog.protocol.registry import HANDLERS, BrokerState, ConnectionState, RequestContext, defer
from chronolog.security import tls
from chronolog.security.listeners import ListenerSpec, parse_listeners
from chronolog.security.quotas import QuotaStore
from chronolog.security.sessions import expired, linger, log_failed_login
from chronolog.server.frames import FrameReader, FrameSizeError
from chronolog.server.quotas import QuotaManager
from chronolog.storage import LogManager

if TYPE_CHECKING:
    from chronolog.security.acl import AclAuthorizer

log = logging.getLogger(__name__)


# Handler modules imported on the first request for one of their APIs (`registry.defer`): their API keys,
# versions and features, advertised meanwhile (the modules' `register` checks the versions against these).
DEFERRED_HANDLERS: dict[str, tuple[dict[int, tuple[int, int]], dict[str, tuple[int, int, int]]]] = {
    "chronolog.protocol.share_groups": ({76: (1, 1), 77: (1, 1), 78: (1, 2), 79: (1, 2), 90: (0, 1), 91: (0, 0),
                                         92: (0, 0)}, {"share.version": (0, 2, 2)}),
    "chronolog.protocol.streams_groups": ({88: (0, 1), 89: (0, 1)}, {"streams.version": (0, 1, 1)}),
    "chronolog.protocol.delegation_tokens": ({38: (1, 3), 39: (1, 2), 40: (1, 2), 41: (1, 3)}, {}),
}


def _load_handlers() -> None:
    import chronolog.protocol.core  # noqa: F401  (registers)
    for optional in ("chronolog.protocol.admin", "chronolog.protocol.groups", "chronolog.protocol.sasl",
                     "chronolog.protocol.acls", "chronolog.protocol.scram_admin", "chronolog.protocol.transactions",
                     "chronolog.protocol.consumer_groups"):
        with contextlib.suppress(ModuleNotFoundError):
            __import__(optional)
    for module, (versions, features) in DEFERRED_HANDLERS.items():
        defer(module, versions, features)


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


TLS_HANDSHAKE_TIMEOUT_S = 30.0
# The APIs answered from the group coordinator's state: OffsetCommit, OffsetFetch, FindCoordinator, JoinGroup,
# Heartbeat, LeaveGroup, SyncGroup, DescribeGroups, ListGroups, AddOffsetsToTxn, EndTxn, TxnOffsetCommit,
# DeleteGroups, OffsetDelete, ConsumerGroupHeartbeat, ConsumerGroupDescribe, StreamsGroupHeartbeat/Describe.
GROUP_COORDINATOR_APIS = frozenset({8, 9, 10, 11, 12, 13, 14, 15, 16, 25, 26, 28, 42, 47, 68, 69, 88, 89})
# Those naming a group or transactional id (with InitProducerId, AddPartitionsToTxn, DescribeTransactions):
# refused when its coordinator partition could not be opened at start (`_offline_coordinator`).
KEYED_COORDINATOR_APIS = (GROUP_COORDINATOR_APIS | {22, 24, 65}) - {10, 16}
# What a client sends before anything else (ApiVersions, SaslHandshake, SaslAuthenticate) and Metadata: answered
# while the coordinators are still starting (`Broker._coordinators_started`). Every other request waits for them.
BEFORE_COORDINATORS_APIS = frozenset({18, 17, 36, 3})
# The coordinators (group and transaction) start this long after the listeners open, or at the first request
# that needs them if one comes sooner: the first clients' ApiVersions and Metadata are answered before their
# modules are imported and their topics read, which is most of a start's work after the logs' (issue #26).
COORDINATORS_START_DELAY_S = 0.1


@dataclass
class Listener:
    """One bound listener: its spec, TLS context, and the address Metadata gives its clients."""

    spec: ListenerSpec
    ssl_context: ssl.SSLContext | None
    client_auth: str = "none"
    host: str = ""
    port: int = 0
    advertised_host: str = ""
    advertised_port: int = 0
    server: asyncio.base_events.Server | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def security_protocol(self) -> str:
        return self.spec.security_protocol

    @property
    def authenticates(self) -> bool:
        """SASL, or TLS that insists on a client certificate: clients here prove who they are."""
        return self.spec.uses_sasl or (self.spec.uses_tls and self.client_auth == "required")


def _parse_ip_overrides(value: str) -> dict[str, int]:
    """`max.connections.per.ip.overrides`: `ip:count,ip:count` (host names are resolved once)."""
    out: dict[str, int] = {}
    for item in (value or "").split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        if not sep or not host or not count.strip().isdigit():
            raise ChronologError(f"max.connections.per.ip.overrides: invalid entry {item!r}; expected host:count")
        try:
            ip = str(ipaddress.ip_address(host.strip("[] ")))
        except ValueError:
            try:
                ip = socket.gethostbyname(host.strip())
            except OSError as exc:
                raise ChronologError(f"max.connections.per.ip.overrides: cannot resolve {host!r}: {exc}") from None
        out[ip] = int(count)
    return out


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class Broker:
    """Listeners (`listeners`, or one PLAINTEXT listener from host/port), connections, and the per-request
    path: SASL gate, global in-flight bound, dispatch. Requests on one connection are handled strictly one
    at a time: the next frame is read only after the previous response was written (Kafka mutes a channel
    until its response is sent), so a connection has at most one request in flight."""

    # A connection's repeated one-partition Fetch is recognised by its bytes and answered without the
    # handler (protocol.fetch_plan); tests switch this off to compare both paths.
    plan_fetches = True
    # Programmed faults (chronolog.testing.faults), set only by chronolog.testing: an object whose
    # `async respond(handler, body, ctx)` then serves every request.
    faults = None

    def __init__(self, data_dir: Path | str, host: str = "127.0.0.1", port: int = 9092,
                 configs: dict[str, str] | None = None, ssl_context: ssl.SSLContext | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port
        self.config = BrokerConfig(configs or {})
        self.ssl_context = ssl_context
        if self.config["listeners"]:
            self.specs = parse_listeners(self.config["listeners"], self.config["listener.security.protocol.map"])
        else:
            proto = "SSL" if ssl_context is not None else "PLAINTEXT"
            self.specs = [ListenerSpec(proto, proto, host, port)]
        if not self.specs:
            raise ChronologError("listeners: no listener configured")
        self.listeners: list[Listener] = []
        self.state: BrokerState | None = None
        self._coordinators: asyncio.Task | None = None  # their start (`_coordinators_started`)
        self._warm_up: threading.Thread | None = None  # codec.warm_up, joined by `stop`: a stopped broker leaves no thread
        self._coordinators_timer: asyncio.TimerHandle | None = None
        self._readers: set[FrameReader] = set()  # admitted connections; each one's task is `.task`
        self._idle_reaper: asyncio.Task | None = None
        self._per_ip: Counter[str] = Counter()
        self._max_total = int(self.config["max.connections"])
        self._max_per_ip = int(self.config["max.connections.per.ip"])
        self._ip_overrides = _parse_ip_overrides(self.config["max.connections.per.ip.overrides"])
        self._inflight = asyncio.Semaphore(int(self.config["queued.max.requests"]))
        self._mapping_rules = tls.parse_mapping_rules(self.config["ssl.principal.mapping.rules"])
        # SCRAM credentials (with their hashing and JSON): used only by SASL listeners and their admin APIs
        self.credentials = LazyObject(functools.partial(_credential_store, self.data_dir))
        self.quotas = QuotaManager(QuotaStore(self.data_dir), int(self.config["quota.window.num"]),
                                   int(self.config["quota.window.size.seconds"]))
        self._mechanisms = [m.strip() for m in str(self.config["sasl.enabled.mechanisms"]).split(",") if m.strip()]
        _load_handlers()

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        self._check_listener()
        listeners = [self._prepare(spec) for spec in self.specs]
        authorizer = self._authorizer()
        advertised = self._advertised()
        manager = LogManager(self.data_dir, self.config)
        await asyncio.to_thread(manager.startup, lazy=True)  # partitions open in the background
        self.state = BrokerState(manager, self.config, self.host, self.port, data_waiters=DataSignal())
        if authorizer is not None:
            self.state.authorizer = authorizer
        self.state.credentials = self.credentials  # Describe/AlterUserScramCredentials
        self.state.quotas = self.quotas  # Describe/AlterClientQuotas; an unreadable file stops the start
        self.quotas.active()
        loop = asyncio.get_running_loop()
        try:
            for listener in listeners:
                serve = functools.partial(self._serve_connection, listener)
                listener.server = await loop.create_server(lambda serve=serve: FrameReader(loop, serve),
                                                           listener.spec.host or None, listener.spec.port)
                listener.host = listener.spec.host or "0.0.0.0"
                listener.port = listener.server.sockets[0].getsockname()[1]
                adv = advertised.get(listener.name)
                wildcard = listener.spec.host in ("", "0.0.0.0", "::")
                listener.advertised_host = (adv.host if adv and adv.host else
                                            socket.getfqdn() if wildcard else listener.spec.host)
                listener.advertised_port = adv.port if adv and adv.port else listener.port
                self.listeners.append(listener)
        except OSError as exc:
            for listener in self.listeners:
                listener.server.close()
            await asyncio.to_thread(manager.shutdown)
            raise ChronologError(f"cannot listen on {listener.spec.host}:{listener.spec.port}: {exc}") from None
        first = self.listeners[0]
        self.host, self.port = first.host, first.port
        self.state.host, self.state.port = first.advertised_host, first.advertised_port
        self._coordinators_timer = loop.call_later(COORDINATORS_START_DELAY_S, self._start_coordinators)
        max_idle_ms = int(self.config["connections.max.idle.ms"])
        if max_idle_ms >= 0:
            self._idle_reaper = asyncio.create_task(self._close_idle_connections(max_idle_ms / 1000.0))
        for listener in self.listeners:
            log.info("chronolog broker listening on %s://%s:%d (%s), data dir %s", listener.name, listener.host,
                     listener.port, listener.security_protocol, self.data_dir)

    def _start_coordinators(self) -> asyncio.Task:
        """The group and transaction coordinators' start, begun once (again only after one that failed)."""
        if self._coordinators is None or (self._coordinators.done() and not self._coordinators.cancelled()
                                          and self._coordinators.exception() is not None):
            self._coordinators = asyncio.ensure_future(self._run_coordinators())
            self._coordinators.add_done_callback(_log_coordinators_failure)
        return self._coordinators

    async def _run_coordinators(self) -> None:
        """Their modules are imported in a thread, so the event loop goes on answering meanwhile; the group
        coordinator reads `__consumer_offsets` before the transaction coordinator completes transactions a
        stop caught in PrepareCommit (their offsets are the group coordinator's to apply)."""
        state = self.state
        coordinator_cls, transactions_cls = await asyncio.to_thread(_coordinator_classes)
        # The readers of the versions librdkafka and the Java client send most (ApiVersions 3-4, Metadata
        # 12-13, Produce 7+, Fetch 11+) are built now in the background (codec.warm_up), not during the start: with
        # one interpreter lock, building them while the start runs only delays the start. A client that comes
        # earlier builds those of its own versions on first use.
        self._warm_up = threading.Thread(target=codec.warm_up, daemon=True, name="chronolog-codec-warm-up",
                                         args=([(18, 3, 4), (3, 12, 13), (0, 7, 13), (1, 11, 18)],))
        self._warm_up.start()
        if coordinator_cls is not None and state.coordinator is None:
            coordinator = coordinator_cls(self.data_dir / "__consumer_offsets-state", self.config, state.log_manager)
            await coordinator.start()
            state.coordinator = coordinator
        if state.share_groups is None:  # share groups (KIP-932): their state files are read before any request
            from chronolog.server.share_group import ShareGroups
            state.share_groups = await asyncio.to_thread(ShareGroups, self.data_dir, self.config, state.log_manager)
            if state.coordinator is not None:  # KIP-848's per-group configs, kept with the share groups' state
                state.coordinator.consumer.group_configs = state.share_groups.configs
                state.coordinator.streams.group_configs = state.share_groups.configs  # streams.* (KIP-1071)
        if state.transactions is None:
            transactions = transactions_cls(state.log_manager, self.config, state.producer_ids, state.coordinator,
                                            state.data_waiters.notify)
            await transactions.start()
            state.transactions = transactions

    async def _coordinators_started(self) -> None:
        """Until both coordinators have started (starting them now if they have not begun). A start that
        failed closes the connection of the request that waited for it; the next request tries again."""
        task = self._start_coordinators()
        if not task.done():
            await asyncio.shield(task)
        elif task.exception() is not None:
            raise ConnectionError(f"the coordinators could not start: {task.exception()}")

    def _prepare(self, spec: ListenerSpec) -> Listener:
        context = None
        client_auth = "none"
        if spec.uses_tls:
            context = self.ssl_context or tls.server_context(self.config)
            client_auth = {ssl.CERT_NONE: "none", ssl.CERT_OPTIONAL: "requested",
                           ssl.CERT_REQUIRED: "required"}[context.verify_mode]
        if spec.uses_sasl:
            if not self._mechanisms:
                raise ChronologError(f"listener {spec.name} uses SASL but sasl.enabled.mechanisms is empty")
            if "PLAIN" in self._mechanisms and not spec.uses_tls and not _is_loopback(spec.host):
                log.warning("listener %s offers SASL/PLAIN without TLS: passwords cross the network in clear",
                            spec.name)
        return Listener(spec, context, client_auth)

    def _advertised(self) -> dict[str, ListenerSpec]:
        value = self.config["advertised.listeners"]
        if not value:
            return {}
        specs = parse_listeners(value, self.config["listener.security.protocol.map"], what="advertised.listeners")
        names = {spec.name for spec in self.specs}
        for spec in specs:
            if spec.name not in names:
                raise ChronologError(f"advertised.listeners: {spec.name} is not one of the listeners")
        return {spec.name: spec for spec in specs}

    def _authorizer(self) -> AclAuthorizer | None:
        """`authorizer.class.name` set to anything enables ACLs (Kafka names a class; we have one)."""
        if not self.config["authorizer.class.name"]:
            return None
        from chronolog.security.acl import AclAuthorizer, AclStore, parse_super_users

        store = AclStore(self.data_dir)
        store.bindings()  # an unreadable ACL file stops the start instead of being read as "no ACLs"
        authorizer = AclAuthorizer(store, parse_super_users(self.config["super.users"]),
                                   bool(self.config["allow.everyone.if.no.acl.found"]))
        authorizer.auto_refresh = False  # _handle refreshes once per request
        return authorizer

    def _check_listener(self) -> None:
        """A listener without authentication (PLAINTEXT, or SSL without required client certificates) stays
        on loopback unless explicitly allowed."""
        for spec in self.specs:
            if spec.uses_sasl:
                continue
            if spec.uses_tls and self.ssl_context is None and self.config["ssl.client.auth"] == "required":
                continue
            if spec.uses_tls and self.ssl_context is not None and self.ssl_context.verify_mode == ssl.CERT_REQUIRED:
                continue
            if not _is_loopback(spec.host) and not self.config["listeners.allow.non.loopback.without.auth"]:
                where = spec.host or "all interfaces"
                raise ChronologError(f"refusing to listen on {where} ({spec.name}) without authentication; "
                                     "use a SASL listener or ssl.client.auth=required, or set "
                                     "listeners.allow.non.loopback.without.auth=true to allow it")

    async def _close_idle_connections(self, max_idle_s: float) -> None:
        """`connections.max.idle.ms`, as Kafka's `Selector` expires idle channels: a connection that has not
        sent a byte nor been sent a response for that long is closed, unless one of its requests is being
        served (a JoinGroup waiting for a rebalance, a Fetch long poll)."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(max(max_idle_s / 4, 0.05), 30.0))
            now = loop.time()
            for frames in list(self._readers):
                if not frames.busy and now - frames.last_active > max_idle_s and frames.transport is not None:
                    log.debug("closing the connection from %s: idle for %.0f ms",
                              frames.transport.get_extra_info("peername"), (now - frames.last_active) * 1000)
                    frames.transport.close()

    async def stop(self, *, durable: bool = True) -> None:
        """Close the listeners and connections, stop the coordinators, then the logs (`durable=False`: data
        about to be deleted, nothing synced; `LogManager.shutdown`)."""
        if self._idle_reaper is not None:
            self._idle_reaper.cancel()
        if self._coordinators_timer is not None:
            self._coordinators_timer.cancel()
        if self._coordinators is not None and not self._coordinators.done():
            with contextlib.suppress(Exception):
                await asyncio.shield(self._coordinators)  # a half-started coordinator is stopped below
        for listener in self.listeners:
            if listener.server is not None:
                listener.server.close()
        for listener in self.listeners:
            if listener.server is not None:
                with contextlib.suppress(Exception):
                    await listener.server.wait_closed()
        for frames in list(self._readers):
            if frames.task is not None:
                frames.task.cancel()
        if self.state is not None:
            if self.state.transactions is not None:
                await self.state.transactions.stop()
            if self.state.coordinator is not None:
                await self.state.coordinator.stop()
            if self.state.share_groups is not None:
                self.state.share_groups.close()
            await asyncio.to_thread(self.state.log_manager.shutdown, durable=durable)
        if self._warm_up is not None:
            await asyncio.to_thread(self._warm_up.join)

    # -- connections -------------------------------------------------------------------------------
    def _admit(self, ip: str) -> str | None:
        """Kafka's `ConnectionQuotas`: why a new connection from `ip` is refused (None: admitted)."""
        limit = self._ip_overrides.get(ip, self._max_per_ip)
        if self._per_ip[ip] >= limit:
            return f"address already has the configured maximum of {limit} connections"
        if len(self._readers) >= self._max_total:
            return f"the broker already has the configured maximum of {self._max_total} connections"
        return None

    async def _serve_connection(self, listener: Listener, frames: FrameReader) -> None:
        peer = frames.transport.get_extra_info("peername") or ("?", 0)
        ip = str(peer[0])
        refused = self._admit(ip)
        if refused is not None:
            # Kafka closes the excess connection at once (TooManyConnectionsException); for max.connections it
            # stops accepting instead, which asyncio's server cannot do: we close that one too.
            log.warning("Rejected connection from %s on %s, %s", ip, listener.name, refused)
            frames.transport.abort()
            return
        self._per_ip[ip] += 1
        self._readers.add(frames)
        conn = None
        try:
            conn = await self._open(listener, frames, ip)
            if conn is not None:
                writer = asyncio.StreamWriter(frames.transport, frames, None, asyncio.get_running_loop())
                await self._requests(conn, frames, writer, peer)
        finally:
            for close in list(conn.closers.values()) if conn is not None else ():
                with contextlib.suppress(Exception):
                    close()
            self._per_ip[ip] -= 1
            if self._per_ip[ip] <= 0:
                del self._per_ip[ip]
            self._readers.discard(frames)
            with contextlib.suppress(Exception):
                frames.transport.close()

    async def _open(self, listener: Listener, frames: FrameReader, ip: str) -> ConnectionState | None:
        """TLS handshake (after the connection limits: a refused client costs no handshake) and the
        connection's initial principal."""
        principal = "User:ANONYMOUS"
        if listener.ssl_context is not None:
            try:
                frames.set_transport(await asyncio.get_running_loop().start_tls(
                    frames.transport, frames, listener.ssl_context, server_side=True,
                    ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S))
            except (ssl.SSLError, OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
                log.info("Failed authentication with %s (SSL handshake failed: %s)", ip, exc)
                return None
            if not listener.spec.uses_sasl:
                try:
                    principal = tls.principal_from_cert(frames.transport.get_extra_info("peercert"),
                                                        self._mapping_rules)
                except ChronologError as exc:
                    log.info("Failed authentication with %s (%s)", ip, exc)
                    return None
        sasl = None
        if listener.spec.uses_sasl:
            from chronolog.security.sasl import SaslSession

            sasl = SaslSession(self._mechanisms, self.credentials.lookup, self.credentials.verify_plain)
        return ConnectionState(listener=listener, principal=principal, sasl=sasl)

    async def _requests(self, conn: ConnectionState, frames: FrameReader, writer: asyncio.StreamWriter,
                        peer: tuple) -> None:
        max_request = int(self.config["socket.request.max.bytes"])
        max_unauthenticated = int(self.config["sasl.server.max.receive.size"])
        # connections.failed.authentication.delay.ms (KIP-306): the answer to a failed authentication is
        # held back that long (Selector's delayed close), then sent and the connection closed: guessing is slow.
        failed_auth_delay = int(self.config["connections.failed.authentication.delay.ms"]) / 1000.0
        # sendfile moves file bytes straight to a plain TCP socket; TLS must encrypt them in user space.
        zero_copy = conn.listener is None or conn.listener.ssl_context is None
        transport = writer.transport
        try:
            while True:
                authenticating = conn.sasl is not None and not conn.sasl.complete
                limit = max_unauthenticated if authenticating else max_request
                # After SaslHandshake v0 the client sends bare SASL tokens (KIP-152), any size >= 0; a
                # request is at least its header's 8 bytes (Kafka's InvalidReceiveException otherwise).
                raw_token = authenticating and conn.sasl.raw_tokens
                minimum = 0 if raw_token else 8
                try:
                    frame = await frames.read_frame(minimum, limit)
                except FrameSizeError as exc:
                    what = "SASL token" if raw_token else "request"
                    log.warning("closing %s: %s size %d outside [%d, %d]", peer, what, exc.size, minimum, limit)
                    return
                if raw_token:
                    answer = self._raw_token(conn, frame, peer)
                    if answer is None:
                        await asyncio.sleep(failed_auth_delay)
                        return
                    writer.write(struct.pack(">i", len(answer)) + answer)
                    await writer.drain()
                    continue
                if expired(conn.sasl, frame):  # KIP-368: not re-authenticated within connections.max.reauth.ms
                    log.info("closing the connection from %s: its SASL session expired", peer)
                    return
                frames.busy = True
                try:
                    response = self._planned_fetch(conn, frame, peer[0])
                    if response is None:
                        async with self._inflight:  # queued.max.requests across all connections
                            response = await self._respond(frame, peer[0], conn)
                    if conn.close_after_response:  # a failed authentication: logged, its answer held back
                        log_failed_login(peer, conn.listener.name, conn.sasl)
                        await asyncio.sleep(failed_auth_delay)
                    if isinstance(response, codec.ResponseParts):
                        await self._send_parts(writer, response, zero_copy)
                    elif response:
                        writer.write(response)
                        if transport.get_write_buffer_size():  # (all sent at once: nothing to wait for)
                            await writer.drain()
                    if conn.throttle_ms:
                        await self.quotas.mute(conn)  # KIP-219: a throttled client's next request waits
                finally:
                    frames.busy = False
                    frames.last_active = asyncio.get_running_loop().time()
                if conn.close_after_response:  # a failed authentication: the client reads the answer, then
                    await linger(frames, failed_auth_delay)  # the close (a client may drop data read with EOF)
                    return
        except (ConnectionResetError, BrokenPipeError) as exc:  # the client went away: nothing to report
            log.debug("connection from %s ended: %s", peer, exc)
        except ConnectionError as exc:  # a framing error of ours: close that connection
            log.warning("closing connection from %s: %s", peer, exc)
        except (asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("connection from %s failed", peer)

    def _raw_token(self, conn: ConnectionState, token: bytes, peer: tuple) -> bytes | None:
        """One bare SASL token after a v0 handshake; a failure closes without an answer (Kafka cannot
        frame an error there either)."""
        from chronolog.security.scram import AuthenticationError

        try:
            answer = conn.sasl.authenticate(token)
        except AuthenticationError:
            log_failed_login(peer, conn.listener.name, conn.sasl)
            return None
        if conn.sasl.complete:
            conn.principal = conn.sasl.principal
            conn.sasl.start_lifetime(int(self.config["connections.max.reauth.ms"]))
        return answer

    def _refresh_acls(self) -> None:
        """Once per request: has the ACL file changed? (one stat)"""
        refresh = getattr(self.state.authorizer, "refresh", None)
        if refresh is not None:
            refresh()

    def _planned_fetch(self, conn: ConnectionState, frame: bytes, client_host: str
                       ) -> bytes | codec.ResponseParts | None:
        """The answer to `frame` if it is the connection's planned Fetch at another offset with records
        ready (protocol.fetch_plan, core.planned_fetch), without parsing it; None: serve it as usual. Not
        while SASL is still running, nor when queued.max.requests are already being served, nor when a
        client quota bounds this connection's Fetch (server.quotas: those are recorded on the full path)."""
        plan = conn.fetch_plan
        if (plan is None or not self.plan_fetches or self._inflight.locked()
                or not self.quotas.fetch_free(conn, frame)):
            return None
        if conn.sasl is not None and not conn.sasl.complete:
            return None
        offset = plan.offset_of(frame)
        if offset is None:
            return None
        self._refresh_acls()
        correlation_id = int.from_bytes(frame[4:8], "big", signed=True)
        ctx = RequestContext(self.state, codec.FETCH_KEY, plan.version, correlation_id, None, client_host,
                             principal=conn.principal, connection=conn)
        return planned_fetch(ctx, plan, offset)

    async def _send_parts(self, writer: asyncio.StreamWriter, response: codec.ResponseParts, zero_copy: bool) -> None:
        """A response holding file regions (Fetch records): the framing bytes are written and each region
        is sent with sendfile, as Kafka's `FileRecords.writeTo` does (`FileChannel.transferTo`); on TLS, or
        where the loop cannot sendfile, the regions are read with one `pread` each and written. A region
        that comes up short (its file truncated meanwhile) closes the connection: the frame's size is
        already promised."""
        try:
            if not zero_copy:
                writer.write(response.to_bytes())
                await writer.drain()
                return
            loop = asyncio.get_running_loop()
            transport = writer.transport
            for part in response.parts:
                if not isinstance(part, codec.FileRegion):
                    writer.write(part)
                    continue
                if transport.is_closing():  # loop.sendfile would raise RuntimeError
                    raise ConnectionResetError("the client closed the connection")
                sent = _sendfile_now(transport, part)
                if sent == part.size:
                    continue
                try:
                    sent += await loop.sendfile(transport, part, part.position + sent, part.size - sent,
                                                fallback=False)
                except asyncio.SendfileNotAvailableError:  # a loop or platform without it: one pread
                    writer.write(part.read_bytes()[sent:])
                    continue
                if sent != part.size:
                    raise ConnectionError(f"file region shrank from {part.size} to {sent} bytes while being sent")
            await writer.drain()
        finally:
            response.close()

    async def _handle(self, frame: bytes, client_host: str, conn: ConnectionState | None = None) -> bytes | None:
        """One request to one response frame as bytes (None: no response, e.g. acks=0); file regions
        are read in. Framing errors raise ConnectionError so the caller closes the connection."""
        response = await self._respond(frame, client_host, conn)
        if isinstance(response, codec.ResponseParts):
            try:
                return response.to_bytes()
            finally:
                response.close()
        return response

    async def _respond(self, frame: bytes, client_host: str, conn: ConnectionState | None = None
                       ) -> bytes | codec.ResponseParts | None:
        """One request to one response frame (None: no response, e.g. acks=0), with Fetch records as file
        regions the caller sends and releases. Framing errors raise ConnectionError so the caller closes
        the connection."""
        api_key, version, correlation_id = codec.peek_header(frame)
        if conn is not None and conn.sasl is not None and not conn.sasl.complete:
            refused = conn.sasl.rejects(api_key)
            if refused is not None:  # SaslServerAuthenticator: IllegalSaslStateException closes the channel
                raise ConnectionError(refused)
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
        self._refresh_acls()
        if self.state.transactions is None and (api_key not in BEFORE_COORDINATORS_APIS or (
                api_key == codec.METADATA_KEY and _names_internal_topic(request.body))):
            await self._coordinators_started()
        if api_key in KEYED_COORDINATOR_APIS:
            offline = _offline_coordinator(self.state, request.body)
            if offline is not None:  # Kafka's broker does not lead that partition: NOT_COORDINATOR, then
                # FindCoordinator answers COORDINATOR_NOT_AVAILABLE; a closed connection makes clients ask it too
                raise ConnectionError(f"the coordinator of {offline} is offline until the next start (its "
                                      f"partition could not be opened)")
        ctx = RequestContext(self.state, api_key, version, correlation_id, request.client_id, client_host,
                             principal=conn.principal if conn is not None else "User:ANONYMOUS", connection=conn)
        if api_key == codec.FETCH_KEY and conn is not None and self.plan_fetches:
            plan = conn.fetch_plan  # (still right when the plan matched but left the answer here: a long poll)
            if plan is None or plan.offset_of(frame) is None:
                conn.fetch_plan = FetchPlan.build(frame, version, request.body, self.state.topic_name)
        if self.faults is not None:  # a test broker's programmed faults (quotas are not charged for them)
            return await self.faults.respond(handler, request.body, ctx)
        quota_start = self.quotas.before(api_key, ctx)
        try:
            result = handler.fn(request.body, ctx)
            if result is not None and type(result) is not dict and inspect.isawaitable(result):
                result = await result
        except KafkaError as exc:
            log.warning("API %d v%d failed: %s", api_key, version, exc)
            raise ConnectionError(str(exc)) from None
        self.quotas.account(api_key, ctx, frame, result, quota_start)  # client quotas: throttle_time
        if result is None:
            return None
        return codec.encode_values(api_key, version, correlation_id, result)


def _sendfile_now(transport: asyncio.Transport, region: codec.FileRegion) -> int:
    """As much of `region` as the socket takes now, with one `os.sendfile` straight to the transport's
    socket (0 if its write buffer still holds earlier bytes, which must go first). asyncio's
    `loop.sendfile` waits for the buffer to drain and pauses the transport around the call: for one
    fetch that bookkeeping cost more CPU than the send, so it is kept for what the socket cannot take
    at once. A file shorter than the region stops the send where it ends; the caller notices."""
    if transport.get_write_buffer_size():
        return 0
    sock = transport.get_extra_info("socket")
    if sock is None:
        return 0
    sent = 0
    try:
        while sent < region.size:
            n = os.sendfile(sock.fileno(), region.fd, region.position + sent, region.size - sent)
            if n == 0:  # the end of the file: the region shrank
                break
            sent += n
    except (BlockingIOError, InterruptedError):
        pass
    except (BrokenPipeError, ConnectionResetError) as exc:
        raise ConnectionResetError(f"the client closed the connection: {exc}") from None
    return sent


def _credential_store(data_dir: Path) -> Any:
    from chronolog.security.credentials import CredentialStore

    return CredentialStore(data_dir)


def _coordinator_classes() -> tuple[type | None, type]:
    """The group coordinator's class (None where its module is absent) and the transaction coordinator's."""
    from chronolog.server.transactions import TransactionCoordinator

    try:
        from chronolog.server.coordinator import GroupCoordinator
    except ModuleNotFoundError:
        return None, TransactionCoordinator
    return GroupCoordinator, TransactionCoordinator


def _offline_coordinator(state: BrokerState, body: Any) -> str | None:
    """The group or transactional id named by a coordinator request whose `__consumer_offsets` or
    `__transaction_state` partition could not be opened at start, or None (almost always: no partition is)."""
    groups, txns = state.coordinator, state.transactions
    groups = groups if groups is not None and groups.store.offline else None
    txns = txns if txns is not None and txns.offline else None
    if groups is None and txns is None:
        return None
    for name in ("group_id", "group_ids", "groups", "groups_names", "transactional_id", "transactional_ids",
                 "transactions"):
        value = getattr(body, name, None)
        for key in value if isinstance(value, tuple) else (value,):
            key = getattr(key, "group_id", getattr(key, "transactional_id", key))
            if not isinstance(key, str):
                continue
            if name.startswith("group") and groups is not None and groups.offline(key):
                return f"group {key}"
            if name.startswith("transaction") and txns is not None and txns.offline_id(key):
                return f"transactional id {key}"
    return None


def _log_coordinators_failure(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("the group and transaction coordinators could not start (the next request that needs them "
                  "tries again): %s", task.exception())


def _names_internal_topic(metadata_request) -> bool:
    """A Metadata request naming `__consumer_offsets` or `__transaction_state`, which their coordinators create."""
    for topic in getattr(metadata_request, "topics", None) or ():
        if getattr(topic, "name", None) in INTERNAL_TOPICS:
            return True
    return False


async def run_until_signalled(broker: Broker) -> None:
    # The handlers come first: a SIGTERM while the logs load or just after the listener opened (before
    # this function went on) still stops cleanly, instead of killing the process between its writes.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await broker.start()
    for listener in broker.listeners:  # one line per listener; tests read the bound ports from these
        print(f"chronolog serving on {listener.name}://{listener.host}:{listener.port} "
              f"(data dir {broker.data_dir})", flush=True)
    await stop.wait()
    await broker.stop()


def serve(data_dir: Path | str, host: str = "127.0.0.1", port: int = 9092,
          configs: dict[str, str] | None = None) -> None:
    """Run a broker until SIGTERM/SIGINT, then stop cleanly (indexes trimmed, checkpoints written)."""
    asyncio.run(run_until_signalled(Broker(data_dir, host, port, configs)))
