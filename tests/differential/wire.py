"""One raw connection to a broker for the wire-level fuzzer and the API-version tests: requests written and
answers read by kio's classes (and codec's for versions kio lacks), and every error code an answer holds."""

from __future__ import annotations

import dataclasses
import functools
import io
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)
from kio.serial.errors import SerialError

from chronolog.protocol import newer_schemas

API_VERSIONS = 18
CLOSED = "closed"  # the broker closed the connection instead of answering
TIMED_OUT = "timed out"  # no answer within the Wire's timeout


@functools.cache
def request_class(api_key: int, version: int) -> type:
    return newer_schemas.REQUESTS.get((api_key, version)) or load_request_schema(api_key, version)


def response_class(api_key: int, version: int) -> type:
    return newer_schemas.RESPONSES.get((api_key, version)) or load_response_schema(api_key, version)


@functools.cache
def _reader(cls: type) -> Callable:
    return entity_reader(cls)


@functools.cache
def _writer(cls: type) -> Callable:
    return entity_writer(cls)


class Wire:
    """One connection to a broker: requests written by kio, answers read by kio (None: the broker closed
    the connection, which is then opened again for the next request)."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 10) -> None:
        self.address = (host, port)
        self.timeout = timeout
        self.sock: socket.socket | None = None
        self.correlation = 0

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def call(self, api_key: int, version: int, body: Any) -> Any:
        return self.receive(api_key, version, self.send(api_key, version, body))

    def send(self, api_key: int, version: int, body: Any) -> float | None:
        """Write one request; its answer is read by `receive`, by the deadline returned (None: the broker
        closed the connection). Sent to both brokers before either answer is read, a request reaches them at
        the same moment, whatever one of them makes it wait (a JoinGroup waits for its rebalance)."""
        req_cls = request_class(api_key, version)
        header_cls = RequestHeaderV2 if req_cls.__flexible__ else RequestHeaderV1
        self.correlation += 1
        buf = io.BytesIO()
        _writer(header_cls)(buf, header_cls(request_api_key=api_key, request_api_version=version,
                                            correlation_id=self.correlation, client_id="wirefuzz"))
        _writer(req_cls)(buf, body)
        frame = buf.getvalue()
        if self.sock is None:
            self.sock = socket.create_connection(self.address, timeout=self.timeout)
        try:
            self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        except ConnectionError:
            self.close()
            return None
        return time.monotonic() + self.timeout

    def receive(self, api_key: int, version: int, deadline: float | None) -> Any:
        if deadline is None or self.sock is None:
            return None
        try:
            self.sock.settimeout(max(deadline - time.monotonic(), 0.001))
            payload = self._recv(struct.unpack(">i", self._recv(4))[0])
        except (EOFError, ConnectionError):
            self.close()
            return None
        except TimeoutError:
            self.close()
            return TIMED_OUT
        flexible = bool(request_class(api_key, version).__flexible__)
        resp_cls = response_class(api_key, version)
        header_cls = ResponseHeaderV1 if flexible and api_key != API_VERSIONS else ResponseHeaderV0
        header, used = _reader(header_cls)(payload, 0)
        assert header.correlation_id == self.correlation
        try:
            body, _ = _reader(resp_cls)(payload, used)
        except SerialError:  # kio refuses some values brokers send (a timestamp of -1 for "none")
            return Walked(walk_codes(resp_cls, payload, used)[0])
        return body

    def _recv(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise EOFError("the broker closed the connection")
            data += chunk
        return bytes(data)


@dataclasses.dataclass(frozen=True)
class Walked:
    """An answer kio cannot decode, read by `walk_codes`: its error codes only."""

    codes: list[tuple[str, int]]


_FIXED = {"int8": 1, "bool": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "timedelta_i32": 4,
          "int64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8, "uuid": 16}


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def walk_codes(cls: type, buf: bytes, pos: int, path: str = "") -> tuple[list[tuple[str, int]], int]:
    """The error codes of one entity of `cls` at `pos` (Kafka's encoding, as the schema lays it out), and
    where it ends: what `error_codes` takes from kio's decoding, for answers kio refuses."""
    flexible = bool(cls.__flexible__)
    codes: list[tuple[str, int]] = []

    def length(pos: int, wide: bool) -> tuple[int, int]:
        if flexible:
            n, pos = _uvarint(buf, pos)
            return n - 1, pos
        fmt = ">i" if wide else ">h"
        return struct.unpack_from(fmt, buf, pos)[0], pos + struct.calcsize(fmt)

    def primitive(kafka_type: str, name: str, pos: int) -> int:
        if kafka_type in _FIXED:
            if name == "error_code" or name.endswith("_error_code"):
                codes.append((f"{path}.{name}".lstrip("."), struct.unpack_from(">h", buf, pos)[0]))
            return pos + _FIXED[kafka_type]
        n, pos = length(pos, kafka_type in ("bytes", "records"))
        return pos + max(n, 0)

    def one(f: dataclasses.Field, pos: int) -> int:
        kind = classify_field(f)
        if isinstance(kind, EntityField):
            if is_optional(f):
                if buf[pos] == 0xFF:
                    return pos + 1
                pos += 1
            inner, pos = walk_codes(kind.type_, buf, pos, f"{path}.{f.name}")
            codes.extend(inner)
            return pos
        if isinstance(kind, EntityTupleField | PrimitiveTupleField):
            n, pos = length(pos, True)
            for _ in range(max(n, 0)):
                if isinstance(kind, EntityTupleField):
                    inner, pos = walk_codes(kind.type_, buf, pos, f"{path}.{f.name}")
                    codes.extend(inner)
                else:
                    pos = primitive(f.metadata["kafka_type"], "", pos)
            return pos
        return primitive(f.metadata["kafka_type"], f.name, pos)

    tagged = {}
    for f in dataclasses.fields(cls):
        if f.metadata.get("tag") is not None:
            tagged[f.metadata["tag"]] = f
        else:
            pos = one(f, pos)
    if flexible:
        count, pos = _uvarint(buf, pos)
        for _ in range(count):
            tag, pos = _uvarint(buf, pos)
            size, pos = _uvarint(buf, pos)
            if tag in tagged:
                one(tagged[tag], pos)
            pos += size
    return codes, pos


def error_codes(body: Any) -> list[tuple[str, int]]:
    """Every error_code field of an answer, recursively, as (path without array indices, code), sorted: a
    multiset, so the order brokers list topics or partitions in does not matter."""
    if body is None:
        return [(CLOSED, -1)]
    if body == TIMED_OUT:
        return [(TIMED_OUT, -1)]
    if isinstance(body, Walked):
        return sorted(body.codes)
    out: list[tuple[str, int]] = []

    def walk(obj: Any, path: str) -> None:
        if dataclasses.is_dataclass(obj):
            for f in dataclasses.fields(obj):
                value = getattr(obj, f.name)
                if f.name == "error_code" or f.name.endswith("_error_code"):
                    out.append((f"{path}.{f.name}".lstrip("."), int(value)))
                else:
                    walk(value, f"{path}.{f.name}")
        elif isinstance(obj, tuple):
            for item in obj:
                walk(item, path)
    walk(body, "")
    return sorted(out)
