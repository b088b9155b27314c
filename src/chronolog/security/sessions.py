"""What the broker does around a connection's SASL session, kept out of the connection loop: the one INFO
line per failed login (Kafka's `Selector` logs "Failed authentication with ..." at INFO, KIP-306) and the
end of a session that was not re-authenticated in time (KIP-368)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

log = logging.getLogger("chronolog.server.authentication")

SASL_HANDSHAKE = 17


def _peer_text(peer: Any) -> str:
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"/{peer[0]}:{peer[1]}"
    return f"/{peer}"


def log_failed_login(peer: Any, listener: str, session: Any, reason: str | None = None) -> None:
    """One INFO line: peer address and port, listener, mechanism and the user name as the client sent it
    (repr: a name is client bytes and must not forge log lines); never a password, token or proof."""
    mechanism = getattr(session, "mechanism", None) or "-"
    user = getattr(session, "user", None)
    why = reason or getattr(session, "failure", None) or "authentication failed"
    what = "re-authentication" if getattr(session, "reauthenticating", False) else "authentication"
    log.info("Failed %s with %s (listener %s, mechanism %s, user %s): %s", what, _peer_text(peer), listener,
             mechanism, repr(user) if user is not None else "-", why)


def expired(session: Any, frame: bytes) -> bool:
    """Must this request close the connection because the session lifetime passed? As Kafka's
    `SocketServer.Processor`: a SaslHandshake from a client that can re-authenticate begins the
    re-authentication instead; any other request on an expired session closes the connection."""
    if session is None or not session.expired():
        return False
    api_key = int.from_bytes(frame[0:2], "big", signed=True) if len(frame) >= 2 else -1
    return not (api_key == SASL_HANDSHAKE and session.supports_reauth)


async def linger(frames: Any, timeout: float) -> None:
    """After the answer to a failed login: wait (at most `timeout`) for the client to hang up, discarding
    what it sends, so the answer is read before the close. The answer itself was already held back, so
    a client that hangs up at once is not slowed further; one that does not is closed after `timeout`."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(timeout):
            while True:
                await frames.read_frame(0, 1 << 20)
