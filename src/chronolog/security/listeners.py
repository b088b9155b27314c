"""Kafka's `listeners`, `advertised.listeners` and `listener.security.protocol.map`
(`SocketServerConfigs`, `EndPoint.parseListenerName`): `NAME://host:port[,NAME://host:port]`, where
NAME is a security protocol or a name mapped to one; an empty host means every interface."""

from __future__ import annotations

import re
from dataclasses import dataclass

from chronolog.errors import ChronologError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in SECURITY_PROTOCOLS)
_ENDPOINT = re.compile(r"^(?P<name>[A-Za-z0-9_]+)://(?P<host>\[[0-9a-fA-F:.]*\]|[^:\[\]/]*):(?P<port>-?\d+)$")


@dataclass(frozen=True)
class ListenerSpec:
    name: str
    security_protocol: str
    host: str  # "" = all interfaces
    port: int

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def parse_protocol_map(value: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in (value or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, proto = item.partition(":")
        name, proto = name.strip().upper(), proto.strip().upper()
        if not sep or not name or proto not in SECURITY_PROTOCOLS:
            raise ChronologError(f"listener.security.protocol.map: invalid entry {item!r}; expected "
                                 f"NAME:PROTOCOL with PROTOCOL one of {', '.join(SECURITY_PROTOCOLS)}")
        if name in out:
            raise ChronologError(f"listener.security.protocol.map: {name} is mapped twice")
        out[name] = proto
    return out


def parse_listeners(value: str, protocol_map: str = DEFAULT_PROTOCOL_MAP, *,
                    what: str = "listeners") -> list[ListenerSpec]:
    mapping = parse_protocol_map(protocol_map)
    out: list[ListenerSpec] = []
    for item in (value or "").split(","):
        item = item.strip()
        if not item:
            continue
        m = _ENDPOINT.match(item)
        if m is None:
            raise ChronologError(f"{what}: invalid endpoint {item!r}; expected NAME://host:port, "
                                 "e.g. SASL_SSL://127.0.0.1:9093")
        name = m["name"].upper()
        if name not in mapping:
            raise ChronologError(f"{what}: no security protocol defined for listener {name} "
                                 "(add it to listener.security.protocol.map)")
        port = int(m["port"])
        if not 0 <= port <= 65535:
            raise ChronologError(f"{what}: port {port} out of range")
        host = m["host"].strip("[]")
        out.append(ListenerSpec(name, mapping[name], host, port))
    names = [spec.name for spec in out]
    if len(set(names)) != len(names):
        raise ChronologError(f"{what}: each listener must have a distinct name, got {', '.join(names)}")
    ports = [spec.port for spec in out if spec.port]
    if what == "listeners" and len(set(ports)) != len(ports):
        raise ChronologError(f"{what}: each listener must have a distinct port")
    return out
