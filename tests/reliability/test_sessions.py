"""SASL sessions end to end: the failed-login delay (KIP-306) and re-authentication (KIP-368), against a
broker subprocess with a SASL_PLAINTEXT listener, driven by confluent-kafka (librdkafka re-authenticates
since 2.2) and by raw frames with a small SCRAM client (for what clients hide: the held-back answer, the
session lifetime, a principal change on re-authentication)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import socket
import time
import uuid

import pytest

from chronolog.security.credentials import CredentialStore
from tests.brokerproc import BrokerProcess
from tests.frames import decode_response, recv_frame, request_frame
from tests.waiting import closed_by_peer, poll_until

confluent_kafka = pytest.importorskip("confluent_kafka")
kio = pytest.importorskip("kio")
from confluent_kafka import Producer  # noqa: E402

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]

DELAY_MS = 100
REAUTH_MS = 2000
PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret"}


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory):
    data = tmp_path_factory.mktemp("sessions") / "data"
    data.mkdir()
    creds = CredentialStore(data)
    for user, password in PASSWORDS.items():
        creds.upsert(user, "SCRAM-SHA-256", password)
    proc = BrokerProcess(data, {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "connections.failed.authentication.delay.ms": str(DELAY_MS),
        "connections.max.reauth.ms": str(REAUTH_MS),
    }).start()
    yield proc
    proc.stop()


# -- raw frames and a SCRAM client ------------------------------------------------------------------------
def _call(sock: socket.socket, api_key: int, version: int, **fields):
    from kio.index import load_request_schema
    sock.sendall(request_frame(api_key, version, 7, load_request_schema(api_key, version)(**fields)))
    return decode_response(api_key, version, recv_frame(sock))


def _connect(proc: BrokerProcess) -> socket.socket:
    host, port = proc.listeners["SASL_PLAINTEXT"]
    return socket.create_connection((host, port), timeout=60)


def _scram_login(sock: socket.socket, user: str, password: str, auth_version: int = 1):
    """SaslHandshake v1 + SCRAM-SHA-256 over SaslAuthenticate (RFC 5802, client side): the last answer."""
    assert int(_call(sock, 17, 1, mechanism="SCRAM-SHA-256").error_code) == 0
    nonce = secrets.token_urlsafe(18)
    bare = f"n={user},r={nonce}"
    first = _call(sock, 36, auth_version, auth_bytes=f"n,,{bare}".encode())
    if int(first.error_code):
        return first
    server_first = bytes(first.auth_bytes).decode()
    attrs = dict(item.split("=", 1) for item in server_first.split(","))
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    without_proof = f"c={base64.b64encode(b'n,,').decode()},r={attrs['r']}"
    auth_message = f"{bare},{server_first},{without_proof}".encode()
    signature = hmac.new(hashlib.sha256(client_key).digest(), auth_message, "sha256").digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True))).decode()
    return _call(sock, 36, auth_version, auth_bytes=f"{without_proof},p={proof}".encode())


def _ms(value) -> int:
    """kio reads int64 milliseconds as a timedelta."""
    return round(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)


def _log_text(proc: BrokerProcess) -> str:
    return proc.log_path.read_text(errors="replace")


# -- KIP-306 -------------------------------------------------------------------------------------------
def test_failed_logins_are_held_back_and_logged_once(sasl_broker):
    """20 wrong SCRAM logins by a client that hangs up as soon as it has the answer take at least 20 times
    connections.failed.authentication.delay.ms, because the answer itself waits; each is logged once at
    INFO with peer, listener, mechanism and the user name, never the password."""
    guesser = f"guess-{uuid.uuid4().hex[:8]}"
    waited = []
    started = time.monotonic()
    for _attempt in range(20):
        with _connect(sasl_broker) as s:
            assert int(_call(s, 17, 1, mechanism="SCRAM-SHA-256").error_code) == 0
            first = _call(s, 36, 1, auth_bytes=f"n,,n={guesser},r=abcdefgh".encode())
            server_nonce = dict(i.split("=", 1) for i in bytes(first.auth_bytes).decode().split(","))["r"]
            sent = time.monotonic()
            answer = _call(s, 36, 1, auth_bytes=f"c=biws,r={server_nonce},p={'A' * 44}".encode())
            waited.append(time.monotonic() - sent)
            assert int(answer.error_code) == 58
    elapsed = time.monotonic() - started
    assert elapsed >= 20 * DELAY_MS / 1000.0
    assert min(waited) >= DELAY_MS / 1000.0  # the answer, not only the close, is delayed
    pattern = re.compile(rf"INFO \S+: Failed authentication with /127\.0\.0\.1:\d+ \(listener SASL_PLAINTEXT, "
                         rf"mechanism SCRAM-SHA-256, user '{guesser}'\): .*invalid credentials")
    assert poll_until(lambda: len(pattern.findall(_log_text(sasl_broker))) >= 20, 60)
    assert len(pattern.findall(_log_text(sasl_broker))) == 20

    # PLAIN carries the password in its token: the log names the user, never the password.
    with _connect(sasl_broker) as s:
        assert int(_call(s, 17, 1, mechanism="PLAIN").error_code) == 0
        assert int(_call(s, 36, 1, auth_bytes=b"\0alice\0hunter2-wrong").error_code) == 58
        assert closed_by_peer(s)
    assert poll_until(lambda: "mechanism PLAIN, user 'alice'" in _log_text(sasl_broker), 60)
    assert "hunter2" not in _log_text(sasl_broker)


# -- KIP-368 -------------------------------------------------------------------------------------------
def test_session_lifetime_and_reauthentication_on_the_wire(sasl_broker):
    with _connect(sasl_broker) as s:
        final = _scram_login(s, "alice", PASSWORDS["alice"])
        assert int(final.error_code) == 0 and _ms(final.session_lifetime) == REAUTH_MS
        # Re-authentication on the same connection, then ordinary requests go on.
        again = _scram_login(s, "alice", PASSWORDS["alice"])
        assert int(again.error_code) == 0 and _ms(again.session_lifetime) == REAUTH_MS
        assert int(_call(s, 3, 1, topics=None).brokers[0].port) == sasl_broker.listeners["SASL_PLAINTEXT"][1]
        # Another user's credentials cannot change the connection's principal (ensurePrincipalUnchanged).
        changed = _scram_login(s, "bob", PASSWORDS["bob"])
        assert int(changed.error_code) == 58
        assert "Cannot change principals during re-authentication from User.alice: User.bob" in changed.error_message
        assert closed_by_peer(s)


def test_client_without_reauthentication_is_closed_after_the_lifetime(sasl_broker):
    """SaslAuthenticate v0 cannot carry a lifetime: such a client may not re-authenticate (its handshake
    is refused) and its connection ends at its first request after connections.max.reauth.ms."""
    with _connect(sasl_broker) as s:
        assert int(_scram_login(s, "alice", PASSWORDS["alice"], auth_version=0).error_code) == 0
        assert int(_call(s, 17, 1, mechanism="SCRAM-SHA-256").error_code) == 34  # ILLEGAL_SASL_STATE
        start = time.monotonic()

        def metadata_refused() -> bool:
            try:
                _call(s, 3, 1, topics=None)
                return False
            except (EOFError, ConnectionResetError):
                return True
        assert poll_until(metadata_refused, REAUTH_MS / 1000.0 + 60, interval=0.2)
        assert time.monotonic() - start >= REAUTH_MS / 1000.0 - 0.5  # it did serve until the lifetime


def test_librdkafka_reauthenticates_and_is_closed_after_its_user_is_deleted(sasl_broker):
    """A librdkafka producer keeps producing across several session lifetimes without an error (it
    re-authenticates; without it the broker would close its connection); once its user is deleted, the
    next re-authentication fails and its connection is closed within one lifetime."""
    errors: list = []
    delivered: list = []
    log_start = len(_log_text(sasl_broker))
    producer = Producer({"bootstrap.servers": sasl_broker.bootstrap_for("SASL_PLAINTEXT"),
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                         "sasl.username": "carol", "sasl.password": PASSWORDS["carol"], "error_cb": errors.append,
                         "linger.ms": 0, "message.timeout.ms": 10000, "reconnect.backoff.ms": 5000,
                         "reconnect.backoff.max.ms": 10000})
    start = time.monotonic()
    deadline = start + 3.5 * REAUTH_MS / 1000.0
    sent = 0
    while time.monotonic() < deadline and sent < 400:  # 20 records a second
        if time.monotonic() >= start + sent * 0.05:
            producer.produce("reauth", b"x", on_delivery=lambda err, msg: delivered.append(err))
            sent += 1
        producer.poll(0.01)
    producer.flush(15)
    assert errors == [] and len(delivered) == sent and set(delivered) == {None}
    assert "SASL session expired" not in _log_text(sasl_broker)[log_start:]

    CredentialStore(sasl_broker.data_dir).delete("carol")
    failed = re.compile(r"INFO \S+: Failed re-authentication with /127\.0\.0\.1:\d+ \(listener SASL_PLAINTEXT, "
                        r"mechanism SCRAM-SHA-256, user 'carol'\)")

    def reauth_failed() -> bool:
        producer.poll(0.05)
        return failed.search(_log_text(sasl_broker)) is not None
    # KIP-368's promise: at the next re-authentication, within one lifetime of the deletion (the bound is
    # generous: a loaded machine delays librdkafka's re-authentication too; it only ends a hung run).
    assert poll_until(reauth_failed, REAUTH_MS / 1000.0 + 60)
    assert poll_until(lambda: producer.poll(0.05) is not None and
                      any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors), 10), errors
