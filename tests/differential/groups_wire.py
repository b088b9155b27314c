"""Group and transaction requests over plain sockets, the same bytes to chronolog and to Kafka: a KIP-848
member driven by its ConsumerGroupHeartbeats, a classic member by JoinGroup/SyncGroup, a transactional
producer by InitProducerId/AddOffsetsToTxn/TxnOffsetCommit/EndTxn. What the group and transaction
differential tests compare where a client library would retry or hide an error code."""

from __future__ import annotations

import struct
import time
import uuid
from typing import Any

from tests.differential.admin_wire import plain, request


def request_newer(port: int, api_key: int, version: int, values: dict) -> dict:
    """`admin_wire.request` through chronolog's own schemas for the versions kio lacks (protocol.newer_schemas):
    TxnOffsetCommit v6, DeleteGroups v3."""
    import io
    import socket

    from kio.schema.request_header.v2.header import RequestHeader
    from kio.schema.response_header.v1.header import ResponseHeader
    from kio.serial import entity_reader, entity_writer
    from kio.static.primitive import i16, i32

    from chronolog.protocol import codec
    from tests.frames import recv_frame

    req_cls, resp_cls = codec.request_schema(api_key, version), codec.response_schema(api_key, version)
    buf = io.BytesIO()
    entity_writer(RequestHeader)(buf, RequestHeader(request_api_key=i16(api_key), request_api_version=i16(version),
                                                    correlation_id=i32(12), client_id="differential"))
    entity_writer(req_cls)(buf, codec.build(req_cls, values))
    frame = buf.getvalue()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        payload = recv_frame(sock)
    header, used = entity_reader(ResponseHeader)(payload, 0)
    assert header.correlation_id == 12
    return plain(entity_reader(resp_cls)(payload, used)[0])

# Kafka's error codes the scenarios name
NONE, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS = 0, 16, 15, 14
ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS = 22, 25, 27
MEMBER_ID_REQUIRED, FENCED_INSTANCE_ID = 79, 82
CONCURRENT_TRANSACTIONS = 51
RETRIABLE = {NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS}


def port_of(side: Any) -> int:
    return int(side.bootstrap.rsplit(":", 1)[1])


NEWER = {(28, 6), (42, 3)}  # versions kio has no schema for


def call(side: Any, api_key: int, version: int, **values: Any) -> dict:
    if (api_key, version) in NEWER:
        return request_newer(port_of(side), api_key, version, values)
    return request(port_of(side), api_key, version, values)


def retry(side: Any, api_key: int, version: int, error_of: Any = None, timeout: float = 30, **values: Any) -> dict:
    """The request again while its error is a retriable coordinator error (the coordinator loading, the
    internal topic being created, a transaction still completing)."""
    error_of = error_of or (lambda r: r["error_code"])
    deadline = time.monotonic() + timeout
    while True:
        answer = call(side, api_key, version, **values)
        if error_of(answer) not in RETRIABLE or time.monotonic() > deadline:
            return answer
        time.sleep(0.05)


def coordinator_ready(side: Any, key: str, key_type: int = 0) -> None:
    """FindCoordinator until it answers: Kafka creates `__consumer_offsets`/`__transaction_state` here."""
    answer = retry(side, 10, 4, error_of=lambda r: r["coordinators"][0]["error_code"], key_type=key_type,
                   coordinator_keys=[key])
    assert answer["coordinators"][0]["error_code"] == 0, answer


def topic_id(side: Any, name: str) -> str:
    answer = call(side, 3, 12, topics=[{"name": name}], allow_auto_topic_creation=False)
    (topic,) = answer["topics"]
    assert topic["error_code"] == 0, topic
    return topic["topic_id"]


# -- KIP-848 members --------------------------------------------------------------------------------------
def heartbeat(side: Any, group: str, *, member_id: str = "", epoch: int = 0, topics: list[str] | None = None,
              regex: str | None = None, instance_id: str | None = None, owned: list[dict] | None = None,
              rebalance_ms: int = 30000, version: int = 1) -> dict:
    return retry(side, 68, version, group_id=group, member_id=member_id, member_epoch=epoch, instance_id=instance_id,
                 rebalance_timeout=rebalance_ms if epoch == 0 else -1, subscribed_topic_names=topics,
                 subscribed_topic_regex=regex, topic_partitions=owned if owned is not None else ([] if epoch == 0
                                                                                                 else None))


class Member848:
    """A KIP-848 member that reconciles as the Java consumer does: it reports what it owns on every
    heartbeat and takes whatever assignment the coordinator hands it."""

    def __init__(self, side: Any, group: str, *, topics: list[str] | None = None, regex: str | None = None,
                 instance_id: str | None = None) -> None:
        self.side, self.group = side, group
        self.member_id = str(uuid.uuid4())
        self.epoch = 0
        self.owned: list[dict] = []
        first = heartbeat(side, group, member_id=self.member_id, topics=topics if topics is not None else
                          ([] if regex else None), regex=regex, instance_id=instance_id)
        assert first["error_code"] == 0, first
        self._take(first)

    def _take(self, answer: dict) -> None:
        self.epoch = answer["member_epoch"]
        if answer["assignment"] is not None:
            self.owned = [{"topic_id": t["topic_id"], "partitions": sorted(t["partitions"])}
                          for t in answer["assignment"]["topic_partitions"]]

    def beat(self) -> dict:
        answer = heartbeat(self.side, self.group, member_id=self.member_id, epoch=self.epoch, owned=self.owned)
        if answer["error_code"] == 0:
            self._take(answer)
        return answer

    def settle(self, until: Any = None, timeout: float = 20) -> None:
        """Heartbeat until `until(self)` (default: the answer repeats: nothing left to reconcile)."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            answer = self.beat()
            assert answer["error_code"] == 0, answer
            state = (self.epoch, repr(self.owned))
            if (until(self) if until else state == last):
                return
            last = state
            time.sleep(0.05)
        raise AssertionError(f"{self.side.kind}: member {self.member_id} did not settle: {self.owned}")

    def owned_names(self, ids: dict[str, str]) -> dict[str, list[int]]:
        names = {v: k for k, v in ids.items()}
        return {names.get(t["topic_id"], t["topic_id"]): t["partitions"] for t in self.owned if t["partitions"]}

    def leave(self) -> dict:
        return heartbeat(self.side, self.group, member_id=self.member_id, epoch=-1)


# -- classic members --------------------------------------------------------------------------------------
def subscription(topics: list[str]) -> bytes:
    """ConsumerProtocolSubscription v0: topics, no user data."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def assignment(partitions: dict[str, list[int]]) -> bytes:
    out = struct.pack(">hi", 0, len(partitions))
    for t, ps in partitions.items():
        out += struct.pack(">h", len(t)) + t.encode() + struct.pack(f">i{len(ps)}i", len(ps), *ps)
    return out + struct.pack(">i", -1)


def join(side: Any, group: str, topics: list[str], *, member_id: str = "", instance_id: str | None = None,
         version: int = 7, session_ms: int = 30000) -> dict:
    """JoinGroup, again with the id handed out when the answer is MEMBER_ID_REQUIRED (KIP-394)."""
    values = dict(group_id=group, session_timeout=session_ms, rebalance_timeout=session_ms,
                  group_instance_id=instance_id, protocol_type="consumer",
                  protocols=[{"name": "range", "metadata": subscription(topics)}])
    answer = retry(side, 11, version, member_id=member_id, **values)
    if answer["error_code"] == MEMBER_ID_REQUIRED:
        answer = retry(side, 11, version, member_id=answer["member_id"], **values)
    return answer


def join_and_sync(side: Any, group: str, topic: str, *, instance_id: str | None = None) -> tuple[str, int]:
    """One classic member alone in its group, stable, owning every partition of `topic` (its partition 0):
    its member id and generation."""
    joined = join(side, group, [topic], instance_id=instance_id)
    assert joined["error_code"] == 0, joined
    member, generation = joined["member_id"], joined["generation_id"]
    synced = retry(side, 14, 5, group_id=group, generation_id=generation, member_id=member,
                   group_instance_id=instance_id, protocol_type="consumer", protocol_name="range",
                   assignments=[{"member_id": member, "assignment": assignment({topic: [0]})}])
    assert synced["error_code"] == 0, synced
    return member, generation


# -- transactions -----------------------------------------------------------------------------------------
class Txn:
    """A transactional producer by hand: its id and epoch, one open transaction at a time."""

    def __init__(self, side: Any, txn_id: str | None = None) -> None:
        self.side = side
        self.txn_id = txn_id or f"t-{uuid.uuid4().hex[:10]}"
        coordinator_ready(side, self.txn_id, key_type=1)
        answer = retry(side, 22, 4, transactional_id=self.txn_id, transaction_timeout=60000, producer_id=-1,
                       producer_epoch=-1)
        assert answer["error_code"] == 0, answer
        self.pid, self.epoch = answer["producer_id"], answer["producer_epoch"]

    def add_offsets(self, group: str) -> int:
        return retry(self.side, 25, 3, transactional_id=self.txn_id, producer_id=self.pid,
                     producer_epoch=self.epoch, group_id=group)["error_code"]

    def commit_offsets(self, group: str, topic: str, *, version: int = 3, member_id: str = "",
                       generation: int = -1, instance_id: str | None = None, partition: int = 0,
                       offset: int = 1) -> int:
        """One TxnOffsetCommit of `topic`'s partition: its error code."""
        answer = retry(self.side, 28, version, error_of=lambda r: r["topics"][0]["partitions"][0]["error_code"],
                       transactional_id=self.txn_id, group_id=group, producer_id=self.pid,
                       producer_epoch=self.epoch, generation_id=generation, member_id=member_id,
                       group_instance_id=instance_id,
                       topics=[{"name": topic, "topic_id": topic_id(self.side, topic) if version >= 6 else None,
                                "partitions": [{"partition_index": partition, "committed_offset": offset,
                                                               "committed_leader_epoch": -1,
                                                               "committed_metadata": ""}]}])
        return answer["topics"][0]["partitions"][0]["error_code"]

    def end(self, commit: bool) -> int:
        return retry(self.side, 26, 3, transactional_id=self.txn_id, producer_id=self.pid,
                     producer_epoch=self.epoch, committed=commit)["error_code"]


def committed(side: Any, group: str, topic: str, partition: int = 0) -> int:
    """The group's committed offset of the partition (OffsetFetch v8, require_stable: waits out a pending
    transactional commit)."""
    def error(r: dict) -> int:
        g = r["groups"][0]
        if g["error_code"]:
            return g["error_code"]
        return g["topics"][0]["partitions"][0]["error_code"] if g["topics"] else 0

    deadline = time.monotonic() + 20
    while True:
        answer = call(side, 9, 8, groups=[{"group_id": group, "topics": [{"name": topic, "partition_indexes":
                                                                           [partition]}]}], require_stable=True)
        if error(answer) != 88 or time.monotonic() > deadline:  # UNSTABLE_OFFSET_COMMIT
            break
        time.sleep(0.05)
    assert error(answer) == 0, answer
    return answer["groups"][0]["topics"][0]["partitions"][0]["committed_offset"]
