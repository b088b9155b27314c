"""A classic group's state and its members (Kafka's `ClassicGroup` and `ClassicGroupMember`), which
`server.coordinator.GroupCoordinator` moves through its states: Empty -> PreparingRebalance ->
CompletingRebalance -> Stable (and Dead after deletion)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from chronolog.records.consumer_protocol import read_subscription

EMPTY, PREPARING, COMPLETING, STABLE, DEAD = "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    last_heartbeat: float = field(default_factory=time.monotonic)
    join_future: asyncio.Future | None = None
    sync_future: asyncio.Future | None = None


@dataclass
class Group:
    group_id: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    rebalance_task: asyncio.Task | None = None
    new_group: bool = True
    # KIP-394's pending members: ids handed out with MEMBER_ID_REQUIRED, not members until they join with
    # them (ClassicGroup.pendingJoinMembers); id -> when its session timeout passes (monotonic)
    pending: dict[str, float] = field(default_factory=dict)
    # members of this generation that have not sent their SyncGroup yet (ClassicGroup.pendingSyncMembers):
    # removed when the rebalance timeout passes first (GroupMetadataManager.expirePendingSync)
    pending_sync: set[str] = field(default_factory=set)
    sync_task: asyncio.Task | None = None
    # the topics its members subscribe to, computed at each new generation (ClassicGroup.subscribedTopics);
    # None when unknown (not the consumer protocol, or a subscription that does not parse)
    subscribed: set[str] | None = None

    def compute_subscribed(self) -> None:
        """ClassicGroup.computeSubscribedTopics, at each new generation."""
        if self.protocol_type != "consumer":
            self.subscribed = None
            return
        topics: set[str] = set()
        for m in self.members.values():
            parsed = parse_subscription_v0(dict(m.protocols).get(self.protocol_name or "")) \
                if self.protocol_name is not None else None
            if parsed is None:
                self.subscribed = None
                return
            topics |= parsed
        self.subscribed = topics

    def is_subscribed(self, topic: str) -> bool:
        """ClassicGroup.isSubscribedToTopic: when the topics are not known, any topic of a consumer group."""
        return topic in self.subscribed if self.subscribed is not None else self.protocol_type == "consumer"


def parse_subscription_v0(metadata: bytes | None) -> set[str] | None:
    """The topics of a ConsumerProtocolSubscription read as its version 0 prefix (topics, user data), as
    ClassicGroup.computeSubscribedTopics reads it; None when it does not parse."""
    if metadata is None:
        return None
    try:
        topics = read_subscription(metadata, max_version=0, errors="replace").topics  # Java decodes so
    except ValueError:
        return None
    return None if None in topics else set(topics)
