"""Records benchmarks: building and parsing v2 batches, per codec, against CRC-32C over the same bytes.

CRC-32C is the floor every append pays (the broker verifies each batch), so "x CRC" says how many times
more a step costs than just checksumming its bytes. MB/s counts uncompressed record bytes.
"""

from __future__ import annotations

import os
from functools import partial

from bench.common import best_of
from chronolog.records import CompressionType, RecordBatch, SimpleRecord, build_batch, crc32c

T0 = 1_700_000_000_000
BATCHES = 400
RECORDS_PER_BATCH = 50
VALUE_SIZE = 200


def _inputs() -> list[list[SimpleRecord]]:
    # Half random, half repetitive, so the codecs have something to do but cannot cheat entirely.
    return [[SimpleRecord(T0 + b * 1000 + i, b"key-%d" % i,
                          os.urandom(VALUE_SIZE // 2) + b"syslog line " * (VALUE_SIZE // 24))
             for i in range(RECORDS_PER_BATCH)] for b in range(BATCHES)]


def _build_all(inputs: list[list[SimpleRecord]], codec: CompressionType) -> None:
    for batch in inputs:
        build_batch(batch, compression=codec)


def _parse_all(built: list[bytes]) -> None:
    for raw in built:
        for _ in RecordBatch(raw).records():
            pass


def _crc_all(built: list[bytes]) -> None:
    for raw in built:
        crc32c(raw)


def main() -> None:
    inputs = _inputs()
    payload = sum(len(r.key) + len(r.value) for batch in inputs for r in batch)
    rows = [("codec", "build MB/s", "parse MB/s", "crc32c MB/s", "build x CRC", "parse x CRC", "payload/wire")]
    for codec in CompressionType:
        built = [build_batch(b, compression=codec) for b in inputs]
        t_build = best_of(partial(_build_all, inputs, codec))
        t_parse = best_of(partial(_parse_all, built))
        t_crc = best_of(partial(_crc_all, built), repeat=5)
        wire = sum(len(raw) for raw in built)
        mb = payload / 1e6
        rows.append((codec.name, f"{mb / t_build:.1f}", f"{mb / t_parse:.1f}", f"{wire / 1e6 / t_crc:.0f}",
                     f"{t_build / t_crc:.0f}", f"{t_parse / t_crc:.0f}", f"{payload / wire:.2f}"))
    print(f"{BATCHES} batches x {RECORDS_PER_BATCH} records x ~{VALUE_SIZE} B values "
          f"({payload / 1e6:.1f} MB of keys+values); best of 3")
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))


if __name__ == "__main__":
    main()
