"""Security end to end: a broker subprocess with SASL_SSL, SSL, SASL_PLAINTEXT and PLAINTEXT listeners,
a test CA from trustme, SCRAM users and ACLs in the data dir, driven by confluent-kafka, kafka-python and
raw Kafka frames (for the wire details clients hide: the v0 handshake, error answers, closed sockets)."""

from __future__ import annotations

import json
import logging
import shutil
import socket
import struct
import subprocess
import time
import uuid

import pytest

from chronolog.security.acl import AclBinding, AclFilter, AclStore
from chronolog.security.credentials import CredentialStore
from tests.brokerproc import BrokerProcess
from tests.clirun import chronolog_completed
from tests.frames import decode_response, recv_frame, request_frame
from tests.waiting import closed_by_peer, established_connections, poll_until, readable

trustme = pytest.importorskip("trustme")
confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]

PASSWORDS = {"alice": "alice-secret", "admin": "admin-secret"}
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


def _allow(principal: str, op: str, rtype: str, name: str, pattern: str = "LITERAL") -> AclBinding:
    return AclBinding.create(principal_=principal, operation_=op, permission_="Allow", resource_type_=rtype,
                             name=name, pattern_type_=pattern)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    base = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    alice = ca.issue_cert("alice.clients.test", common_name="alice")
    paths = {"ca": base / "ca.pem", "server": base / "server.pem", "alice_cert": base / "alice.crt",
             "alice_key": base / "alice.key"}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    server.private_key_and_cert_chain_pem.write_to_path(str(paths["server"]))
    alice.cert_chain_pems[0].write_to_path(str(paths["alice_cert"]))
    alice.private_key_pem.write_to_path(str(paths["alice_key"]))
    return {k: str(v) for k, v in paths.items()}


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory, pki):
    data = tmp_path_factory.mktemp("secure") / "data"
    data.mkdir()
    creds = CredentialStore(data)
    for user, password in PASSWORDS.items():
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            creds.upsert(user, mechanism, password)
    AclStore(data).add([
        _allow("User:alice", "Write", "Topic", "allowed"), _allow("User:alice", "Read", "Topic", "allowed"),
        _allow("User:alice", "Read", "Group", "g"),
    ])
    proc = BrokerProcess(data, {
        "listeners": "SASL_SSL://127.0.0.1:0,SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        "ssl.keystore.location": pki["server"], "ssl.truststore.location": pki["ca"],
        "ssl.client.auth": "requested", "sasl.enabled.mechanisms": ",".join(MECHANISMS),
        "authorizer.class.name": "chronolog", "super.users": "User:admin",
        "auto.create.topics.enable": "false",
    }).start()
    admin = AdminClient(_sasl_conf(proc, pki, "admin", "SCRAM-SHA-256"))
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in ("allowed", "secret")]).values():
        future.result(15)
    yield proc
    proc.stop()


def _sasl_conf(proc: BrokerProcess, pki: dict, user: str, mechanism: str, password: str | None = None) -> dict:
    return {"bootstrap.servers": proc.bootstrap_for("SASL_SSL"), "security.protocol": "SASL_SSL",
            "sasl.mechanism": mechanism, "sasl.username": user,
            "sasl.password": PASSWORDS[user] if password is None else password, "ssl.ca.location": pki["ca"]}


def _produce(conf: dict, topic: str, values: list[bytes]) -> list:
    results: list = []
    producer = Producer({**conf, "message.timeout.ms": 10000})
    for v in values:
        producer.produce(topic, v, on_delivery=lambda err, msg: results.append(err))
    producer.flush(15)
    return results


def _consume_assigned(conf: dict, topic: str, until: bytes, timeout: float = 60.0) -> tuple[list[bytes], list]:
    """Reads partition 0 from the start until `until` was seen, an error came, or the timeout. The group is
    one alice may read: librdkafka looks up its coordinator even for assign(), and FindCoordinator needs
    Describe on the group."""
    consumer = Consumer({**conf, "group.id": "g", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values, errors = [], []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and until not in values and not errors:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                errors.append(msg.error())
            else:
                values.append(msg.value())
    finally:
        consumer.close()
    return values, errors


# -- SASL_SSL with every mechanism and both clients ------------------------------------------------------
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_sasl_ssl_produce_consume(secure_broker, pki, mechanism):
    conf = _sasl_conf(secure_broker, pki, "alice", mechanism)
    marker = f"confluent-{mechanism}-{uuid.uuid4().hex[:6]}".encode()
    assert _produce(conf, "allowed", [marker]) == [None]
    values, errors = _consume_assigned(conf, "allowed", marker)
    assert not errors and marker in values


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_sasl_ssl_produce_consume(secure_broker, pki, mechanism):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    common = {"bootstrap_servers": secure_broker.bootstrap_for("SASL_SSL"), "security_protocol": "SASL_SSL",
              "sasl_mechanism": mechanism, "sasl_plain_username": "alice",
              "sasl_plain_password": PASSWORDS["alice"], "ssl_cafile": pki["ca"]}
    marker = f"kafka-python-{mechanism}-{uuid.uuid4().hex[:6]}".encode()
    producer = KafkaProducer(**common)
    try:
        producer.send("allowed", marker).get(timeout=15)
    finally:
        producer.close(5)
    consumer = KafkaConsumer(**common, enable_auto_commit=False)
    try:
        consumer.assign([KTP("allowed", 0)])
        consumer.seek_to_beginning()
        seen: list = []
        deadline = time.monotonic() + 10
        while marker not in seen and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                seen += [r.value for r in records]
        assert marker in seen
    finally:
        consumer.close()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kcat_sasl_ssl(secure_broker, pki, mechanism):
    """Debian's kcat links an older librdkafka than confluent-kafka's wheel: its SCRAM client repeats the
    client nonce in the final message, which Kafka (and we) accept."""
    kcat = shutil.which("kcat")
    if kcat is None:
        pytest.skip("kcat not installed")
    args = [kcat, "-b", secure_broker.bootstrap_for("SASL_SSL"), "-X", "security.protocol=SASL_SSL",
            "-X", f"sasl.mechanism={mechanism}", "-X", "sasl.username=alice",
            "-X", f"sasl.password={PASSWORDS['alice']}", "-X", f"ssl.ca.location={pki['ca']}"]
    marker = f"kcat-{mechanism}-{uuid.uuid4().hex[:6]}"
    produced = subprocess.run([*args, "-P", "-t", "allowed"], input=marker + "\n", capture_output=True, text=True,
                              timeout=30)
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run([*args, "-C", "-t", "allowed", "-o", "beginning", "-e", "-q"], capture_output=True,
                              text=True, timeout=30)
    assert consumed.returncode == 0 and marker in consumed.stdout.split("\n"), consumed.stderr


# -- failures a client sees --------------------------------------------------------------------------------
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_wrong_password_is_rejected(secure_broker, pki, mechanism):
    errors: list = []
    producer = Producer({**_sasl_conf(secure_broker, pki, "alice", mechanism, password="wrong"),
                         "error_cb": errors.append, "reconnect.backoff.ms": 2000, "reconnect.backoff.max.ms": 5000})
    deadline = time.monotonic() + 10
    auth: list = []
    while not auth and time.monotonic() < deadline:
        producer.poll(0.2)
        auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    del producer
    assert auth, errors
    expected = "Invalid username or password" if mechanism == "PLAIN" else "invalid credentials"
    assert expected in auth[0].str()


def test_kafka_python_wrong_password_is_rejected(secure_broker, pki, caplog):
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError

    caplog.set_level(logging.INFO, logger="kafka")
    producer = KafkaProducer(bootstrap_servers=secure_broker.bootstrap_for("SASL_SSL"), security_protocol="SASL_SSL",
                             sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="alice", sasl_plain_password="nope",
                             ssl_cafile=pki["ca"], max_block_ms=2000, api_version=(2, 5))
    try:
        with pytest.raises(KafkaTimeoutError):  # kafka-python keeps retrying; send() gives up
            producer.send("allowed", b"x").get(timeout=3)
    finally:
        producer.close(1)
    assert any("SaslAuthenticationFailedError" in r.getMessage() and "invalid credentials" in r.getMessage()
               for r in caplog.records)


# -- ACLs --------------------------------------------------------------------------------------------------
def test_acls_topic_and_group(secure_broker, pki):
    alice = _sasl_conf(secure_broker, pki, "alice", "SCRAM-SHA-256")
    # Metadata hides what alice may not describe; the broker list is the SASL_SSL listener's address.
    meta = AdminClient(alice).list_topics(timeout=10)
    assert "allowed" in meta.topics and "secret" not in meta.topics
    assert [(b.host, b.port) for b in meta.brokers.values()] == [secure_broker.listeners["SASL_SSL"]]
    # Produce to a denied topic: TOPIC_AUTHORIZATION_FAILED.
    errs = _produce(alice, "secret", [b"x"])
    assert [e.code() for e in errs] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    # Consume a denied topic (in an allowed group): TOPIC_AUTHORIZATION_FAILED.
    denied = Consumer({**alice, "group.id": "g", "auto.offset.reset": "earliest"})
    denied.subscribe(["secret"])
    try:
        err = None
        deadline = time.monotonic() + 10
        while err is None and time.monotonic() < deadline:
            msg = denied.poll(0.5)
            if msg is not None and msg.error():
                err = msg.error()
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    finally:
        denied.close()
    # Group g is allowed: subscribe, read, commit.
    marker = f"group-{uuid.uuid4().hex[:6]}".encode()
    assert _produce(alice, "allowed", [marker]) == [None]
    consumer = Consumer({**alice, "group.id": "g", "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["allowed"])
    try:
        seen: list = []
        deadline = time.monotonic() + 20
        while marker not in seen and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert not msg.error(), msg.error()
                seen.append(msg.value())
        assert marker in seen
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    # Another group: GROUP_AUTHORIZATION_FAILED.
    other = Consumer({**alice, "group.id": "other", "auto.offset.reset": "earliest"})
    other.subscribe(["allowed"])
    try:
        err = None
        deadline = time.monotonic() + 10
        while err is None and time.monotonic() < deadline:
            msg = other.poll(0.5)
            if msg is not None and msg.error():
                err = msg.error()
        assert err is not None and err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, err
    finally:
        other.close()


def test_acls_on_offsets_coordinator_broker_configs_and_producer_ids(secure_broker, pki):
    """The checks KafkaApis makes beyond produce/fetch/join: OffsetCommit needs Read and OffsetFetch Describe
    on each topic (FindCoordinator's Describe on the group: test_acls_topic_and_group's other group); broker DescribeConfigs DescribeConfigs on the
    cluster; an idempotent producer's InitProducerId Write on some topic or IdempotentWrite on the cluster."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ConfigResource

    alice = _sasl_conf(secure_broker, pki, "alice", "SCRAM-SHA-256")
    consumer = Consumer({**alice, "group.id": "g", "enable.auto.commit": False})
    try:
        with pytest.raises(KafkaException) as err:
            consumer.commit(offsets=[TopicPartition("secret", 0, 1)], asynchronous=False)
        assert err.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert consumer.commit(offsets=[TopicPartition("allowed", 0, 1)], asynchronous=False)[0].error is None
        fetched = consumer.committed([TopicPartition("secret", 0), TopicPartition("allowed", 0)], timeout=10)
        assert fetched[0].error is not None and fetched[0].error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert fetched[1].error is None and fetched[1].offset == 1
    finally:
        consumer.close()
    alice_admin = AdminClient(alice)  # held: a destroyed client fails its futures with _DESTROY
    future = alice_admin.describe_configs([ConfigResource("BROKER", "1")])
    with pytest.raises(KafkaException) as err:
        next(iter(future.values())).result(10)
    assert err.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    admin = AdminClient(_sasl_conf(secure_broker, pki, "admin", "SCRAM-SHA-256"))
    configs = next(iter(admin.describe_configs([ConfigResource("BROKER", "1")]).values())).result(10)
    assert configs["ssl.key.password"].is_sensitive and configs["ssl.key.password"].value is None
    # alice may write a topic, so her idempotent producer gets a producer id (the refusal: tests/protocol/test_acl.py).
    assert _produce({**alice, "enable.idempotence": True}, "allowed", [b"idempotent"]) == [None]


def test_super_user_and_live_acl_change(secure_broker, pki):
    admin = _sasl_conf(secure_broker, pki, "admin", "SCRAM-SHA-512")
    marker = f"secret-{uuid.uuid4().hex[:6]}".encode()
    assert _produce(admin, "secret", [marker]) == [None]
    values, errors = _consume_assigned(admin, "secret", marker)
    assert not errors and marker in values
    assert "secret" in AdminClient(admin).list_topics(timeout=10).topics
    # Granting alice Read on a prefix takes effect on the running broker (the ACL file is re-read).
    store = AclStore(secure_broker.data_dir)
    grant = [_allow("User:alice", "Read", "Topic", "sec", "PREFIXED")]
    store.add(grant)
    try:
        alice = _sasl_conf(secure_broker, pki, "alice", "PLAIN")
        values, errors = _consume_assigned(alice, "secret", marker)
        assert not errors and marker in values
        assert "secret" in AdminClient(alice).list_topics(timeout=10).topics  # Read implies Describe
    finally:
        store.remove(AclFilter(principal="User:alice", pattern_type="PREFIXED", name="sec"))


def test_ssl_listener_client_certificate_principal(secure_broker, pki):
    """SSL without SASL: a client certificate with CN=alice is User:alice; without one, User:ANONYMOUS."""
    ssl_conf = {"bootstrap.servers": secure_broker.bootstrap_for("SSL"), "security.protocol": "SSL",
                "ssl.ca.location": pki["ca"]}
    with_cert = {**ssl_conf, "ssl.certificate.location": pki["alice_cert"], "ssl.key.location": pki["alice_key"]}
    meta = AdminClient(with_cert).list_topics(timeout=10)
    assert [(b.host, b.port) for b in meta.brokers.values()] == [secure_broker.listeners["SSL"]]
    marker = f"ssl-{uuid.uuid4().hex[:6]}".encode()
    assert _produce(with_cert, "allowed", [marker]) == [None]
    values, errors = _consume_assigned(with_cert, "allowed", marker)
    assert not errors and marker in values
    errs = _produce(ssl_conf, "allowed", [b"anonymous"])
    assert [e.code() for e in errs] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


# -- the wire, with raw frames -----------------------------------------------------------------------------
def _connect(proc: BrokerProcess, listener: str) -> socket.socket:
    host, port = proc.listeners[listener]
    return socket.create_connection((host, port), timeout=60)


def test_raw_sasl_wire_behaviour(secure_broker):
    from kio.index import load_request_schema
    handshake_v1 = load_request_schema(17, 1)
    authenticate_v1 = load_request_schema(36, 1)
    # Any request other than ApiVersions/SaslHandshake before authentication closes the connection.
    with _connect(secure_broker, "SASL_PLAINTEXT") as s:
        s.sendall(request_frame(3, 1, 1, load_request_schema(3, 1)(topics=None)))
        assert closed_by_peer(s)
    # An unknown mechanism: UNSUPPORTED_SASL_MECHANISM with the enabled list, then closed.
    with _connect(secure_broker, "SASL_PLAINTEXT") as s:
        s.sendall(request_frame(17, 1, 1, handshake_v1(mechanism="GSSAPI")))
        resp = decode_response(17, 1, recv_frame(s))
        assert int(resp.error_code) == 33 and set(resp.mechanisms) == set(MECHANISMS)
        assert closed_by_peer(s)
    # A wrong PLAIN password: SASL_AUTHENTICATION_FAILED with a message, then closed.
    with _connect(secure_broker, "SASL_PLAINTEXT") as s:
        s.sendall(request_frame(17, 1, 1, handshake_v1(mechanism="PLAIN")))
        assert int(decode_response(17, 1, recv_frame(s)).error_code) == 0
        s.sendall(request_frame(36, 1, 2, authenticate_v1(auth_bytes=b"\0alice\0wrong")))
        resp = decode_response(36, 1, recv_frame(s))
        assert int(resp.error_code) == 58 and "Invalid username or password" in resp.error_message
        assert closed_by_peer(s)
    # The v0 handshake (KIP-152): raw size-prefixed tokens without Kafka headers, then normal requests.
    with _connect(secure_broker, "SASL_PLAINTEXT") as s:
        s.sendall(request_frame(17, 0, 1, load_request_schema(17, 0)(mechanism="PLAIN")))
        assert int(decode_response(17, 0, recv_frame(s)).error_code) == 0
        token = b"\0alice\0" + PASSWORDS["alice"].encode()
        s.sendall(struct.pack(">i", len(token)) + token)
        assert recv_frame(s) == b""  # PlainSaslServer's empty challenge
        s.sendall(request_frame(3, 1, 3, load_request_schema(3, 1)(topics=None)))
        names = {t.name for t in decode_response(3, 1, recv_frame(s)).topics}
        assert names == {"allowed"}  # authenticated as alice: secret stays hidden
    # v0 with a wrong password: the connection is closed without an answer.
    with _connect(secure_broker, "SASL_PLAINTEXT") as s:
        s.sendall(request_frame(17, 0, 1, load_request_schema(17, 0)(mechanism="PLAIN")))
        recv_frame(s)
        token = b"\0alice\0wrong"
        s.sendall(struct.pack(">i", len(token)) + token)
        assert closed_by_peer(s)


def test_plaintext_listener_is_anonymous(secure_broker):
    from kio.index import load_request_schema
    with _connect(secure_broker, "PLAINTEXT") as s:
        s.sendall(request_frame(3, 1, 1, load_request_schema(3, 1)(topics=None)))
        resp = decode_response(3, 1, recv_frame(s))
        assert resp.topics == ()  # User:ANONYMOUS may describe nothing
        assert [(b.host, b.port) for b in resp.brokers] == [secure_broker.listeners["PLAINTEXT"]]
        s.sendall(request_frame(17, 1, 2, load_request_schema(17, 1)(mechanism="PLAIN")))
        assert int(decode_response(17, 1, recv_frame(s)).error_code) == 34  # ILLEGAL_SASL_STATE


# -- connection limits ------------------------------------------------------------------------------------
def test_per_ip_connection_limit(tmp_path):
    from kio.index import load_request_schema
    proc = BrokerProcess(tmp_path / "data", {"max.connections.per.ip": "2"}).start()
    api_versions = request_frame(18, 0, 1, load_request_schema(18, 0)())
    try:
        # The fixture's readiness probe may still hold a slot until the broker notices its close.
        assert poll_until(lambda: established_connections(proc.port) == 0, 60)
        first, second = _connect_plain(proc), _connect_plain(proc)
        for s in (first, second):
            s.sendall(api_versions)
            assert recv_frame(s)
        third = _connect_plain(proc)
        assert closed_by_peer(third)
        third.close()
        first.close()
        deadline = time.monotonic() + 60
        while True:  # the broker notices the close asynchronously
            again = _connect_plain(proc)
            again.sendall(api_versions)
            try:
                assert recv_frame(again)
                break
            except (ConnectionError, OSError):
                again.close()
                assert time.monotonic() < deadline
                time.sleep(0.05)
        again.close()
        second.close()
    finally:
        proc.stop()
    assert "Rejected connection from 127.0.0.1" in proc.log_path.read_text()


def test_queued_max_requests_bounds_requests_in_flight(tmp_path):
    """queued.max.requests=1: while one connection's Fetch is parked in its long poll, another
    connection's request waits for it (its answer comes second), and is then served. The broker runs in this
    process so the test can see the moment the Fetch holds the only slot instead of guessing it."""
    from kio.index import load_request_schema

    from chronolog.protocol import codec
    from chronolog.server.embedded import EmbeddedBroker

    embedded = EmbeddedBroker(tmp_path / "data", configs={"queued.max.requests": "1"}).start()
    address = ("127.0.0.1", embedded.broker.port)
    try:
        with socket.create_connection(address, timeout=60) as a, socket.create_connection(address, timeout=60) as b:
            a.sendall(request_frame(3, 1, 1, codec.build(load_request_schema(3, 1), {"topics": [{"name": "idle"}]})))
            assert any(t.name == "idle" for t in decode_response(3, 1, recv_frame(a)).topics)
            # The Fetch must find the auto-created partition's log, or it is answered at once with an error.
            assert poll_until(lambda: ("idle", 0) in embedded.broker.state.log_manager._logs, 60)
            fetch = codec.build(load_request_schema(1, 4), {
                "replica_id": -1, "max_wait": 4000, "min_bytes": 1, "max_bytes": 1 << 20,
                "topics": [{"topic": "idle", "partitions": [{"partition": 0, "fetch_offset": 0,
                                                              "partition_max_bytes": 1 << 20}]}]})
            assert not embedded.broker._inflight.locked()
            a.sendall(request_frame(1, 4, 2, fetch))
            assert poll_until(embedded.broker._inflight.locked, 60)  # the Fetch holds the only slot
            b.sendall(request_frame(18, 0, 3, load_request_schema(18, 0)()))
            # b waits for the slot: no answer while the Fetch is parked (its max_wait is far longer than this
            # look; a broker without the bound answers ApiVersions at once).
            assert not readable(b, 0.5) and embedded.broker._inflight.locked()
            recv_frame(a)  # the parked Fetch answers at its max_wait
            assert recv_frame(b)  # and b is served right after
    finally:
        embedded.stop()


def _connect_plain(proc: BrokerProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proc.port), timeout=60)


# -- CLI ---------------------------------------------------------------------------------------------------
def _cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return chronolog_completed(*args, stdin=stdin)


def test_cli_users_and_acls(tmp_path):
    data = str(tmp_path / "data")
    added = _cli("users", "add", "carol", "--data-dir", data, "--password-stdin", stdin="pa55-word\n")
    assert added.returncode == 0, added.stderr
    path = tmp_path / "data" / "chronolog-credentials.json"
    assert path.stat().st_mode & 0o777 == 0o600
    raw = path.read_text()
    assert "pa55-word" not in raw and "carol" in raw
    creds = CredentialStore(tmp_path / "data")
    assert creds.verify_plain("carol", "pa55-word") and not creds.verify_plain("carol", "pa55-wore")
    listed = _cli("users", "list", "--data-dir", data, "--json")
    assert json.loads(listed.stdout) == {"carol": {"SCRAM-SHA-256": 4096, "SCRAM-SHA-512": 4096}}
    bad = _cli("users", "add", "dave", "--data-dir", data, "--mechanism", "MD5", "--password-stdin", stdin="x\n")
    assert bad.returncode != 0 and "unknown mechanism" in bad.stderr and "Traceback" not in bad.stderr
    empty = _cli("users", "add", "dave", "--data-dir", data, "--password-stdin", stdin="\n")
    assert empty.returncode != 0 and "Traceback" not in empty.stderr
    assert _cli("users", "delete", "carol", "--data-dir", data).returncode == 0
    assert CredentialStore(tmp_path / "data").users() == {}

    add = _cli("acls", "add", "--data-dir", data, "--allow-principal", "User:alice", "--operation", "read",
               "--operation", "write", "--topic", "logs", "--group", "g", "--resource-pattern-type", "prefixed",
               "--json")
    assert add.returncode != 0 and "Group only supports" in add.stderr  # write on a group is not a thing
    add = _cli("acls", "add", "--data-dir", data, "--allow-principal", "User:alice", "--operation", "read",
               "--topic", "logs", "--group", "g", "--resource-pattern-type", "prefixed", "--json")
    assert add.returncode == 0, add.stderr
    assert len(json.loads(add.stdout)) == 2
    deny = _cli("acls", "add", "--data-dir", data, "--deny-principal", "User:mallory", "--operation", "all",
                "--topic", "*")
    assert deny.returncode == 0, deny.stderr
    listed = json.loads(_cli("acls", "list", "--data-dir", data, "--principal", "User:alice", "--json").stdout)
    assert {(a["resource_type"], a["pattern_type"], a["name"], a["operation"]) for a in listed} == {
        ("Topic", "PREFIXED", "logs", "Read"), ("Group", "PREFIXED", "g", "Read")}
    removed = _cli("acls", "remove", "--data-dir", data, "--topic", "logs", "--json")
    assert removed.returncode == 0 and len(json.loads(removed.stdout)) == 1
    assert {b.name for b in AclStore(tmp_path / "data").list()} == {"g", "*"}
    bad = _cli("acls", "add", "--data-dir", data, "--allow-principal", "alice", "--operation", "read", "--topic", "t")
    assert bad.returncode != 0 and "Type:name" in bad.stderr and "Traceback" not in bad.stderr


# -- ACL admin APIs ---------------------------------------------------------------------------------------
def test_acl_admin_apis(secure_broker, pki):
    """CreateAcls / DescribeAcls / DeleteAcls through confluent-kafka's AdminClient: a super user manages
    ACLs (they land in the same file `chronolog acls` edits); alice, without ALTER on the cluster, cannot."""
    from confluent_kafka.admin import (
        AclBinding as CKBinding,
    )
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    admin = AdminClient(_sasl_conf(secure_broker, pki, "admin", "SCRAM-SHA-256"))
    binding = CKBinding(ResourceType.TOPIC, "api-", ResourcePatternType.PREFIXED, "User:zed", "*",
                        AclOperation.READ, AclPermissionType.ALLOW)
    for future in admin.create_acls([binding]).values():
        assert future.result(10) is None
    assert any(b.name == "api-" and b.principal == "User:zed" for b in AclStore(secure_broker.data_dir).list())
    match = AclBindingFilter(ResourceType.TOPIC, "api-topic", ResourcePatternType.MATCH, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    described = admin.describe_acls(match).result(10)
    assert [(b.name, b.principal, b.operation) for b in described] == [("api-", "User:zed", AclOperation.READ)]
    alice = AdminClient(_sasl_conf(secure_broker, pki, "alice", "SCRAM-SHA-256"))
    with pytest.raises(confluent_kafka.KafkaException) as denied:
        list(alice.create_acls([binding]).values())[0].result(10)
    assert denied.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # librdkafka drops DescribeAcls' top-level error (it answers an empty list); kafka-python raises it.
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        KafkaAdminClient,
        ResourcePatternFilter,
    )
    from kafka.admin import ACLResourcePatternType as KPPattern
    from kafka.admin import ResourceType as KPType
    from kafka.errors import ClusterAuthorizationFailedError

    kp_alice = KafkaAdminClient(bootstrap_servers=secure_broker.bootstrap_for("SASL_SSL"), security_protocol="SASL_SSL",
                                sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="alice",
                                sasl_plain_password=PASSWORDS["alice"], ssl_cafile=pki["ca"])
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            kp_alice.describe_acls(ACLFilter(principal=None, host="*", operation=ACLOperation.ANY,
                                             permission_type=ACLPermissionType.ANY,
                                             resource_pattern=ResourcePatternFilter(KPType.TOPIC, "api-topic",
                                                                                    KPPattern.MATCH)))
    finally:
        kp_alice.close()
    deleted = list(admin.delete_acls([match]).values())[0].result(10)
    assert [(b.name, b.principal) for b in deleted] == [("api-", "User:zed")]
    assert not any(b.principal == "User:zed" for b in AclStore(secure_broker.data_dir).list())
    # The audit trail: one INFO line per change, naming who made it (alice's refused attempt changed nothing).
    log_text = secure_broker.log_path.read_text()
    for action in ("CreateAcls", "DeleteAcls"):
        lines = [line for line in log_text.splitlines() if "chronolog.audit" in line and f" {action} " in line
                 and "'User:zed'" in line]
        assert len(lines) == 1 and lines[0].startswith("INFO chronolog.audit: User:admin from 127.0.0.1"), lines
        assert "Allow 'User:zed' Read from host '*' on Topic:PREFIXED:'api-'" in lines[0]


def test_scram_credential_admin_apis(secure_broker, pki):
    """AlterUserScramCredentials / DescribeUserScramCredentials (KIP-554): the client salts and hashes, the
    broker stores the derived keys; the new user logs in at once; alice (no ALTER on the cluster) cannot."""
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient(_sasl_conf(secure_broker, pki, "admin", "SCRAM-SHA-256"))
    upsert = UserScramCredentialUpsertion("frank", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                          b"frank-pw", b"some-salt-bytes!")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        assert future.result(10) is None
    described = admin.describe_user_scram_credentials(["frank"])["frank"].result(10)
    infos = described.scram_credential_infos
    assert [(i.mechanism, i.iterations) for i in infos] == [(ScramMechanism.SCRAM_SHA_512, 8192)]
    assert "frank-pw" not in (secure_broker.data_dir / "chronolog-credentials.json").read_text()
    frank = {**_sasl_conf(secure_broker, pki, "admin", "SCRAM-SHA-512"), "sasl.username": "frank",
             "sasl.password": "frank-pw"}
    AdminClient(frank).list_topics(timeout=10)  # authenticates (frank may describe nothing)
    alice = AdminClient(_sasl_conf(secure_broker, pki, "alice", "SCRAM-SHA-256"))
    with pytest.raises(confluent_kafka.KafkaException) as denied:
        list(alice.alter_user_scram_credentials([upsert]).values())[0].result(10)
    assert denied.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    delete = UserScramCredentialDeletion("frank", ScramMechanism.SCRAM_SHA_512)
    for future in admin.alter_user_scram_credentials([delete]).values():
        assert future.result(10) is None
    assert "frank" not in CredentialStore(secure_broker.data_dir).users()
    audit = [line for line in secure_broker.log_path.read_text().splitlines()
             if line.startswith("INFO chronolog.audit: User:admin") and "user 'frank'" in line]
    assert len(audit) == 2 and "set SCRAM-SHA-512 credential" in audit[0] and "deleted SCRAM-SHA-512" in audit[1]
    assert "frank-pw" not in secure_broker.log_path.read_text()
