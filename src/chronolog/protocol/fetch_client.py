"""The client side of ApiVersions, Metadata, ListOffsets and Fetch, sans I/O: request frames out, plain
answers in.

A reader that wants the raw record batches of a partition (to decode them into columns, not into one
Python object per record as librdkafka's consumer hands them out) speaks Fetch itself. The frames are
written and read by hand with `struct`, field by field as Kafka's message schemas give them
(ApiVersionsResponse.json, MetadataRequest/Response.json, ListOffsetsRequest/Response.json,
FetchRequest/Response.json), only for the non-flexible versions used here: importing kio's schemas costs a
command-line tool more than the read of a 10 MB window (`read_response` still reads any other response
with kio, imported when first asked). The socket loop lives with the reader (`timetravel.fetcher`).

Versions: Fetch v4 is the first with `isolation_level`, the last stable offset and the aborted
transactions (KIP-98); we use the highest non-flexible one both sides know (up to v11), so no topic ids
(v13) are needed. Metadata v1-v8, ListOffsets v2-v5 (v2: isolation_level), ApiVersions v0 (every broker
answers it).
"""

from __future__ import annotations

import struct
from collections import namedtuple  # a third of a frozen dataclass's cost to define; typing not imported

from chronolog.errors import CorruptMessageError

API_VERSIONS, METADATA, FETCH, LIST_OFFSETS = 18, 3, 1, 2
FETCH_MIN, FETCH_MAX = 4, 11
METADATA_MIN, METADATA_MAX = 1, 8
LIST_OFFSETS_MIN, LIST_OFFSETS_MAX = 2, 5
READ_UNCOMMITTED, READ_COMMITTED = 0, 1  # `IsolationLevel`
EARLIEST, LATEST = -2, -1                # ListOffsets' special timestamps (ListOffsetsRequest)


class PartitionFetch(namedtuple("PartitionFetch", "error_code high_watermark last_stable_offset log_start_offset "
                                                 "aborted records")):
    """One partition of a Fetch response: what a reader needs to go on. `aborted`: (producer id, first
    offset) of aborted transactions; `records`: the bytes of its batches."""

    __slots__ = ()


class PartitionLeader(namedtuple("PartitionLeader", "error_code leader")):
    __slots__ = ()


class Metadata(namedtuple("Metadata", "brokers topic_error partitions")):
    """`brokers`: id -> (host, port); `topic_error`: None when the topic is not in the answer;
    `partitions`: id -> PartitionLeader."""

    __slots__ = ()


_HEAD = struct.Struct(">ihhi")   # size, api key, version, correlation id (request header v1, then client id)
_I8, _I16, _I32, _I64 = (struct.Struct(f">{c}") for c in "bhiq")


class Reader:
    """A response frame read field by field (classic, non-flexible encodings); a frame that ends early or
    holds a negative length where one is required raises CorruptMessageError."""

    __slots__ = ("buf", "pos", "what")

    def __init__(self, frame: bytes, pos: int = 0, what: str = "the response") -> None:
        self.buf, self.pos, self.what = frame, pos, what

    def _take(self, s: struct.Struct) -> int:
        try:
            (v,) = s.unpack_from(self.buf, self.pos)
        except struct.error:
            raise CorruptMessageError(f"cannot decode {self.what}: it ends at byte {len(self.buf)}, inside a "
                                      f"field at {self.pos}") from None
        self.pos += s.size
        return v

    def i8(self) -> int:
        return self._take(_I8)

    def i16(self) -> int:
        return self._take(_I16)

    def i32(self) -> int:
        return self._take(_I32)

    def i64(self) -> int:
        return self._take(_I64)

    def bytes(self, size: int | None = None) -> bytes | None:
        """A nullable bytes field (int32 length), or `size` bytes."""
        n = self.i32() if size is None else size
        if n < 0:
            return None
        end = self.pos + n
        if end > len(self.buf):
            raise CorruptMessageError(f"cannot decode {self.what}: a field of {n} bytes at {self.pos} runs past "
                                      "its end")
        out, self.pos = self.buf[self.pos:end], end
        return out

    def string(self) -> str | None:
        """A nullable string (int16 length)."""
        n = self.i16()
        return None if n < 0 else self.bytes(n).decode("utf-8", "replace")

    def count(self) -> int:
        """An array's length; a null array (-1) reads as empty."""
        return max(self.i32(), 0)

    def skip(self, n: int) -> None:
        self.pos += n


def put_string(out: bytearray, s: str | None) -> None:
    """A nullable string (int16 length) appended to a request being written."""
    if s is None:
        out += _I16.pack(-1)
        return
    raw = s.encode()
    out += _I16.pack(len(raw))
    out += raw


def _request(api_key: int, version: int, correlation_id: int, client_id: str) -> bytearray:
    """A request's frame so far: size (filled by `_done`), header v1."""
    out = bytearray(_HEAD.pack(0, api_key, version, correlation_id))
    put_string(out, client_id)
    return out


def _done(out: bytearray) -> bytes:
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def request_frame(api_key: int, version: int, correlation_id: int, client_id: str, body: bytes) -> bytes:
    """A whole request frame (size, header v1, `body`): for a request written by its caller."""
    out = _request(api_key, version, correlation_id, client_id)
    out += body
    return _done(out)


def answer(frame: bytes, correlation_id: int, what: str = "the response") -> Reader:
    """A reader past the response header v0 of a size-stripped frame (`what` it holds, for errors)."""
    got = _I32.unpack_from(frame, 0)[0] if len(frame) >= 4 else None
    if got != correlation_id:
        raise CorruptMessageError(f"response correlation id {got}, expected {correlation_id}")
    return Reader(frame, 4, what)


def read_response(api_key: int, version: int, frame: bytes, correlation_id: int):
    """The response entity of a frame (without its size prefix) as kio reads it; response header v0
    (non-flexible). For the answers this module does not read by hand."""
    from kio.index import load_response_schema
    from kio.serial import entity_reader
    answer(frame, correlation_id)
    cls = load_response_schema(api_key, version)
    try:
        body, _used = entity_reader(cls)(frame, 4)
    except Exception as exc:  # kio raises SerialError, ValueError ... on bytes that are not this response
        raise CorruptMessageError(f"cannot decode {cls.__name__} v{version}: {exc}") from None
    return body


def api_versions_request(correlation_id: int, client_id: str) -> bytes:
    return _done(_request(API_VERSIONS, 0, correlation_id, client_id))


def read_api_versions(frame: bytes, correlation_id: int) -> dict[int, tuple[int, int]]:
    r = answer(frame, correlation_id, "ApiVersionsResponse v0")
    r.i16()  # error_code: an unsupported version is answered with v0's layout and the keys it knows
    out = {}
    for _ in range(r.count()):
        key, lo, hi = r.i16(), r.i16(), r.i16()
        out[key] = (lo, hi)
    return out


def pick(versions: dict[int, tuple[int, int]], api_key: int, lo: int, hi: int) -> int | None:
    """The highest version in [lo, hi] that the broker supports, None if none."""
    found = versions.get(api_key)
    if found is None or found[1] < lo or found[0] > hi:
        return None
    return min(hi, found[1])


def _check(version: int, lo: int, hi: int, what: str) -> None:
    if not lo <= version <= hi:
        raise ValueError(f"{what} v{version} is not written here")


def metadata_request(version: int, correlation_id: int, client_id: str, topic: str) -> bytes:
    """Metadata for one topic, never creating it (allow_auto_topic_creation false, v4+; KIP-361)."""
    _check(version, METADATA_MIN, METADATA_MAX, "Metadata")
    out = _request(METADATA, version, correlation_id, client_id)
    out += _I32.pack(1)
    put_string(out, topic)
    if version >= 4:
        out += b"\0"
    if version >= 8:
        out += b"\0\0"  # include_cluster_authorized_operations, include_topic_authorized_operations
    return _done(out)


def read_metadata(version: int, frame: bytes, correlation_id: int, topic: str) -> Metadata:
    r = answer(frame, correlation_id, f"MetadataResponse v{version}")
    if version >= 3:
        r.i32()  # throttle_time_ms
    brokers = {}
    for _ in range(r.count()):
        node, host, port = r.i32(), r.string(), r.i32()
        r.string()  # rack
        brokers[node] = (host, port)
    if version >= 2:
        r.string()  # cluster_id
    r.i32()  # controller_id
    found: Metadata | None = None
    for _ in range(r.count()):
        error, name = r.i16(), r.string()
        r.i8()  # is_internal
        parts = {}
        for _ in range(r.count()):
            p_error, index, leader = r.i16(), r.i32(), r.i32()
            if version >= 7:
                r.i32()  # leader_epoch
            for _ in range(3 if version >= 5 else 2):  # replicas, isr, offline replicas
                r.skip(4 * r.count())
            parts[index] = PartitionLeader(p_error, leader)
        if version >= 8:
            r.i32()  # topic_authorized_operations
        if name == topic and found is None:
            found = Metadata(brokers, error, parts)
    return found if found is not None else Metadata(brokers, None, {})


def list_offsets_request(version: int, correlation_id: int, client_id: str, topic: str,
                         partitions: dict[int, int], isolation_level: int) -> bytes:
    """ListOffsets of one topic: partition -> timestamp (or EARLIEST / LATEST); one entry per partition, as
    Kafka requires (a partition named twice is INVALID_REQUEST)."""
    _check(version, LIST_OFFSETS_MIN, LIST_OFFSETS_MAX, "ListOffsets")
    out = _request(LIST_OFFSETS, version, correlation_id, client_id)
    out += _I32.pack(-1) + _I8.pack(isolation_level) + _I32.pack(1)
    put_string(out, topic)
    out += _I32.pack(len(partitions))
    for p, ts in partitions.items():
        out += _I32.pack(p)
        if version >= 4:
            out += _I32.pack(-1)  # current_leader_epoch: not known
        out += _I64.pack(ts)
    return _done(out)


def read_list_offsets(version: int, frame: bytes, correlation_id: int,
                      topic: str) -> dict[int, tuple[int, int, int]]:
    """partition -> (error code, timestamp, offset) of the topic's answers; offset -1: none."""
    r = answer(frame, correlation_id, f"ListOffsetsResponse v{version}")
    r.i32()  # throttle_time_ms
    out = {}
    for _ in range(r.count()):
        name = r.string()
        for _ in range(r.count()):
            p, error, ts, offset = r.i32(), r.i16(), r.i64(), r.i64()
            if version >= 4:
                r.i32()  # leader_epoch
            if name == topic:
                out[p] = (error, ts, offset)
    return out


def fetch_request(version: int, correlation_id: int, client_id: str, topic: str, partition: int, offset: int,
                  *, max_bytes: int, isolation_level: int, max_wait_ms: int = 0) -> bytes:
    """A one-partition Fetch of `offset` (no fetch session: session id 0, epoch -1, as a plain consumer
    without KIP-227 sessions)."""
    _check(version, FETCH_MIN, FETCH_MAX, "Fetch")
    out = _request(FETCH, version, correlation_id, client_id)
    out += struct.pack(">iiiib", -1, max_wait_ms, 1, max_bytes, isolation_level)  # replica_id .. isolation
    if version >= 7:
        out += struct.pack(">ii", 0, -1)  # session_id, session_epoch
    out += _I32.pack(1)
    put_string(out, topic)
    out += _I32.pack(1) + _I32.pack(partition)
    if version >= 9:
        out += _I32.pack(-1)  # current_leader_epoch
    out += _I64.pack(offset)
    if version >= 5:
        out += _I64.pack(-1)  # log_start_offset (a follower's; -1 for a consumer)
    out += _I32.pack(max_bytes)
    if version >= 7:
        out += _I32.pack(0)  # forgotten_topics_data
    if version >= 11:
        put_string(out, "")  # rack_id
    return _done(out)


def read_fetch(version: int, frame: bytes, correlation_id: int, topic: str, partition: int) -> PartitionFetch:
    r = answer(frame, correlation_id, f"FetchResponse v{version}")
    r.i32()  # throttle_time_ms
    top = 0
    if version >= 7:
        top = r.i16()
        r.i32()  # session_id
    for _ in range(r.count()):
        name = r.string()
        for _ in range(r.count()):
            index, error, high, stable = r.i32(), r.i16(), r.i64(), r.i64()
            start = r.i64() if version >= 5 else -1
            n = r.i32()
            aborted = tuple((r.i64(), r.i64()) for _ in range(n)) if n > 0 else ()
            if version >= 11:
                r.i32()  # preferred_read_replica
            records = r.bytes()
            if name == topic and index == partition:
                return PartitionFetch(error or top, high, stable, start, aborted, records or b"")
    raise CorruptMessageError(f"the Fetch response holds no answer for {topic}-{partition}")
