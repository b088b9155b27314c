"""The dispatch table and the context handlers receive. Handlers are functions of (request, context) that
return a dict of response values (the codec builds the version's response from it); they never touch
sockets. Handlers that wait (Fetch long-poll, JoinGroup) are `async def`."""

from __future__ import annotations

import importlib
import itertools
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from chronolog.config import BrokerConfig
from chronolog.protocol.topic_ids import TopicIds
from chronolog.security.audit import authorization

if TYPE_CHECKING:
    from chronolog.storage import LogManager


class AllowAll:
    """The authorizer used when no ACLs are configured (`authorizer.class.name` empty)."""

    def authorize(self, principal: str, operation: str, resource_type: str, resource_name: str) -> bool:
        return True


@dataclass
class ConnectionState:
    """What one client connection carries across its requests: the listener it came in on (for the
    address Metadata advertises), who it authenticated as, and its SASL exchange while that runs."""

    listener: Any = None  # the server's listener: name, security_protocol, advertised_host/_port
    principal: str = "User:ANONYMOUS"
    sasl: Any = None  # a chronolog.security.sasl.SaslSession on SASL_* listeners
    close_after_response: bool = False  # a failed authentication: answer, then close (Kafka does)
    fetch_plan: Any = None  # its last one-partition Fetch request (protocol.fetch_plan), for the next one
    throttle_ms: int = 0  # client quotas (KIP-219): mute the connection this long after the answer
    quotas: Any = None  # the client quotas resolved for it (server.quotas.ConnectionQuotas)
    # what to undo when it closes, by key (a share session: Kafka's ShareSessionCache disconnect listener)
    closers: dict[Any, Callable[[], None]] = field(default_factory=dict)


@dataclass
class BrokerState:
    """What every handler may read: storage, configs, our address, and shared mutable bits."""

    log_manager: LogManager
    broker_config: BrokerConfig
    host: str
    port: int
    cluster_id: str = "chronolog-cluster"
    coordinator: Any = None
    transactions: Any = None  # the TransactionCoordinator (server.transactions)
    share_groups: Any = None  # share groups (KIP-932): server.share_group.ShareGroups
    authorizer: Any = field(default_factory=AllowAll)
    data_waiters: Any = None  # set by the server: wakes Fetch long-polls when data arrives
    credentials: Any = None  # the SCRAM CredentialStore (Describe/AlterUserScramCredentials)
    quotas: Any = None  # server.quotas.QuotaManager: its `store` (Describe/AlterClientQuotas), mutation quota
    # Producer ids must not repeat across restarts: start from the clock (ms), as unique as Kafka's blocks.
    producer_ids: itertools.count = field(default_factory=lambda: itertools.count(int(time.time() * 1000)))
    topic_ids: TopicIds = field(default_factory=TopicIds)  # KIP-516: ids in Produce v13, Fetch v13+, Metadata v12+

    def topic_name(self, topic_id: Any) -> str | None:
        """The topic a topic id names now, or None (UNKNOWN_TOPIC_ID)."""
        return self.topic_ids.name_of(self.log_manager, topic_id)

    @property
    def node_id(self) -> int:
        return int(self.broker_config["node.id"])


@dataclass
class RequestContext:
    state: BrokerState
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    principal: str = "User:ANONYMOUS"
    connection: ConnectionState | None = None

    @property
    def log_manager(self) -> LogManager:
        return self.state.log_manager

    @property
    def broker_config(self) -> BrokerConfig:
        return self.state.broker_config

    @property
    def coordinator(self) -> Any:
        return self.state.coordinator

    @property
    def authorizer(self) -> Any:
        return self.state.authorizer

    @property
    def advertised_host(self) -> str:
        """The host clients should use: the one of the listener this request came in on."""
        listener = self.connection.listener if self.connection is not None else None
        return listener.advertised_host if listener is not None else self.state.host

    @property
    def advertised_port(self) -> int:
        listener = self.connection.listener if self.connection is not None else None
        return listener.advertised_port if listener is not None else self.state.port

    def allowed(self, operation: str, resource_type: str, name: str, *, log_if_denied: bool = True) -> bool:
        """Operations and resource types by Kafka's names in any case (`describe_configs`, `Topic`).
        `log_if_denied=False` where Kafka passes it: a check that filters what the client is shown, whose
        denials are not INFO lines of the authorizer's audit trail (security.audit)."""
        # KafkaApis (CreateTopics, Metadata auto-creation): CREATE on the cluster covers every topic; it is
        # asked first, without a denial line.
        if (operation.lower() == "create" and resource_type.lower() == "topic"
                and self._authorize("create", "cluster", "kafka-cluster", log_if_denied=False)):
            return True
        return self._authorize(operation, resource_type, name, log_if_denied=log_if_denied)

    def allowed_on_any(self, operation: str, resource_type: str) -> bool:
        """Authorizer.authorizeByResourceType: may this principal do `operation` on some resource of the
        type? Authorizers without that method (the allow-all default, plain hooks) answer yes."""
        by_type = getattr(self.state.authorizer, "authorize_by_resource_type", None)
        if by_type is None:
            return True
        if getattr(self.state.authorizer, "matches_hosts", False):
            return by_type(self.principal, operation, resource_type, host=self.client_host)
        return by_type(self.principal, operation, resource_type)

    def _authorize(self, operation: str, resource_type: str, name: str, log_if_denied: bool = True) -> bool:
        auth = self.state.authorizer
        if getattr(auth, "matches_hosts", False):  # ACLs may name client hosts; plain 4-argument hooks too
            allowed = auth.authorize(self.principal, operation, resource_type, name, host=self.client_host)
        else:
            allowed = auth.authorize(self.principal, operation, resource_type, name)
        if getattr(auth, "audited", False):  # the ACL authorizer's decisions (not the allow-all default)
            authorization(self, allowed, operation, resource_type, name, log_if_denied)
        return allowed


Handler = Callable[[Any, RequestContext], dict | Awaitable[dict]]


@dataclass(frozen=True)
class ApiHandler:
    min_version: int
    max_version: int
    fn: Handler
    parse_min_version: int | None = None  # advertised from min_version, rejected below this (KAFKA-18659)
    module: str | None = None  # deferred: the module that registers the real handler, imported on first use


class Handlers(dict[int, ApiHandler]):
    """API key -> handler. A deferred entry (`defer`) advertises its versions (ApiVersions reads `items()`)
    and is replaced by the real one when `get` or `[]` first asks for its key, before the request is parsed:
    a module may add schemas the codec needs (protocol.streams_schemas)."""

    def get(self, key: int, default: ApiHandler | None = None) -> ApiHandler | None:  # type: ignore[override]
        handler = dict.get(self, key, default)
        return _loaded(key, handler) if handler is not None and handler.module is not None else handler

    def __getitem__(self, key: int) -> ApiHandler:
        handler = dict.__getitem__(self, key)
        return _loaded(key, handler) if handler.module is not None else handler


def _loaded(key: int, handler: ApiHandler) -> ApiHandler:
    importlib.import_module(handler.module)  # type: ignore[arg-type]  # its `register` replaces the entry
    real = dict.get(HANDLERS, key)
    if real is None or real.module is not None:
        raise RuntimeError(f"{handler.module} registered no handler for API key {key}")
    return real


HANDLERS: Handlers = Handlers()
# The features ApiVersions (v3+) lists, by Kafka's names: (supported min, supported max, finalized level).
# The module that serves a feature's APIs adds it (protocol.share_groups: `share.version`, KIP-932).
FEATURES: dict[str, tuple[int, int, int]] = {}


def register(api_key: int, min_version: int, max_version: int, *, parse_min: int | None = None):
    def wrap(fn: Handler) -> Handler:
        deferred = dict.get(HANDLERS, api_key)
        if deferred is not None and deferred.module is not None and (
                (deferred.min_version, deferred.max_version, deferred.parse_min_version)
                != (min_version, max_version, parse_min)):
            raise RuntimeError(f"API key {api_key} was deferred with versions {deferred.min_version}-"
                               f"{deferred.max_version}, but {fn.__module__} registers {min_version}-{max_version}")
        HANDLERS[api_key] = ApiHandler(min_version, max_version, fn, parse_min)
        return fn
    return wrap


def defer(module: str, versions: dict[int, tuple[int, int]], features: dict[str, tuple[int, int, int]] | None = None
          ) -> None:
    """Advertise the APIs `module` serves (key -> (min, max) version) and its features without importing it:
    it is imported when a request first asks for one of them (most brokers never see a share or streams group
    API, and their modules are a third of a start's imports). `register` checks the versions against these.
    Nothing happens for a module already imported (its handlers are registered)."""
    if module in sys.modules:
        return
    def first_call(request: Any, ctx: RequestContext) -> dict | Awaitable[dict]:
        return HANDLERS[ctx.api_key].fn(request, ctx)  # (an entry taken from `items()`: load it now)
    for key, (lo, hi) in versions.items():
        if dict.get(HANDLERS, key) is None:
            HANDLERS[key] = ApiHandler(lo, hi, first_call, None, module)
    for name, feature in (features or {}).items():
        FEATURES.setdefault(name, feature)


def load_deferred() -> None:
    """Import every deferred handler module now: for a caller that walks the schemas of every API served
    (the fuzz tests: a deferred module may add schemas the codec lacks until it is imported)."""
    for key, handler in list(HANDLERS.items()):
        if handler.module is not None:
            HANDLERS[key]  # noqa: B018  (loads it)
