"""Frames in, kio entities out, and back. Request/response structs are kio's (generated from Kafka's own
JSON schemas); this module only frames, picks header versions and builds responses from plain values.

Rules that are easy to get wrong (Kafka's `RequestHeader`, KIP-482, KIP-511):
- A flexible request uses request header v2 (v1 + tagged fields; `client_id` stays a classic string);
  a flexible response uses response header v1, except ApiVersions, which always answers with header v0.
- An ApiVersions request of a version we don't know is answered with a v0 body: UNSUPPORTED_VERSION plus
  our ApiVersions range, so the client can retry.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import os
import struct
import typing
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)
from kio.serial.errors import SerialError

from chronolog.errors import CorruptMessageError, InvalidRequestError, UnsupportedVersionError
from chronolog.protocol.list_offsets_request import read_list_offsets_request
from chronolog.protocol.produce_request import read_produce_request
from chronolog.protocol.wire import past_end as _past_end
from chronolog.protocol.wire import read_uvarint as _uvarint

API_VERSIONS_KEY = 18
METADATA_KEY = 3
FETCH_KEY = 1
PRODUCE_KEY = 0
LIST_OFFSETS_KEY = 2


class RequestFrame(NamedTuple):  # (a frozen dataclass took 0.6 us to build, a tuple 0.2)
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any  # the kio request entity (Produce and ListOffsets: the hand readers' tuples)


def peek_header(frame: bytes | memoryview) -> tuple[int, int, int]:
    """api key, version and correlation id: the part of every header version that never changes."""
    if len(frame) < 8:
        raise InvalidRequestError("request frame shorter than a request header")
    return struct.unpack_from(">hhi", frame, 0)


# Versions kio has no schema for whose wire format equals a later version's: DescribeLogDirs v0 == v1
# (DescribeLogDirsRequest.json / DescribeLogDirsResponse.json: "Version 1 is the same as version 0").
SAME_AS = {(35, 0): 1}


# Versions kio has no schema for yet are ours (protocol.newer_schemas), asked for only where kio has none:
# building them takes a tenth of a broker's start, and the first requests (ApiVersions up to v4, Metadata)
# never need them.
@functools.cache
def request_schema(api_key: int, version: int) -> type:
    try:
        return load_request_schema(api_key, SAME_AS.get((api_key, version), version))
    except Exception:
        pass
    from chronolog.protocol import newer_schemas
    newer = newer_schemas.REQUESTS.get((api_key, version))
    if newer is None:
        raise UnsupportedVersionError(f"API {api_key} v{version} is not supported")
    return newer


@functools.cache
def response_schema(api_key: int, version: int) -> type:
    try:
        return load_response_schema(api_key, SAME_AS.get((api_key, version), version))
    except Exception:
        from chronolog.protocol import newer_schemas
        newer = newer_schemas.RESPONSES.get((api_key, version))
        if newer is None:
            raise
        return newer


@functools.cache
def _reader(cls: type):
    return entity_reader(cls)


@functools.cache
def _writer(cls: type):
    return entity_writer(cls)


def parse_request(frame: bytes | bytearray | memoryview) -> RequestFrame:
    api_key, version, correlation_id = peek_header(frame)
    if api_key == PRODUCE_KEY and 3 <= version <= 13:  # records as slices of the frame, no copy
        client_id, body = read_produce_request(frame, version)
        return RequestFrame(api_key, version, correlation_id, client_id, body)
    if api_key == LIST_OFFSETS_KEY and 1 <= version <= 11:  # a lookup's fields, without kio's entities
        client_id, body = read_list_offsets_request(frame, version)
        return RequestFrame(api_key, version, correlation_id, client_id, body)
    cls = request_schema(api_key, version)
    header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
    data = bytes(frame)
    try:
        header, used = _reader(header_cls)(data, 0)
        _length_checker(cls)(data, used, len(data))
        body, used2 = _reader(cls)(data, used)
    except SerialError as exc:
        raise CorruptMessageError(f"cannot decode {cls.__name__}: {exc}") from None
    except Exception as exc:  # the native reader may raise ValueError/UnicodeDecodeError on garbage
        raise CorruptMessageError(f"cannot decode {cls.__name__}: {exc}") from None
    # Trailing bytes are tolerated: kio leaves a few unread after a null array in some flexible
    # requests (librdkafka's Metadata v12 with topics=null), and the fields before them are right.
    return RequestFrame(api_key, version, correlation_id, header.client_id, body)


def warm_up(ranges: typing.Iterable[tuple[int, int, int]]) -> None:
    """Build kio's readers (and our length checks, and the response writers kio still does) for these
    (api key, first, last version) ranges now rather than on the first request of each version, which paid
    10-120 ms for it: a producer's first Produce stalled for that long after every broker start."""
    _reader(RequestHeaderV1)
    _reader(RequestHeaderV2)
    for api_key, first, last in ranges:
        for version in range(first, last + 1):
            cls = request_schema(api_key, version)
            _reader(cls)
            _length_checker(cls)
            if api_key not in (PRODUCE_KEY, FETCH_KEY):  # their responses are framed by hand
                _writer(response_schema(api_key, version))


# -- array lengths are checked before kio sees them ------------------------------------------------------
# kio's native reader reserves room for an array's stated length before reading its elements, and a failed
# reservation aborts the process: one frame saying "2**32 - 2 topics" would kill the broker. Kafka's
# generated readers (MessageDataGenerator) refuse an array longer than the bytes left in the frame
# ("Tried to allocate a collection of size N, but there are only M bytes remaining"); this walk over the
# request's layout applies that rule to every array, tagged fields included, without building anything.
# It also refuses a null where the schema has a non-nullable array, which kio would hand to the handlers as
# None ("non-nullable field X was serialized as null", as Kafka's readers say).
_FIXED_SIZES = {"int8": 1, "bool": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4,
                "timedelta_i32": 4, "int64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8, "uuid": 16}
_Step = typing.Callable[[bytes, int, int], int]


def _length(flexible: bool, wide: bool) -> typing.Callable[[bytes, int], tuple[int, int]]:
    """Reads a length: compact (unsigned varint of length + 1) in flexible versions, else int16/int32."""
    if flexible:
        def compact(buf: bytes, pos: int) -> tuple[int, int]:
            n, pos = _uvarint(buf, pos)
            return n - 1, pos
        return compact
    fmt = struct.Struct(">i" if wide else ">h")

    def classic(buf: bytes, pos: int) -> tuple[int, int]:
        if pos + fmt.size > len(buf):
            raise _past_end()
        return fmt.unpack_from(buf, pos)[0], pos + fmt.size
    return classic


def _skip_sized(read_length: typing.Callable) -> _Step:
    def step(buf: bytes, pos: int, end: int) -> int:
        n, pos = read_length(buf, pos)
        return pos + n if n > 0 else pos
    return step


def _skip_fixed(size: int) -> _Step:
    return lambda buf, pos, end: pos + size


def _field_step(field: dataclasses.Field, flexible: bool) -> _Step:
    kind = classify_field(field)
    if isinstance(kind, EntityField):
        inner = _length_checker(kind.type_)
        if not is_optional(field):
            return inner

        def nullable_struct(buf: bytes, pos: int, end: int) -> int:
            """A nullable struct (e.g. DescribeTopicPartitions' cursor) starts with an int8 marker: -1 is
            null, anything else is followed by the struct (Kafka's generated `read`)."""
            if pos >= end:
                raise _past_end()
            marker = buf[pos]
            return pos + 1 if marker == 0xFF else inner(buf, pos + 1, end)
        return nullable_struct
    if isinstance(kind, EntityTupleField | PrimitiveTupleField):
        if isinstance(kind, EntityTupleField):
            element = _length_checker(kind.type_)
        else:
            element = _primitive_step(field.metadata["kafka_type"], flexible)
        read_count = _length(flexible, wide=True)
        nullable = is_optional(field)
        name = field.name

        def array(buf: bytes, pos: int, end: int) -> int:
            n, pos = read_count(buf, pos)
            if n < 0 and not nullable:
                raise CorruptMessageError(f"non-nullable field {name} was serialized as null")
            if n > end - pos:
                raise CorruptMessageError(f"Tried to allocate a collection of size {n}, but there are only "
                                          f"{end - pos} bytes remaining.")
            for _ in range(n):
                pos = element(buf, pos, end)
                if pos > end:
                    raise _past_end()
            return pos
        return array
    return _primitive_step(field.metadata["kafka_type"], flexible)


def _primitive_step(kafka_type: str, flexible: bool) -> _Step:
    if kafka_type in _FIXED_SIZES:
        return _skip_fixed(_FIXED_SIZES[kafka_type])
    if kafka_type == "string":
        return _skip_sized(_length(flexible, wide=False))
    if kafka_type in ("bytes", "records"):
        return _skip_sized(_length(flexible, wide=True))
    raise TypeError(f"no length rule for Kafka type {kafka_type!r}")


@functools.cache
def _length_checker(cls: type) -> _Step:
    """A walk over one entity's bytes that raises CorruptMessageError on an array longer than what is left;
    returns where the entity ends. Fixed-size neighbours are skipped in one step."""
    flexible = bool(cls.__flexible__)
    steps: list[_Step] = []
    tagged: dict[int, _Step] = {}
    fixed = 0
    for field in dataclasses.fields(cls):
        tag = field.metadata.get("tag")
        if tag is not None:
            tagged[int(tag)] = _field_step(field, flexible)
            continue
        size = _FIXED_SIZES.get(field.metadata.get("kafka_type", ""))
        if size is not None and not isinstance(classify_field(field), PrimitiveTupleField):
            fixed += size
            continue
        if fixed:
            steps.append(_skip_fixed(fixed))
            fixed = 0
        steps.append(_field_step(field, flexible))
    if fixed:
        steps.append(_skip_fixed(fixed))

    def walk(buf: bytes, pos: int, end: int) -> int:
        for step in steps:
            pos = step(buf, pos, end)
            if pos > end:
                raise _past_end()
        if flexible:  # tagged fields: count, then (tag, size, bytes); known tags are walked inside their size
            count, pos = _uvarint(buf, pos)
            for _ in range(count):
                tag, pos = _uvarint(buf, pos)
                size, pos = _uvarint(buf, pos)
                if pos + size > end:
                    raise _past_end()
                step = tagged.get(tag)
                if step is not None:
                    step(buf, pos, pos + size)
                pos += size
        return pos
    return walk


def encode_response(api_key: int, version: int, correlation_id: int, body: Any) -> bytes:
    """Size-prefixed response frame."""
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    out.write(struct.pack(">i", correlation_id))
    if type(body).__flexible__ and api_key != API_VERSIONS_KEY:
        out.write(b"\0")  # response header v1: empty tagged fields
    _writer(type(body))(out, body)
    data = bytearray(out.getbuffer())
    struct.pack_into(">i", data, 0, len(data) - 4)
    return bytes(data)


def api_versions_error_v0(correlation_id: int, min_version: int, max_version: int) -> bytes:
    """KIP-511: an unknown ApiVersions version gets a v0 body with UNSUPPORTED_VERSION and our range."""
    body = struct.pack(">ihihhh", correlation_id, 35, 1, API_VERSIONS_KEY, min_version, max_version)
    return struct.pack(">i", len(body)) + body


# -- building responses from plain values --------------------------------------------------------------
@functools.cache
def _fields(cls: type) -> tuple[tuple[str, Any, bool, Any], ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        out.append((f.name, hints[f.name], has_default, default))
    return tuple(out)


def _strip_optional(tp: Any) -> tuple[Any, bool]:
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, getattr(__import__("types"), "UnionType", None)) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0], True
    return tp, False


def _neutral(tp: Any) -> Any:
    tp, optional = _strip_optional(tp)
    if optional:
        return None
    origin = typing.get_origin(tp)
    if origin is tuple:
        return ()
    if tp is KioErrorCode:
        return KioErrorCode.none
    if isinstance(tp, type):
        if dataclasses.is_dataclass(tp):
            return build(tp, {})
        if issubclass(tp, bool):
            return False
        if issubclass(tp, datetime.timedelta):
            return datetime.timedelta(0)
        if issubclass(tp, int):
            return 0
        if issubclass(tp, float):
            return 0.0
        if issubclass(tp, str):
            return ""
        if issubclass(tp, bytes):
            return b""
        if issubclass(tp, uuid.UUID):
            return uuid.UUID(int=0)
    return None


def _coerce(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    tp, _ = _strip_optional(tp)
    origin = typing.get_origin(tp)
    if origin is tuple:
        inner = typing.get_args(tp)[0]
        return tuple(_coerce(inner, v) for v in value)
    if tp is KioErrorCode:
        return value if isinstance(value, KioErrorCode) else KioErrorCode(int(value))
    if isinstance(tp, type):
        if dataclasses.is_dataclass(tp):
            return value if isinstance(value, tp) else build(tp, value)
        if issubclass(tp, datetime.datetime) and not isinstance(value, datetime.datetime):
            return None if int(value) < 0 else datetime.datetime.fromtimestamp(int(value) / 1000, datetime.UTC)
        if issubclass(tp, datetime.timedelta) and not isinstance(value, datetime.timedelta):
            return datetime.timedelta(milliseconds=int(value))
        if issubclass(tp, uuid.UUID) and not isinstance(value, uuid.UUID):
            return uuid.UUID(str(value)) if isinstance(value, str) else uuid.UUID(int=int(value))
    return value


def build(cls: type, values: dict[str, Any]) -> Any:
    """An instance of a kio dataclass from a dict: keys the version lacks are dropped, fields the dict
    lacks get their schema default or a neutral value (0, "", (), None, no error)."""
    kwargs = {}
    for name, tp, has_default, _default in _fields(cls):
        if name in values:
            kwargs[name] = _coerce(tp, values[name])
        elif not has_default:
            kwargs[name] = _neutral(tp)
    return cls(**kwargs)


def build_response(api_key: int, version: int, values: dict[str, Any]) -> Any:
    return build(response_schema(api_key, version), values)


# -- Fetch responses around file regions ------------------------------------------------------------------
# Kafka serves a fetch without copying records through user space: `FetchResponse` is written as a
# sequence of sends, and each partition's records are a `FileRecords` slice that `FileRecords.writeTo`
# hands to `FileChannel.transferTo` (sendfile). `encode_fetch_response` does the same: it frames the
# response fields by hand for the versions we serve (4-18) and leaves each large records field as a
# `FileRegion` of its segment file, so the server can `sendfile` it (plain TCP) or read it with one `pread`
# (TLS, tests). tests/protocol/test_fetch_encoding.py checks every version byte for byte against kio.
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_PARTITION_HEAD = struct.Struct(">ihqq")  # partition_index, error_code, high_watermark, last_stable_offset
_ABORTED = struct.Struct(">qq")  # producer_id, first_offset


class FileRegion:
    """`size` bytes at `position` of an open file descriptor this object owns (a `dup` of a segment's, so a
    segment deleted meanwhile cannot close it or hand its number to another file). `close` releases it."""

    __slots__ = ("fd", "position", "size")

    def __init__(self, fd: int, position: int, size: int) -> None:
        self.fd, self.position, self.size = fd, position, size

    def fileno(self) -> int:  # for loop.sendfile
        return self.fd

    def read_bytes(self) -> bytes:
        data = os.pread(self.fd, self.size, self.position)
        if len(data) != self.size:  # the file was truncated after the fetch found the range
            raise ConnectionError(f"file region shrank from {self.size} to {len(data)} bytes while being sent")
        return data

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


@dataclass
class ResponseParts:
    """A response frame as byte strings and file regions, in order; the regions are owned and must be
    released with `close` once sent."""

    parts: list[bytes | FileRegion]

    def regions(self) -> list[FileRegion]:
        return [p for p in self.parts if isinstance(p, FileRegion)]

    def to_bytes(self) -> bytes:
        return b"".join(p.read_bytes() if isinstance(p, FileRegion) else p for p in self.parts)

    def close(self) -> None:
        for region in self.regions():
            region.close()


def _put_uvarint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _millis(value: Any) -> int:
    return int(value.total_seconds() * 1000) if isinstance(value, datetime.timedelta) else int(value or 0)


class _Frame:
    """What the hand-framed responses share: a size placeholder and the correlation id (plus the empty
    tagged fields of a v1 response header when flexible), and lengths and strings in the classic (int16 /
    int32) or compact (unsigned varint + 1) encoding. `out` is the bytes so far."""

    __slots__ = ("out", "flexible")

    def __init__(self, correlation_id: int, flexible: bool) -> None:
        self.out = bytearray(8)
        _I32.pack_into(self.out, 4, correlation_id)
        self.flexible = flexible
        if flexible:
            self.out.append(0)  # response header v1: no tagged fields

    def length(self, n: int, wide: bool) -> None:
        """An array or bytes length (wide; -1: null), or a string's (not wide)."""
        if self.flexible:
            _put_uvarint(self.out, n + 1)
        elif wide:
            self.out += _I32.pack(n)
        else:
            self.out += _I16.pack(n)

    def string(self, value: str | None) -> None:
        if value is None:
            self.length(-1, False)
        else:
            data = value.encode()
            self.length(len(data), False)
            self.out += data

    def tags(self) -> None:
        """An empty tagged-fields section (flexible versions only)."""
        if self.flexible:
            self.out.append(0)

    def topic_id(self, value: Any) -> None:
        """A topic id (KIP-516): 16 bytes, the null id for none."""
        if not isinstance(value, uuid.UUID):
            value = uuid.UUID(str(value)) if value else uuid.UUID(int=0)
        self.out += value.bytes

    def topics(self, topics, name_key: str, partitions_key: str, partition: Callable[[dict], bool | None],
               by_id: bool = False) -> None:
        """The topics array both framed responses share: each topic's name (its `topic_id` when `by_id`),
        then its partitions array, each partition's fields written by `partition` and closed, like each
        topic, by its tagged fields (empty, unless `partition` wrote them and said so)."""
        self.length(len(topics), True)
        for topic in topics:
            if by_id:
                self.topic_id(topic.get("topic_id"))
            else:
                self.string(str(topic[name_key]))
            partitions = topic.get(partitions_key) or ()
            self.length(len(partitions), True)
            for p in partitions:
                if not partition(p):
                    self.tags()
            self.tags()


def encode_fetch_response(version: int, correlation_id: int, values: dict[str, Any]) -> bytes | ResponseParts:
    """A size-prefixed Fetch response (v4-v18) from the handler's values. A records value may be bytes,
    None (null) or a FileRegion; with regions the answer is a ResponseParts, else bytes. From v13 topics
    are named by `topic_id` (KIP-516). The partition tagged fields of v12+ (diverging_epoch,
    current_leader, snapshot_id) and v16's node_endpoints are never set by a single-node broker (Kafka
    sets them on leader changes) and are written as Kafka writes defaults: not at all."""
    if not 4 <= version <= 18:
        raise UnsupportedVersionError(f"Fetch v{version} responses are not framed here")
    f = _Frame(correlation_id, version >= 12)
    parts: list[bytes | FileRegion] = []
    f.out += _I32.pack(_millis(values.get("throttle_time", 0)))
    if version >= 7:
        f.out += _I16.pack(int(values.get("error_code", 0))) + _I32.pack(int(values.get("session_id", 0)))

    def partition(p: dict) -> bool:
        f.out += _PARTITION_HEAD.pack(int(p["partition_index"]), int(p.get("error_code", 0)),
                                      int(p.get("high_watermark", -1)), int(p.get("last_stable_offset", -1)))
        if version >= 5:
            f.out += _I64.pack(int(p.get("log_start_offset", -1)))
        aborted = p.get("aborted_transactions")
        if aborted is None:
            f.length(-1, True)
        else:
            f.length(len(aborted), True)
            for a in aborted:
                f.out += _ABORTED.pack(int(a["producer_id"]), int(a["first_offset"]))
                f.tags()
        if version >= 11:
            f.out += _I32.pack(int(p.get("preferred_read_replica", -1)))
        records = p.get("records")
        diverging = p.get("diverging_epoch")
        if records is None:
            f.length(-1, True)
        elif isinstance(records, FileRegion):  # the framing so far, then the region; framing goes on after it
            f.length(records.size, True)
            parts.append(bytes(f.out))
            parts.append(records)
            f.out = bytearray()
        else:
            f.length(len(records), True)
            f.out += records

        if diverging is not None and version >= 12:
            # the partition's tagged fields: one, tag 0 (DivergingEpoch), 13 bytes: epoch, end offset and the
            # struct's own (empty) tagged fields
            f.out += b"\x01\x00\x0d" + _I32.pack(int(diverging["epoch"])) + _I64.pack(int(diverging["end_offset"]))
            f.out.append(0)
            return True
        return False

    f.topics(values.get("responses") or (), "topic", "partitions", partition, by_id=version >= 13)
    f.tags()
    out = f.out
    if not parts:
        _I32.pack_into(out, 0, len(out) - 4)
        return bytes(out)
    if out:
        parts.append(bytes(out))
    total = sum(p.size if isinstance(p, FileRegion) else len(p) for p in parts)
    first = bytearray(parts[0])
    _I32.pack_into(first, 0, total - 4)
    parts[0] = bytes(first)
    return ResponseParts(parts)


_PRODUCE_PARTITION = struct.Struct(">ihqq")  # index, error_code, base_offset, log_append_time


def encode_produce_response(version: int, correlation_id: int, values: dict[str, Any]) -> bytes:
    """A size-prefixed Produce response (v3-v13) from the handler's values, framed by hand: building it
    through kio's dataclasses cost more than the append it answers (about 0.2 ms of a 0.4 ms request for a
    16 KiB batch). v13 names topics by `topic_id` (KIP-516). The tagged fields of v10+ (current_leader,
    node_endpoints) are only set by Kafka on NOT_LEADER_OR_FOLLOWER, which a single node never answers:
    they are written as defaults are, not at all."""
    if not 3 <= version <= 13:
        raise UnsupportedVersionError(f"Produce v{version} responses are not framed here")
    f = _Frame(correlation_id, version >= 9)

    def partition(p: dict) -> None:
        append_time = p.get("log_append_time", -1)
        f.out += _PRODUCE_PARTITION.pack(int(p["index"]), int(p.get("error_code", 0)), int(p.get("base_offset", -1)),
                                         -1 if append_time is None or append_time < 0 else int(append_time))
        if version >= 5:
            f.out += _I64.pack(int(p.get("log_start_offset", -1)))
        if version >= 8:
            errors = p.get("record_errors") or ()
            f.length(len(errors), True)
            for e in errors:
                f.out += _I32.pack(int(e["batch_index"]))
                f.string(e.get("batch_index_error_message"))
                f.tags()
            f.string(p.get("error_message"))

    f.topics(values.get("responses") or (), "name", "partition_responses", partition, by_id=version >= 13)
    f.out += _I32.pack(_millis(values.get("throttle_time", 0)))
    f.tags()
    _I32.pack_into(f.out, 0, len(f.out) - 4)
    return bytes(f.out)


_OFFSET_PARTITION = struct.Struct(">ihqq")  # partition_index, error_code, timestamp, offset


def encode_list_offsets_response(version: int, correlation_id: int, values: dict[str, Any]) -> bytes:
    """A size-prefixed ListOffsets response (v1-v11, ListOffsetsResponse.json) from the handler's values,
    framed by hand: kio's build and write of these five fields were half of a lookup's broker CPU (about
    30 of 60 us). No version has tagged fields a broker sets."""
    if not 1 <= version <= 11:
        raise UnsupportedVersionError(f"ListOffsets v{version} responses are not framed here")
    f = _Frame(correlation_id, version >= 6)
    if version >= 2:
        f.out += _I32.pack(_millis(values.get("throttle_time", 0)))

    def partition(p: dict) -> None:
        f.out += _OFFSET_PARTITION.pack(int(p["partition_index"]), int(p.get("error_code", 0)),
                                        int(p.get("timestamp", -1)), int(p.get("offset", -1)))
        if version >= 4:
            f.out += _I32.pack(int(p.get("leader_epoch", -1)))

    f.topics(values.get("topics") or (), "name", "partitions", partition)
    f.tags()
    _I32.pack_into(f.out, 0, len(f.out) - 4)
    return bytes(f.out)


def encode_values(api_key: int, version: int, correlation_id: int, values: dict[str, Any]) -> bytes | ResponseParts:
    """A handler's values to a size-prefixed response frame: Produce, Fetch and ListOffsets framed by hand
    (above), the rest built and written through kio."""
    if api_key == FETCH_KEY:
        return encode_fetch_response(version, correlation_id, values)
    if api_key == PRODUCE_KEY:
        return encode_produce_response(version, correlation_id, values)
    if api_key == LIST_OFFSETS_KEY and version >= 1:
        return encode_list_offsets_response(version, correlation_id, values)
    return encode_response(api_key, version, correlation_id, build_response(api_key, version, values))
