"""Topic ids (KIP-516) to topic names, for the requests that address topics by id: Produce v13, Fetch v13+,
Metadata v12+. Kafka's `MetadataCache.getTopicName`; here one map per broker, rebuilt from the log manager
when an id is not in it or names a topic deleted (or deleted and made again under a new id) since."""

from __future__ import annotations

import base64
import uuid
from typing import Any

ZERO = uuid.UUID(int=0)


def uuid_of(raw: str) -> uuid.UUID:
    """A stored topic id (Kafka's base64 form in `partition.metadata`) as a UUID."""
    return uuid.UUID(bytes=base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))


class TopicIds:
    """The names of topic ids, checked against the log manager on every look-up: an id of a topic deleted
    since the map was built is unknown (UNKNOWN_TOPIC_ID), as in Kafka."""

    def __init__(self) -> None:
        self._names: dict[uuid.UUID, tuple[str, str]] = {}  # id -> (name, its stored id string)

    def name_of(self, manager: Any, topic_id: uuid.UUID | None) -> str | None:
        """The topic `topic_id` names now, or None (for the null id too)."""
        if topic_id is None or topic_id == ZERO:
            return None
        hit = self._names.get(topic_id)
        if hit is not None and self._current(manager, *hit):
            return hit[0]
        names: dict[uuid.UUID, tuple[str, str]] = {}
        for name in manager.topics():
            try:
                raw = manager.topic_id(name)
            except KeyError:  # deleted meanwhile
                continue
            names[uuid_of(raw)] = (name, raw)
        self._names = names
        hit = names.get(topic_id)
        return hit[0] if hit is not None else None

    @staticmethod
    def _current(manager: Any, name: str, raw: str) -> bool:
        try:
            return manager.has_topic(name) and manager.topic_id(name) == raw
        except KeyError:
            return False
