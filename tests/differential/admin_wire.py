"""Admin requests over a plain socket at a chosen version, to chronolog and to Kafka alike, answers decoded
by kio into plain dicts: what the differential admin tests compare where a client library would hide a
field (librdkafka ignores CreateTopics' configs; the Java client crashes without them)."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import io
import socket
import struct
import uuid
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from chronolog.protocol import codec


def _flexible(cls: type) -> bool:
    return bool(getattr(cls, "__flexible__", False))


def request(port: int, api_key: int, version: int, values: dict[str, Any], host: str = "127.0.0.1",
            timeout: float = 30) -> dict:
    """Send one request built from `values` (codec.build: absent fields neutral) and answer its body as a
    dict (enums as ints, UUIDs as str, timedeltas as ms)."""
    req_cls = load_request_schema(api_key, version)
    resp_cls = load_response_schema(api_key, version)
    flexible = _flexible(req_cls)
    header_cls = RequestHeaderV2 if flexible else RequestHeaderV1
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, header_cls(request_api_key=i16(api_key), request_api_version=i16(version),
                                              correlation_id=i32(11), client_id="differential"))
    entity_writer(req_cls)(buf, codec.build(req_cls, values))
    frame = buf.getvalue()
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        head = _recv(sock, 4)
        payload = _recv(sock, struct.unpack(">i", head)[0])
    resp_header = ResponseHeaderV1 if flexible and api_key != 18 else ResponseHeaderV0
    header, used = entity_reader(resp_header)(payload, 0)
    assert header.correlation_id == 11
    body, _ = entity_reader(resp_cls)(payload, used)
    return plain(body)


def _recv(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError("broker closed the connection")
        data += chunk
    return bytes(data)


def plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    if isinstance(value, enum.Enum):
        return int(value.value)
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return value
