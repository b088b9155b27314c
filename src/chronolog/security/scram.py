"""SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) as a sans-I/O server state machine, plus the
salted credential it checks against. Follows Kafka's `ScramSaslServer`, `ScramMessages` and
`ScramFormatter`: no SASLprep (Kafka hashes the UTF-8 bytes of the password as they are), channel
binding not supported (gs2 flag `n` or `y`), an authorization id must equal the user name, and at
least 4096 iterations (`ScramMechanism.minIterations`).

Only the salted keys are ever stored (StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey =
HMAC(SaltedPassword, "Server Key")): knowing them does not reveal the password, and StoredKey alone does
not let anyone log in."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from chronolog.errors import ChronologError

MECHANISMS: dict[str, str] = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS = 4096  # ScramMechanism.minIterations
MAX_ITERATIONS = 16384  # ScramMechanism.maxIterations
DEFAULT_ITERATIONS = 4096


class AuthenticationError(ChronologError):
    """Authentication failed; `str()` is the message safe to send to the client."""


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def to_json(self) -> dict:
        enc = base64.b64encode
        return {"salt": enc(self.salt).decode(), "iterations": self.iterations,
                "stored_key": enc(self.stored_key).decode(), "server_key": enc(self.server_key).decode()}

    @classmethod
    def from_json(cls, data: dict) -> ScramCredential:
        dec = base64.b64decode
        return cls(dec(data["salt"]), int(data["iterations"]), dec(data["stored_key"]), dec(data["server_key"]))


def _hash_name(mechanism: str) -> str:
    try:
        return MECHANISMS[mechanism]
    except KeyError:
        raise ChronologError(f"unknown SCRAM mechanism {mechanism!r}; expected one of "
                             f"{', '.join(MECHANISMS)}") from None


def _hmac(hash_name: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hash_name).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) of RFC 5802 is PBKDF2 with HMAC and the hash's own output length."""
    return hashlib.pbkdf2_hmac(_hash_name(mechanism), password.encode("utf-8"), salt, iterations)


def make_credential(mechanism: str, password: str, *, salt: bytes | None = None,
                    iterations: int = DEFAULT_ITERATIONS) -> ScramCredential:
    """A new credential; a random 32-byte salt unless one is given (tests use RFC 7677's)."""
    hash_name = _hash_name(mechanism)
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ChronologError(f"iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS} "
                             f"(ScramMechanism), got {iterations}")
    salt = secrets.token_bytes(32) if salt is None else salt
    salted = salted_password(mechanism, password, salt, iterations)
    client_key = _hmac(hash_name, salted, b"Client Key")
    return ScramCredential(salt, iterations, hashlib.new(hash_name, client_key).digest(),
                           _hmac(hash_name, salted, b"Server Key"))


def credential_from_salted(mechanism: str, salt: bytes, iterations: int, salted: bytes) -> ScramCredential:
    """What AlterUserScramCredentials sends (KIP-554): the client salts and hashes, the broker derives
    the keys, so the password never reaches the broker."""
    hash_name = _hash_name(mechanism)
    client_key = _hmac(hash_name, salted, b"Client Key")
    return ScramCredential(salt, iterations, hashlib.new(hash_name, client_key).digest(),
                           _hmac(hash_name, salted, b"Server Key"))


def verify_password(mechanism: str, credential: ScramCredential, password: str) -> bool:
    """Checks a clear password (SASL/PLAIN) against the stored SCRAM keys, in constant time."""
    hash_name = _hash_name(mechanism)
    salted = salted_password(mechanism, password, credential.salt, credential.iterations)
    stored = hashlib.new(hash_name, _hmac(hash_name, salted, b"Client Key")).digest()
    return hmac.compare_digest(stored, credential.stored_key)


# -- messages (ScramMessages) --------------------------------------------------------------------------
_SASLNAME = r"(?:[\x01-\x2B\x2D-\x3C\x3E-\x7F]|=2C|=3D)+"
_PRINTABLE = r"[\x21-\x2B\x2D-\x7E]+"
_CLIENT_FIRST = re.compile(rf"(?P<gs2>(?P<flag>[ny]),(?:a=(?P<authzid>{_SASLNAME}))?,)"
                           rf"(?P<bare>n=(?P<user>{_SASLNAME}),r=(?P<nonce>{_PRINTABLE})(?P<ext>,.*)?)$")
_CLIENT_FINAL = re.compile(rf"(?P<without_proof>c=(?P<cbind>[A-Za-z0-9+/=]+),r=(?P<nonce>{_PRINTABLE})(?:,.*?)?)"
                           r",p=(?P<proof>[A-Za-z0-9+/=]+)$")


def decode_saslname(name: str) -> str:
    """RFC 5802 5.1: ',' and '=' travel as '=2C' and '=3D'."""
    return name.replace("=2C", ",").replace("=3D", "=")


def encode_saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


CredentialLookup = Callable[[str, str], "ScramCredential | None"]


class ScramServer:
    """One SCRAM exchange, server side: `evaluate(client-first)` -> server-first, `evaluate(client-final)`
    -> server-final; any failure raises AuthenticationError and the exchange is over.

    An unknown user is not told apart from a wrong password: the exchange goes on with a salt derived
    from a per-process secret and fails at the proof (RFC 5802 section 9's advice); Kafka fails the first
    message instead, with the same generic message."""

    _fake_secret = secrets.token_bytes(32)

    def __init__(self, mechanism: str, lookup: CredentialLookup, *, server_nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self._hash = _hash_name(mechanism)
        self._lookup = lookup
        self._server_nonce = server_nonce or secrets.token_urlsafe(24)
        self._state = "first"
        self._credential: ScramCredential | None = None
        self._messages: tuple[str, str, str] | None = None  # client-first-bare, server-first, gs2 header
        self._nonce = ""
        self.username: str | None = None
        self.complete = False

    def _fail(self, reason: str) -> AuthenticationError:
        self._state = "failed"
        # KafkaAuthenticator never echoes SaslException details (they could reveal that a user exists).
        return AuthenticationError(f"Authentication failed during authentication due to invalid credentials "
                                   f"with SASL mechanism {self.mechanism}", reason)

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise self._fail("token is not UTF-8") from None
        if self._state == "first":
            return self._first(text)
        if self._state == "final":
            return self._final(text)
        raise self._fail(f"unexpected token in state {self._state}")

    def _first(self, text: str) -> bytes:
        m = _CLIENT_FIRST.match(text)
        if m is None:
            raise self._fail("invalid client-first-message")
        user = decode_saslname(m["user"])
        if m["authzid"] is not None and decode_saslname(m["authzid"]) != user:
            raise self._fail("authorization id differs from user name")
        ext = m["ext"] or ""
        if ext and "tokenauth=true" in ext:
            raise self._fail("delegation tokens are not supported")
        credential = self._lookup(user, self.mechanism)
        if credential is None:
            salt = _hmac(self._hash, self._fake_secret, user.encode())[:32]
            size = hashlib.new(self._hash).digest_size
            credential = ScramCredential(salt, DEFAULT_ITERATIONS, secrets.token_bytes(size),
                                         secrets.token_bytes(size))
        self._credential = credential
        self.username = user
        self._nonce = m["nonce"] + self._server_nonce
        server_first = (f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},"
                        f"i={credential.iterations}")
        self._messages = (m["bare"], server_first, m["gs2"])
        self._state = "final"
        return server_first.encode()

    def _final(self, text: str) -> bytes:
        m = _CLIENT_FINAL.match(text)
        if m is None:
            raise self._fail("invalid client-final-message")
        assert self._messages is not None and self._credential is not None
        bare, server_first, gs2 = self._messages
        # ScramSaslServer checks endsWith, not equality: librdkafka before 2.x sends the client nonce twice
        # (client nonce + the combined nonce). The proof covers the message as sent, and it must still end
        # with our fresh nonce, so nothing is lost; Debian's kcat and rsyslog's omkafka need this.
        if not m["nonce"].endswith(self._nonce):
            raise self._fail("nonce mismatch")
        try:
            cbind = base64.b64decode(m["cbind"], validate=True)
            proof = base64.b64decode(m["proof"], validate=True)
        except ValueError:
            raise self._fail("invalid base64") from None
        if cbind != gs2.encode():
            raise self._fail("channel binding mismatch")
        auth_message = f"{bare},{server_first},{m['without_proof']}".encode()
        cred = self._credential
        client_signature = _hmac(self._hash, cred.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise self._fail("invalid proof")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), cred.stored_key):
            raise self._fail("invalid proof")
        self._state = "done"
        self.complete = True
        server_signature = _hmac(self._hash, cred.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)


class PlainServer:
    """SASL/PLAIN (RFC 4616) as Kafka's `PlainSaslServer` reads it, checked against the SCRAM credential
    so that no clear password is ever stored. `verify(user, password) -> bool` is the lookup."""

    mechanism = "PLAIN"

    def __init__(self, verify: Callable[[str, str], bool]) -> None:
        self._verify = verify
        self.username: str | None = None
        self.complete = False

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise AuthenticationError("Authentication failed: unexpected token after completion")
        try:
            parts = token.decode("utf-8").split("\0")
        except UnicodeDecodeError:
            raise AuthenticationError("Invalid SASL/PLAIN response: not UTF-8") from None
        if len(parts) != 3:
            raise AuthenticationError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, user, password = parts
        self.username = user or None  # as sent, for the failed-login log line; `complete` says if proved
        if not user:
            raise AuthenticationError("Authentication failed: username not specified")
        if not password:
            raise AuthenticationError("Authentication failed: password not specified")
        if authzid and authzid != user:
            raise AuthenticationError("Authentication failed: Client requested an authorization id that is "
                                      "different from username")
        if not self._verify(user, password):
            raise AuthenticationError("Authentication failed: Invalid username or password")
        self.username = user
        self.complete = True
        return b""
