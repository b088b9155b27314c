"""What the tests of the hand-written request readers (`produce_request`, `list_offsets_request`) share: a
frame written by kio, kio's reading path as the broker took it before (header, the length walk, the body),
and the check that a hand reader refuses the truncated and corrupted frames kio's path refuses."""

from __future__ import annotations

import io
import random
from collections.abc import Callable
from typing import Any

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from chronolog.errors import KafkaError
from chronolog.protocol import codec


def write_frame(api_key: int, version: int, body: Any, client_id: str | None = "c", correlation_id: int = 1
                ) -> bytes:
    """A size-stripped request frame: the header of the request's version, then `body`, written by kio."""
    cls = codec.request_schema(api_key, version)
    header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
    out = io.BytesIO()
    entity_writer(header_cls)(out, header_cls(request_api_key=i16(api_key), request_api_version=i16(version),
                                              correlation_id=i32(correlation_id), client_id=client_id))
    entity_writer(cls)(out, body)
    return out.getvalue()


def random_header(rng: random.Random) -> dict:
    return {"client_id": rng.choice([None, "", "rdkafka", "é"]), "correlation_id": rng.randrange(2**31)}


def kio_read(api_key: int, version: int, frame: bytes) -> tuple[Any, Any]:
    """(header, body) as kio's path read them: header, the length walk, the body."""
    cls = codec.request_schema(api_key, version)
    header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
    header, used = entity_reader(header_cls)(frame, 0)
    codec._length_checker(cls)(frame, used, len(frame))
    body, _ = entity_reader(cls)(frame, used)
    return header, body


def _verdict(fn: Callable[[bytes, int], Any], frame: bytes, version: int) -> Any:
    try:
        return fn(frame, version)
    except (KafkaError, Exception) as exc:  # kio raises its own errors; ours raise CorruptMessageError
        return type(exc)


def refusals_agree(theirs: Callable[[bytes, int], Any], ours: Callable[[bytes, int], Any],
                   frame: Callable[[random.Random], bytes], version: int, rng: random.Random) -> int:
    """Truncations and byte flips of 60 frames: where kio's path refuses one the hand reader refuses it too,
    and where kio reads one both read the same. The number of refusals."""
    refused = 0
    for _ in range(60):
        whole = frame(rng)
        mutants = [whole[:cut] for cut in range(8, len(whole), max(1, len(whole) // 40))]
        for _ in range(40):
            m = bytearray(whole)
            for _ in range(rng.choice([1, 1, 2, 3])):
                m[rng.randrange(8, len(m))] = rng.choice([0, 0x7F, 0x80, 0xFF, rng.randrange(256)])
            mutants.append(bytes(m))
        for m in mutants:
            expected, got = _verdict(theirs, m, version), _verdict(ours, m, version)
            if isinstance(expected, type):
                assert isinstance(got, type), (m, expected, got)
                refused += 1
            else:
                assert got == expected, m
    return refused


def framed_as_kio(api_key: int, version: int, correlation_id: int, values: dict) -> Any:
    """A hand-framed response (`codec.encode_values`) checked against kio's build and write of the same
    values, byte for byte and read back whole with its size prefix right: the body kio reads from it."""
    framed = codec.encode_values(api_key, version, correlation_id, values)
    expected = codec.encode_response(api_key, version, correlation_id,
                                     codec.build_response(api_key, version, values))
    assert framed == expected
    cls = codec.response_schema(api_key, version)
    start = 8 + (1 if cls.__flexible__ else 0)
    body, used = entity_reader(cls)(framed, start)
    assert start + used == len(framed) and int.from_bytes(framed[:4], "big", signed=True) == len(framed) - 4
    return body
