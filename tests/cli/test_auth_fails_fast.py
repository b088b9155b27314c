"""Wrong credentials or a TLS handshake that cannot succeed stop a tool at once with librdkafka's reason in
one line, as Kafka's tools stop on SaslAuthenticationException / SslAuthenticationException (neither is
retriable), instead of waiting out the client's request timeout while librdkafka retries. A broker that is
down keeps its own one line."""

from __future__ import annotations

import socket
import threading

import pytest

from tests.brokerproc import BrokerProcess
from tests.cli.conftest import assert_one_line_error, chronolog

INVALID = "SASL authentication error: Authentication failed during authentication due to invalid credentials " \
          "with SASL mechanism SCRAM-SHA-256"


@pytest.fixture(scope="module")
def sasl_plain_broker(tmp_path_factory):
    from chronolog.security.credentials import CredentialStore
    data = tmp_path_factory.mktemp("sasl-plain") / "data"
    data.mkdir()
    CredentialStore(data).upsert("alice", "SCRAM-SHA-256", "alice-secret")
    proc = BrokerProcess(data, {"listeners": "SASL_PLAINTEXT://127.0.0.1:0",
                                "sasl.enabled.mechanisms": "SCRAM-SHA-256"}).start()
    b = proc.bootstrap_for("SASL_PLAINTEXT")
    auth = ["-b", b, "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=SCRAM-SHA-256",
            "-X", "sasl.username=alice"]
    r = chronolog("topics", "create", "plain", *auth, "-X", "sasl.password=alice-secret")
    assert r.rc == 0, r.err
    yield proc, b, auth
    proc.stop()


@pytest.mark.parametrize("args", [
    ["topics", "list"],
    ["offsets", "plain", "--time", "1h ago"],
    ["consume", "plain", "--from", "1h ago"],
    ["lag", "--group", "g"],
    ["group-history", "--group", "g"],
    ["reset-offsets", "--group", "g", "--topic", "plain", "--to-earliest", "--execute"],
    ["produce", "plain"],
], ids=lambda a: a[0])
def test_a_wrong_password_is_one_line_naming_authentication(sasl_plain_broker, args):
    proc, b, auth = sasl_plain_broker
    line = assert_one_line_error(chronolog(*args, *auth, "-X", "sasl.password=wrong", stdin="x\n"),
                                 "authentication failed with ", INVALID)
    assert "(after " not in line and "/bootstrap" not in line  # librdkafka's broker name and timing are cut


def test_the_right_password_still_works_after_a_wrong_one(sasl_plain_broker):
    proc, b, auth = sasl_plain_broker
    r = chronolog("offsets", "plain", "--time", "1h ago", *auth, "-X", "sasl.password=alice-secret", "--json")
    assert r.rc == 0, r.err


def test_tls_to_a_plaintext_listener_is_one_line_naming_tls(sasl_plain_broker):
    proc, b, auth = sasl_plain_broker
    assert_one_line_error(chronolog("topics", "list", "-b", b, "-X", "security.protocol=SASL_SSL",
                                    "-X", "sasl.mechanism=SCRAM-SHA-256", "-X", "sasl.username=alice",
                                    "-X", "sasl.password=alice-secret"),
                          "TLS handshake failed with ", "SSL")


def test_a_closed_port_is_still_its_own_line():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        for args in (["topics", "list"], ["offsets", "plain", "--time", "1h ago"]):
            line = assert_one_line_error(chronolog(*args, "-b", f"127.0.0.1:{port}", "-X",
                                                   "security.protocol=SASL_PLAINTEXT"),
                                         f"cannot connect to 127.0.0.1:{port}", "is the broker running?")
            assert "authentication" not in line


def test_a_broker_that_never_answers_is_bounded_and_not_called_authentication():
    """TCP accepted, no Kafka answer: the connection-setup bound the user gave ends the wait, in one line."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        srv.settimeout(0.5)
        port = srv.getsockname()[1]
        held, stop = [], threading.Event()

        def accept() -> None:
            while not stop.is_set():
                try:
                    held.append(srv.accept()[0])
                except OSError:
                    continue

        t = threading.Thread(target=accept, daemon=True)
        t.start()
        try:
            line = assert_one_line_error(chronolog("topics", "list", "-b", f"127.0.0.1:{port}",
                                                   "-X", "socket.connection.setup.timeout.ms=2000"),
                                         f"cannot reach 127.0.0.1:{port}: no answer within 2 s")
            assert "authentication" not in line and "TLS" not in line
        finally:
            stop.set()
            t.join(5)
            for conn in held:
                conn.close()
