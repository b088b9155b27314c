"""A consumer's next Fetch recognised by its bytes, and its answer framed without kio.

A consumer reading one partition sends the same Fetch request over and over, each time with the fetch
offset moved on (librdkafka, the Java client, kafka-python and aiokafka all do), and keeps one in flight:
the time from request to answer is on its critical path once per `fetch.message.max.bytes`. Parsing that
request with kio (after the array-length walk), building the handler's dicts and framing the answer cost
about 30 us in a tight loop and 3-4 times as much while the client parsed the previous answer on the
other core (docs/benchmarks-history.md, "The planned Fetch").

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
import uuid
from collections.abc import Callable
from typing import Any

from chronolog.protocol.codec import FileRegion, ResponseParts, _Frame, _put_uvarint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_SIZE_AND_CORRELATION = struct.Struct(">ii")
_OFFSETS_V4 = struct.Struct(">qq")  # high_watermark, last_stable_offset
_OFFSETS_V5 = struct.Struct(">qqq")  # + log_start_offset


class FetchPlan:
    """One connection's one-partition Fetch request with its fetch offset left out, and the constant
    parts of its answer."""

    __slots__ = ("version", "topic", "topic_id", "partition", "limit", "min_bytes", "_length", "_head", "_middle", "_tail",
                 "_offset_at", "_before", "_offsets", "_after", "_trailer", "_flexible")

    def __init__(self, frame: bytes, version: int, offset_at: int, topic: str, partition: int, limit: int,
                 min_bytes: int, topic_id: uuid.UUID | None = None) -> None:
        self.version, self.topic, self.partition = version, topic, partition
        self.topic_id = topic_id  # v13+: the id the request names the topic by (KIP-516)
        self.limit, self.min_bytes = limit, min_bytes
        self._offset_at = offset_at
        self._length = len(frame)
        self._head = bytes(frame[:4])  # api key and version (then the correlation id)
        self._middle = bytes(frame[8:offset_at])
        self._tail = bytes(frame[offset_at + 8:])
        # The answer, framed with the encoder's own `_Frame` as codec.encode_fetch_response frames one topic
        # with one partition: the bytes before the partition's offsets, between them and the records'
        # length, and after the records never change.
        flexible = self._flexible = version >= 12
        f = _Frame(0, flexible)
        f.out += _I32.pack(0)  # throttle_time_ms
        if version >= 7:
            f.out += _I16.pack(0) + _I32.pack(0)  # error_code, session_id (no fetch sessions)
        f.length(1, True)
        if version >= 13:
            f.topic_id(topic_id)
        else:
            f.string(topic)
        f.length(1, True)
        f.out += _I32.pack(partition) + _I16.pack(0)  # partition_index, error_code
        self._before = bytes(f.out[8:])  # (the size and correlation id are the answer's own)
        f.out = bytearray()
        f.length(-1, True)  # aborted_transactions: null
        if version >= 11:
            f.out += _I32.pack(-1)  # preferred_read_replica
        self._after = bytes(f.out)
        f.out = bytearray()
        for _ in range(3):  # the partition's, the topic's and the response's tagged fields
            f.tags()
        self._trailer = bytes(f.out)
        self._offsets = _OFFSETS_V5 if version >= 5 else _OFFSETS_V4

    @classmethod
    def build(cls, frame: bytes | bytearray | memoryview, version: int, request: Any,
              name_of: Callable[[uuid.UUID], str | None] | None = None) -> FetchPlan | None:
        """A plan for this parsed Fetch request (kio's entity), or None when it is not a one-partition
        request or its fetch offset cannot be found in the frame without doubt. From v13 the topic is
        named by id: `name_of` gives its name (None: unknown, no plan)."""
        if not 4 <= version <= 18 or len(request.topics) != 1 or getattr(request, "forgotten_topics_data", ()):
            return None
        if int(getattr(request, "isolation_level", 0)) != 0:
            return None  # read_committed answers carry aborted transactions and stop at the LSO: the handler's
        topic = request.topics[0]
        if len(topic.partitions) != 1:
            return None
        p = topic.partitions[0]
        if version >= 9 and int(p.current_leader_epoch) not in (-1, 0):
            return None  # a leader epoch other than none or the leader's (0) is an error: the handler's
        if version >= 12 and int(p.last_fetched_epoch) > 0:
            return None  # a last fetched epoch after the leader's: OFFSET_OUT_OF_RANGE, the handler's
        fields = _I32.pack(int(p.partition))
        if version >= 9:
            fields += _I32.pack(int(p.current_leader_epoch))
        fields += _I64.pack(int(p.fetch_offset))
        data = bytes(frame)
        at = data.find(fields, 8)
        if at < 0 or data.find(fields, at + 1) >= 0:
            return None
        limit = max(min(int(p.partition_max_bytes), int(request.max_bytes)), 0)
        topic_id = None
        if version >= 13:
            topic_id = topic.topic_id
            name = name_of(topic_id) if name_of is not None else None
            if name is None:
                return None
        else:
            name = str(topic.topic)
        return cls(data, version, at + len(fields) - 8, name, int(p.partition), limit, int(request.min_bytes),
                   topic_id)

    def offset_of(self, frame: bytes | bytearray) -> int | None:
        """The fetch offset of `frame` if it is this plan's request at some offset, else None."""
        at = self._offset_at
        if (len(frame) != self._length or frame[:4] != self._head or frame[8:at] != self._middle
                or frame[at + 8:] != self._tail):
            return None
        return _I64.unpack_from(frame, at)[0]

    def response(self, correlation_id: int, high_watermark: int, log_start_offset: int,
                 records: bytes | FileRegion, last_stable_offset: int | None = None) -> bytes | ResponseParts:
        """The size-prefixed answer: the partition's records with no error (read_uncommitted; the last
        stable offset is reported all the same, as Kafka does)."""
        size = records.size if isinstance(records, FileRegion) else len(records)
        lso = high_watermark if last_stable_offset is None else last_stable_offset
        offsets = (self._offsets.pack(high_watermark, lso, log_start_offset) if self.version >= 5
                   else self._offsets.pack(high_watermark, lso))
        body = bytearray(self._before)
        body += offsets
        body += self._after
        if self._flexible:
            _put_uvarint(body, size + 1)
        else:
            body += _I32.pack(size)
        head = _SIZE_AND_CORRELATION.pack(4 + len(body) + size + len(self._trailer), correlation_id) + bytes(body)
        if isinstance(records, FileRegion):
            return ResponseParts([head, records, self._trailer] if self._trailer else [head, records])
        return head + records + self._trailer
