"""A consumer's next Fetch recognised by its bytes, and its answer framed without kio.

A consumer reading one partition sends the same Fetch request over and over, each time with the fetch
offset moved on (librdkafka, the Java client, kafka-python and aiokafka all do), and keeps one in flight:
the time from request to answer is on its critical path once per `fetch.message.max.bytes`. Parsing that
request with kio (after the array-length walk), building the handler's dicts and framing the answer cost
about 30 us in a tight loop and 3-4 times as much while the client parsed the previous answer on the
other core (measured 2026-11-23, docs/benchmarks.md).

`FetchPlan.build` takes a Fetch request kio has parsed, when it asks for exactly one partition of one topic
and forgets none, and finds its fetch offset in the frame: the only place the 12 bytes of partition,
current leader epoch (v9+) and fetch offset occur. A later frame of the connection that equals it byte for
byte except for the correlation id and those 8 bytes is the same request at another offset: nothing in
the layout depends on the offset's value. `offset_of` answers that with three slice comparisons, and
`response` frames the answer exactly as `codec.encode_fetch_response` does for one partition (the
constant part is built once). What the answer says is decided by `core.planned_fetch`, with the same
rules as the Fetch handler; anything but data ready to send (an error, too little data for min_bytes, a
long poll) goes through the handler. `tests/protocol/test_fetch_plan.py` compares both paths byte for byte.
"""

from __future__ import annotations

import struct
from typing import Any

from chronolog.protocol.codec import FileRegion, ResponseParts

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_SIZE_AND_CORRELATION = struct.Struct(">ii")
_OFFSETS_V4 = struct.Struct(">qq")  # high_watermark, last_stable_offset
_OFFSETS_V5 = struct.Struct(">qqq")  # + log_start_offset


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class FetchPlan:
    """One connection's one-partition Fetch request with its fetch offset left out, and the constant
    parts of its answer."""

    __slots__ = ("version", "topic", "partition", "limit", "min_bytes", "_length", "_head", "_middle", "_tail",
                 "_offset_at", "_before", "_offsets", "_after", "_trailer", "_flexible")

    def __init__(self, frame: bytes, version: int, offset_at: int, topic: str, partition: int, limit: int,
                 min_bytes: int) -> None:
        self.version, self.topic, self.partition = version, topic, partition
        self.limit, self.min_bytes = limit, min_bytes
        self._offset_at = offset_at
        self._length = len(frame)
        self._head = bytes(frame[:4])  # api key and version (then the correlation id)
        self._middle = bytes(frame[8:offset_at])
        self._tail = bytes(frame[offset_at + 8:])
        # The answer, as codec.encode_fetch_response writes it for one topic with one partition:
        flexible = self._flexible = version >= 12
        name = topic.encode()
        before = bytearray(b"\x00" if flexible else b"")  # response header v1: no tagged fields
        before += _I32.pack(0)  # throttle_time_ms
        if version >= 7:
            before += _I16.pack(0) + _I32.pack(0)  # error_code, session_id (no fetch sessions)
        if flexible:
            before += _uvarint(2) + _uvarint(len(name) + 1) + name + _uvarint(2)
        else:
            before += _I32.pack(1) + _I16.pack(len(name)) + name + _I32.pack(1)
        before += _I32.pack(partition) + _I16.pack(0)  # partition_index, error_code
        self._before = bytes(before)
        self._offsets = _OFFSETS_V5 if version >= 5 else _OFFSETS_V4
        after = b"\x00" if flexible else _I32.pack(-1)  # aborted_transactions: null
        if version >= 11:
            after += _I32.pack(-1)  # preferred_read_replica
        self._after = after
        self._trailer = b"\x00\x00\x00" if flexible else b""  # partition, topic and response tagged fields

    @classmethod
    def build(cls, frame: bytes | bytearray | memoryview, version: int, request: Any) -> FetchPlan | None:
        """A plan for this parsed Fetch request (kio's entity), or None when it is not a one-partition
        request or its fetch offset cannot be found in the frame without doubt."""
        if not 4 <= version <= 12 or len(request.topics) != 1 or getattr(request, "forgotten_topics_data", ()):
            return None
        topic = request.topics[0]
        if len(topic.partitions) != 1:
            return None
        p = topic.partitions[0]
        fields = _I32.pack(int(p.partition))
        if version >= 9:
            fields += _I32.pack(int(p.current_leader_epoch))
        fields += _I64.pack(int(p.fetch_offset))
        data = bytes(frame)
        at = data.find(fields, 8)
        if at < 0 or data.find(fields, at + 1) >= 0:
            return None
        limit = max(min(int(p.partition_max_bytes), int(request.max_bytes)), 0)
        return cls(data, version, at + len(fields) - 8, str(topic.topic), int(p.partition), limit,
                   int(request.min_bytes))

    def offset_of(self, frame: bytes | bytearray) -> int | None:
        """The fetch offset of `frame` if it is this plan's request at some offset, else None."""
        at = self._offset_at
        if (len(frame) != self._length or frame[:4] != self._head or frame[8:at] != self._middle
                or frame[at + 8:] != self._tail):
            return None
        return _I64.unpack_from(frame, at)[0]

    def response(self, correlation_id: int, high_watermark: int, log_start_offset: int,
                 records: bytes | FileRegion) -> bytes | ResponseParts:
        """The size-prefixed answer: the partition's records with no error."""
        size = records.size if isinstance(records, FileRegion) else len(records)
        offsets = (self._offsets.pack(high_watermark, high_watermark, log_start_offset) if self.version >= 5
                   else self._offsets.pack(high_watermark, high_watermark))
        length = _uvarint(size + 1) if self._flexible else _I32.pack(size)
        body = self._before + offsets + self._after + length
        head = _SIZE_AND_CORRELATION.pack(4 + len(body) + size + len(self._trailer), correlation_id) + body
        if isinstance(records, FileRegion):
            return ResponseParts([head, records, self._trailer] if self._trailer else [head, records])
        return head + records + self._trailer
