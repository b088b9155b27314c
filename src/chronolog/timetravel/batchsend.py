"""An idempotent producer of ready record batches, for tools that build whole batches themselves
(`chronolog produce` encodes a block of lines at a time with `records.encode`): no Python call per record.

It does what librdkafka's idempotent producer does for one topic (KIP-98): an InitProducerId without a
transactional id, then each partition's batches, encoded with the producer id, epoch and the partition's
next sequence number (`producer`), sent in order with acks=all. A batch whose answer was lost is sent again with the
same sequence, so the broker writes it at most once (DUPLICATE_SEQUENCE_NUMBER answers a copy it
already has); `send` returns only when every batch it was given is acknowledged, so a caller can count
what is done. One request is in flight at a time.
"""

from __future__ import annotations

import struct
import time
from collections import deque

from chronolog.errors import ChronologError, ErrorCode
from chronolog.protocol import fetch_client as fc
from chronolog.protocol import produce_client as pc
from chronolog.timetravel.connection import Connection, ConnectionLost, servers

INIT_PRODUCER_ID = 22
DESCRIBE_CONFIGS = 32
# Kafka's RetriableException codes a produce can meet while leaders move or the broker restarts
RETRIABLE = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE,
                       ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NETWORK_EXCEPTION,
                       ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                       ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                       ErrorCode.NOT_COORDINATOR, ErrorCode.CONCURRENT_TRANSACTIONS})


_NO_TXN = struct.pack(">hi", -1, 60000)  # InitProducerId: transactional_id null, transaction_timeout_ms


class BatchSender:
    """Sends batches of one topic's partitions to their leaders, idempotently."""

    def __init__(self, bootstrap: str, topic: str, client_id: str = "chronolog-produce", timeout_s: float = 30.0,
                 delivery_timeout_s: float = 120.0) -> None:
        self.servers = servers(bootstrap)
        self.topic = topic
        self.client_id = client_id
        self.timeout = timeout_s
        self.delivery_timeout = delivery_timeout_s
        self._conns: dict[tuple[str, int], Connection] = {}
        self.leaders: dict[int, tuple[str, int] | None] = {}
        self._refresh()
        self.producer_id, self.epoch = self._init_producer_id()
        self._sequence = dict.fromkeys(self.leaders, 0)

    @property
    def partitions(self) -> list[int]:
        return sorted(self.leaders)

    def _conn(self, where: tuple[str, int]) -> Connection:
        conn = self._conns.get(where)
        if conn is None:
            conn = self._conns[where] = Connection(*where, self.timeout, self.client_id)
        return conn

    def _drop(self, where: tuple[str, int]) -> None:
        conn = self._conns.pop(where, None)
        if conn is not None:
            conn.close()

    def _any(self, call):
        """`call(conn)` on the first bootstrap server (or known broker) that answers."""
        last: Exception | None = None
        for where in [*self._conns, *self.servers]:
            try:
                return call(self._conn(where))
            except ConnectionLost as exc:
                self._drop(where)
                last = exc
        raise ChronologError(f"{last}; is the broker running?")

    def _refresh(self) -> None:
        def ask(conn: Connection) -> fc.Metadata:
            version = fc.pick(conn.versions, fc.METADATA, fc.METADATA_MIN, fc.METADATA_MAX)
            if version is None:
                raise ChronologError(f"{conn.where} answers no Metadata version from {fc.METADATA_MIN} on")
            return conn.call([fc.metadata_request(version, conn.next_id(), self.client_id, self.topic)],
                             lambda frame, cid: fc.read_metadata(version, frame, cid, self.topic))
        md = self._any(ask)
        if md.topic_error is None or md.topic_error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise ChronologError(f"topic {self.topic!r} not found")
        if md.topic_error:
            raise ChronologError(f"topic {self.topic!r}: {ErrorCode(md.topic_error).name}")
        self.leaders = {p: md.brokers.get(found.leader) if not found.error_code else None
                        for p, found in md.partitions.items()}

    def _init_producer_id(self) -> tuple[int, int]:
        """InitProducerId without a transactional id: a new producer id for idempotent writes (KIP-98)."""
        def ask(conn: Connection) -> tuple[int, int]:
            version = fc.pick(conn.versions, INIT_PRODUCER_ID, 0, 1)  # v2+ are flexible; 0-1 carry all we need
            if version is None:
                raise ChronologError(f"{conn.where} answers no InitProducerId v0-v1: idempotent writes need it")
            # a null transactional id and transaction_timeout_ms (InitProducerIdRequest.json v0-v1, not flexible)
            data = fc.request_frame(INIT_PRODUCER_ID, version, conn.next_id(), self.client_id, _NO_TXN)

            def read(frame: bytes, cid: int) -> tuple[int, int, int]:
                r = fc.answer(frame, cid, f"InitProducerIdResponse v{version}")
                r.i32()  # throttle_time_ms
                return r.i16(), r.i64(), r.i16()
            return conn.call([data], read)
        deadline = time.monotonic() + self.timeout
        tries = 0
        while True:  # a broker that has just started answers COORDINATOR_LOAD_IN_PROGRESS for a while (Kafka)
            code, producer_id, epoch = self._any(ask)
            if not code:
                return producer_id, epoch
            if code not in RETRIABLE or time.monotonic() >= deadline:
                raise ChronologError(f"InitProducerId: {ErrorCode(code).name}")
            tries += 1
            time.sleep(min(0.05 * 2 ** min(tries, 5), 1.0))

    def topic_config(self, name: str) -> str | None:
        """One of the topic's configs (DescribeConfigs v1, DescribeConfigsRequest/Response.json), None when
        it cannot be read."""
        def ask(conn: Connection) -> str | None:
            if fc.pick(conn.versions, DESCRIBE_CONFIGS, 1, 1) is None:
                return None
            body = bytearray(struct.pack(">ib", 1, 2))  # one resource, of type TOPIC
            fc.put_string(body, self.topic)
            body += struct.pack(">i", 1)                # configuration_keys: this one
            fc.put_string(body, name)
            body += b"\0"                               # include_synonyms
            data = fc.request_frame(DESCRIBE_CONFIGS, 1, conn.next_id(), self.client_id, body)

            def read(frame: bytes, cid: int) -> str | None:
                r = fc.answer(frame, cid, "DescribeConfigsResponse v1")
                r.i32()  # throttle_time_ms
                found = None
                for _ in range(r.count()):
                    error = r.i16()
                    r.string(), r.i8(), r.string()  # error_message, resource_type, resource_name
                    for _ in range(r.count()):
                        key, value = r.string(), r.string()
                        r.i8(), r.i8(), r.i8()  # read_only, config_source, is_sensitive
                        for _ in range(r.count()):  # synonyms
                            r.string(), r.string(), r.i8()
                        if key == name and not error and found is None:
                            found = value
                return found
            return conn.call([data], read)
        try:
            return self._any(ask)
        except ChronologError:
            return None

    def producer(self, partition: int, records: int) -> tuple[int, int, int]:
        """(producer id, epoch, base sequence) for the next `records` records of `partition`, to encode
        them with (`records.encode.encode_batches(producer=...)`); batches so numbered must be sent in
        the order they were numbered."""
        base = self._sequence[partition]
        self._sequence[partition] = (base + records) % (1 << 31)  # DefaultRecordBatch.incrementSequence
        return self.producer_id, self.epoch, base

    def send(self, batches: dict[int, list[bytes]]) -> None:
        """Every batch (numbered by `producer`) to its partition, in order per partition; returns when all are
        acknowledged (acks=all), raises ChronologError when one cannot be written."""
        pending = {p: deque(bs) for p, bs in batches.items() if bs}
        deadline = time.monotonic() + self.delivery_timeout
        failures = 0
        while pending:
            problem = ""
            by_leader: dict[tuple[str, int], dict[int, bytes]] = {}
            for p, queue in pending.items():
                where = self.leaders.get(p)
                if where is None:
                    problem = f"{self.topic}-{p} has no leader"
                else:
                    by_leader.setdefault(where, {})[p] = queue[0]
            for where, chosen in by_leader.items():
                try:
                    answers = self._produce(where, chosen)
                except ConnectionLost as exc:
                    self._drop(where)
                    problem = str(exc)
                    continue
                for p in chosen:
                    answer = answers.get((self.topic, p))
                    code = answer.error_code if answer is not None else ErrorCode.UNKNOWN_SERVER_ERROR
                    if code in (0, ErrorCode.DUPLICATE_SEQUENCE_NUMBER):  # written, now or by an earlier try
                        pending[p].popleft()
                        if not pending[p]:
                            del pending[p]
                    elif code in RETRIABLE:
                        problem = f"{self.topic}-{p}: {ErrorCode(code).name}"
                    else:
                        name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
                        detail = f" ({answer.message})" if answer is not None and answer.message else ""
                        raise ChronologError(f"produce to {self.topic}-{p} failed: {name}{detail}")
            if problem and pending:
                failures += 1
                if time.monotonic() >= deadline:
                    raise ChronologError(f"produce to {self.topic} failed after {failures} tries: {problem}")
                time.sleep(min(0.1 * 2 ** min(failures - 1, 4), 1.0))
                try:
                    self._refresh()
                except ChronologError:
                    pass  # no broker now: the next round tries again, until the deadline

    def _produce(self, where: tuple[str, int], chosen: dict[int, bytes]) -> dict:
        conn = self._conn(where)
        version = fc.pick(conn.versions, pc.PRODUCE, pc.PRODUCE_MIN, pc.PRODUCE_MAX)
        if version is None:
            raise ChronologError(f"{conn.where} answers no Produce version from {pc.PRODUCE_MIN} to "
                                 f"{pc.PRODUCE_MAX}")
        pieces = pc.produce_request(version, conn.next_id(), self.client_id, -1, int(self.timeout * 1000),
                                    {self.topic: chosen})
        return conn.call(pieces, lambda frame, cid: pc.read_produce(version, frame, cid))

    def close(self) -> None:
        for where in list(self._conns):
            self._drop(where)
