"""Delegation tokens (KIP-48): CreateDelegationToken, RenewDelegationToken, ExpireDelegationToken,
DescribeDelegationToken, answered as a Kafka broker without `delegation.token.secret.key` answers them
(`KafkaApis.allowTokenRequests`, `DelegationTokenManager.isEnabled`): DELEGATION_TOKEN_REQUEST_NOT_ALLOWED on
a PLAINTEXT listener or to a one-way-TLS client, DELEGATION_TOKEN_AUTH_DISABLED elsewhere. chronolog issues
no tokens (docs/differences.md); `kafka-delegation-tokens` then says so in its first line.

Kafka answers -1 for the timestamps of a refused token; kio cannot write a negative timestamp, so these
answers carry the epoch (clients read them only with no error)."""

from __future__ import annotations

from typing import Any

from chronolog.errors import ErrorCode
from chronolog.protocol.registry import RequestContext, register


def _refusal(ctx: RequestContext) -> int:
    listener = ctx.connection.listener if ctx.connection is not None else None
    protocol = getattr(listener, "security_protocol", "PLAINTEXT")
    if protocol == "PLAINTEXT" or (protocol == "SSL" and ctx.principal == "User:ANONYMOUS"):
        return ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    return ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED


@register(38, 1, 3)
def create_delegation_token(req: Any, ctx: RequestContext) -> dict:
    owner_type, _, owner_name = (ctx.principal or "User:ANONYMOUS").partition(":")
    code = _refusal(ctx)
    if getattr(req, "owner_principal_name", None):
        if req.owner_principal_type is None:  # Kafka's KafkaPrincipal(null, name) fails: UNKNOWN_SERVER_ERROR
            code, owner_type = ErrorCode.UNKNOWN_SERVER_ERROR, ""
        owner_type, owner_name = req.owner_principal_type or owner_type, req.owner_principal_name
    requester_type, _, requester_name = (ctx.principal or "User:ANONYMOUS").partition(":")
    return {"throttle_time": 0, "error_code": code, "principal_type": owner_type,
            "principal_name": owner_name, "token_requester_principal_type": requester_type,
            "token_requester_principal_name": requester_name, "issue_timestamp": 0, "expiry_timestamp": 0,
            "max_timestamp": 0, "token_id": "", "hmac": b""}


@register(39, 1, 2)
def renew_delegation_token(req: Any, ctx: RequestContext) -> dict:
    return {"throttle_time": 0, "error_code": _refusal(ctx), "expiry_timestamp": 0}


@register(40, 1, 2)
def expire_delegation_token(req: Any, ctx: RequestContext) -> dict:
    return {"throttle_time": 0, "error_code": _refusal(ctx), "expiry_timestamp": 0}


@register(41, 1, 3)
def describe_delegation_token(req: Any, ctx: RequestContext) -> dict:
    return {"throttle_time": 0, "error_code": _refusal(ctx), "tokens": []}
