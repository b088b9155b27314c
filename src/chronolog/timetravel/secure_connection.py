"""TLS and SASL for the tools' own connections (`timetravel.connection`), from the client configs librdkafka
takes (`security.protocol`, `ssl.ca.location`, `ssl.certificate.location`, `ssl.key.location`,
`ssl.key.password`, `ssl.endpoint.identification.algorithm`, `sasl.mechanism`, `sasl.username`,
`sasl.password`), so a command that speaks the wire itself (share and streams groups) reaches a broker that
only listens on SASL_SSL as the librdkafka commands do.

The order is Kafka's client's (`SaslClientAuthenticator`): TLS, then ApiVersions, SaslHandshake v1 and
SaslAuthenticate v1 tokens (KIP-152). Mechanisms: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, Kafka's
`ScramSaslClient`); others (GSSAPI, OAUTHBEARER) are one line naming the librdkafka commands that have them.
Imported only by a connection with such configs: a plain one (`consume --format raw`) starts without ssl.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import socket
from typing import Any

from chronolog.errors import ChronologError
from chronolog.protocol import fetch_client as fc
from chronolog.security.scram import MECHANISMS as SCRAM_HASHES
from chronolog.security.scram import decode_saslname, encode_saslname, salted_password

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
PROTOCOLS = ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class AuthenticationFailed(ChronologError):
    """The broker refused the credentials (SASL_AUTHENTICATION_FAILED) or the exchange broke off."""


def security_protocol(conf: dict) -> str:
    """`security.protocol` in lower case (PLAINTEXT when unset); one line for a name Kafka does not have."""
    proto = str(conf.get("security.protocol", "plaintext")).lower()
    if proto not in PROTOCOLS:
        raise ChronologError(f"security.protocol={conf.get('security.protocol')}: use one of "
                             f"{', '.join(p.upper() for p in PROTOCOLS)}")
    return proto


def mechanism(conf: dict) -> str:
    """The SASL mechanism (librdkafka's `sasl.mechanism`, or `sasl.mechanisms`; GSSAPI by default, as there)."""
    name = str(conf.get("sasl.mechanism", conf.get("sasl.mechanisms", "GSSAPI"))).upper()
    if name not in MECHANISMS:
        raise ChronologError(f"sasl.mechanism={name} is not spoken by this command's own connection "
                             f"({', '.join(MECHANISMS)} are)")
    return name


def wrap_tls(sock: socket.socket, host: str, conf: dict) -> socket.socket:
    """`sock` after a TLS handshake, verified against `ssl.ca.location` (the system's CAs without it) and,
    unless `ssl.endpoint.identification.algorithm` is `none`, against `host` (librdkafka's default `https`)."""
    import ssl

    ctx = ssl.create_default_context(cafile=conf.get("ssl.ca.location") or None)
    if str(conf.get("ssl.endpoint.identification.algorithm", "https")).lower() == "none":
        ctx.check_hostname = False
    if conf.get("ssl.certificate.location"):
        ctx.load_cert_chain(conf["ssl.certificate.location"], conf.get("ssl.key.location") or None,
                            conf.get("ssl.key.password") or None)
    return ctx.wrap_socket(sock, server_hostname=host)


def authenticate(conn: Any, conf: dict) -> None:
    """SaslHandshake v1 and SaslAuthenticate v1 on `conn` (a `Connection` that has its API versions), as
    `sasl.username`/`sasl.password` with the configured mechanism; `AuthenticationFailed` in one line."""
    name = mechanism(conf)
    user, password = str(conf.get("sasl.username", "")), str(conf.get("sasl.password", ""))
    body = bytearray()
    fc.put_string(body, name)
    enabled = conn.call([fc.request_frame(SASL_HANDSHAKE, 1, conn.next_id(), conn.client_id, bytes(body))],
                        _read_handshake)
    if enabled is not None:
        raise AuthenticationFailed(f"{conn.where} does not enable SASL mechanism {name} (it enables "
                                   f"{', '.join(enabled) or 'none'})")
    if name == "PLAIN":
        _exchange(conn, f"\0{user}\0{password}".encode())
        return
    client = ScramClient(name, user, password)
    server_first = _exchange(conn, client.first())
    server_final = _exchange(conn, client.final(server_first))
    client.verify(server_final)


def _exchange(conn: Any, token: bytes) -> bytes:
    return conn.call([fc.request_frame(SASL_AUTHENTICATE, 1, conn.next_id(), conn.client_id,
                                       len(token).to_bytes(4, "big", signed=True) + token)], _read_authenticate)


def _read_handshake(frame: bytes, cid: int) -> list[str] | None:
    """None when the mechanism is enabled, else the mechanisms the broker enables."""
    r = fc.answer(frame, cid, "SaslHandshakeResponse v1")
    code = r.i16()
    enabled = [r.string() or "" for _ in range(r.count())]
    return None if code == 0 else enabled


def _read_authenticate(frame: bytes, cid: int) -> bytes:
    r = fc.answer(frame, cid, "SaslAuthenticateResponse v1")
    code, message = r.i16(), r.string()
    token = r.bytes() or b""
    if code:
        raise AuthenticationFailed(f"authentication failed: {message or f'error code {code}'}")
    return token


class ScramClient:
    """The client side of one SCRAM exchange (RFC 5802 without channel binding, `n,,`), as Kafka's
    `ScramSaslClient`: client-first, then client-final with the proof, then the server's signature checked."""

    def __init__(self, mechanism: str, user: str, password: str, nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self.hash = SCRAM_HASHES[mechanism]  # the broker's own table of SCRAM hashes
        self.password = password
        self.nonce = nonce or secrets.token_urlsafe(24)
        self.bare = f"n={encode_saslname(user)},r={self.nonce}"
        self.auth_message = b""
        self.server_key = b""

    def first(self) -> bytes:
        return f"n,,{self.bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        fields = self._fields(server_first)
        nonce, salt, iterations = fields.get("r", ""), fields.get("s"), fields.get("i", "")
        if not nonce.startswith(self.nonce) or salt is None or not iterations.isdigit():
            raise AuthenticationFailed(f"authentication failed: an invalid SCRAM server-first-message "
                                       f"({server_first[:80]!r})")
        salted = salted_password(self.mechanism, self.password, base64.b64decode(salt), int(iterations))
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={nonce}"
        self.auth_message = f"{self.bare},{server_first.decode()},{without_proof}".encode()
        client_key = self._hmac(salted, b"Client Key")
        signature = self._hmac(hashlib.new(self.hash, client_key).digest(), self.auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self.server_key = self._hmac(salted, b"Server Key")
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        fields = self._fields(server_final)
        if "e" in fields:
            raise AuthenticationFailed(f"authentication failed: {decode_saslname(fields['e'])}")
        want = base64.b64encode(self._hmac(self.server_key, self.auth_message)).decode()
        if not hmac.compare_digest(fields.get("v", ""), want):
            raise AuthenticationFailed("authentication failed: the server's SCRAM signature is wrong")

    def _hmac(self, key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, self.hash).digest()

    @staticmethod
    def _fields(message: bytes) -> dict[str, str]:
        text = message.decode("utf-8", "replace")
        return dict(part.split("=", 1) for part in text.split(",") if "=" in part)
