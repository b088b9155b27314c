"""The files: one librdkafka producer sends the same batches (fixed timestamps, keys, headers) to a topic on
each broker, uncompressed and with each codec. Where Kafka's rules decide the bytes, chronolog's segment
files equal Kafka's byte for byte:

- `.log`: the producer's batches with the broker's offsets and partition leader epoch (0 on a fresh
  single-node topic); Kafka keeps a batch's compressed bytes when the topic's compression.type is
  `producer`, so the codecs' bytes are librdkafka's on both. They could not be equal for an idempotent or
  transactional producer (each broker hands out its own producer ids, which the batch CRC covers), for
  transaction markers (the coordinator's epoch and clock) or LogAppendTime (the broker's clock): those
  are not compared here.
- `.index` / `.timeindex`: one entry once more than index.interval.bytes were appended since the last, the
  time index only when the max timestamp grows, and the roll's last time-index entry
  (`LogSegment.onBecomeInactiveSegment`); rolls by record time (`segment.ms`). The active segment's index
  files are preallocated by Kafka (segment.index.bytes) and trimmed only at the roll: their entries are
  compared, not their zero tails.

Then Kafka's own DumpLogSegments reads chronolog's segments (`--deep-iteration`, `--verify-index-only`) as
it reads its own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.differential.steps import now_ms, produce

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
TOPIC_CONFIGS = {"segment.ms": "60000", "index.interval.bytes": "200"}


def _batches(base: int) -> list[list[tuple]]:
    """Eight batches over about four minutes of record time (rolls at 60 s), one late, some headers."""
    out = []
    offsets_in = [1, 3, 7, 2, 12, 1, 5, 9]
    times = [0, 20_000, 45_000, 70_000, 30_000, 140_000, 150_000, 260_000]
    n = 0
    for count, t in zip(offsets_in, times, strict=True):
        batch = []
        for j in range(count):
            key = None if n % 7 == 3 else f"key-{n % 5}".encode()
            value = None if n % 11 == 10 else (f"value {n} " * (1 + n % 4)).encode()
            headers = [("h", f"{n}".encode()), ("h", None), ("ü", b"x")] if n % 3 == 0 else None
            batch.append((key, value, base + t + j, headers))
            n += 1
        out.append(batch)
    return out


@pytest.fixture(scope="module")
def written(chronolog_side, kafka_side):
    """{codec: {kind: partition dir}} after the same produce on both brokers."""
    base = (now_ms() - 7_200_000) // 1000 * 1000
    batches = _batches(base)
    out = {}
    for codec in CODECS:
        dirs = {}
        for side in (chronolog_side, kafka_side):
            topic = side.create_topic(configs=TOPIC_CONFIGS, prefix=f"files-{codec}")
            got = produce(side, topic, batches, **{"compression.type": codec, "enable.idempotence": False})
            assert all(e is None for _p, _o, e in got), got
            dirs[side.kind] = side.partition_dir(topic)
        out[codec] = dirs
    return out


def _files(d: Path, ext: str) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.glob(f"*{ext}"))}


def _entries(raw: bytes, size: int) -> bytes:
    """An index file's entries: up to the last non-zero entry (an active segment's file is preallocated)."""
    used = len(raw.rstrip(b"\0"))
    return raw[:-(-used // size) * size]


@pytest.mark.parametrize("codec", CODECS)
def test_segment_files_are_kafkas_bytes(written, codec):
    c, k = written[codec]["chronolog"], written[codec]["kafka"]
    logs_c, logs_k = _files(c, ".log"), _files(k, ".log")
    assert list(logs_c) == list(logs_k), "segments rolled at other offsets"
    assert len(logs_c) >= 3
    for name in logs_k:
        assert logs_c[name] == logs_k[name], f"{codec}: {name} differs"
    active = sorted(logs_k)[-1][:-4]
    for ext, size in ((".index", 8), (".timeindex", 12)):
        files_c, files_k = _files(c, ext), _files(k, ext)
        assert list(files_c) == list(files_k)
        for name in files_k:
            if name.startswith(active):
                assert _entries(files_c[name], size) == _entries(files_k[name], size), f"{codec}: {name}"
            else:  # trimmed at the roll: the whole file
                assert files_c[name] == files_k[name], f"{codec}: {name} differs"


def _dump(files: list[Path], *options: str) -> str:
    from chronolog.testing.kafka import run_tool

    proc = run_tool("kafka-dump-log", "--files", ",".join(str(f) for f in files), *options, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def _without_dirs(text: str, dirs: dict[str, Path]) -> str:
    for d in dirs.values():
        text = text.replace(str(d), "<dir>")
    return re.sub(r"files-[a-z0-9]+-[0-9a-f]{12}", "<topic>", text)


@pytest.mark.parametrize("options", [("--deep-iteration", "--print-data-log"), ("--verify-index-only",)],
                         ids=["deep_iteration", "verify_index_only"])
def test_kafka_dump_log_reads_chronolog_segments(written, options):
    """One DumpLogSegments run over every codec's segments on each side: the same report, no mismatch."""
    reports = {}
    for kind in ("chronolog", "kafka"):
        dirs = {codec: written[codec][kind] for codec in CODECS}
        exts = (".log",) if options[0] == "--deep-iteration" else (".index", ".timeindex")
        files = [p for d in dirs.values() for ext in exts for p in sorted(d.glob(f"*{ext}"))]
        reports[kind] = _without_dirs(_dump(files, *options), dirs)
    assert "Mismatches" not in reports["chronolog"] and "isvalid: false" not in reports["chronolog"]
    assert "Found" not in reports["chronolog"] or "Found timestamp mismatch" not in reports["chronolog"]
    assert reports["chronolog"] == reports["kafka"]


# -- recompressed by the broker, and cleaned by it ----------------------------------------------------------
def _batch_view(raw: bytes) -> list[tuple]:
    """Each batch's header without its length and CRC, and its records decompressed."""
    from chronolog.records.memory import iter_batches

    out = []
    for batch in iter_batches(raw):
        header = list(batch._h)
        del header[4], header[1]  # crc, batch length: they follow the compressed bytes
        out.append((tuple(header), bytes(batch.records_section())))
    return out


@pytest.mark.parametrize("codec", CODECS[1:])
def test_batches_recompressed_by_the_topic_codec(chronolog_side, kafka_side, codec):
    """compression.type=<codec> on the topic, an uncompressed producer: each broker compresses every batch
    (LogValidator's recompression). The compressed bytes are each compressor's own (Java's zip, snappy-java,
    lz4-java and zstd-jni against zlib, cramjam and libzstd here) and cannot be equal; the batches' headers
    but for length and CRC, and the records once decompressed, are; the segments roll at the same offsets."""
    base = (now_ms() - 7_200_000) // 1000 * 1000
    views = {}
    for side in (chronolog_side, kafka_side):
        topic = side.create_topic(configs={**TOPIC_CONFIGS, "compression.type": codec}, prefix=f"files-re-{codec}")
        produce(side, topic, _batches(base), **{"compression.type": "none"})
        views[side.kind] = {name: _batch_view(raw) for name, raw in _files(side.partition_dir(topic), ".log").items()}
    assert views["chronolog"] == views["kafka"]


def test_compacted_segments_are_kafkas_bytes(chronolog_side, kafka_side):
    """A compacted topic rolled by record time, once each broker's cleaner has been over it: the cleaned
    segments are the same bytes (LogCleaner keeps each key's last record, rebuilding batches in place)."""
    from tests.differential.steps import consume, wait_until

    base = (now_ms() - 3_000_000) // 1000 * 1000
    keys = [b"a", b"b", b"a", b"c", b"b", b"a", b"d", b"c", b"a", b"e"]
    batches = [[(k, f"v{i}".encode(), base + i * 40_000)] for i, k in enumerate(keys)]
    logs = {}
    for side in (chronolog_side, kafka_side):
        topic = side.create_topic(configs={"cleanup.policy": "compact", "segment.ms": "60000",
                                           "min.cleanable.dirty.ratio": "0.01"}, prefix="files-compacted")
        produce(side, topic, batches)
        closed = max(int(p.name[:-4]) for p in side.partition_dir(topic).glob("*.log"))

        def cleaned(side=side, topic=topic, closed=closed):
            older = [r["key"] for r in consume(side, topic) if r["offset"] < closed]
            return len(older) == len(set(older))

        wait_until(cleaned, 60, f"{side.kind}: the cleaner's pass")
        logs[side.kind] = _files(side.partition_dir(topic), ".log")
    assert logs["chronolog"] == logs["kafka"]
