"""The tools' Kafka client: librdkafka (confluent-kafka) configured the way the tools need it.

- Extra client configs (`-X key=value`, `--command-config FILE`, as kcat and Kafka's tools take them) reach
  every client, so TLS and SASL work wherever a bootstrap server does.
- librdkafka's own log lines go to Python logging (logger `chronolog.librdkafka`), not to stderr.
- A bootstrap server that refuses connections is one error at once instead of librdkafka's retries.
- An authentication or TLS failure is one error at once too: librdkafka retries it until the request times
  out, where Kafka's tools stop (SaslAuthenticationException and SslAuthenticationException are not
  retriable), so every new client waits for its first metadata answer or for such an error.
- Read-only questions never create a topic: metadata is asked through a consumer with
  `allow.auto.create.topics=false` (a Metadata request with allowAutoTopicCreation=false, KIP-361); an
  AdminClient's metadata request would let a broker with `auto.create.topics.enable` create a mistyped name.
"""

from __future__ import annotations

import logging
import re
import socket
from collections.abc import Iterator
from pathlib import Path

from chronolog.config import parse_pairs
from chronolog.errors import ChronologError, UnknownTopicOrPartitionError
from chronolog.records import Record
from chronolog.timetravel.sources import BrokerSource, OffsetAtTime, destroy_admin, kafka_words

LOGGER = logging.getLogger("chronolog.librdkafka")
PROBE_TIMEOUT_S = 3.0


def read_properties(path: Path) -> dict[str, str]:
    """A Java-style properties file (`key=value` or `key: value`, `#`/`!` comments), as Kafka's
    `--command-config` takes it."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ChronologError(f"cannot read --command-config {path}: {exc.strerror or exc}") from None
    out: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
        if cut < 0:
            raise ChronologError(f"{path}:{n}: expected key=value, got {line!r}")
        out[line[:cut].strip()] = line[cut + 1:].strip()
    return out


_JAAS = re.compile(r'(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')
_JAVA_ONLY = {"ssl.truststore.location": "ssl.ca.location=CA.pem", "ssl.truststore.password": "ssl.ca.location",
              "ssl.truststore.type": "ssl.ca.location"}


def from_java(conf: dict[str, str]) -> dict[str, str]:
    """The Java client's names that a Kafka tools' properties file holds, in librdkafka's words:
    `sasl.jaas.config` with a PLAIN or SCRAM login module becomes `sasl.username`/`sasl.password`; a JKS
    truststore, which librdkafka cannot read, is refused with the PEM option to use instead."""
    out = dict(conf)
    jaas = out.pop("sasl.jaas.config", None)
    if jaas is not None:
        if "PlainLoginModule" not in jaas and "ScramLoginModule" not in jaas:
            raise ChronologError("sasl.jaas.config: only PlainLoginModule and ScramLoginModule can be translated; "
                                 "give sasl.username and sasl.password")
        found = {k: v.replace('\\"', '"') for k, v in _JAAS.findall(jaas)}
        if set(found) != {"username", "password"}:
            raise ChronologError('sasl.jaas.config: expected username="..." password="..."')
        out.setdefault("sasl.username", found["username"])
        out.setdefault("sasl.password", found["password"])
    for key, instead in _JAVA_ONLY.items():
        if key in out:
            raise ChronologError(f"{key} is the Java client's (a JKS/PKCS12 truststore): librdkafka takes "
                                 f"{instead} (PEM)")
    return out


def client_config(bootstrap: str, extra: list[str] | None = None, command_config: Path | None = None) -> dict:
    """librdkafka configs: the file first, then `-X` pairs (later wins, as in kcat)."""
    conf: dict = {"bootstrap.servers": bootstrap}
    if command_config is not None:
        conf.update(read_properties(command_config))
    conf.update(parse_pairs(extra or [], "-X"))
    conf = from_java(conf)
    conf["logger"] = LOGGER
    return conf


def _addresses(bootstrap: str) -> list[tuple[str, int]]:
    out = []
    for item in bootstrap.split(","):
        item = item.strip().rsplit("://", 1)[-1]
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ChronologError(f"--bootstrap-server takes HOST:PORT[,HOST:PORT], got {bootstrap!r}")
        out.append((host.strip("[]") or "localhost", int(port)))
    return out


def probe(bootstrap: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Fail at once when no bootstrap server accepts a TCP connection: librdkafka would retry until its
    request times out (15 s by default) and log every attempt."""
    reasons = []
    for host, port in _addresses(bootstrap):
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return
        except OSError as exc:
            reasons.append(f"{host}:{port}: {exc.strerror or exc}")
    raise ChronologError(f"cannot connect to {bootstrap} ({'; '.join(reasons)}); is the broker running?")


def kafka_error_text(exc: BaseException) -> str:
    """One line for a confluent_kafka.KafkaException (its KafkaError's text)."""
    arg = exc.args[0] if exc.args else exc
    return arg.str() if hasattr(arg, "str") else str(arg)


_BROKER_PREFIX = re.compile(r"^\w+://(?P<addr>[^/\s]+)/\S+: ")
_AFTER = re.compile(r"\s*\(after \d+ms in state \w+\)$")
_TLS_WORDS = ("SSL", "TLS", "certificate")


class AuthWatch:
    """The client's `error_cb`: keeps the first error that retrying cannot cure. librdkafka reports a
    failed SASL exchange as _AUTHENTICATION and a failed TLS handshake as _SSL, or as _TRANSPORT with the
    SSL reason; a broker that is down or slow is not one of them (its own bounded wait applies)."""

    def __init__(self) -> None:
        self.failure: str | None = None

    def __call__(self, err) -> None:
        from confluent_kafka import KafkaError
        code, text = err.code(), err.str()
        LOGGER.error("%s: %s", err.name(), text)  # what librdkafka logs when no error_cb is set
        if self.failure is not None:
            return
        found = _BROKER_PREFIX.match(text)
        reason = _AFTER.sub("", text[found.end():] if found else text)
        if code == KafkaError._AUTHENTICATION:
            kind = "authentication failed"
        elif code == KafkaError._SSL or (code == KafkaError._TRANSPORT and any(w in reason for w in _TLS_WORDS)):
            kind = "TLS handshake failed"
        else:
            return
        self.failure = f"{kind} with {found['addr']}: {reason}" if found else f"{kind}: {reason}"


# (bootstrap, security configs) that answered once in this process: their next clients skip the wait.
_ANSWERED: set[tuple] = set()
_SECURITY_PREFIXES = ("bootstrap.servers", "security.", "sasl.", "ssl.", "enable.ssl")


def _security_key(conf: dict) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in conf.items() if k.startswith(_SECURITY_PREFIXES)))


def _answered(client, watch: AuthWatch, conf: dict, timeout: float) -> None:
    """Return once the bootstrap servers answered a metadata request; raise at once on an authentication
    or TLS failure (`watch` sees it when poll() serves librdkafka's error events), or after `timeout`
    without an answer."""
    import time

    from confluent_kafka import KafkaException
    key = _security_key(conf)
    if key in _ANSWERED:
        return
    deadline = time.monotonic() + timeout
    last = "no answer"
    while True:
        client.poll(0)
        if watch.failure is not None:
            raise ChronologError(watch.failure)
        left = deadline - time.monotonic()
        if left <= 0:
            raise ChronologError(f"cannot reach {conf['bootstrap.servers']}: no answer within {timeout:g} s "
                                 f"({last})")
        try:
            client.list_topics(timeout=min(0.25, left))
        except KafkaException as exc:
            last = kafka_words(exc)
            continue
        _ANSWERED.add(key)
        return


def _timeout_s(conf: dict) -> float:
    """librdkafka's bound for a connection's setup, TCP, TLS and SASL handshakes included (the tools' 15 s
    when not given, rather than librdkafka's 30 s)."""
    try:
        return int(conf.get("socket.connection.setup.timeout.ms", 15_000)) / 1000
    except (TypeError, ValueError):
        return 15.0


def _made(make, conf: dict):
    """`make(conf + error_cb)`, answered (see `_answered`); bad configs are one line."""
    from confluent_kafka import KafkaException
    watch = AuthWatch()
    try:
        client = make({**conf, "error_cb": watch})
    except (KafkaException, ValueError, TypeError) as exc:
        # confluent-kafka turns a Ctrl-C that lands while it reads the config into a config error ("expected
        # configuration property name as type unicode string") and the KeyboardInterrupt is lost: a config
        # error that does not come again was that Ctrl-C, and the tool stops as for one.
        try:
            make({**conf, "error_cb": AuthWatch()})
        except (KafkaException, ValueError, TypeError):
            raise ChronologError(f"client config: {kafka_error_text(exc)}") from None
        raise KeyboardInterrupt from None
    try:
        _answered(client, watch, conf, _timeout_s(conf))
    except BaseException:
        _destroy(client)  # here, not by the garbage collector in whatever thread it runs
        raise
    return client


def _destroy(client) -> None:
    """Close or destroy a librdkafka client in this thread (`BrokerSource.close` says why)."""
    from confluent_kafka import Consumer
    if isinstance(client, Consumer):
        client.close()
    else:
        destroy_admin(client)  # an AdminClient's or a Producer's `__exit__` destroys its handle


def admin_client(conf: dict):
    from confluent_kafka.admin import AdminClient
    probe(conf["bootstrap.servers"])
    return _made(AdminClient, dict(conf))


def consumer_client(conf: dict, **more):
    from confluent_kafka import Consumer
    return _made(Consumer, {**conf, "enable.auto.commit": False, "allow.auto.create.topics": False, **more})


def producer_client(conf: dict, **defaults):
    """A producer with `defaults` that the user's -X / --command-config can override."""
    from confluent_kafka import Producer
    probe(conf["bootstrap.servers"])
    return _made(Producer, {**defaults, **conf})


def topic_metadata(consumer, bootstrap: str, topic: str, timeout: float):
    """The topic's metadata without creating it; a missing topic is `UnknownTopicOrPartitionError`."""
    from confluent_kafka import KafkaError, KafkaException
    try:
        md = consumer.list_topics(topic, timeout=timeout)
    except KafkaException as exc:
        raise ChronologError(f"cannot reach {bootstrap}: {kafka_words(exc)}") from None
    t = md.topics.get(topic)
    if t is None or (t.error is not None and t.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART) or not t.partitions:
        raise UnknownTopicOrPartitionError(f"topic {topic!r} not found on {bootstrap} (`chronolog topics list` "
                                           "shows its topics)")
    if t.error is not None:
        raise ChronologError(f"topic {topic!r}: {kafka_words(t.error)}")
    return t


class ClientSource(BrokerSource):
    """`BrokerSource` with the tools' client configs, the fail-fast probe, metadata without topic creation
    and one-line errors for unknown partitions and failed admin calls."""

    def __init__(self, bootstrap: str, conf: dict | None = None, timeout: float = 15.0) -> None:
        self.bootstrap = bootstrap
        self.timeout = timeout
        base = {"socket.connection.setup.timeout.ms": int(timeout * 1000), **(conf or {}),
                "bootstrap.servers": bootstrap, "logger": LOGGER}
        self.conf = base
        self._admin = admin_client(base)
        self._consumers: dict = {}  # isolation level -> consumer, as BrokerSource keeps them

    def _consumer(self, isolation: str):
        """BrokerSource's consumer of that isolation level, made with the tools' client configs."""
        self._check_open()
        if isolation not in self._consumers:
            self._consumers[isolation] = consumer_client(self.conf, **{
                "group.id": "chronolog-tools", "enable.partition.eof": True, "isolation.level": isolation})
        return self._consumers[isolation]

    def _metadata(self, topic: str | None = None):
        from confluent_kafka import KafkaException
        try:
            return self.consumer.list_topics(topic, timeout=self.timeout)
        except KafkaException as exc:
            raise ChronologError(f"cannot reach {self.bootstrap}: {kafka_words(exc)}") from None

    def partitions(self, topic: str) -> list[int]:
        return sorted(topic_metadata(self.consumer, self.bootstrap, topic, self.timeout).partitions)

    def check_partitions(self, topic: str, partitions: list[int] | None) -> list[int]:
        """`partitions` (all when None) after checking that each exists: one line naming the ones that do."""
        return checked_partitions(topic, self.partitions(topic), partitions)

    def watermarks(self, topic: str, partition: int, *, isolation: str = "read_uncommitted") -> tuple[int, int]:
        from confluent_kafka import KafkaException
        try:
            return super().watermarks(topic, partition, isolation=isolation)
        except KafkaException as exc:
            raise ChronologError(f"offsets of {topic}-{partition}: {kafka_words(exc)}") from None

    def offsets_for_time(self, topic: str, ts: int, partitions: list[int] | None = None, *,
                         isolation: str = "read_uncommitted") -> dict[int, OffsetAtTime]:
        from confluent_kafka import KafkaException
        parts = self.check_partitions(topic, partitions)
        try:
            return super().offsets_for_time(topic, ts, parts, isolation=isolation)
        except KafkaException as exc:
            raise ChronologError(f"offsets for time in {topic}: {kafka_words(exc)}") from None

    def read(self, topic: str, partition: int, start: int, end: int, *,
             isolation: str = "read_uncommitted") -> Iterator[Record]:
        yield from super().read(topic, partition, start, end, isolation=isolation)

    def group_state(self, group: str) -> tuple[str, int]:
        return _wrapped(super().group_state, f"describe group {group}", group)

    def committed(self, group: str, topic: str, partitions: list[int]) -> dict[int, int]:
        return _wrapped(super().committed, f"offsets of group {group}", group, topic, partitions)

    def commit(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        _wrapped(super().commit, f"commit for group {group}", group, topic, offsets)


def _wrapped(fn, what: str, *args):
    from confluent_kafka import KafkaException
    try:
        return fn(*args)
    except KafkaException as exc:
        raise ChronologError(f"{what}: {kafka_words(exc)}") from None


def checked_partitions(topic: str, known: list[int], wanted: list[int] | None) -> list[int]:
    """`wanted` (all of `known` when None) after checking that each exists: one line naming the ones that do."""
    if wanted is None:
        return known
    missing = [p for p in wanted if p not in known]
    if missing:
        raise UnknownTopicOrPartitionError(
            f"topic {topic!r} has no partition {', '.join(map(str, missing))} (it has {_ranges(known)})")
    return list(wanted)


def _ranges(parts: list[int]) -> str:
    if parts and parts == list(range(parts[0], parts[-1] + 1)):
        return f"{parts[0]}..{parts[-1]}" if len(parts) > 1 else str(parts[0])
    return ", ".join(map(str, parts))
