"""SaslHandshake (API 17, v0-1) and SaslAuthenticate (API 36, v0-2), KIP-43 and KIP-152. The exchange
itself is `chronolog.security.sasl.SaslSession` on the connection; these handlers translate requests.

On a connection that is not authenticating (a non-SASL listener, or after authentication completed)
both answer ILLEGAL_SASL_STATE, as `KafkaApis.handleSaslHandshakeRequest` / `handleSaslAuthenticateRequest`
do. A rejected mechanism or failed authentication is answered and the connection then closed
(`SaslServerAuthenticator` sends the response, then raises); the broker logs it and holds the answer back
for connections.failed.authentication.delay.ms (KIP-306). A SaslHandshake v1 on an authenticated connection
whose client used SaslAuthenticate v1+ begins a re-authentication (KIP-368); SaslAuthenticate's
session_lifetime_ms carries connections.max.reauth.ms."""

from __future__ import annotations

import logging
from typing import Any

from chronolog.errors import ErrorCode
from chronolog.protocol.registry import RequestContext, register

log = logging.getLogger(__name__)


def _session(ctx: RequestContext) -> Any:
    return ctx.connection.sasl if ctx.connection is not None else None


@register(17, 0, 1)
def sasl_handshake(req: Any, ctx: RequestContext) -> dict:
    from chronolog.security.sasl import HANDSHAKE  # (with SCRAM's hashing) by SASL listeners only

    session = _session(ctx)
    if session is not None and session.complete and ctx.api_version >= 1:
        session.begin_reauthentication()  # KIP-368 (refused below unless the client can re-authenticate)
    if session is None or session.state != HANDSHAKE:
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}
    code = session.handshake(req.mechanism, ctx.api_version)
    if code:
        ctx.connection.close_after_response = True  # the broker logs it and holds the answer (KIP-306)
    return {"error_code": code, "mechanisms": list(session.enabled)}


@register(36, 0, 2)
def sasl_authenticate(req: Any, ctx: RequestContext) -> dict:
    from chronolog.security.sasl import AUTHENTICATE
    from chronolog.security.scram import AuthenticationError

    session = _session(ctx)
    if session is None or session.state != AUTHENTICATE or session.raw_tokens:
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "auth_bytes": b"", "session_lifetime": 0,
                "error_message": "SaslAuthenticate request received after successful authentication"
                if session is not None and session.complete else "Unexpected SaslAuthenticate request"}
    if ctx.api_version >= 1:  # SaslServerAuthenticator: v1+ means the client can re-authenticate
        session.supports_reauth = True
    try:
        token = session.authenticate(bytes(req.auth_bytes))
    except AuthenticationError as exc:
        ctx.connection.close_after_response = True  # the broker logs it and holds the answer (KIP-306)
        return {"error_code": ErrorCode.SASL_AUTHENTICATION_FAILED, "error_message": str(exc.args[0]),
                "auth_bytes": b"", "session_lifetime": 0}
    lifetime = 0
    if session.complete:
        ctx.connection.principal = session.principal
        lifetime = session.start_lifetime(int(ctx.broker_config["connections.max.reauth.ms"]))
    return {"error_code": 0, "error_message": None, "auth_bytes": token, "session_lifetime": lifetime}
