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
    store = _store(ctx)
    allowed = store is not None and ctx.allowed("alter", "cluster", "kafka-cluster")
    ops = [("delete", d) for d in req.deletions] + [("upsert", u) for u in req.upsertions]
    per_user = Counter(op.name for _kind, op in ops)
    results: dict[str, tuple[int, str | None]] = {}
    for kind, op in ops:
        name = op.name
        if name in results and results[name][0]:
            continue  # one error per user, as Kafka answers
        if not allowed:
            results[name] = (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
            continue
        if per_user[name] > 1:
            results[name] = (ErrorCode.DUPLICATE_RESOURCE,
                             "A user credential cannot be altered twice in the same request")
            continue
        if not name:
            results[name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
            continue
        mechanism = _BY_CODE.get(int(op.mechanism))
        if mechanism is None:
            results[name] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
            continue
        try:
            if kind == "delete":
                if not store.delete(name, mechanism):
                    results[name] = (ErrorCode.RESOURCE_NOT_FOUND,
                                     f"Attempt to delete a user credential that does not exist: {name}")
                    continue
                audit(ctx, "AlterUserScramCredentials", f"deleted {mechanism} credential of user {name!r}")
            else:
                iterations = int(op.iterations)
                if iterations < scram.MIN_ITERATIONS:
                    results[name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
                    continue
                if iterations > scram.MAX_ITERATIONS:
                    results[name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
                    continue
                credential = scram.credential_from_salted(mechanism, bytes(op.salt), iterations,
                                                          bytes(op.salted_password))
                store.put(name, mechanism, credential)
                audit(ctx, "AlterUserScramCredentials", f"set {mechanism} credential of user {name!r} "
                      f"({iterations} iterations)")
        except ChronologError as exc:
            results[name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, str(exc))
            continue
        results.setdefault(name, (0, None))
    return {"throttle_time": 0, "results": [{"user": u, "error_code": code, "error_message": msg}
                                            for u, (code, msg) in results.items()]}
