"""SCRAM server state machine against RFC 7677's SCRAM-SHA-256 test vector, a client we write from RFC
5802 for SHA-512, and the ways an exchange must fail."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from chronolog.errors import ErrorCode
from chronolog.security import scram
from chronolog.security.sasl import AUTHENTICATE, COMPLETE, FAILED, SaslSession

# RFC 7677 section 3.
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_credential() -> scram.ScramCredential:
    return scram.make_credential("SCRAM-SHA-256", "pencil", salt=SALT, iterations=4096)


def lookup_for(users: dict[str, scram.ScramCredential]):
    return lambda user, mechanism: users.get(user)


def test_rfc7677_vector() -> None:
    server = scram.ScramServer("SCRAM-SHA-256", lookup_for({"user": rfc_credential()}), server_nonce=SERVER_NONCE)
    assert server.evaluate(CLIENT_FIRST) == SERVER_FIRST
    assert not server.complete
    assert server.evaluate(CLIENT_FINAL) == SERVER_FINAL
    assert server.complete and server.username == "user"


def test_stored_credential_holds_no_password() -> None:
    cred = rfc_credential()
    assert b"pencil" not in repr(cred.to_json()).encode()
    assert scram.ScramCredential.from_json(cred.to_json()) == cred
    assert scram.verify_password("SCRAM-SHA-256", cred, "pencil")
    assert not scram.verify_password("SCRAM-SHA-256", cred, "pencil2")


def client_exchange(mechanism: str, server: scram.ScramServer, user: str, password: str,
                    nonce: str = "clientnonce123", repeat_client_nonce: bool = False) -> bytes:
    """A SCRAM client written from RFC 5802 section 3; returns the server-final message."""
    hash_name = scram.MECHANISMS[mechanism]
    bare = f"n={scram.encode_saslname(user)},r={nonce}"
    server_first = server.evaluate(f"n,,{bare}".encode()).decode()
    fields = dict(item.split("=", 1) for item in server_first.split(","))
    assert fields["r"].startswith(nonce) and len(fields["r"]) > len(nonce)
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), base64.b64decode(fields["s"]), int(fields["i"]))
    client_key = hmac.new(salted, b"Client Key", hash_name).digest()
    stored_key = hashlib.new(hash_name, client_key).digest()
    without_proof = f"c=biws,r={nonce if repeat_client_nonce else ''}{fields['r']}"
    auth = f"{bare},{server_first},{without_proof}".encode()
    signature = hmac.new(stored_key, auth, hash_name).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    final = server.evaluate(f"{without_proof},p={base64.b64encode(proof).decode()}".encode())
    server_key = hmac.new(salted, b"Server Key", hash_name).digest()
    assert final == b"v=" + base64.b64encode(hmac.new(server_key, auth, hash_name).digest())
    return final


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_round_trip_with_escaped_name(mechanism: str) -> None:
    cred = scram.make_credential(mechanism, "s3cret,=x", iterations=4096)
    assert len(cred.salt) == 32 and cred.iterations >= scram.MIN_ITERATIONS
    server = scram.ScramServer(mechanism, lookup_for({"a,b=c": cred}))
    client_exchange(mechanism, server, "a,b=c", "s3cret,=x")
    assert server.complete and server.username == "a,b=c"


def test_older_librdkafka_repeating_the_client_nonce_is_accepted() -> None:
    """librdkafka 1.x sends r=<client nonce><combined nonce>; Kafka's ScramSaslServer accepts a final
    nonce that ends with the server-first nonce (found with Debian's kcat)."""
    cred = scram.make_credential("SCRAM-SHA-256", "pw")
    server = scram.ScramServer("SCRAM-SHA-256", lookup_for({"u": cred}))
    client_exchange("SCRAM-SHA-256", server, "u", "pw", repeat_client_nonce=True)
    assert server.complete


def test_wrong_password_fails_at_the_proof() -> None:
    server = scram.ScramServer("SCRAM-SHA-256", lookup_for({"user": rfc_credential()}))
    with pytest.raises(scram.AuthenticationError, match="invalid credentials with SASL mechanism SCRAM-SHA-256"):
        client_exchange("SCRAM-SHA-256", server, "user", "wrong")
    assert not server.complete
    with pytest.raises(scram.AuthenticationError):  # the exchange is over
        server.evaluate(CLIENT_FINAL)


def test_unknown_user_looks_like_a_wrong_password() -> None:
    server = scram.ScramServer("SCRAM-SHA-256", lookup_for({}))
    first = server.evaluate(b"n,,n=nobody,r=abc").decode()
    assert first.startswith("r=abc") and ",s=" in first and first.endswith(",i=4096")
    again = scram.ScramServer("SCRAM-SHA-256", lookup_for({})).evaluate(b"n,,n=nobody,r=abc").decode()
    assert first.split(",")[1] == again.split(",")[1]  # a stable fake salt: no tell between attempts
    with pytest.raises(scram.AuthenticationError):
        server.evaluate(b"c=biws,r=" + first.split(",")[0][2:].encode() + b",p=" + base64.b64encode(b"x" * 32))


@pytest.mark.parametrize("first", [b"p=tls-unique,,n=user,r=abc", b"n,,n=,r=abc", b"garbage", b"\xff\xfe",
                                   b"n,a=other,n=user,r=abc"])
def test_bad_client_first(first: bytes) -> None:
    server = scram.ScramServer("SCRAM-SHA-256", lookup_for({"user": rfc_credential()}))
    with pytest.raises(scram.AuthenticationError):
        server.evaluate(first)


def test_nonce_and_channel_binding_are_checked() -> None:
    server = scram.ScramServer("SCRAM-SHA-256", lookup_for({"user": rfc_credential()}), server_nonce=SERVER_NONCE)
    server.evaluate(CLIENT_FIRST)
    with pytest.raises(scram.AuthenticationError):
        server.evaluate(CLIENT_FINAL.replace(b"k0,p=", b"k1,p="))
    server = scram.ScramServer("SCRAM-SHA-256", lookup_for({"user": rfc_credential()}), server_nonce=SERVER_NONCE)
    server.evaluate(CLIENT_FIRST)
    with pytest.raises(scram.AuthenticationError):
        server.evaluate(CLIENT_FINAL.replace(b"c=biws", b"c=eSws"))


def test_iterations_bounds() -> None:
    with pytest.raises(Exception, match="iterations"):
        scram.make_credential("SCRAM-SHA-256", "pw", iterations=4095)


def test_plain_server() -> None:
    creds = {"alice": scram.make_credential("SCRAM-SHA-512", "pw")}

    def verify(user: str, password: str) -> bool:
        cred = creds.get(user)
        return cred is not None and scram.verify_password("SCRAM-SHA-512", cred, password)

    ok = scram.PlainServer(verify)
    assert ok.evaluate(b"\0alice\0pw") == b"" and ok.complete and ok.username == "alice"
    assert scram.PlainServer(verify).evaluate(b"alice\0alice\0pw") == b""
    for token, message in [(b"\0alice\0nope", "Invalid username or password"),
                           (b"\0bob\0pw", "Invalid username or password"),
                           (b"bob\0alice\0pw", "authorization id that is different"),
                           (b"\0alice", "expected 3 tokens"), (b"\0\0pw", "username not specified"),
                           (b"\0alice\0", "password not specified")]:
        with pytest.raises(scram.AuthenticationError, match=message):
            scram.PlainServer(verify).evaluate(token)


def test_sasl_session_states() -> None:
    cred = rfc_credential()
    session = SaslSession(["SCRAM-SHA-256"], lookup_for({"user": cred}), lambda u, p: False)
    assert session.rejects(18) is None and session.rejects(17) is None
    assert "during SASL handshake" in session.rejects(3)
    assert session.handshake("PLAIN", 1) == ErrorCode.UNSUPPORTED_SASL_MECHANISM and session.state == FAILED
    session = SaslSession(["SCRAM-SHA-256"], lookup_for({"user": cred}), lambda u, p: False)
    assert session.handshake("SCRAM-SHA-256", 1) == 0 and session.state == AUTHENTICATE
    assert session.rejects(36) is None and session.rejects(18) is not None
    session._server._server_nonce = SERVER_NONCE
    assert session.authenticate(CLIENT_FIRST) == SERVER_FIRST
    assert session.authenticate(CLIENT_FINAL) == SERVER_FINAL
    assert session.state == COMPLETE and session.principal == "User:user" and session.rejects(3) is None
    raw = SaslSession(["SCRAM-SHA-256"], lookup_for({}), lambda u, p: False)
    raw.handshake("SCRAM-SHA-256", 0)
    assert raw.raw_tokens and raw.rejects(36) is not None
