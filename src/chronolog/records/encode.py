"""Record batches from column buffers, for writers that hold their rows as Arrow columns (the Spark
sink's own Produce path): `_encode.c` writes the v2 batches with no Python object per record.

A column is handed over as the tuple of its Arrow buffers (see `_encode.c`); `arrow_batches` builds the
tuples from pyarrow arrays (only their buffers are read: no pyarrow import here). Without the C extension (no compiler
where chronolog was installed, or CHRONOLOG_PURE_PYTHON set) `AVAILABLE` is False and writers keep their client-library path.
"""

from __future__ import annotations

import struct

from chronolog.native import load_native

_encode_batches = load_native("chronolog.records._encode", "encode_batches")
_key_partitions = load_native("chronolog.records._encode", "key_partitions")
AVAILABLE = _encode_batches is not None and _key_partitions is not None

_LENGTH = struct.Struct(">i")
_ATTRIBUTES = struct.Struct(">h")


NONE = 0  # CompressionType.NONE: records.compression (and records.batch) are imported only to compress


def encode_batches(rows: int, key, value, timestamps, headers, now_ms: int, max_bytes: int,
                   codec: int = NONE, index=None, producer: tuple[int, int, int] | None = None,
                   ) -> list[bytes]:
    """v2 batches of `rows` records (CreateTime, no producer id), each at most `max_bytes` before
    compression unless one record alone is bigger; with `index` ((buffer of int64 row numbers, offset,
    count)) the records are those rows, in that order. With `producer` ((producer id, epoch, base
    sequence)) they are an idempotent producer's, numbered on from that sequence. A compressed batch that
    does not shrink is sent uncompressed, as librdkafka does (rd_kafka_compress_MessageSet_buf)."""
    batches = (_encode_batches(rows, key, value, timestamps, headers, now_ms, max_bytes, index) if producer is None
               else _encode_batches(rows, key, value, timestamps, headers, now_ms, max_bytes, index, producer))
    if codec == NONE:
        return batches
    return [compress_batch(b, codec) for b in batches]


def _binary(arr):
    """(validity or None, offsets, data, offset) of a binary array (utf8 has the same layout)."""
    if arr is None:
        return None
    bufs = arr.buffers()
    return (bufs[0] if arr.null_count else None, bufs[1], bufs[2] if bufs[2] is not None else b"", arr.offset)


def arrow_batches(key, value, timestamps, headers, now_ms: int, max_bytes: int,
                  codec: int = NONE, index=None) -> list[bytes]:
    """`encode_batches` over pyarrow arrays of one length, any of them None (null in every row): `key`
    and `value` binary, `timestamps` int64 ms (null: `now_ms`), `headers` list<struct<key: string,
    value: binary>> (a null list: no headers; the caller has refused null header keys). With `index`
    (a pyarrow array of int64 or uint64 row numbers, no nulls) only those rows, in its order: what the
    arrays `take(index)` would give, without the copy."""
    rows = len(value) if value is not None else len(key) if key is not None else \
        len(timestamps) if timestamps is not None else len(headers) if headers is not None else 0
    ts = None
    if timestamps is not None:
        bufs = timestamps.buffers()
        ts = (bufs[0] if timestamps.null_count else None, bufs[1], timestamps.offset)
    hdr = None
    if headers is not None:
        entries = headers.values  # the list offsets index it from its start; field() adds its own offset
        hdr = (headers.buffers()[0] if headers.null_count else None, headers.buffers()[1], headers.offset,
               _binary(entries.field("key")), _binary(entries.field("value")))
    where = None
    if index is not None:
        if index.null_count:
            raise ValueError("index: a null row number")
        if index.type.bit_width != 64:
            index = index.cast("int64")
        where = (index.buffers()[1], index.offset, len(index))
    return encode_batches(rows, _binary(key), _binary(value), ts, hdr, now_ms, max_bytes, codec, where)


def compress_batch(batch: bytes, codec: int) -> bytes:
    """The same batch with its records compressed: new length, attributes and CRC
    (DefaultRecordBatch: the CRC covers attributes to the end)."""
    from chronolog.records.batch import ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER_SIZE, crc32c
    from chronolog.records.compression import compress
    body = compress(codec, memoryview(batch)[HEADER_SIZE:])
    if len(body) >= len(batch) - HEADER_SIZE:
        return batch
    out = bytearray(batch[:HEADER_SIZE])
    out += body
    _LENGTH.pack_into(out, 8, len(out) - 12)
    (attributes,) = _ATTRIBUTES.unpack_from(out, ATTRIBUTES_OFFSET)
    _ATTRIBUTES.pack_into(out, ATTRIBUTES_OFFSET, (attributes & ~0x07) | int(codec))
    struct.pack_into(">I", out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def key_partitions(key, count: int) -> bytes:
    """librdkafka's default partitioner (consistent_random) for every row of a binary pyarrow array:
    CRC-32 of the key modulo `count` as int32s in native order, -1 where the key is null or empty (the
    caller picks those)."""
    return _key_partitions(len(key), _binary(key), count)
