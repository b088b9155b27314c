"""The client side of Produce, sans I/O: a request frame out of ready record batches, per-partition
answers in. For writers that build their own v2 batches (the Spark sink's Arrow path) instead of handing
records one by one to a client library.

Versions: v3 (the first that carries v2 batches and a transactional id) to v8, the last non-flexible
one, so the frame is written by hand with classic lengths: request header v1, then transactional_id
(null), acks, timeout_ms, topic_data (ProduceRequest.json). Every broker from Kafka 0.11 answers one of
them; Kafka 4.0 dropped only v0-v2 (KIP-896). The response is read by hand too (ProduceResponse.json),
as `fetch_client` reads its answers: no schema library to import before the first batch.
With acks=0 the broker sends no response at all (Kafka's KafkaApis.handleProduceRequest).
"""

from __future__ import annotations

import struct
from collections import namedtuple  # not a dataclass: `dataclasses` is a tenth of `chronolog produce`'s start
from collections.abc import Mapping

from chronolog.protocol.fetch_client import answer

PRODUCE = 0
PRODUCE_MIN, PRODUCE_MAX = 3, 8
_HEAD = struct.Struct(">ihhi")       # size, api key, version, correlation id
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS = struct.Struct(">hhi")        # transactional_id null (-1), acks, timeout_ms


PartitionAnswer = namedtuple("PartitionAnswer", "error_code base_offset message")


def _string(out: bytearray, s: str) -> None:
    raw = s.encode()
    out += _I16.pack(len(raw))
    out += raw


def produce_request(version: int, correlation_id: int, client_id: str, acks: int, timeout_ms: int,
                    batches: Mapping[str, Mapping[int, bytes]]) -> list[bytes | bytearray]:
    """The frame of one Produce request as pieces to send in turn (the batches are not copied into one
    buffer): one batch per partition, as Kafka requires for v2 batches (LogValidator: "one and only one
    batch is allowed")."""
    if not PRODUCE_MIN <= version <= PRODUCE_MAX:
        raise ValueError(f"Produce v{version} is not written here")
    head = bytearray(_HEAD.size)
    _string(head, client_id)
    head += _ACKS.pack(-1, acks, timeout_ms)
    head += _I32.pack(len(batches))
    pieces: list[bytes | bytearray] = [head]
    tail = head
    for topic, parts in batches.items():
        _string(tail, topic)
        tail += _I32.pack(len(parts))
        for partition, batch in parts.items():
            tail += _I32.pack(partition)
            tail += _I32.pack(len(batch))
            pieces.append(batch)
            tail = bytearray()
            pieces.append(tail)
    total = sum(len(p) for p in pieces) - 4
    _HEAD.pack_into(head, 0, total, PRODUCE, version, correlation_id)
    return [p for p in pieces if len(p)]


def read_produce(version: int, frame: bytes, correlation_id: int) -> dict[tuple[str, int], PartitionAnswer]:
    """(topic, partition) -> the broker's answer, from a size-stripped response frame (v3-v8: response
    header v0, as Fetch's)."""
    r = answer(frame, correlation_id, f"ProduceResponse v{version}")
    out = {}
    for _ in range(r.count()):
        name = r.string()
        for _ in range(r.count()):
            index, error = r.i32(), r.i16()
            base = r.i64()
            r.i64()  # log_append_time_ms
            if version >= 5:
                r.i64()  # log_start_offset
            message = None
            if version >= 8:
                for _ in range(r.count()):  # record_errors
                    r.i32()
                    r.string()
                message = r.string()
            out[(name, index)] = PartitionAnswer(error, base, message)
    return out
