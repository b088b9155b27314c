"""CreateAcls (API 30), DescribeAcls (API 29) and DeleteAcls (API 31), v1-3 (Kafka 4.0 dropped v0), after
`AclApis`: Create/Delete need ALTER on the cluster and Describe needs DESCRIBE on the cluster
(CLUSTER_AUTHORIZATION_FAILED otherwise); without an authorizer every call answers SECURITY_DISABLED.
Bindings are stored in the same `chronolog-acls.json` that `chronolog acls` edits."""

from __future__ import annotations

import functools
from typing import Any

from chronolog.errors import ChronologError, ErrorCode, KafkaError
from chronolog.lazy import LazyModule
from chronolog.protocol.registry import RequestContext, register
from chronolog.security.audit import audit

acl = LazyModule("chronolog.security.acl")  # imported by the first ACL request, not by every broker's start

UNKNOWN, ANY, MATCH = 0, 1, 2
NO_AUTHORIZER = "No Authorizer is configured on the broker"


def _refuse_unknown(what: str, entries: Any, *fields: str) -> None:
    """Describe/Create/DeleteAclsRequest's constructors throw IllegalArgumentException for an UNKNOWN (0)
    resource type, pattern type, operation or permission, so Kafka closes the connection before any
    authorizer is asked; the raised KafkaError closes ours the same way."""
    for entry in entries:
        if any(int(getattr(entry, f)) == UNKNOWN for f in fields):
            raise KafkaError(f"{what} contains UNKNOWN elements")


@functools.cache
def _names() -> tuple[dict[int, str], dict[int, str], dict[int, str], dict[int, str]]:
    """The names of the wire's operation, permission, resource type and pattern type codes."""
    return tuple({v: k for k, v in table.items()}
                 for table in (acl.OPERATIONS, acl.PERMISSIONS, acl.RESOURCE_TYPES, acl.PATTERN_TYPES))


def _store(ctx: RequestContext) -> acl.AclStore | None:
    return getattr(ctx.authorizer, "store", None)


def _code(table: dict[str, int], name: str) -> int:
    return table[name]


def _filter(f: Any) -> acl.AclFilter:
    """An AclBindingFilter from the wire; unknown codes raise (answered INVALID_REQUEST)."""
    def pick(code: int, names: dict[int, str], what: str, allow_match: bool = False) -> str | None:
        code = int(code)
        if code == ANY:
            return None
        if allow_match and code == MATCH:
            return "MATCH"
        if code not in names:
            raise ChronologError(f"unknown {what} {code}")
        return names[code]
    ops, perms, types, patterns = _names()
    return acl.AclFilter(resource_type=pick(f.resource_type_filter, types, "resource type"),
                         pattern_type=pick(f.pattern_type_filter, patterns, "pattern type", allow_match=True),
                         name=f.resource_name_filter, principal=f.principal_filter, host=f.host_filter,
                         operation=pick(f.operation, ops, "operation"),
                         permission=pick(f.permission_type, perms, "permission type"))


def _describe(b: acl.AclBinding) -> str:
    return (f"{b.permission} {b.principal!r} {b.operation} from host {b.host!r} on "
            f"{b.resource_type}:{b.pattern_type}:{b.name!r}")


def _wire(b: acl.AclBinding) -> dict:
    return {"resource_type": _code(acl.RESOURCE_TYPES, b.resource_type), "resource_name": b.name,
            "pattern_type": _code(acl.PATTERN_TYPES, b.pattern_type), "principal": b.principal, "host": b.host,
            "operation": _code(acl.OPERATIONS, b.operation), "permission_type": _code(acl.PERMISSIONS, b.permission)}


@register(29, 1, 3)
def describe_acls(req: Any, ctx: RequestContext) -> dict:
    _refuse_unknown("DescribeAclsRequest", [req], "pattern_type_filter", "resource_type_filter", "permission_type",
                    "operation")
    store = _store(ctx)
    if store is None:
        return {"throttle_time": 0, "error_code": ErrorCode.SECURITY_DISABLED, "error_message": NO_AUTHORIZER,
                "resources": []}
    if not ctx.allowed("describe", "cluster", acl.CLUSTER_NAME):
        return {"throttle_time": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "error_message": "Cluster authorization failed.", "resources": []}
    try:
        found = store.list(_filter(req))
    except ChronologError as exc:
        return {"throttle_time": 0, "error_code": ErrorCode.INVALID_REQUEST, "error_message": str(exc),
                "resources": []}
    grouped: dict[tuple, list[dict]] = {}
    for b in found:
        key = (_code(acl.RESOURCE_TYPES, b.resource_type), b.name, _code(acl.PATTERN_TYPES, b.pattern_type))
        grouped.setdefault(key, []).append({"principal": b.principal, "host": b.host,
                                            "operation": _code(acl.OPERATIONS, b.operation),
                                            "permission_type": _code(acl.PERMISSIONS, b.permission)})
    resources = [{"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
                 for (t, n, p), acls in grouped.items()]
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "resources": resources}


@register(30, 1, 3)
def create_acls(req: Any, ctx: RequestContext) -> dict:
    _refuse_unknown("CreatableAcls", req.creations, "resource_pattern_type", "resource_type", "permission_type",
                    "operation")
    store = _store(ctx)
    results: list[dict] = []
    valid: list[acl.AclBinding] = []
    ops, perms, types, patterns = _names()
    for c in req.creations:
        if store is None:
            results.append({"error_code": ErrorCode.SECURITY_DISABLED, "error_message": NO_AUTHORIZER})
            continue
        if not ctx.allowed("alter", "cluster", acl.CLUSTER_NAME):
            results.append({"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                            "error_message": "Cluster authorization failed."})
            continue
        try:
            ptype = patterns.get(int(c.resource_pattern_type))
            rtype = types.get(int(c.resource_type))
            op, perm = ops.get(int(c.operation)), perms.get(int(c.permission_type))
            if None in (ptype, rtype, op, perm):
                raise ChronologError("Invalid ACL creation: resource type, pattern type, operation and "
                                     "permission must be specific values")
            valid.append(acl.AclBinding.create(principal_=c.principal, operation_=op, permission_=perm,
                                               resource_type_=rtype, name=c.resource_name, pattern_type_=ptype,
                                               host=c.host))
            results.append({"error_code": 0, "error_message": None})
        except ChronologError as exc:
            results.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": str(exc)})
    if valid:
        for b in store.add(valid):
            audit(ctx, "CreateAcls", _describe(b))
    return {"throttle_time": 0, "results": results}


@register(31, 1, 3)
def delete_acls(req: Any, ctx: RequestContext) -> dict:
    _refuse_unknown("DeleteAclsRequest filters", req.filters, "pattern_type_filter", "resource_type_filter",
                    "operation", "permission_type")
    store = _store(ctx)
    results = []
    for f in req.filters:
        if store is None:
            results.append({"error_code": ErrorCode.SECURITY_DISABLED, "error_message": NO_AUTHORIZER,
                            "matching_acls": []})
            continue
        if not ctx.allowed("alter", "cluster", acl.CLUSTER_NAME):
            results.append({"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                            "error_message": "Cluster authorization failed.", "matching_acls": []})
            continue
        try:
            removed = store.remove(_filter(f))
        except ChronologError as exc:
            results.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": str(exc), "matching_acls": []})
            continue
        for b in removed:
            audit(ctx, "DeleteAcls", _describe(b))
        results.append({"error_code": 0, "error_message": None,
                        "matching_acls": [{"error_code": 0, "error_message": None, **_wire(b)} for b in removed]})
    return {"throttle_time": 0, "filter_results": results}
