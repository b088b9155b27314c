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
    components = []
    for c in req.components:
        match_type = int(c.match_type)
        if c.entity_type not in (q.USER, q.CLIENT_ID, q.IP):
            return error(ErrorCode.INVALID_REQUEST, f"Custom entity type '{c.entity_type}' not supported")
        if match_type not in (EXACT, DEFAULT, SPECIFIED):
            return error(ErrorCode.INVALID_REQUEST, f"Unknown match type {match_type}")
        if match_type == EXACT and c.match is None:
            return error(ErrorCode.INVALID_REQUEST, f"Missing name for the exact match of {c.entity_type}")
        components.append((c.entity_type, match_type, c.match))
    if len({c[0] for c in components}) != len(components):
        return error(ErrorCode.INVALID_REQUEST, "Duplicate entity type in the filter")
    try:
        found = store.all() if store is not None else {}
    except ChronologError as exc:
        return error(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))
    entries = [{"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                "values": [{"key": k, "value": v} for k, v in sorted(values.items())]}
               for entity, values in found.items() if _matches(entity, components, bool(req.strict))]
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "entries": entries}


@register(49, 0, 1)
def alter_client_quotas(req: Any, ctx: RequestContext) -> dict:
    allowed = ctx.allowed("alter_configs", "cluster", CLUSTER)
    store = _store(ctx)
    results, changes = [], []
    for e in req.entries:
        wire_entity = [{"entity_type": d.entity_type, "entity_name": d.entity_name} for d in e.entity]
        out = {"error_code": 0, "error_message": None, "entity": wire_entity}
        try:
            if not allowed:
                raise _Refused(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
            if store is None:
                raise _Refused(ErrorCode.UNKNOWN_SERVER_ERROR, "client quotas are not available on this broker")
            entity = q.entity((d.entity_type, d.entity_name) for d in e.entity)
            ops: dict[str, float | None] = {}
            for op in e.ops:
                if op.key in ops:
                    raise q.QuotaError(f"duplicate quota key {op.key!r}")
                ops[op.key] = None if op.remove else q.check_value(op.key, float(op.value))
            if any(v is None and k not in q.KEYS for k, v in ops.items()):
                raise q.QuotaError(f"unknown quota key; expected one of {', '.join(q.KEYS)}")
            changes.append((entity, ops))
        except _Refused as exc:
            out.update(error_code=exc.code, error_message=str(exc))
        except q.QuotaError as exc:
            out.update(error_code=ErrorCode.INVALID_REQUEST, error_message=str(exc))
        results.append(out)
    if changes:
        try:
            store.alter(changes, validate_only=bool(req.validate_only))
            if not req.validate_only:
                for entity, ops in changes:
                    audit(ctx, "AlterClientQuotas", f"{q.describe_entity(entity)!r}: " + ", ".join(
                        f"{k}={'<removed>' if v is None else v}" for k, v in ops.items()))
        except ChronologError as exc:
            for r in results:
                if r["error_code"] == 0:
                    r.update(error_code=ErrorCode.UNKNOWN_SERVER_ERROR, error_message=str(exc))
    return {"throttle_time": 0, "entries": results}


class _Refused(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
