"""Authorized-operations bit fields (KIP-430): which AclOperations the principal may perform on a resource,
as Metadata, DescribeCluster, DescribeTopicPartitions and the group describes answer when asked."""

from __future__ import annotations

from chronolog.protocol.registry import RequestContext

NOT_ASKED = -2147483648  # the schemas' default (Integer.MIN_VALUE): the client did not ask
# AclOperation codes
CODES = {"read": 3, "write": 4, "create": 5, "delete": 6, "alter": 7, "describe": 8, "cluster_action": 9,
         "describe_configs": 10, "alter_configs": 11, "idempotent_write": 12}
# Each resource type's supported operations (Kafka's `AuthHelper.authorizedOperations` over
# `ResourceType`'s operations).
CLUSTER = ("create", "cluster_action", "describe_configs", "alter_configs", "idempotent_write", "alter", "describe")
TOPIC = ("read", "write", "create", "describe", "delete", "alter", "describe_configs", "alter_configs")
GROUP = ("read", "describe", "delete")


def authorized(ctx: RequestContext, resource_type: str, name: str, ops: tuple[str, ...]) -> int:
    bits = 0
    for op in ops:
        if ctx.allowed(op, resource_type, name):
            bits |= 1 << CODES[op]
    return bits


def cluster_operations(ctx: RequestContext, asked: bool) -> int:
    """AuthHelper: asked for, without Describe on the cluster: 0; else the allowed operations."""
    if not asked:
        return NOT_ASKED
    if not ctx.allowed("describe", "cluster", "kafka-cluster"):
        return 0
    return authorized(ctx, "cluster", "kafka-cluster", CLUSTER)
