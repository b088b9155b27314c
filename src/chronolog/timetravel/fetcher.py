"""Raw record batches of one partition from any Kafka-protocol broker: the socket loop around
`protocol.fetch_client`, plain TCP (PLAINTEXT). Readers that need TLS or SASL use librdkafka instead
(`RAW_FETCH_OPTIONS` says which client options this loop honours).

The leader of the partition is found with Metadata from the bootstrap servers; Fetch requests go to it,
one partition at a time, and the records of each answer are handed to the caller as bytes (a torn last
batch, cut by the size limit, is fetched again from its offset by the next request, as every consumer
does). A leader change (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH) refreshes
the metadata and retries, a few times.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from chronolog.errors import ChronologError, ErrorCode
from chronolog.protocol import fetch_client as fc
from chronolog.timetravel.connection import Connection, servers

# librdkafka option names (as Spark's `kafka.` options carry them) that this loop honours; a query given
# any other keeps the librdkafka reader.
RAW_FETCH_OPTIONS = frozenset({"bootstrap.servers", "client.id", "isolation.level", "fetch.max.bytes",
                               "max.partition.fetch.bytes", "socket.timeout.ms", "security.protocol"})
_RETRIABLE = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.FENCED_LEADER_EPOCH,
              ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.REQUEST_TIMED_OUT}


def unsupported_options(conf: dict[str, str]) -> list[str]:
    """The client options a raw fetch cannot honour (anything but plaintext included)."""
    out = sorted(k for k in conf if k not in RAW_FETCH_OPTIONS)
    proto = conf.get("security.protocol", "plaintext").lower()
    if proto != "plaintext":
        out.append(f"security.protocol={proto}")
    return out


class RawFetcher:
    """Fetches raw batches of partitions of one topic from their leaders."""

    def __init__(self, bootstrap: str, *, client_id: str = "chronolog-reader", timeout: float = 30.0,
                 max_bytes: int = 8 << 20, isolation_level: int = fc.READ_UNCOMMITTED) -> None:
        self.servers = servers(bootstrap)
        self.bootstrap = bootstrap
        self.client_id = client_id
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.isolation_level = isolation_level
        self._conns: dict[tuple[str, int], Connection] = {}
        self._leaders: dict[tuple[str, int], tuple[str, int]] = {}

    def _conn(self, host: str, port: int) -> Connection:
        key = (host, port)
        if key not in self._conns:
            self._conns[key] = Connection(host, port, self.timeout, self.client_id)
        return self._conns[key]

    def _bootstrap_conn(self) -> Connection:
        last = None
        for host, port in self.servers:
            try:
                return self._conn(host, port)
            except ChronologError as exc:
                last = exc
        raise last  # type: ignore[misc]

    def metadata(self, topic: str) -> fc.Metadata:
        """The topic's partitions and leaders (never creating the topic: allow_auto_topic_creation false)."""
        conn = self._bootstrap_conn()
        version = fc.pick(conn.versions, fc.METADATA, fc.METADATA_MIN, fc.METADATA_MAX)
        if version is None:
            raise ChronologError(f"{conn.where} answers no Metadata version we speak")
        md = conn.call([fc.metadata_request(version, conn.next_id(), self.client_id, topic)],
                       lambda frame, cid: fc.read_metadata(version, frame, cid, topic))
        if md.topic_error is None or md.topic_error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION or not md.partitions:
            raise ChronologError(f"topic {topic!r} not found on {self.bootstrap}")
        return md

    def partitions(self, topic: str) -> list[int]:
        return sorted(self.metadata(topic).partitions)

    def leader(self, topic: str, partition: int, refresh: bool = False) -> tuple[str, int]:
        key = (topic, partition)
        if refresh or key not in self._leaders:
            md = self.metadata(topic)
            found = md.partitions.get(partition)
            if found is None:
                raise ChronologError(f"{topic}-{partition} not found on {self.bootstrap}")
            if found.error_code or found.leader not in md.brokers:
                raise ChronologError(f"{topic}-{partition} has no leader on {self.bootstrap} "
                                     f"({ErrorCode(found.error_code).name if found.error_code else 'leader unknown'})")
            self._leaders[key] = md.brokers[found.leader]
        return self._leaders[key]

    def fetch(self, topic: str, partition: int, offset: int) -> fc.PartitionFetch:
        """One Fetch of `offset` from the partition's leader, retrying leader moves a few times."""
        deadline = time.monotonic() + self.timeout
        refresh = False
        while True:
            host, port = self.leader(topic, partition, refresh)
            conn = self._conn(host, port)
            version = fc.pick(conn.versions, fc.FETCH, fc.FETCH_MIN, fc.FETCH_MAX)
            if version is None:
                raise ChronologError(f"{conn.where} answers no Fetch version from {fc.FETCH_MIN} on")
            request = fc.fetch_request(version, conn.next_id(), self.client_id, topic, partition, offset,
                                       max_bytes=self.max_bytes, isolation_level=self.isolation_level)
            answer = conn.call([request], lambda frame, cid, v=version: fc.read_fetch(v, frame, cid, topic, partition))
            if answer.error_code in _RETRIABLE and time.monotonic() < deadline:
                refresh = True
                continue
            if answer.error_code:
                name = ErrorCode(answer.error_code).name
                if answer.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    raise ChronologError(f"offset {offset} of {topic}-{partition} is out of range on "
                                         f"{conn.where} (deleted by retention?)")
                raise ChronologError(f"fetching {topic}-{partition} at offset {offset} from {conn.where}: {name}")
            return answer

    def batches(self, topic: str, partition: int, start: int, end: int,
                next_offset) -> Iterator[fc.PartitionFetch]:
        """Fetch answers from `start` until `next_offset()` (the caller's decoder position after each
        answer) reaches `end` or the readable end (the high watermark, or the last stable offset under
        read_committed)."""
        offset = start
        while offset < end:
            answer = self.fetch(topic, partition, offset)
            stop = answer.last_stable_offset if self.isolation_level == fc.READ_COMMITTED and \
                answer.last_stable_offset >= 0 else answer.high_watermark
            yield answer
            moved = next_offset()
            if moved <= offset:
                if offset >= stop or not answer.records:
                    return
                raise ChronologError(f"{topic}-{partition}: no whole batch at offset {offset} in "
                                     f"{len(answer.records)} bytes from {self.bootstrap}")
            offset = moved
            if offset >= stop:
                return

    def close(self) -> None:
        conns, self._conns = list(self._conns.values()), {}
        for c in conns:
            c.close()
