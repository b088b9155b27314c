"""Share groups (KIP-932) as kafka-share-groups.sh describes them, with lag in records and in record time.

librdkafka's admin client has no share-group calls, so these requests go over the tools' own connection
(`timetravel.connection`, with the source's TLS and SASL configs): ListGroups v5 (its `group_type`), FindCoordinator (GROUP), then
ShareGroupDescribe v1 and DescribeShareGroupOffsets v1 (KIP-1226: each partition's lag, the records from the
share-partition start offset to the high watermark not yet acknowledged) at the group's coordinator. The
lag in time copies `groups describe` for consumer groups: the newest record's time minus the time of the
first record not known to be acknowledged (at the start offset, or at high watermark - lag if later). Shared by `chronolog groups` and the console's groups page.
"""

from __future__ import annotations

import io
import re
import struct
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i16, i32

from chronolog.errors import ChronologError, CorruptMessageError, ErrorCode
from chronolog.timetravel.connection import Connection, ConnectionLost, servers

LIST_GROUPS, FIND_COORDINATOR, SHARE_GROUP_DESCRIBE, DESCRIBE_SHARE_GROUP_OFFSETS = 16, 10, 77, 90
KEY_TYPE_GROUP = 0


class ShareGroupNotFoundError(ChronologError):
    """No share group of that id (GROUP_ID_NOT_FOUND from ShareGroupDescribe)."""


def _request(api_key: int, version: int, cid: int, client_id: str, **fields: Any) -> bytes:
    cls = load_request_schema(api_key, version)
    header_cls = __import__(cls.__module__, fromlist=["RequestHeader"]).RequestHeader  # v2: flexible versions
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    entity_writer(header_cls)(out, header_cls(request_api_key=i16(api_key), request_api_version=i16(version),
                                              correlation_id=i32(cid), client_id=client_id))
    entity_writer(cls)(out, cls(**fields))
    data = bytearray(out.getbuffer())
    struct.pack_into(">i", data, 0, len(data) - 4)
    return bytes(data)


def _reader(api_key: int, version: int) -> Any:
    cls = load_response_schema(api_key, version)
    header_cls = __import__(cls.__module__, fromlist=["ResponseHeader"]).ResponseHeader

    def read(frame: bytes, cid: int) -> Any:
        try:
            header, used = entity_reader(header_cls)(frame, 0)
            if int(header.correlation_id) != cid:
                raise CorruptMessageError(f"response correlation id {header.correlation_id}, expected {cid}")
            body, _ = entity_reader(cls)(frame, used)
        except CorruptMessageError:
            raise
        except Exception as exc:  # kio's SerialError, ValueError ... on bytes that are not this response
            raise CorruptMessageError(f"cannot decode {cls.__name__} v{version}: {exc}") from None
        return body
    return read


def _code(value: Any) -> int:
    return int(getattr(value, "value", value))


def _state(state: str) -> str:
    """A group state as the tools print it: `Stable` -> `STABLE`, a streams group's `NotReady` -> `NOT_READY`."""
    return re.sub(r"(?<=[a-z])(?=[A-Z])", "_", state).upper()


def _error(code: int, message: str | None) -> str:
    name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
    return f"{name}: {message}" if message else name


class ShareGroupClient:
    """The share-group admin requests over the tools' own connections (one at a time; TLS and SASL as the
    client configs `security` say); the streams-group client (timetravel/streams_groups.py) is this one with
    another describe."""

    serves = "share groups (API {api} v{lo}-{hi}); Kafka 4.1 or later with share.version 1 or more does"

    def __init__(self, bootstrap: str, *, client_id: str = "chronolog-tools", timeout: float = 15.0,
                 security: dict | None = None) -> None:
        self.bootstrap = bootstrap
        self.security = security
        self.servers = servers(bootstrap)
        self.client_id = client_id
        self.timeout = timeout
        self._conns: dict[tuple[str, int], Connection] = {}

    def _conn(self, where: tuple[str, int]) -> Connection:
        if where not in self._conns:
            self._conns[where] = Connection(where[0], where[1], self.timeout, self.client_id, self.security)
        return self._conns[where]

    def _call(self, where: tuple[str, int], api_key: int, lo: int, hi: int, **fields: Any) -> Any:
        conn = self._conn(where)
        found = conn.versions.get(api_key)
        if found is None or found[1] < lo or found[0] > hi:
            raise ChronologError(f"{conn.where} does not serve " + self.serves.format(api=api_key, lo=lo, hi=hi))
        version = min(hi, found[1])
        try:
            return conn.call([_request(api_key, version, conn.next_id(), self.client_id, **fields)],
                             _reader(api_key, version))
        except ConnectionLost:
            self._conns.pop(where, None)
            conn.close()
            raise

    def _any(self, api_key: int, lo: int, hi: int, **fields: Any) -> Any:
        last: ConnectionLost | None = None
        for where in self.servers:
            try:
                return self._call(where, api_key, lo, hi, **fields)
            except ConnectionLost as exc:
                last = exc
        raise ChronologError(f"cannot reach {self.bootstrap}: {last}")

    def list_groups(self) -> list[dict]:
        """Every group with its type and state (ListGroups v5, which says `group_type`), from each bootstrap
        server's answer; the share groups are those of type `share`."""
        body = self._any(LIST_GROUPS, 5, 5, states_filter=(), types_filter=())
        if _code(body.error_code):
            raise ChronologError(f"list groups: {_error(_code(body.error_code), None)}")
        return [{"group": g.group_id, "type": g.group_type.lower(), "state": _state(g.group_state)}
                for g in body.groups]

    def coordinator(self, group: str) -> tuple[str, int]:
        body = self._any(FIND_COORDINATOR, 4, 6, key_type=i8(KEY_TYPE_GROUP), coordinator_keys=(group,))
        for c in body.coordinators:
            if _code(c.error_code):
                raise ChronologError(f"coordinator of {group}: {_error(_code(c.error_code), c.error_message)}")
            return c.host, int(c.port)
        raise ChronologError(f"coordinator of {group}: no answer")

    def describe(self, group: str) -> Any:
        """ShareGroupDescribe v1's group entry; `ShareGroupNotFoundError` when it is not a share group."""
        return self._described(group, SHARE_GROUP_DESCRIBE, 1, "share", ShareGroupNotFoundError)

    def _described(self, group: str, api: int, version: int, kind: str, not_found: type[ChronologError]) -> Any:
        """The group's entry in a share or streams group Describe (`api` at `version`) from its coordinator;
        `not_found` when the broker has no `kind` group of that id (GROUP_ID_NOT_FOUND)."""
        where = self.coordinator(group)
        body = self._call(where, api, version, version, group_ids=(group,), include_authorized_operations=False)
        described = body.groups[0]
        code = _code(described.error_code)
        if code == ErrorCode.GROUP_ID_NOT_FOUND:
            raise not_found(f"{kind} group {group} does not exist")
        if code:
            raise ChronologError(f"describe {kind} group {group}: {_error(code, described.error_message)}")
        return described

    def offsets(self, group: str) -> dict[tuple[str, int], tuple[int, int]]:
        """(topic, partition) -> (start offset, lag) of every partition the group has state for
        (DescribeShareGroupOffsets v1, topics null); -1 where the broker does not know."""
        mod = __import__(load_request_schema(DESCRIBE_SHARE_GROUP_OFFSETS, 1).__module__,
                         fromlist=["DescribeShareGroupOffsetsRequestGroup"])
        where = self.coordinator(group)
        body = self._call(where, DESCRIBE_SHARE_GROUP_OFFSETS, 1, 1,
                          groups=(mod.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None),))
        out: dict[tuple[str, int], tuple[int, int]] = {}
        for g in body.groups:
            if _code(g.error_code):
                raise ChronologError(f"offsets of share group {group}: {_error(_code(g.error_code), g.error_message)}")
            for t in g.topics:
                for p in t.partitions:
                    if not _code(p.error_code):
                        out[(t.topic_name, int(p.partition_index))] = (int(p.start_offset), int(p.lag))
        return out

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()


def share_client(source: Any, kind: type[ShareGroupClient] = ShareGroupClient) -> Any:
    """A share-group client (or `kind`) on the source's bootstrap servers, with its client.id and its TLS and
    SASL configs; a SASL mechanism these connections do not speak (GSSAPI, OAUTHBEARER) is one line now."""
    conf = getattr(source, "conf", {}) or {}
    from chronolog.timetravel.secure_connection import mechanism, security_protocol
    if security_protocol(conf).startswith("sasl"):
        mechanism(conf)
    return kind(source.bootstrap, client_id=str(conf.get("client.id", "chronolog-tools")),
                timeout=float(getattr(source, "timeout", 15.0)), security=dict(conf))


def _record_time(source: Any, topic: str, partition: int, offset: int) -> int | None:
    for rec in source.read(topic, partition, offset, offset + 1):
        return rec.timestamp
    return None


def describe_share_group(source: Any, group: str, client: ShareGroupClient | None = None) -> dict:
    """A share group's state, members and, per partition with state, the share-partition start offset, the
    log end, lag in records (the broker's, KIP-1226) and in record time (the newest record's time minus the
    time of the first record that may be unacknowledged)."""
    own = client is None
    client = client or share_client(source)
    try:
        described = client.describe(group)
        offsets = client.offsets(group)
    finally:
        if own:
            client.close()
    members = []
    owner: dict[tuple[str, int], list[str]] = {}
    for m in described.members:
        tps = [(t.topic_name, int(p)) for t in m.assignment.topic_partitions for p in t.partitions]
        members.append({"member_id": m.member_id, "client_id": m.client_id, "host": m.client_host,
                        "partitions": [f"{t}-{p}" for t, p in sorted(tps)]})
        for tp in tps:
            owner.setdefault(tp, []).append(m.member_id)  # a share partition has many consumers
    rows = []
    for (topic, partition) in sorted(set(offsets) | set(owner)):
        start, lag = offsets.get((topic, partition), (-1, -1))
        low, high = source.watermarks(topic, partition)
        start_offset = start if start >= 0 else None
        lag_records = lag if lag >= 0 else None
        lag_ms = None
        if lag_records == 0:
            lag_ms = 0
        elif lag_records and start_offset is not None:
            # the first unacknowledged record is at or after both the start offset and high - lag (the
            # records before it all acknowledged); Kafka 4.4 reports the start offset of its last state
            # write, which may trail the acknowledged records, so high - lag is the better bound
            first = _record_time(source, topic, partition, max(start_offset, low, high - lag_records))
            last = _record_time(source, topic, partition, high - 1) if high > 0 else None
            if first is not None and last is not None:
                lag_ms = max(0, last - first)
        rows.append({"topic": topic, "partition": partition, "start_offset": start_offset, "log_start": low,
                     "log_end": high, "lag": lag_records, "lag_ms": lag_ms,
                     "members": sorted(owner.get((topic, partition), []))})
    return {"group": group, "type": "share", "state": described.group_state.upper(),
            "group_epoch": int(described.group_epoch), "members": members, "partitions": rows}
