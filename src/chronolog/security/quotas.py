"""Client quotas as Kafka keeps them (KIP-13, KIP-55, KIP-124, KIP-599, KIP-546): a quota entity is a user,
a client id, or both, each either named or the default (Kafka's `<default>`, a null name on the wire), with
values under Kafka's config names. They live in `chronolog-quotas.json` in the data dir, written atomically
(through `chronolog.diskio.write_atomic`) and re-read by a running broker when the file changed, so a change
applies to the next request.

    {"version": 1, "quotas": [{"entity": {"user": "alice", "client-id": null}, "values": {"producer_byte_rate": 1048576}}]}

Which quota applies to a connection is Kafka's `DefaultQuotaCallback` order, for each quota key on its own:
user + client-id, user + default client-id, user, default user + client-id, default user + default client-id,
default user, client-id, default client-id. The level also says who shares the quota (the metric tags): a
user quota is shared by all of that user's client ids, a default-user quota is per user, and so on."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from chronolog.errors import ChronologError
from chronolog.security.files import WatchedJson, locked, write_json_atomic

QUOTAS_FILE = "chronolog-quotas.json"
USER, CLIENT_ID, IP = "user", "client-id", "ip"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
# QuotaConfig: the byte rates are LONG configs, the others DOUBLE.
KEYS: dict[str, bool] = {PRODUCER_BYTE_RATE: True, CONSUMER_BYTE_RATE: True, REQUEST_PERCENTAGE: False,
                         CONTROLLER_MUTATION_RATE: False}

Entity = tuple[tuple[str, "str | None"], ...]  # sorted (type, name) pairs; a None name is the default


class QuotaError(ChronologError):
    """A quota entity or value Kafka would refuse (INVALID_REQUEST on the wire)."""


def entity(pairs: Iterable[tuple[str, str | None]]) -> Entity:
    """A validated entity: user and/or client-id, each at most once (Kafka's ip entities are refused: we
    have no connection-rate quota)."""
    items = list(pairs)
    types = [t for t, _ in items]
    if not items:
        raise QuotaError("a quota entity needs a user, a client-id or both")
    if len(set(types)) != len(types):
        raise QuotaError(f"duplicate entity type in {types}")
    for t, name in items:
        if t == IP:
            raise QuotaError("ip quotas (connection_creation_rate) are not supported")
        if t not in (USER, CLIENT_ID):
            raise QuotaError(f"unknown quota entity type {t!r}; expected user or client-id")
        if name is not None and not isinstance(name, str):
            raise QuotaError(f"invalid {t} name {name!r}")
    return tuple(sorted(items))


def check_value(key: str, value: float) -> float:
    """A value for `key` as Kafka's QuotaConfig validates it (the byte rates are whole numbers)."""
    if key not in KEYS:
        raise QuotaError(f"unknown quota key {key!r}; expected one of {', '.join(KEYS)}")
    if not isinstance(value, (int, float)) or math.isnan(value) or math.isinf(value) or value <= 0:
        raise QuotaError(f"{key} must be a positive number, got {value!r}")
    if KEYS[key] and float(value) != int(value):
        raise QuotaError(f"{key} must be a whole number, got {value!r}")
    return float(value)


def describe_entity(e: Entity) -> str:
    return ", ".join(f"{t}={'<default>' if n is None else n}" for t, n in e)


@dataclass(frozen=True)
class Applied:
    """The quota that applies to a request: its bound and who shares it (Kafka's quota metric tags)."""

    limit: float
    user: str
    client_id: str


class QuotaStore:
    def __init__(self, data_dir: Path | str) -> None:
        self.path = Path(data_dir) / QUOTAS_FILE
        self._file = WatchedJson(self.path, {"version": 1, "quotas": []})
        self._generation = -1
        self._index: dict[Entity, dict[str, float]] = {}

    def all(self) -> dict[Entity, dict[str, float]]:
        """entity -> {key: value}, re-read when the file changed (one stat)."""
        data = self._file.get()
        if self._file.generation != self._generation:
            raw = data.get("quotas") if isinstance(data, dict) else None
            if not isinstance(raw, list):
                raise ChronologError(f"{self.path}: no 'quotas' list")
            index: dict[Entity, dict[str, float]] = {}
            for item in raw:
                try:
                    e = entity(item["entity"].items())
                    index[e] = {k: check_value(k, v) for k, v in item["values"].items()}
                except (QuotaError, KeyError, TypeError, AttributeError) as exc:
                    raise ChronologError(f"{self.path}: invalid quota {item!r}: {exc}") from None
            self._index, self._generation = index, self._file.generation
        return self._index

    @property
    def generation(self) -> int:
        self.all()
        return self._file.generation

    def alter(self, changes: Iterable[tuple[Entity, dict[str, float | None]]], validate_only: bool = False) -> None:
        """Set (a value) or remove (None) keys per entity, all or nothing; an entity left without values
        disappears, as in Kafka."""
        with locked(self.path):
            current = {e: dict(v) for e, v in self.all().items()}
            for e, ops in changes:
                values = current.setdefault(e, {})
                for key, value in ops.items():
                    if value is None:
                        if key not in KEYS:
                            raise QuotaError(f"unknown quota key {key!r}; expected one of {', '.join(KEYS)}")
                        values.pop(key, None)
                    else:
                        values[key] = check_value(key, value)
                if not values:
                    del current[e]
            if validate_only:
                return
            write_json_atomic(self.path, {"version": 1, "quotas": [
                {"entity": dict(e), "values": v} for e, v in sorted(current.items(), key=lambda i: _sort_key(i[0]))]})

    def resolve(self, user: str, client_id: str, key: str) -> Applied | None:
        """The quota `key` that applies to `user` (principal name) with `client_id`, in Kafka's order."""
        quotas = self.all()
        if not quotas:
            return None
        levels: tuple[tuple[Entity, str, str], ...] = (
            (((CLIENT_ID, client_id), (USER, user)), user, client_id),
            (((CLIENT_ID, None), (USER, user)), user, client_id),
            (((USER, user),), user, ""),
            (((CLIENT_ID, client_id), (USER, None)), user, client_id),
            (((CLIENT_ID, None), (USER, None)), user, client_id),
            (((USER, None),), user, ""),
            (((CLIENT_ID, client_id),), "", client_id),
            (((CLIENT_ID, None),), "", client_id),
        )
        for e, tag_user, tag_client in levels:
            values = quotas.get(e)
            if values is not None and key in values:
                return Applied(values[key], tag_user, tag_client)
        return None


def _sort_key(e: Entity) -> tuple:
    return tuple((t, n is not None, n or "") for t, n in e)
