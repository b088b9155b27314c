"""Broker-config changes with an authorizer on: the same AlterConfigs and IncrementalAlterConfigs of BROKER
resources, sent by a principal without ACLs and by one allowed ALTER_CONFIGS on the cluster, answered alike by
chronolog and Kafka 4.4 (`ConfigAdminManager.preprocess`: duplicate keys and null values first, then the
cluster authorization, then the node id and the values).

One Kafka broker of this module's own, with a SASL_PLAINTEXT (PLAIN) listener beside its PLAINTEXT one and
Kafka's StandardAuthorizer (the fixture's PLAINTEXT principal, ANONYMOUS, is its super user); chronolog with
its authorizer on one SASL_PLAINTEXT listener (super user `admin`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from chronolog.testing.kafka import KafkaBroker, _free_ports
from tests.differential import wirefuzz

USERS = {"alice": "alice-secret", "bob": "bob-secret", "admin": "admin-secret"}
SET, DELETE, APPEND = 0, 1, 2
CLUSTER, BROKER, TOPIC, LITERAL, ALTER_CONFIGS, ALLOW = 4, 4, 2, 3, 11, 3
CLUSTER_AUTHORIZATION_FAILED = 31


class _SaslKafka(KafkaBroker):
    """KafkaBroker with a SASL_PLAINTEXT listener on a port of its own (`sasl_port`)."""

    def _make_nodes(self, count: int) -> None:
        super()._make_nodes(count)
        node = self.nodes[0]
        self.sasl_port = _free_ports(1)[0]
        lines = []
        for line in node.properties.read_text().splitlines():
            if line.startswith(("listeners=", "advertised.listeners=")):
                line += f",SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}"
            lines.append(line)
        node.properties.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def kafka_acl() -> Iterator[_SaslKafka]:
    from chronolog.testing.kafka import kafka_available

    if kafka_available():
        pytest.skip(f"Apache Kafka cannot run here: {kafka_available()}")
    jaas = "org.apache.kafka.common.security.plain.PlainLoginModule required " + " ".join(
        f'user_{u}="{p}"' for u, p in USERS.items()) + ";"
    broker = _SaslKafka(configs={
        "sasl.enabled.mechanisms": "PLAIN", "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS"})
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def chronolog_acl() -> Iterator[Any]:
    from chronolog.testing.runner import TestBroker

    broker = TestBroker(configs={"authorizer.class.name": "chronolog", "super.users": "User:admin"},
                        users=USERS).start()
    try:
        yield broker
    finally:
        broker.stop()


def _login(port: int, user: str | None) -> wirefuzz.Wire:
    """A connection authenticated as `user` (SASL/PLAIN over Kafka requests, KIP-152), or none for None."""
    wire = wirefuzz.Wire(port)
    if user is not None:
        assert wire.call(17, 1, wirefuzz.build(17, 1, {"mechanism": "PLAIN"}, {})).error_code == 0
        auth = wire.call(36, 2, wirefuzz.build(36, 2, {"auth_bytes": f"\0{user}\0{USERS[user]}".encode()}, {}))
        assert auth.error_code == 0, auth
    return wire


def _node_id(wire: wirefuzz.Wire) -> str:
    return str(wire.call(3, 12, wirefuzz.build(3, 12, {"topics": [], "allow_auto_topic_creation": False},
                                                   {})).brokers[0].node_id)


def _codes(wire: wirefuzz.Wire, key: int, version: int, values: dict) -> list[tuple[str, int]]:
    return wirefuzz.error_codes(wire.call(key, version, wirefuzz.build(key, version, values, {})))


def _incremental(name: str, *configs: tuple[str, int, str | None]) -> dict:
    return {"resource_type": BROKER, "resource_name": name, "configs": [
        {"name": n, "config_operation": op, "value": v} for n, op, v in configs]}


def _legacy(name: str, *configs: tuple[str, str | None]) -> dict:
    return {"resource_type": BROKER, "resource_name": name, "configs": [{"name": n, "value": v} for n, v in configs]}


def _cases(own: str) -> dict[str, tuple[int, int, list[dict]]]:
    retention = "log.retention.ms"
    return {
        "delete an unset config": (44, 1, [_incremental(own, (retention, DELETE, None))]),
        "another node's id": (44, 1, [_incremental("99", (retention, DELETE, None))]),
        "a node id that is no integer": (44, 1, [_incremental("x", (retention, DELETE, None))]),
        "append to a config that is no list": (44, 1, [_incremental(own, (retention, APPEND, "1"))]),
        "a value of the wrong type": (44, 1, [_incremental(own, (retention, SET, "abc"))]),
        "an unknown operation": (44, 1, [_incremental(own, (retention, 7, "1"))]),
        "a key twice": (44, 1, [_incremental(own, (retention, DELETE, None), (retention, DELETE, None))]),
        "a null value": (44, 1, [_incremental(own, (retention, SET, None))]),
        "the cluster's min.insync.replicas deleted": (44, 1, [_incremental("", ("min.insync.replicas", DELETE, None))]),
        "a node's min.insync.replicas": (44, 1, [_incremental(own, ("min.insync.replicas", SET, "1"))]),
        "with a topic": (44, 1, [_incremental(own, (retention, DELETE, None)),
                                 {"resource_type": TOPIC, "resource_name": "acl-no-such-topic", "configs": []}]),
        "legacy: a value of the wrong type": (33, 2, [_legacy(own, (retention, "abc"))]),
        "legacy: another node's id": (33, 2, [_legacy("99", (retention, "1000"))]),
        "legacy: no configs": (33, 2, [_legacy(own)]),
        "legacy: the cluster's configs replaced": (33, 2, [_legacy("")]),
    }


def _answers(port: int, user: str) -> dict[str, list[tuple[str, int]]]:
    wire = _login(port, user)
    try:
        return {case: _codes(wire, key, version, {"resources": resources, "validate_only": False})
                for case, (key, version, resources) in _cases(_node_id(wire)).items()}
    finally:
        wire.close()


def _allow_bob(port: int, admin: str | None, sasl_port: int) -> None:
    wire = _login(port, admin)
    try:
        assert _codes(wire, 30, 3, {"creations": [{
            "resource_type": CLUSTER, "resource_name": "kafka-cluster", "resource_pattern_type": LITERAL,
            "principal": "User:bob", "host": "*", "operation": ALTER_CONFIGS, "permission_type": ALLOW}]}) == [
            ("results.error_code", 0)]
    finally:
        wire.close()
    deadline = time.monotonic() + 30  # Kafka's authorizer sees the new ACL once its metadata has it
    while _answers(sasl_port, "bob")["delete an unset config"] == [("responses.error_code", CLUSTER_AUTHORIZATION_FAILED)]:
        assert time.monotonic() < deadline, "bob's ACL never took effect"
        time.sleep(0.1)


def test_broker_config_changes_with_acls(chronolog_acl, kafka_acl):
    _allow_bob(chronolog_acl.port, "admin", chronolog_acl.port)
    _allow_bob(kafka_acl.port, None, kafka_acl.sasl_port)
    ours = {user: _answers(chronolog_acl.port, user) for user in ("alice", "bob")}
    theirs = {user: _answers(kafka_acl.sasl_port, user) for user in ("alice", "bob")}
    assert ours == theirs
    # without ALTER_CONFIGS on the cluster: refused before the node id and the values are looked at, after
    # the duplicate keys and null values
    r = "responses.error_code"
    denied = {case: codes for case, codes in theirs["alice"].items() if codes == [(r, CLUSTER_AUTHORIZATION_FAILED)]}
    assert set(theirs["alice"]) - set(denied) == {"a key twice", "a null value", "with a topic"}
    assert theirs["alice"]["with a topic"] == sorted([(r, CLUSTER_AUTHORIZATION_FAILED), (r, 29)])
    assert theirs["bob"]["delete an unset config"] == [(r, 0)]
