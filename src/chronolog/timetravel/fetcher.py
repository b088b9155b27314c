"""Raw record batches of one partition from any Kafka-protocol broker: the socket loop around
`protocol.fetch_client`, plain TCP (PLAINTEXT). Readers that need TLS or SASL use librdkafka instead
(`RAW_FETCH_OPTIONS` says which client options this loop honours).

The leader of the partition is found with Metadata from the bootstrap servers; Fetch requests go to it,
one partition at a time, and the records of each answer are handed to the caller as bytes (a torn last
batch, cut by the size limit, is fetched again from its offset by the next request, as every consumer
does). A leader change (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH) refreshes
the metadata and retries. So does a leader that stopped answering while another broker of the cluster still
answers Metadata: a node of a cluster died, and its partitions get new leaders once its broker session
expires (`broker.session.timeout.ms`, 9 s by default), so the fetch waits for that, as Kafka's consumer does
(`retry_for` seconds at most, then one line saying what to do). When no broker answers at all, the error
comes at once: there is nothing to wait for.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator

from chronolog.errors import ChronologError, ErrorCode
from chronolog.protocol import fetch_client as fc
from chronolog.timetravel.connection import Connection, ConnectionLost, servers
from chronolog.timetravel.offsetanswer import OffsetAtTime

# librdkafka option names (as Spark's `kafka.` options carry them) that this loop honours; a query given
# any other keeps the librdkafka reader.
RAW_FETCH_OPTIONS = frozenset({"bootstrap.servers", "client.id", "isolation.level", "fetch.max.bytes",
                               "max.partition.fetch.bytes", "socket.timeout.ms", "security.protocol"})
RETRY_FOR_S = 60.0  # a dead node's partitions move after its session (9 s) and an election: BrokerSource's bound
# OFFSET_NOT_AVAILABLE: a new leader whose high watermark is not yet past its epoch start (KIP-207)
_RETRIABLE = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.FENCED_LEADER_EPOCH,
              ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.OFFSET_NOT_AVAILABLE}


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
                 max_bytes: int = 8 << 20, isolation_level: int = fc.READ_UNCOMMITTED,
                 retry_for: float = RETRY_FOR_S) -> None:
        self.servers = servers(bootstrap)
        self.bootstrap = bootstrap
        self.client_id = client_id
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.isolation_level = isolation_level
        self.retry_for = retry_for
        self._conns: dict[tuple[str, int], Connection] = {}
        self._leaders: dict[tuple[str, int], tuple[str, int]] = {}
        self._brokers: list[tuple[str, int]] = []  # the cluster's brokers, from the last Metadata answer
        self.prefetch = False  # `batches` keeps one Fetch ahead (a thread): for a reader that decodes meanwhile

    def _conn(self, host: str, port: int) -> Connection:
        key = (host, port)
        if key not in self._conns:
            self._conns[key] = Connection(host, port, self.timeout, self.client_id)
        return self._conns[key]

    def _drop(self, host: str, port: int) -> None:
        conn = self._conns.pop((host, port), None)
        if conn is not None:
            conn.close()

    def metadata(self, topic: str) -> fc.Metadata:
        """The topic's partitions and leaders (never creating the topic: allow_auto_topic_creation false),
        from the first bootstrap server or known broker that answers; `ConnectionLost` when none does."""
        last: ConnectionLost | None = None
        for host, port in dict.fromkeys([*self.servers, *self._brokers]):
            try:
                conn = self._conn(host, port)
                version = fc.pick(conn.versions, fc.METADATA, fc.METADATA_MIN, fc.METADATA_MAX)
                if version is None:
                    raise ChronologError(f"{conn.where} answers no Metadata version we speak")
                md = conn.call([fc.metadata_request(version, conn.next_id(), self.client_id, topic)],
                               lambda frame, cid, v=version: fc.read_metadata(v, frame, cid, topic))
            except ConnectionLost as exc:
                self._drop(host, port)
                last = exc
                continue
            self._brokers = list(md.brokers.values())
            if md.topic_error is None or md.topic_error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION or not md.partitions:
                raise ChronologError(f"topic {topic!r} not found on {self.bootstrap}")
            for p, found in md.partitions.items():  # every leader known from one answer, not one ask each
                if not found.error_code and found.leader in md.brokers:
                    self._leaders[(topic, p)] = md.brokers[found.leader]
                else:
                    self._leaders.pop((topic, p), None)
            return md
        raise ConnectionLost(f"{last}; is the broker running?" if len(self.servers) == 1 and last else
                             f"no broker of {self.bootstrap} answers ({last}); is the cluster running?")

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
                raise _NoLeader(f"no leader on {self.bootstrap} "
                                f"({ErrorCode(found.error_code).name if found.error_code else 'leader unknown'})")
            self._leaders[key] = md.brokers[found.leader]
        return self._leaders[key]

    def offsets_for_time(self, topic: str, ts: int, partitions: list[int]) -> dict[int, OffsetAtTime]:
        """Per partition, the first offset with timestamp >= `ts` (ListOffsets by time, KIP-79), the log start
        and the readable end (the last stable offset under read_committed), as `BrokerSource` answers them:
        each leader is asked its three ListOffsets at once (one round trip), again while leaders move."""
        deadline = time.monotonic() + self.retry_for
        refresh = False
        while True:
            try:
                return self._offsets_once(topic, ts, partitions, refresh)
            except _Unreachable as exc:
                raise ConnectionLost(str(exc)) from None
            except (ConnectionLost, _NoLeader) as exc:
                if time.monotonic() >= deadline:
                    raise ChronologError(f"offsets for time in {topic}: {exc}, for {self.retry_for:.0f} s") from None
            time.sleep(0.2)
            refresh = True

    def _offsets_once(self, topic: str, ts: int, partitions: list[int], refresh: bool) -> dict[int, OffsetAtTime]:
        try:
            if refresh:
                self.metadata(topic)
            by_leader: dict[tuple[str, int], list[int]] = {}
            for p in partitions:
                by_leader.setdefault(self.leader(topic, p), []).append(p)
        except ConnectionLost as exc:
            raise _Unreachable(str(exc)) from None
        out = {}
        for (host, port), parts in by_leader.items():
            try:
                conn = self._conn(host, port)
                version = fc.pick(conn.versions, fc.LIST_OFFSETS, fc.LIST_OFFSETS_MIN, fc.LIST_OFFSETS_MAX)
                if version is None:
                    raise ChronologError(f"{conn.where} answers no ListOffsets version from {fc.LIST_OFFSETS_MIN} on")
                asked = []
                for target in (ts, fc.EARLIEST, fc.LATEST):
                    cid = conn.next_id()
                    conn.send([fc.list_offsets_request(version, cid, self.client_id, topic, dict.fromkeys(parts, target),
                                                       self.isolation_level)])
                    asked.append(cid)
                at, low, high = (conn.receive(lambda frame, c, v=version: fc.read_list_offsets(v, frame, c, topic), cid)
                                 for cid in asked)
            except ConnectionLost as exc:
                self._drop(host, port)
                raise ConnectionLost(f"its leader {host}:{port} does not answer ({exc})") from None
            for p in parts:
                answers = [a.get(p, (ErrorCode.UNKNOWN_SERVER_ERROR, -1, -1)) for a in (at, low, high)]
                code = next((c for c, _, _ in answers if c), 0)
                if code in _RETRIABLE or code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    raise _NoLeader(f"{topic}-{p}: {ErrorCode(code).name}")
                if code:
                    name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
                    raise ChronologError(f"offsets for time in {topic}-{p}: {name}{_HINTS.get(code, '')}")
                (_, found_ts, found), (_, _, start), (_, _, end) = answers
                hit = found >= 0
                out[p] = OffsetAtTime(p, found if hit else end, found_ts if hit else -1, hit, start, end)
        return dict(sorted(out.items()))

    def fetch(self, topic: str, partition: int, offset: int) -> fc.PartitionFetch:
        """One Fetch of `offset` from the partition's leader, again while the leader moves or, with the rest of
        the cluster answering, does not answer (at most `retry_for` seconds)."""
        deadline = time.monotonic() + self.retry_for
        refresh = False
        while True:
            try:
                answer, where = self._fetch_once(topic, partition, offset, refresh)
            except _Unreachable as exc:  # no broker answers Metadata: nothing to wait for
                raise ConnectionLost(str(exc)) from None
            except (ConnectionLost, _NoLeader) as exc:
                if time.monotonic() >= deadline:
                    raise ChronologError(f"{topic}-{partition}: {exc}, and no other broker took it over within "
                                         f"{self.retry_for:.0f} s; start that broker again, or check that the "
                                         "partition has an in-sync replica") from None
                time.sleep(0.2)  # as librdkafka's retry.backoff.ms
                refresh = True
                continue
            if answer.error_code in _RETRIABLE and time.monotonic() < deadline:
                time.sleep(0.05)
                refresh = True
                continue
            if answer.error_code:
                name = ErrorCode(answer.error_code).name
                if answer.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    raise ChronologError(f"offset {offset} of {topic}-{partition} is out of range on {where}: "
                                         "deleted by retention meanwhile? Run it again to read from the log start")
                raise ChronologError(f"fetching {topic}-{partition} at offset {offset} from {where}: {name}"
                                     f"{_HINTS.get(answer.error_code, '')}")
            return answer

    def _fetch_once(self, topic: str, partition: int, offset: int, refresh: bool) -> tuple[fc.PartitionFetch, str]:
        try:
            host, port = self.leader(topic, partition, refresh)
        except ConnectionLost as exc:
            raise _Unreachable(str(exc)) from None
        try:
            conn = self._conn(host, port)
            version = fc.pick(conn.versions, fc.FETCH, fc.FETCH_MIN, fc.FETCH_MAX)
            if version is None:
                raise ChronologError(f"{conn.where} answers no Fetch version from {fc.FETCH_MIN} on")
            request = fc.fetch_request(version, conn.next_id(), self.client_id, topic, partition, offset,
                                       max_bytes=self.max_bytes, isolation_level=self.isolation_level)
            return conn.call([request], lambda frame, cid, v=version: fc.read_fetch(v, frame, cid, topic,
                                                                                    partition)), conn.where
        except ConnectionLost as exc:
            self._drop(host, port)  # the leader died or moved: ask the cluster where the partition went
            raise ConnectionLost(f"its leader {host}:{port} does not answer ({exc})") from None

    def _ahead(self, topic: str, partition: int, offset: int) -> _Ahead:
        """The Fetch of `offset` sent now, its answer read when asked for: the broker reads it while the
        caller decodes the one before (one request in flight on the connection, as Kafka answers them)."""
        try:
            host, port = self.leader(topic, partition)
            conn = self._conn(host, port)
            version = fc.pick(conn.versions, fc.FETCH, fc.FETCH_MIN, fc.FETCH_MAX)
            if version is not None:
                cid = conn.next_id()
                conn.send([fc.fetch_request(version, cid, self.client_id, topic, partition, offset,
                                            max_bytes=self.max_bytes, isolation_level=self.isolation_level)])
                return _Ahead(self, topic, partition, offset, (host, port), conn, version, cid)
        except ChronologError:
            pass  # nothing sent: the answer is fetched (with its retries) when asked for
        return _Ahead(self, topic, partition, offset)

    def batches(self, topic: str, partition: int, start: int, end: int,
                next_offset) -> Iterator[fc.PartitionFetch]:
        """Fetch answers from `start` until `next_offset()` (the caller's decoder position after each
        answer) reaches `end` or the readable end (the high watermark, or the last stable offset under
        read_committed). With `prefetch` set, the next Fetch (from the end of the answer's last whole batch)
        is under way in a thread while the caller decodes the answer, as a consumer's fetcher keeps one
        ahead; it is used only when the caller's position agrees."""
        offset = start
        ahead: _Ahead | None = None
        behind: float | None = None  # when waiting for a high watermark to come back up to `end` ends
        try:
            while offset < end:
                if ahead is not None and ahead.offset == offset:
                    answer = ahead.result()
                else:
                    if ahead is not None:
                        ahead.wait()  # one request at a time on a connection
                    answer = self.fetch(topic, partition, offset)
                ahead = None
                stop = answer.last_stable_offset if self.isolation_level == fc.READ_COMMITTED and \
                    answer.last_stable_offset >= 0 else answer.high_watermark
                if self.prefetch:
                    guess = _after_whole_batches(answer.records)
                    if guess is not None and offset < guess < min(end, stop):
                        ahead = self._ahead(topic, partition, guess)
                yield answer
                moved = next_offset()
                if moved > offset:
                    offset = moved
                    if offset < stop or stop >= end:
                        continue  # more to read, or the end reached
                elif answer.records and offset < stop:
                    raise ChronologError(f"{topic}-{partition}: no whole batch at offset {offset} in "
                                         f"{len(answer.records)} bytes from {self.bootstrap}")
                if answer.high_watermark >= end:
                    return  # the readable end: the last stable offset under read_committed
                # The high watermark is below the end the caller planned from an earlier answer: a new leader
                # that has not learned it yet (its followers' fetches advance it), or records lost with an
                # unclean election. Never a short read that looks whole: wait, then say so.
                behind = time.monotonic() + self.retry_for if behind is None else behind
                if time.monotonic() >= behind:
                    raise ChronologError(f"{topic}-{partition}: the broker's end offset stayed at "
                                         f"{answer.high_watermark}, below the {end} it answered before, for "
                                         f"{self.retry_for:.0f} s (a new leader still catching up, or records lost "
                                         "in an unclean leader election): run it again later")
                time.sleep(0.2)
        finally:
            if ahead is not None:
                ahead.wait()

    def close(self) -> None:
        conns, self._conns = list(self._conns.values()), {}
        for c in conns:
            c.close()


class _Ahead:
    """A Fetch sent ahead (`RawFetcher._ahead`): its answer, or, when that is an error or the connection
    broke, the answer of a new `fetch` with its retries, as if nothing had been sent ahead."""

    def __init__(self, fetcher: RawFetcher, topic: str, partition: int, offset: int, where=None, conn=None,
                 version: int = 0, cid: int = 0) -> None:
        self.offset = offset
        self._args = (fetcher, topic, partition, offset, where, conn, version, cid)
        self._answer: fc.PartitionFetch | None = None

    def _read(self) -> fc.PartitionFetch | None:
        fetcher, topic, partition, _offset, where, conn, version, cid = self._args
        if conn is None:
            return None
        self._args = (*self._args[:5], None, 0, 0)  # read once
        try:
            answer = conn.receive(lambda frame, c: fc.read_fetch(version, frame, c, topic, partition), cid)
        except ConnectionLost:
            fetcher._drop(*where)
            return None
        return None if answer.error_code else answer

    def wait(self) -> None:
        """Read the answer off the connection (before another request is sent on it)."""
        if self._answer is None:
            self._answer = self._read()

    def result(self) -> fc.PartitionFetch:
        self.wait()
        if self._answer is not None:
            return self._answer
        fetcher, topic, partition, offset = self._args[:4]
        return fetcher.fetch(topic, partition, offset)


def _after_whole_batches(records) -> int | None:
    """The offset after the last whole batch (v2) or message (v0/v1) in a Fetch answer's records, from the
    headers alone; None when there is none."""
    pos, n, after = 0, len(records), None
    while n - pos >= 17:
        base, size = _BATCH_HEAD.unpack_from(records, pos)
        if size < 14 or n - pos < 12 + size:
            break
        after = base + _DELTA.unpack_from(records, pos + 23)[0] + 1 if records[pos + 16] == 2 and size >= 49 \
            else base + 1
        pos += 12 + size
    return after


_BATCH_HEAD = struct.Struct(">qi")
_DELTA = struct.Struct(">i")  # lastOffsetDelta of a v2 batch, at byte 23


class _NoLeader(ChronologError):
    """The cluster names no leader for the partition yet (an election is under way)."""


class _Unreachable(ConnectionLost):
    """No bootstrap server or known broker answers Metadata: waiting would not help."""


_HINTS = {ErrorCode.TOPIC_AUTHORIZATION_FAILED: " (no READ permission on the topic: ask for a READ ACL)",
          ErrorCode.CORRUPT_MESSAGE: " (the broker found a corrupt batch: `chronolog check` on its data dir)",
          ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: " (deleted meanwhile?)"}
