"""The audit trail of a shared broker: one INFO line on the `chronolog.audit` logger for each change to who may
do what, made over the Kafka protocol (client quotas, ACLs, SCRAM credentials), naming the principal, its
address and client id, and what changed. Failed logins have their own line (security.sessions). Values that
are secrets (salts, salted passwords) are never written; user and client names are quoted, since they are
client bytes and must not forge lines."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("chronolog.audit")


def audit(ctx: Any, action: str, detail: str) -> None:
    log.info("%s from %s (client id %r): %s %s", getattr(ctx, "principal", "?"), getattr(ctx, "client_host", "?"),
             getattr(ctx, "client_id", None), action, detail)
