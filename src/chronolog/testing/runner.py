"""`chronolog.testing.broker()`: a broker in a background thread of the test's process, with topics made
on the spot, SASL users, TLS, programmable faults and their admin API. What Testcontainers' Kafka module
gives, without Docker or a JVM: it starts in tens of milliseconds."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

from chronolog.errors import ChronologError

# Kafka's own test harness defaults (`KafkaConfig` in kafka.utils.TestUtils): a group's first rebalance does
# not wait group.initial.rebalance.delay.ms (3 s by default) for more members.
TEST_DEFAULTS = {"group.initial.rebalance.delay.ms": "0"}
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class TestBroker:
    """One broker for tests. `data_dir` None: a temporary directory, removed by `stop`.

    `users` ({name: password}) turns the listener into SASL (PLAIN and both SCRAM mechanisms, every user
    having credentials for each); `tls=True` makes it TLS with a fresh CA (needs `trustme`), whose PEM file
    is `ca_file`. `admin_api=True` serves the fault admin API on a loopback port (`admin_url`)."""

    __test__ = False  # a class named Test*: not a test case for pytest

    def __init__(self, data_dir: Path | str | None = None, *, configs: dict[str, str] | None = None,
                 users: dict[str, str] | None = None, tls: bool = False, admin_api: bool = False,
                 keep_data: bool | None = None, port: int = 0, admin_port: int = 0) -> None:
        self._own_dir = data_dir is None
        self._base = Path(tempfile.mkdtemp(prefix="chronolog-test-")) if data_dir is None else Path(data_dir)
        self.data_dir = self._base / "data" if self._own_dir else self._base
        self.keep_data = (not self._own_dir) if keep_data is None else keep_data
        self.users = dict(users or {})
        self.tls = bool(tls)
        self.ca_file: Path | None = None
        self.admin_api = admin_api
        self.admin_url: str | None = None
        self._port = int(port)
        self._admin_port = int(admin_port)
        self.configs = {**TEST_DEFAULTS, **{str(k): str(v) for k, v in (configs or {}).items()}}
        self.security_protocol = {(False, False): "PLAINTEXT", (True, False): "SASL_PLAINTEXT", (False, True): "SSL",
                                  (True, True): "SASL_SSL"}[(bool(self.users), self.tls)]
        self._embedded: Any = None
        self._admin: Any = None
        self.faults: Any = None

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> TestBroker:
        from chronolog.server.embedded import EmbeddedBroker
        from chronolog.testing.faults import Faults

        if self._embedded is not None:
            raise ChronologError("this test broker is already started")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        configs = dict(self.configs)
        protocol = self.security_protocol
        if protocol != "PLAINTEXT":
            if "listeners" in configs:
                raise ChronologError("give either users/tls or a listeners config, not both")
            configs["listeners"] = f"{protocol}://127.0.0.1:{self._port}"
        if self.users:
            configs.setdefault("sasl.enabled.mechanisms", ",".join(SASL_MECHANISMS))
            self._add_users()
        if self.tls:
            configs.update(self._make_tls())
        embedded = None
        try:
            embedded = EmbeddedBroker(self.data_dir, "127.0.0.1", self._port, configs)
            embedded.start()
        except BaseException:
            if embedded is not None:  # its loop thread runs: end it
                embedded.loop.call_soon_threadsafe(embedded.loop.stop)
            self._cleanup()
            raise
        self._embedded = embedded
        self.faults = Faults(embedded.broker, embedded.loop)
        if self.admin_api:
            from chronolog.testing.admin import AdminServer

            self._admin = AdminServer(self.faults, embedded.loop, port=self._admin_port).start()
            self.admin_url = self._admin.url
        return self

    def stop(self) -> None:
        """Stop the broker (and its admin API), then remove the data unless kept. Safe to call twice."""
        embedded, self._embedded = self._embedded, None
        if embedded is not None:
            if self._admin is not None:
                self._admin.stop()
                self._admin = None
            embedded.stop(durable=self.keep_data)  # data about to be deleted is not synced first
        self._cleanup()

    def _cleanup(self) -> None:
        if not self.keep_data:
            shutil.rmtree(self._base if self._own_dir else self.data_dir, ignore_errors=True)

    def __enter__(self) -> TestBroker:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._embedded is not None

    @property
    def bootstrap(self) -> str:
        """`host:port` for `bootstrap.servers`."""
        return self._require().bootstrap

    @property
    def port(self) -> int:
        return int(self._require().broker.port)

    # -- clients -----------------------------------------------------------------------------------
    def client_config(self, user: str | None = None, **extra: Any) -> dict[str, Any]:
        """librdkafka (confluent-kafka) settings to reach this broker, as `user` (the first one by default)."""
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap}
        if self.security_protocol != "PLAINTEXT":
            conf["security.protocol"] = self.security_protocol
        if self.users:
            name = user or next(iter(self.users))
            conf.update({"sasl.mechanism": "SCRAM-SHA-256", "sasl.username": name,
                         "sasl.password": self.users[name]})
        if self.tls:
            conf["ssl.ca.location"] = str(self.ca_file)
        conf.update(extra)
        return conf

    def python_client_config(self, user: str | None = None, **extra: Any) -> dict[str, Any]:
        """kafka-python keyword arguments (aiokafka takes the same, with `ssl_context` for `ssl_cafile`)."""
        conf: dict[str, Any] = {"bootstrap_servers": self.bootstrap, "security_protocol": self.security_protocol}
        if self.users:
            name = user or next(iter(self.users))
            conf.update({"sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": name,
                         "sasl_plain_password": self.users[name]})
        if self.tls:
            conf["ssl_cafile"] = str(self.ca_file)
        conf.update(extra)
        return conf

    # -- topics ------------------------------------------------------------------------------------
    def create_topic(self, name: str | None = None, partitions: int = 1, configs: dict[str, str] | None = None,
                     *, prefix: str = "test") -> str:
        """Create a topic (a fresh unique name unless given) and return its name. `configs` are Kafka
        topic configs (`cleanup.policy`, `message.timestamp.type`, ...), refused if unknown."""
        name = name or f"{prefix}-{uuid.uuid4().hex[:12]}"
        self._manager().create_topic(name, int(partitions), {str(k): str(v) for k, v in (configs or {}).items()})
        return name

    def delete_topic(self, name: str) -> None:
        self._manager().delete_topic(name)

    def topics(self) -> dict[str, int]:
        """Topic name -> partition count."""
        return dict(self._manager().topics())

    def end_offsets(self, topic: str) -> list[int]:
        """Each partition's log end offset (how many records were produced, on a fresh topic)."""
        manager = self._manager()
        return [manager.get_log(topic, p).log_end_offset for p in range(manager.topics()[topic])]

    # -- internals ---------------------------------------------------------------------------------
    def _require(self) -> Any:
        if self._embedded is None:
            raise ChronologError("the test broker is not running (use it inside `with` or after start())")
        return self._embedded

    def _manager(self) -> Any:
        return self._require().broker.state.log_manager

    def _add_users(self) -> None:
        from chronolog.security.credentials import CredentialStore

        store = CredentialStore(self.data_dir)
        for name, password in self.users.items():
            for mechanism in SASL_MECHANISMS[1:]:
                store.upsert(name, mechanism, password)

    def _make_tls(self) -> dict[str, str]:
        try:
            import trustme
        except ModuleNotFoundError:
            raise ChronologError("tls=True needs the trustme package: pip install 'chronolog[testing]'") from None
        tls_dir = (self._base if self._own_dir else self.data_dir.parent) / "tls"
        tls_dir.mkdir(parents=True, exist_ok=True)
        ca = trustme.CA()
        cert = ca.issue_cert("localhost", "127.0.0.1")
        self.ca_file = tls_dir / "ca.pem"
        ca.cert_pem.write_to_path(str(self.ca_file))
        keystore = tls_dir / "broker.pem"
        cert.private_key_and_cert_chain_pem.write_to_path(str(keystore))
        return {"ssl.keystore.location": str(keystore)}


def broker(data_dir: Path | str | None = None, *, configs: dict[str, str] | None = None,
           users: dict[str, str] | None = None, tls: bool = False, admin_api: bool = False) -> TestBroker:
    """A TestBroker to use with `with` (started on enter, stopped and its data removed on exit)."""
    return TestBroker(data_dir, configs=configs, users=users, tls=tls, admin_api=admin_api)
