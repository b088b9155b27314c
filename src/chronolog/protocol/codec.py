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
import struct
import typing
import uuid
from dataclasses import dataclass
from typing import Any

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

API_VERSIONS_KEY = 18


@dataclass(frozen=True)
class RequestFrame:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any  # the kio request entity


def peek_header(frame: bytes | memoryview) -> tuple[int, int, int]:
    """api key, version and correlation id: the part of every header version that never changes."""
    if len(frame) < 8:
        raise InvalidRequestError("request frame shorter than a request header")
    return struct.unpack_from(">hhi", frame, 0)


# Versions kio has no schema for whose wire format equals a later version's: DescribeLogDirs v0 == v1
# (DescribeLogDirsRequest.json / DescribeLogDirsResponse.json: "Version 1 is the same as version 0").
SAME_AS = {(35, 0): 1}


@functools.cache
def request_schema(api_key: int, version: int) -> type:
    try:
        return load_request_schema(api_key, SAME_AS.get((api_key, version), version))
    except Exception:
        raise UnsupportedVersionError(f"API {api_key} v{version} is not supported") from None


@functools.cache
def response_schema(api_key: int, version: int) -> type:
    return load_response_schema(api_key, SAME_AS.get((api_key, version), version))


@functools.cache
def _reader(cls: type):
    return entity_reader(cls)


@functools.cache
def _writer(cls: type):
    return entity_writer(cls)


def parse_request(frame: bytes | memoryview) -> RequestFrame:
    api_key, version, correlation_id = peek_header(frame)
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


def _past_end() -> CorruptMessageError:
    return CorruptMessageError("request runs past the end of its frame")


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """Kafka's `ByteUtils.readUnsignedVarint`: at most 5 bytes."""
    value = shift = 0
    for i in range(pos, min(pos + 5, len(buf))):
        b = buf[i]
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i + 1
        shift += 7
    if pos + 5 > len(buf):
        raise _past_end()
    raise CorruptMessageError("varint is longer than 5 bytes")


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
        return _length_checker(kind.type_)
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
