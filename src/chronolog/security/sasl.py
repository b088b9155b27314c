"""The SASL state of one connection on a SASL_PLAINTEXT / SASL_SSL listener, after Kafka's
`SaslServerAuthenticator` (KIP-43, KIP-152):

    HANDSHAKE     ApiVersions and SaslHandshake only; anything else closes the connection
    AUTHENTICATE  after SaslHandshake v1: SaslAuthenticate requests only;
                  after SaslHandshake v0: raw size-prefixed SASL tokens with no Kafka header at all
    COMPLETE      normal requests, as the authenticated principal; a SaslHandshake here begins a
                  re-authentication (KIP-368) if the client used SaslAuthenticate v1+, back to HANDSHAKE
    FAILED        the failure answer is held for connections.failed.authentication.delay.ms (KIP-306),
                  sent, then the connection closes
"""

from __future__ import annotations

import time
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
        self.user: str | None = None  # the user name the client sent, for the failed-login log line
        self.failure: str | None = None  # why it failed (safe to log: never a password or a proof)
        # KIP-368: SaslAuthenticate v1+ tells the broker the client can re-authenticate; then
        # `expires_at` (time.monotonic()) is when an authenticated session that did not re-authenticate ends.
        self.supports_reauth = False
        self.expires_at: float | None = None
        self._previous: tuple[str, str] | None = None  # (mechanism, principal) while re-authenticating
        self._bad_mechanism: str | None = None

    @property
    def reauthenticating(self) -> bool:
        return self._previous is not None

    def begin_reauthentication(self) -> bool:
        """A SaslHandshake on an authenticated connection (`KafkaChannel.maybeBeginServerReauthentication`):
        False when the client never said it can re-authenticate (the handshake is then refused)."""
        if self.state != COMPLETE or not self.supports_reauth or self.mechanism is None or self.principal is None:
            return False
        self._previous = (self.mechanism, self.principal)
        self.state, self._server, self.user, self._bad_mechanism = HANDSHAKE, None, None, None
        return True

    def expired(self, now: float | None = None) -> bool:
        """Is the authenticated session past its lifetime (`serverAuthenticationSessionExpired`)?"""
        return (self.state == COMPLETE and self.expires_at is not None
                and (time.monotonic() if now is None else now) >= self.expires_at)

    def start_lifetime(self, max_reauth_ms: int) -> int:
        """`connections.max.reauth.ms` after a completed (re-)authentication: the session lifetime sent
        to the client (0: none), as `ReauthInfo.calcCompletionTimesAndReturnSessionLifetimeMs` (SCRAM and
        PLAIN credentials do not expire, so the config alone decides)."""
        if max_reauth_ms <= 0:
            self.expires_at = None
            return 0
        self.expires_at = time.monotonic() + max_reauth_ms / 1000.0
        return max_reauth_ms

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
            self.failure = f"Unsupported SASL mechanism {mechanism}"
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM
        if self._previous is not None and mechanism != self._previous[0]:
            # ReauthInfo.saslMechanismUnchanged: the handshake is answered, the next token fails.
            self._bad_mechanism = (f"SASL mechanism '{mechanism}' requested by client is not supported for "
                                   f"re-authentication of mechanism '{self._previous[0]}'")
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
            return self._fail(AuthenticationError("Unexpected SASL token: no authentication in progress"))
        if self._bad_mechanism is not None:
            return self._fail(AuthenticationError(self._bad_mechanism))
        try:
            answer = self._server.evaluate(bytes(token))
        except AuthenticationError as exc:
            return self._fail(exc)
        finally:
            self.user = self._server.username if self.user is None else self.user
        if self._server.complete:
            principal = f"User:{self._server.username}"
            if self._previous is not None and principal != self._previous[1]:
                # ReauthInfo.ensurePrincipalUnchanged
                old, new = self._previous[1].split(":", 1), principal.split(":", 1)
                return self._fail(AuthenticationError(f"Cannot change principals during re-authentication from "
                                                      f"{old[0]}.{old[1]}: {new[0]}.{new[1]}"))
            self.state = COMPLETE
            self.principal = principal
            self._previous = None
        return answer

    def _fail(self, exc: AuthenticationError) -> bytes:
        self.state = FAILED
        self.failure = str(exc.args[0]) + (f" ({exc.args[1]})" if len(exc.args) > 1 else "")
        raise exc
