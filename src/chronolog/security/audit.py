"""The audit trails of a shared broker.

- `chronolog.audit`: one INFO line for each change to who may do what, made over the Kafka protocol (client
  quotas, ACLs, SCRAM credentials), naming the principal, its address and client id, and what changed.
  Values that are secrets (salts, salted passwords) are never written; user and client names are quoted,
  since they are client bytes and must not forge lines. Failed logins have their own line
  (security.sessions).
- `chronolog.authorizer`: each authorization decision of the ACL authorizer, as Kafka's
  `kafka.authorizer.logger` has them (`AclAuthorizer.logAuditMessage`): a denied operation the client asked
  for at INFO, an allowed one at DEBUG. A check that only filters what a client is shown (Metadata for all
  topics, OffsetFetch for all of a group's topics: Kafka's `logIfDenied = false`) is not logged at INFO.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("chronolog.audit")
authorizer_log = logging.getLogger("chronolog.authorizer")

_REQUEST_NAMES: dict[int, str] = {}


def audit(ctx: Any, action: str, detail: str) -> None:
    log.info("%s from %s (client id %r): %s %s", getattr(ctx, "principal", "?"), getattr(ctx, "client_host", "?"),
             getattr(ctx, "client_id", None), action, detail)


def authorization(ctx: Any, allowed: bool, operation: str, resource_type: str, name: str,
                  log_if_denied: bool = True) -> None:
    """One decision in Kafka's words, e.g. `Principal = User:bob is Denied Operation = Write from host =
    127.0.0.1 on resource = Topic:LITERAL:payments for request = Produce with resourceRefCount = 1`
    (operation and resource type by their Kafka names; names a client sent are escaped, never raw)."""
    level = logging.DEBUG if allowed else logging.INFO if log_if_denied else None
    if level is None or not authorizer_log.isEnabledFor(level):
        return
    from chronolog.security.acl import operation as canonical_operation
    from chronolog.security.acl import resource_type as canonical_type
    authorizer_log.log(
        level, "Principal = %s is %s Operation = %s from host = %s on resource = %s:LITERAL:%s for request = %s "
        "with resourceRefCount = 1", _safe(getattr(ctx, "principal", "?")), "Allowed" if allowed else "Denied",
        canonical_operation(operation), getattr(ctx, "client_host", "?"), canonical_type(resource_type),
        _safe(name), request_name(getattr(ctx, "api_key", -1), getattr(ctx, "api_version", 0)))


def request_name(api_key: int, version: int) -> str:
    """Kafka's `ApiKeys` name of a request (`Produce`, `InitProducerId`)."""
    name = _REQUEST_NAMES.get(api_key)
    if name is None:
        from kio.index import load_request_schema
        name = str(api_key)  # an API kio does not know: its number
        for v in (version, *range(20)):
            try:
                name = load_request_schema(api_key, v).__name__.removesuffix("Request")
                break
            except Exception:
                continue
        _REQUEST_NAMES[api_key] = name
    return name


def _safe(text: str) -> str:
    """Client bytes on one line: control characters escaped so that a name cannot forge log lines."""
    text = str(text)
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")
