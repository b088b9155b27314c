"""DescribeUserScramCredentials (API 50) and AlterUserScramCredentials (API 51), KIP-554, v0, on the
credentials file `chronolog users` edits. Describe needs DESCRIBE on the cluster, Alter needs ALTER (as in
`KafkaApis` / `ControllerApis`); the checks and error codes follow `ScramControlManager`."""

from __future__ import annotations

from collections import Counter
from typing import Any

from chronolog.errors import ChronologError, ErrorCode
from chronolog.lazy import LazyModule
from chronolog.protocol.registry import RequestContext, register
from chronolog.security.audit import audit

MECHANISM_CODES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}  # org.apache.kafka.clients.admin.ScramMechanism
_BY_CODE = {v: k for k, v in MECHANISM_CODES.items()}
scram = LazyModule("chronolog.security.scram")  # (with its hashing) by the first request, not by every start


def _store(ctx: RequestContext) -> Any:
    return getattr(ctx.state, "credentials", None)


@register(50, 0, 0)
def describe_user_scram_credentials(req: Any, ctx: RequestContext) -> dict:
    store = _store(ctx)
    if store is None or not ctx.allowed("describe", "cluster", "kafka-cluster"):
        return {"throttle_time": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "error_message": "Cluster authorization failed.", "results": []}
    users = store.users()
    names = list(users) if not req.users else [u.name for u in req.users]
    counts = Counter(names)
    results = []
    for name in dict.fromkeys(names):
        if counts[name] > 1:
            results.append({"user": name, "error_code": ErrorCode.DUPLICATE_RESOURCE, "credential_infos": [],
                            "error_message": f"Cannot describe SCRAM credentials for the same user twice in a "
                                             f"single request: {name}"})
        elif name not in users:
            results.append({"user": name, "error_code": ErrorCode.RESOURCE_NOT_FOUND, "credential_infos": [],
                            "error_message": f"Attempt to describe a user credential that does not exist: {name}"})
        else:
            infos = [{"mechanism": MECHANISM_CODES[m], "iterations": i} for m, i in sorted(users[name].items())
                     if m in MECHANISM_CODES]
            results.append({"user": name, "error_code": 0, "error_message": None, "credential_infos": infos})
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "results": results}


@register(51, 0, 0)
def alter_user_scram_credentials(req: Any, ctx: RequestContext) -> dict:
    """`ScramControlManager.alterCredentials`: deletions then upsertions, one answer per user. A user's first
    error stands (its later operations are skipped); a user altered twice is DUPLICATE_RESOURCE and none of
    its operations apply; a deletion must find the credential as it was before the request."""
    store = _store(ctx)
    if store is None or not ctx.allowed("alter", "cluster", "kafka-cluster"):
        return {"throttle_time": 0, "results": [
            {"user": u, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
             "error_message": "Cluster authorization failed."}
            for u in dict.fromkeys(op.name for op in (*req.deletions, *req.upsertions))]}
    existing = store.users()
    deletions: dict[str, str] = {}
    upsertions: dict[str, tuple[str, Any]] = {}
    errors: dict[str, tuple[int, str]] = {}
    for kind, op in [("delete", d) for d in req.deletions] + [("upsert", u) for u in req.upsertions]:
        name = op.name
        if name in errors:
            continue
        if deletions.pop(name, None) is not None or upsertions.pop(name, None) is not None:
            errors[name] = (ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same "
                                                          "request")
            continue
        mechanism = _BY_CODE.get(int(op.mechanism))
        if not name:
            errors[name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif mechanism is None:
            errors[name] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif kind == "delete":
            if mechanism not in existing.get(name, {}):
                errors[name] = (ErrorCode.RESOURCE_NOT_FOUND,
                                "Attempt to delete a user credential that does not exist")
            else:
                deletions[name] = mechanism
        elif int(op.iterations) < scram.MIN_ITERATIONS:
            errors[name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        elif int(op.iterations) > scram.MAX_ITERATIONS:
            errors[name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
        else:
            upsertions[name] = (mechanism, op)
    results: dict[str, tuple[int, str | None]] = {}
    for name, mechanism in deletions.items():
        try:
            store.delete(name, mechanism)
            audit(ctx, "AlterUserScramCredentials", f"deleted {mechanism} credential of user {name!r}")
            results[name] = (0, None)
        except ChronologError as exc:
            errors[name] = (ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))
    for name, (mechanism, op) in upsertions.items():
        try:
            iterations = int(op.iterations)
            credential = scram.credential_from_salted(mechanism, bytes(op.salt), iterations,
                                                      bytes(op.salted_password))
            store.put(name, mechanism, credential)
            audit(ctx, "AlterUserScramCredentials", f"set {mechanism} credential of user {name!r} "
                  f"({iterations} iterations)")
            results[name] = (0, None)
        except ChronologError as exc:
            errors[name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, str(exc))
    results.update(errors)
    return {"throttle_time": 0, "results": [{"user": u, "error_code": code, "error_message": msg}
                                            for u, (code, msg) in results.items()]}
