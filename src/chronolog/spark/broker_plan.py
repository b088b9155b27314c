"""The driver's plan of a broker-mode query in a handful of requests: Metadata, then ListOffsets for all
partitions of a topic at once (earliest, latest, and each timestamp the plan asks), on plain sockets.

The planner used librdkafka's AdminClient and consumer: two clients made and torn down per query, three
calls per partition and a watermark lookup inside every time lookup (about 0.1 s of a 0.4 s query for a
one-hour window), and, against a broker that is down, retries logged line after line until a 15 s
timeout. Here a refused connection fails at once with one line naming the broker, and the answers of a
topic's partitions come in one request per kind of offset, as Kafka's own `KafkaOffsetReaderAdmin` asks
them (`Admin.listOffsets` with every partition). Connections stay open in the planning worker (Spark
reuses it) and are checked before reuse.

Only plaintext without client options the sockets cannot honour; anything else, and any partition-level
error (a leader moving, a partition without a leader), goes to the librdkafka planner, which retries.
"""

from __future__ import annotations

import io
import struct

from kio.index import load_request_schema
from kio.schema.request_header.v1.header import RequestHeader
from kio.serial import entity_writer
from kio.static.primitive import i8, i16, i32, i64

from chronolog.errors import ChronologError, UnknownTopicOrPartitionError
from chronolog.protocol import fetch_client as fc
from chronolog.timetravel.connection import Connection, ConnectionLost, servers
from chronolog.timetravel.sources import OffsetAtTime

LIST_OFFSETS = 2
LIST_OFFSETS_MIN, LIST_OFFSETS_MAX = 1, 5   # v1: one offset per partition; v6 on is flexible
EARLIEST, LATEST = -2, -1                   # ListOffsets' special timestamps
CLIENT_ID = "chronolog-spark-planner"
DEFAULT_CONNECT_TIMEOUT_S = 10.0            # the Java client's socket.connection.setup.timeout.ms

_open: dict[tuple[str, int], Connection] = {}   # kept across queries by the planning worker


class Fallback(Exception):  # noqa: N818 (a signal, not an error a user sees)
    """An answer the socket planner does not handle itself: plan with librdkafka instead."""


def _frame(api_key: int, version: int, correlation_id: int, body) -> bytes:
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    entity_writer(RequestHeader)(out, RequestHeader(request_api_key=i16(api_key), request_api_version=i16(version),
                                                    correlation_id=i32(correlation_id), client_id=CLIENT_ID))
    entity_writer(type(body))(out, body)
    data = bytearray(out.getbuffer())
    struct.pack_into(">i", data, 0, len(data) - 4)
    return bytes(data)


def _connect(host: str, port: int, timeout: float) -> Connection:
    key = (host, port)
    conn = _open.get(key)
    if conn is not None and conn.alive():
        return conn
    if conn is not None:
        conn.close()
    conn = Connection(host, port, timeout, CLIENT_ID)
    _open[key] = conn
    return conn


def _call(key: tuple[str, int], timeout: float, make):
    """One request on a kept connection: `make(conn)` gives the request's frame and the reader of its
    answer. A connection that broke since its last use is made again once."""
    for attempt in (0, 1):
        conn = _connect(*key, timeout)
        frame, read = make(conn)
        try:
            return conn.call([frame], read)
        except ConnectionLost:
            _open.pop(key, None)
            conn.close()
            if attempt:
                raise
    raise AssertionError("unreachable")


def _version(conn: Connection, api_key: int, lo: int, hi: int) -> int:
    version = fc.pick(conn.versions, api_key, lo, hi)
    if version is None:
        raise Fallback
    return version


def _request(cls, **fields):
    """`cls` with the fields its version has (the others are left out)."""
    names = cls.__dataclass_fields__
    return cls(**{k: v for k, v in fields.items() if k in names})


def _reader(api_key: int, version: int):
    return lambda frame, cid: fc.read_response(api_key, version, frame, cid)


class SocketPlanSource:
    """The planner's view of a broker (`topics`, `partitions`, `watermarks`, `offsets_for_time`, `close`,
    as `timetravel.sources.BrokerSource`), each topic's answers fetched for all its partitions at once."""

    def __init__(self, bootstrap: str, timeout: float = DEFAULT_CONNECT_TIMEOUT_S) -> None:
        self.bootstrap = bootstrap
        self.servers = servers(bootstrap)
        self.timeout = timeout
        self._brokers: dict[int, tuple[str, int]] = {}
        self._leaders: dict[str, dict[int, int]] = {}
        self._names: list[str] | None = None
        self._offsets: dict[tuple[str, int], dict[int, tuple[int, int]]] = {}

    # -- metadata ----------------------------------------------------------------------------------
    def _bootstrap_call(self, make):
        reasons = []
        for key in self.servers:
            try:
                return _call(key, self.timeout, make)
            except ConnectionLost as exc:
                reasons.append(str(exc).removeprefix("cannot connect to "))
        raise ChronologError(f"cannot connect to {self.bootstrap} ({'; '.join(reasons)}); is the broker running?")

    def _metadata(self, topics: list[str] | None) -> None:
        def make(conn: Connection):
            version = _version(conn, fc.METADATA, fc.METADATA_MIN, fc.METADATA_MAX)
            cls = load_request_schema(fc.METADATA, version)
            mod = __import__(cls.__module__, fromlist=["MetadataRequestTopic"])
            body = _request(cls, topics=None if topics is None else tuple(mod.MetadataRequestTopic(name=t) for t in topics),
                            allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                            include_topic_authorized_operations=False)
            return _frame(fc.METADATA, version, conn.next_id(), body), _reader(fc.METADATA, version)

        body = self._bootstrap_call(make)
        self._brokers.update({int(b.node_id): (b.host, int(b.port)) for b in body.brokers})
        names = []
        for t in body.topics:
            code = int(t.error_code.value)
            if code == 0:
                names.append(t.name)
                parts = {}
                for p in t.partitions:
                    if int(p.error_code.value) or int(p.leader_id) not in self._brokers:
                        raise Fallback  # a partition without a leader now: librdkafka's planner retries
                    parts[int(p.partition_index)] = int(p.leader_id)
                self._leaders[t.name] = parts
            elif topics is not None and code != 3:  # 3: UNKNOWN_TOPIC_OR_PARTITION, said by partitions()
                raise Fallback
        if topics is None:
            self._names = sorted(n for n in names if not n.startswith("__"))

    def topics(self) -> dict[str, int]:
        if self._names is None:
            self._metadata(None)
        return {name: len(self._leaders.get(name, {})) for name in self._names or []}

    def partitions(self, topic: str) -> list[int]:
        if topic not in self._leaders:
            self._metadata([topic])
        if not self._leaders.get(topic):
            raise UnknownTopicOrPartitionError(f"topic {topic!r} not found on {self.bootstrap}")
        return sorted(self._leaders[topic])

    # -- offsets -----------------------------------------------------------------------------------
    def _list_offsets(self, topic: str, ts: int) -> dict[int, tuple[int, int]]:
        """{partition: (offset, timestamp)} for `ts` (or EARLIEST / LATEST), every partition of the topic,
        one request per leader; offset -1 where no record has a timestamp at or after `ts`."""
        cached = self._offsets.get((topic, ts))
        if cached is not None:
            return cached
        by_leader: dict[int, list[int]] = {}
        for p in self.partitions(topic):
            by_leader.setdefault(self._leaders[topic][p], []).append(p)
        out: dict[int, tuple[int, int]] = {}
        for node, parts in by_leader.items():
            def make(conn: Connection, parts=parts):
                version = _version(conn, LIST_OFFSETS, LIST_OFFSETS_MIN, LIST_OFFSETS_MAX)
                cls = load_request_schema(LIST_OFFSETS, version)
                mod = __import__(cls.__module__, fromlist=["ListOffsetsPartition", "ListOffsetsTopic"])
                partitions = tuple(_request(mod.ListOffsetsPartition, partition_index=i32(p), current_leader_epoch=i32(-1),
                                            timestamp=i64(ts)) for p in parts)
                body = _request(cls, replica_id=i32(-1), isolation_level=i8(0),
                                topics=(mod.ListOffsetsTopic(name=topic, partitions=partitions),))
                return _frame(LIST_OFFSETS, version, conn.next_id(), body), _reader(LIST_OFFSETS, version)

            try:
                body = _call(self._brokers[node], self.timeout, make)
            except ConnectionLost:
                raise Fallback from None  # the leader the metadata named is unreachable: librdkafka retries
            for t in body.topics:
                for p in t.partitions:
                    if int(p.error_code.value):
                        raise Fallback  # NOT_LEADER_OR_FOLLOWER and the like: a leader is moving
                    out[int(p.partition_index)] = (int(p.offset), int(p.timestamp))
        if set(out) != set(self._leaders[topic]):
            raise Fallback
        self._offsets[(topic, ts)] = out
        return out

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        if partition not in self.partitions(topic):
            raise UnknownTopicOrPartitionError(f"partition {topic}-{partition} not found on {self.bootstrap}")
        return self._list_offsets(topic, EARLIEST)[partition][0], self._list_offsets(topic, LATEST)[partition][0]

    def offsets_for_time(self, topic: str, ts: int, partitions: list[int] | None = None) -> dict[int, OffsetAtTime]:
        found = self._list_offsets(topic, ts)
        out = {}
        for p in partitions if partitions is not None else self.partitions(topic):
            low, high = self.watermarks(topic, p)
            offset, stamp = found[p]
            hit = offset >= 0
            out[p] = OffsetAtTime(p, offset if hit else high, stamp if hit else -1, hit, low, high)
        return out

    def close(self) -> None:
        """The connections stay open for the next query of this worker (see the module's docstring)."""


def close_all() -> None:
    for conn in list(_open.values()):
        conn.close()
    _open.clear()


__all__ = ["Fallback", "SocketPlanSource", "close_all"]
