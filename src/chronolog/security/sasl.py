"""The SASL state of one connection on a SASL_PLAINTEXT / SASL_SSL listener, after Kafka's
`SaslServerAuthenticator` (KIP-43, KIP-152):

    HANDSHAKE     ApiVersions and SaslHandshake only; anything else closes the connection
    AUTHENTICATE  after SaslHandshake v1: SaslAuthenticate requests only;
                  after SaslHandshake v0: raw size-prefixed SASL tokens with no Kafka header at all
    COMPLETE      normal requests, as the authenticated principal
    FAILED        the failure answer is sent, then the connection closes
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from chronolog.errors import ErrorCode
from chronolog.security.scram import (
    MECHANISMS,
    AuthenticationError,
    PlainServer,
    ScramCredential,
    ScramServer,
)

SUPPORTED_MECHANISMS = ("PLAIN", *MECHANISMS)
API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36

HANDSHAKE, AUTHENTICATE, COMPLETE, FAILED = "HANDSHAKE", "AUTHENTICATE", "COMPLETE", "FAILED"


class SaslSession:
    def __init__(self, enabled_mechanisms: Iterable[str],
                 lookup: Callable[[str, str], ScramCredential | None],
                 verify_plain: Callable[[str, str], bool]) -> None:
        self.enabled = [m for m in enabled_mechanisms if m in SUPPORTED_MECHANISMS]
        self._lookup = lookup
        self._verify_plain = verify_plain
        self.state = HANDSHAKE
        self.raw_tokens = False  # True after a v0 handshake: tokens arrive without Kafka headers
        self.mechanism: str | None = None
        self._server: ScramServer | PlainServer | None = None
        self.principal: str | None = None

    @property
    def complete(self) -> bool:
        return self.state == COMPLETE

    def rejects(self, api_key: int) -> str | None:
        """Why a Kafka request cannot be served in the current state (None: it can)."""
        if self.state == COMPLETE:
            return None
        if self.state == HANDSHAKE and api_key in (API_VERSIONS, SASL_HANDSHAKE):
            return None
        if self.state == AUTHENTICATE and not self.raw_tokens and api_key == SASL_AUTHENTICATE:
            return None
        phase = "handshake" if self.state == HANDSHAKE else "authentication"
        return f"Unexpected Kafka request of type {api_key} during SASL {phase}."

    def handshake(self, mechanism: str, version: int) -> int:
        """The SaslHandshake error code; UNSUPPORTED_SASL_MECHANISM also ends the connection."""
        if self.state != HANDSHAKE:
            return ErrorCode.ILLEGAL_SASL_STATE
        if mechanism not in self.enabled:
            self.state = FAILED
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM
        self.mechanism = mechanism
        if mechanism == "PLAIN":
            self._server = PlainServer(self._verify_plain)
        else:
            self._server = ScramServer(mechanism, self._lookup)
        self.raw_tokens = version == 0
        self.state = AUTHENTICATE
        return ErrorCode.NONE

    def authenticate(self, token: bytes) -> bytes:
        """One client token in, the server's token out; AuthenticationError ends the connection."""
        if self.state != AUTHENTICATE or self._server is None:
            self.state = FAILED
            raise AuthenticationError("Unexpected SASL token: no authentication in progress")
        try:
            answer = self._server.evaluate(bytes(token))
        except AuthenticationError:
            self.state = FAILED
            raise
        if self._server.complete:
            self.state = COMPLETE
            self.principal = f"User:{self._server.username}"
        return answer
