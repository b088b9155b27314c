"""The ACL decision procedure (AclAuthorizer's rules), the ACL file, listener parsing and the
loopback-only rule for listeners without authentication."""

from __future__ import annotations

import asyncio
import os

import pytest

from chronolog.errors import ChronologError
from chronolog.protocol.registry import BrokerState, RequestContext
from chronolog.security.acl import AclAuthorizer, AclBinding, AclFilter, AclStore, parse_super_users
from chronolog.security.listeners import parse_listeners


def acl(principal: str, op: str, rtype: str, name: str, perm: str = "Allow", pattern: str = "LITERAL",
        host: str = "*") -> AclBinding:
    return AclBinding.create(principal_=principal, operation_=op, permission_=perm, resource_type_=rtype,
                             name=name, pattern_type_=pattern, host=host)


@pytest.fixture
def store(tmp_path) -> AclStore:
    return AclStore(tmp_path)


def test_allow_deny_implications_and_patterns(store):
    store.add([acl("User:alice", "Read", "Topic", "logs"), acl("User:alice", "Write", "Topic", "app-", pattern="PREFIXED"),
               acl("User:*", "Describe", "Topic", "*"), acl("User:bob", "All", "Topic", "logs"),
               acl("User:bob", "Read", "Topic", "logs", perm="Deny"), acl("User:carol", "AlterConfigs", "Topic", "logs")])
    auth = AclAuthorizer(store)
    assert auth.authorize("User:alice", "read", "topic", "logs")
    assert not auth.authorize("User:alice", "write", "topic", "logs")
    assert auth.authorize("User:alice", "write", "topic", "app-1")  # prefixed
    assert not auth.authorize("User:alice", "write", "topic", "ap")
    assert auth.authorize("User:alice", "describe", "topic", "app-1")  # Write implies Describe
    assert auth.authorize("User:dave", "describe", "topic", "anything")  # User:* on the * literal
    assert not auth.authorize("User:dave", "read", "topic", "anything")
    assert auth.authorize("User:bob", "write", "topic", "logs")  # All
    assert not auth.authorize("User:bob", "read", "topic", "logs")  # Deny wins over All
    assert auth.authorize("User:bob", "describe", "topic", "logs")  # a Read deny does not deny Describe
    assert auth.authorize("User:carol", "describe_configs", "topic", "logs")  # AlterConfigs implies it
    assert not auth.authorize("User:carol", "alter", "topic", "logs")
    assert not auth.authorize("User:alice", "read", "group", "logs")  # resource types are separate


def test_deny_on_wildcard_and_hosts(store):
    store.add([acl("User:alice", "Read", "Topic", "t"), acl("User:*", "Read", "Topic", "*", perm="Deny", host="10.0.0.9"),
               acl("User:eve", "Read", "Topic", "t", host="10.0.0.1")])
    auth = AclAuthorizer(store)
    assert auth.authorize("User:alice", "read", "topic", "t", host="127.0.0.1")
    assert not auth.authorize("User:alice", "read", "topic", "t", host="10.0.0.9")
    assert auth.authorize("User:eve", "read", "topic", "t", host="10.0.0.1")
    assert not auth.authorize("User:eve", "read", "topic", "t", host="10.0.0.2")


def test_super_users_and_no_acl_found(store):
    auth = AclAuthorizer(store, parse_super_users("User:admin; User:ops"))
    assert auth.authorize("User:admin", "alter", "cluster", "kafka-cluster")
    assert auth.authorize("User:ops", "read", "topic", "x")
    assert not auth.authorize("User:alice", "read", "topic", "x")  # default: deny without ACLs
    open_auth = AclAuthorizer(store, allow_everyone_if_no_acl_found=True)
    assert open_auth.authorize("User:alice", "read", "topic", "x")
    store.add([acl("User:bob", "Read", "Topic", "x")])
    assert not open_auth.authorize("User:alice", "read", "topic", "x")  # an ACL exists on x now
    assert open_auth.authorize("User:alice", "read", "topic", "y")


def test_file_changes_are_picked_up(store, tmp_path):
    auth = AclAuthorizer(store)
    assert not auth.authorize("User:alice", "read", "topic", "t")
    other_writer = AclStore(tmp_path)  # e.g. the CLI in another process
    other_writer.add([acl("User:alice", "Read", "Topic", "t")])
    assert auth.authorize("User:alice", "read", "topic", "t")
    other_writer.remove(AclFilter(principal="User:alice"))
    assert not auth.authorize("User:alice", "read", "topic", "t")
    assert os.stat(store.path).st_mode & 0o777 == 0o600
    assert store.add([acl("User:x", "Read", "Topic", "t")]) and not store.add([acl("User:x", "Read", "Topic", "t")])


def test_unreadable_file_is_an_error_not_an_empty_list(tmp_path):
    (tmp_path / "chronolog-acls.json").write_text("{not json")
    with pytest.raises(ChronologError):
        AclStore(tmp_path).bindings()


@pytest.mark.parametrize("kwargs, message", [
    ({"rtype": "Group", "op": "Write"}, "only supports"), ({"rtype": "Cluster", "op": "Create", "name": "x"}, "kafka-cluster"),
    ({"principal": "alice"}, "Type:name"), ({"op": "Fly"}, "unknown ACL operation"), ({"name": ""}, "empty")])
def test_invalid_bindings(kwargs, message):
    args = {"principal": "User:a", "op": "Read", "rtype": "Topic", "name": "t", **kwargs}
    with pytest.raises(ChronologError, match=message):
        acl(args["principal"], args["op"], args["rtype"], args["name"])


def test_create_on_cluster_covers_topics(store, tmp_path):
    """KafkaApis: CREATE on the cluster allows creating any topic."""
    store.add([acl("User:alice", "Create", "Cluster", "kafka-cluster")])
    state = BrokerState(None, None, "127.0.0.1", 0)
    state.authorizer = AclAuthorizer(store)
    ctx = RequestContext(state, 19, 5, 1, "c", "127.0.0.1", principal="User:alice")
    assert ctx.allowed("create", "topic", "anything")
    assert not ctx.allowed("write", "topic", "anything")


def test_authorize_by_resource_type_and_init_producer_id(store):
    """Authorizer.authorizeByResourceType and KafkaApis.handleInitProducerIdRequest: an idempotent producer
    needs IdempotentWrite on the cluster or Write on some topic."""
    from chronolog.protocol.transactions import init_producer_id

    store.add([acl("User:alice", "Write", "Topic", "app-", pattern="PREFIXED"),
               acl("User:bob", "Read", "Topic", "logs"), acl("User:carol", "IdempotentWrite", "Cluster", "kafka-cluster"),
               acl("User:mallory", "Write", "Topic", "logs"),
               acl("User:mallory", "Write", "Topic", "*", perm="Deny")])
    auth = AclAuthorizer(store, parse_super_users("User:admin"))
    assert auth.authorize_by_resource_type("User:alice", "write", "topic")
    assert not auth.authorize_by_resource_type("User:bob", "write", "topic")
    # Kafka's rule counts bindings of the operation itself or All: Read on a topic does not imply Describe
    # here (the made-up "hardcode" resource is not "logs" either).
    assert not auth.authorize_by_resource_type("User:bob", "describe", "topic")
    assert not auth.authorize_by_resource_type("User:mallory", "write", "topic")  # denied on every topic
    assert auth.authorize_by_resource_type("User:admin", "write", "topic")
    assert not auth.authorize_by_resource_type("User:alice", "read", "group")
    state = BrokerState(None, None, "127.0.0.1", 0)
    state.authorizer = auth

    class Req:
        transactional_id = None

    def answer(principal: str) -> int:
        return init_producer_id(Req(), RequestContext(state, 22, 4, 1, "c", "127.0.0.1", principal=principal))["error_code"]

    assert [answer(p) for p in ("User:alice", "User:carol", "User:admin")] == [0, 0, 0]
    assert [answer(p) for p in ("User:bob", "User:mallory", "User:nobody")] == [31, 31, 31]  # CLUSTER_AUTHORIZATION_FAILED


def test_transactional_id_acls(store):
    """KafkaApis: InitProducerId with a transactional id needs Write on it (53 otherwise), FindCoordinator
    for it Describe, which Write implies; IdempotentWrite does not stand in for either."""
    from chronolog.protocol.groups import find_coordinator
    from chronolog.protocol.transactions import init_producer_id

    store.add([acl("User:alice", "Write", "TransactionalId", "app-", pattern="PREFIXED"),
               acl("User:carol", "IdempotentWrite", "Cluster", "kafka-cluster"),
               acl("User:dave", "Describe", "TransactionalId", "app-1")])
    from chronolog.config import BrokerConfig
    state = BrokerState(None, BrokerConfig(), "127.0.0.1", 0)
    state.authorizer = AclAuthorizer(store)

    class Req:
        transactional_id = "app-1"
        transaction_timeout = 60000
        key = "app-1"
        key_type = 1

    def ctx(api_key: int, principal: str) -> RequestContext:
        return RequestContext(state, api_key, 3, 1, "c", "127.0.0.1", principal=principal)

    # allowed, then no coordinator in this bare state (15); denied: TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert [init_producer_id(Req(), ctx(22, p))["error_code"] for p in ("User:alice", "User:carol", "User:dave")] \
        == [15, 53, 53]
    assert [asyncio.run(find_coordinator(Req(), ctx(10, p)))["error_code"] for p in ("User:alice", "User:carol", "User:dave")] \
        == [15, 53, 15]


def test_listeners_parsing():
    specs = parse_listeners("PLAINTEXT://127.0.0.1:9092,SASL_SSL://:9093,INTERNAL://[::1]:0",
                            "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,INTERNAL:SSL")
    assert [(s.name, s.security_protocol, s.host, s.port) for s in specs] == [
        ("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092), ("SASL_SSL", "SASL_SSL", "", 9093), ("INTERNAL", "SSL", "::1", 0)]
    for bad in ("PLAINTEXT://x", "FOO://127.0.0.1:1", "PLAINTEXT://a:1,PLAINTEXT://b:2", "SSL://a:70000"):
        with pytest.raises(ChronologError):
            parse_listeners(bad)


def test_listeners_without_authentication_stay_on_loopback(tmp_path):
    from chronolog.server.broker import Broker
    for listeners in ("PLAINTEXT://0.0.0.0:0", "SSL://:0", "SASL_SSL://127.0.0.1:0,PLAINTEXT://10.1.2.3:0"):
        with pytest.raises(ChronologError, match="without authentication"):
            Broker(tmp_path, configs={"listeners": listeners})._check_listener()
    Broker(tmp_path, configs={"listeners": "SASL_SSL://0.0.0.0:0,PLAINTEXT://127.0.0.1:0"})._check_listener()
    Broker(tmp_path, configs={"listeners": "SSL://0.0.0.0:0", "ssl.client.auth": "required"})._check_listener()
    Broker(tmp_path, configs={"listeners": "PLAINTEXT://0.0.0.0:0",
                              "listeners.allow.non.loopback.without.auth": "true"})._check_listener()
    with pytest.raises(ChronologError, match="without authentication"):
        Broker(tmp_path, host="0.0.0.0")._check_listener()


def test_connection_quotas(tmp_path):
    """ConnectionQuotas: per-IP limit, per-IP overrides, broker-wide limit (the broker test checks the
    per-IP one over real sockets)."""
    from chronolog.server.broker import Broker
    broker = Broker(tmp_path, configs={"max.connections.per.ip": "2", "max.connections": "4",
                                       "max.connections.per.ip.overrides": "127.0.0.2:1,10.0.0.1:3"})
    broker._per_ip.update({"127.0.0.1": 2, "127.0.0.2": 1, "10.0.0.1": 1})
    broker._readers.update(object() for _ in range(4))  # four open connections
    assert "maximum of 2" in broker._admit("127.0.0.1")
    assert "maximum of 1" in broker._admit("127.0.0.2")
    assert "broker already has" in broker._admit("10.0.0.1")  # its own limit is 3, the broker's is reached
    broker._readers.pop()
    assert broker._admit("10.0.0.1") is None and broker._admit("10.9.9.9") is None
    with pytest.raises(ChronologError, match="overrides"):
        Broker(tmp_path, configs={"max.connections.per.ip.overrides": "127.0.0.1"})


@pytest.mark.parametrize(("bindings", "expected"), [
    # an ALLOW prefix dominated by a shorter DENY prefix: nothing is writable
    ([("Allow", "PREFIXED", "app-"), ("Deny", "PREFIXED", "app")], False),
    # a longer DENY prefix leaves the rest of the ALLOW prefix
    ([("Allow", "PREFIXED", "app-"), ("Deny", "PREFIXED", "app-secret")], True),
    # a LITERAL ALLOW is cancelled by a LITERAL DENY on the same name or a DENY prefix of it
    ([("Allow", "LITERAL", "logs"), ("Deny", "LITERAL", "logs")], False),
    ([("Allow", "LITERAL", "logs"), ("Deny", "PREFIXED", "lo")], False),
    ([("Allow", "LITERAL", "logs"), ("Deny", "PREFIXED", "lo"), ("Allow", "LITERAL", "metrics")], True),
    # a LITERAL DENY does not dominate a PREFIXED ALLOW (other names under the prefix stay writable)
    ([("Allow", "PREFIXED", "app-"), ("Deny", "LITERAL", "app-")], True),
    # wildcards: DENY `*` denies whatever is allowed; ALLOW `*` allows whatever prefix is denied
    ([("Allow", "LITERAL", "*"), ("Deny", "PREFIXED", "a")], True),
    ([("Allow", "PREFIXED", "app-"), ("Deny", "LITERAL", "*")], False),
])
def test_authorize_by_resource_type_weighs_deny_prefixes_as_kafka(store, bindings, expected):
    """`Authorizer.authorizeByResourceType`'s default rule, case by case (AuthorizerInterfaceDefaultTest)."""
    store.add([acl("User:dora", "Write", "Topic", name, perm=perm, pattern=pattern) for perm, pattern, name in bindings])
    auth = AclAuthorizer(store)
    assert auth.authorize_by_resource_type("User:dora", "write", "topic", "127.0.0.1") is expected


def test_authorize_by_resource_type_hosts_operations_and_no_acl_found(store):
    store.add([acl("User:erin", "Write", "Topic", "a", host="10.0.0.1"), acl("User:finn", "All", "Topic", "b"),
               acl("User:gus", "Write", "Topic", "c", perm="Deny", pattern="PREFIXED")])
    auth = AclAuthorizer(store)
    assert not auth.authorize_by_resource_type("User:erin", "write", "topic", "127.0.0.1")  # another host
    assert auth.authorize_by_resource_type("User:erin", "write", "topic", "10.0.0.1")
    assert auth.authorize_by_resource_type("User:finn", "write", "topic", "127.0.0.1")  # All covers Write
    assert not auth.authorize_by_resource_type("User:gus", "write", "topic", "127.0.0.1")
    # allow.everyone.if.no.acl.found: no ACL applies to the made-up name, so every principal may
    open_auth = AclAuthorizer(store, allow_everyone_if_no_acl_found=True)
    assert open_auth.authorize_by_resource_type("User:gus", "write", "topic", "127.0.0.1")
    assert open_auth.authorize_by_resource_type("User:gus", "read", "group", "127.0.0.1")
