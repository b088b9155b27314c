"""DescribeClientQuotas (API 48) and AlterClientQuotas (API 49), v0-1 (KIP-546), over the broker's quota file
(security.quotas). As Kafka's `ControllerApis`: Describe needs DESCRIBE_CONFIGS and Alter ALTER_CONFIGS on the
cluster (CLUSTER_AUTHORIZATION_FAILED otherwise); a bad entity, key or value answers INVALID_REQUEST for its
entry and leaves that entity as it was, the valid entries apply (`ClientQuotaControlManager`). A null entity
name is the default entity."""

from __future__ import annotations

from typing import Any

from chronolog.errors import ChronologError, ErrorCode
from chronolog.protocol.registry import RequestContext, register
from chronolog.security import quotas as q
from chronolog.security.audit import audit

CLUSTER = "kafka-cluster"
EXACT, DEFAULT, SPECIFIED = 0, 1, 2  # ClientQuotaFilterComponent match types


def _store(ctx: RequestContext) -> q.QuotaStore | None:
    return getattr(getattr(ctx.state, "quotas", None), "store", None)


def _matches(entity: q.Entity, components: list[tuple[str, int, str | None]], strict: bool) -> bool:
    names = dict(entity)
    for etype, match_type, match in components:
        if etype not in names:
            return False
        name = names[etype]
        if match_type == EXACT and name != match:
            return False
        if match_type == DEFAULT and name is not None:
            return False
        if match_type == SPECIFIED and name is None:
            return False
    return not strict or len(names) == len(components)


@register(48, 0, 1)
def describe_client_quotas(req: Any, ctx: RequestContext) -> dict:
    def error(code: int, message: str) -> dict:
        return {"throttle_time": 0, "error_code": code, "error_message": message, "entries": None}
    if not ctx.allowed("describe_configs", "cluster", CLUSTER):
        return error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    store = _store(ctx)
    try:
        components = _filter_components(req.components)
    except _Refused as exc:
        return error(exc.code, str(exc))
    try:
        found = store.all() if store is not None else {}
    except ChronologError as exc:
        return error(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))
    entries = [{"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                "values": [{"key": k, "value": v} for k, v in sorted(values.items())]}
               for entity, values in found.items() if _matches(entity, components, bool(req.strict))]
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "entries": entries}


def _filter_components(wire: Any) -> list[tuple[str, int, str | None]]:
    """`ClientQuotasImage.describe`'s checks, in its order: each component in turn (empty type, a type twice,
    a type Kafka does not know (UNSUPPORTED_VERSION), the match type and its match string), then ip beside
    user or client-id."""
    components: list[tuple[str, int, str | None]] = []
    for c in wire:
        etype, match_type, match = c.entity_type, int(c.match_type), c.match
        if not etype:
            raise _Refused(ErrorCode.INVALID_REQUEST, "Invalid empty entity type.")
        if etype in {t for t, _, _ in components}:
            raise _Refused(ErrorCode.INVALID_REQUEST, f"Entity type {etype} cannot appear more than once in the "
                                                      "filter.")
        if etype not in (q.USER, q.CLIENT_ID, q.IP):
            raise _Refused(ErrorCode.UNSUPPORTED_VERSION, f"Unsupported entity type {etype}")
        if match_type == EXACT and match is None:
            raise _Refused(ErrorCode.INVALID_REQUEST, "Request specified MATCH_TYPE_EXACT, but set match string "
                                                      "to null.")
        if match_type in (DEFAULT, SPECIFIED) and match is not None:
            name = "MATCH_TYPE_DEFAULT" if match_type == DEFAULT else "MATCH_TYPE_SPECIFIED"
            raise _Refused(ErrorCode.INVALID_REQUEST, f"Request specified {name}, but also specified a match "
                                                      "string.")
        if match_type not in (EXACT, DEFAULT, SPECIFIED):
            raise _Refused(ErrorCode.INVALID_REQUEST, f"Unknown match type {match_type}")
        components.append((etype, match_type, match))
    types = {t for t, _, _ in components}
    if q.IP in types and types & {q.USER, q.CLIENT_ID}:
        raise _Refused(ErrorCode.INVALID_REQUEST, "Invalid entity filter component combination. IP filter "
                                                  "component should not be used with user or clientId filter "
                                                  "component.")
    return components


@register(49, 0, 1)
def alter_client_quotas(req: Any, ctx: RequestContext) -> dict:
    """As `ClientQuotaControlManager.alterClientQuotas`: the request's entities are maps (a type named twice
    keeps its last name), answered once each; an entity named again is refused ("Ignoring duplicate
    entity") while its first alteration stands; removing a key the entity does not have is no change."""
    allowed = ctx.allowed("alter_configs", "cluster", CLUSTER)
    store = _store(ctx)
    results: dict[tuple, dict] = {}
    changes = []
    for e in req.entries:
        names: dict[str, str | None] = {}
        for d in e.entity:
            names[d.entity_type] = d.entity_name
        key = tuple(sorted(names.items(), key=lambda i: (i[0], i[1] is not None, i[1] or "")))
        out = {"error_code": 0, "error_message": None,
               "entity": [{"entity_type": t, "entity_name": n} for t, n in names.items()]}
        try:
            if not allowed:
                raise _Refused(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
            ops: dict[str, float | None] = {}
            duplicate = None
            for op in e.ops:
                if op.key in ops:
                    duplicate = op.key
                else:
                    ops[op.key] = None if op.remove else float(op.value)
            if key in results or duplicate is not None:
                raise q.QuotaError(f"Ignoring duplicate entity {q.describe_entity(key)}" if key in results
                                   else f"Duplicate quota key {duplicate} not updating quota for this entity")
            if store is None:
                raise _Refused(ErrorCode.UNKNOWN_SERVER_ERROR, "client quotas are not available on this broker")
            if not names:
                raise q.QuotaError("Invalid empty client quota entity")
            for etype, name in names.items():
                if etype not in (q.USER, q.CLIENT_ID, q.IP):
                    raise q.QuotaError(f"Unhandled client quota entity type: {etype}")
                if name == "":
                    raise q.QuotaError(f"Empty {etype} not supported")
            entity = q.entity(names.items())
            for k, v in ops.items():
                if v is not None:
                    q.check_value(k, v)
            changes.append((entity, {k: v for k, v in ops.items() if v is not None or k in q.KEYS}))
        except _Refused as exc:
            out.update(error_code=exc.code, error_message=str(exc))
        except q.QuotaError as exc:
            out.update(error_code=ErrorCode.INVALID_REQUEST, error_message=str(exc))
        results[key] = out
    if changes:
        try:
            store.alter(changes, validate_only=bool(req.validate_only))
            if not req.validate_only:
                for entity, ops in changes:
                    audit(ctx, "AlterClientQuotas", f"{q.describe_entity(entity)!r}: " + ", ".join(
                        f"{k}={'<removed>' if v is None else v}" for k, v in ops.items()))
        except ChronologError as exc:
            for r in results.values():
                if r["error_code"] == 0:
                    r.update(error_code=ErrorCode.UNKNOWN_SERVER_ERROR, error_message=str(exc))
    return {"throttle_time": 0, "entries": list(results.values())}


class _Refused(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
