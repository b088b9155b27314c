"""Each side's readers on the other's files. Kafka 4.4's DumpLogSegments reads the segments chronolog wrote
for an idempotent producer, committed and aborted transactions and a compacted topic; chronolog's `check`,
`dump-log` and path mode (`consume`/`offsets --data-dir`) read a Kafka 4.4 log dir written with the four
codecs, transactions and compaction, and answer what the Kafka broker answers over the wire."""

from __future__ import annotations

import json
import re
import shutil
import uuid
from pathlib import Path

import pytest

from tests.cli.conftest import chronolog
from tests.differential.steps import consume, list_offsets_admin, now_ms, produce, wait_until

CODECS = ("gzip", "snappy", "lz4", "zstd")


def _transactions(side, topic: str, base: int) -> None:
    from confluent_kafka import Producer

    producer = Producer(side.client_config(**{"transactional.id": f"tx-{topic}", "linger.ms": 5}))
    producer.init_transactions(30)
    for n, (commit, count) in enumerate(((True, 3), (False, 2), (True, 1))):
        producer.begin_transaction()
        for i in range(count):
            producer.produce(topic, key=f"t{n}-{i}".encode(), value=f"txn {n} record {i}".encode(), partition=0,
                             timestamp=base + 1000 * n + i)
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    # the last marker is written after EndTxn answers
    wait_until(lambda: list_offsets_admin(side, topic, 1, ["latest"], isolation="read_committed")
               [(0, "latest")][0] == 9, what=f"{side.kind}: the last commit marker")


def _compacted(side, topic: str, base: int) -> None:
    keys = [b"a", b"b", b"a", b"c", b"b", b"a", b"d", b"c", b"a", b"e"]
    produce(side, topic, [[(k, f"v{i}".encode(), base + i * 40_000)] for i, k in enumerate(keys)])
    closed = max(int(p.name[:-4]) for p in side.partition_dir(topic).glob("*.log"))

    def cleaned():
        older = [r["key"] for r in consume(side, topic) if r["offset"] < closed]
        return len(older) == len(set(older))

    wait_until(cleaned, 60, f"{side.kind}: the cleaner's pass")


KINDS_OF_TOPIC = ("idempotent", "transactions", "compacted", *CODECS)


@pytest.fixture(scope="module")
def rich(chronolog_side, kafka_side):
    """{kind of topic: {broker kind: (topic, partition dir)}} with the same records on both brokers."""
    base = (now_ms() - 7_200_000) // 1000 * 1000
    suffix = uuid.uuid4().hex[:8]
    out: dict[str, dict[str, tuple[str, Path]]] = {k: {} for k in KINDS_OF_TOPIC}
    for side in (chronolog_side, kafka_side):
        topic = side.create_topic(f"idem-{suffix}")
        produce(side, topic, [[(f"i{i}".encode(), f"idem {i}".encode(), base + i) for i in range(5)],
                              [(b"i5", b"idem 5", base + 10)]], **{"enable.idempotence": True})
        out["idempotent"][side.kind] = (topic, side.partition_dir(topic))
        topic = side.create_topic(f"txn-{suffix}")
        _transactions(side, topic, base)
        out["transactions"][side.kind] = (topic, side.partition_dir(topic))
        topic = side.create_topic(f"compacted-{suffix}", configs={
            "cleanup.policy": "compact", "segment.ms": "60000", "min.cleanable.dirty.ratio": "0.01"})
        _compacted(side, topic, base)
        out["compacted"][side.kind] = (topic, side.partition_dir(topic))
        for codec in CODECS:
            topic = side.create_topic(f"codec-{codec}-{suffix}", configs={"segment.ms": "60000"})
            produce(side, topic, [[(f"k{j}".encode(), f"{codec} {i}.{j} ".encode() * 4, base + 30_000 * i + j)
                                   for j in range(5)] for i in range(5)], **{"compression.type": codec})
            out[codec][side.kind] = (topic, side.partition_dir(topic))
    return out


# -- Kafka's DumpLogSegments on chronolog's segments ------------------------------------------------------
_VARYING = re.compile(r"(producerId|producerEpoch|crc|CreateTime|coordinatorEpoch|lastModified\w*|position): -?\d+ ?")


def _dump_records(files: list[Path], *options: str) -> tuple[str, list[str]]:
    from chronolog.testing.kafka import run_tool

    proc = run_tool("kafka-dump-log", "--files", ",".join(map(str, files)), *options, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [_VARYING.sub("", ln).strip() for ln in proc.stdout.splitlines() if ln.startswith("| offset")]
    return proc.stdout, lines


def test_kafka_dump_log_reads_chronolog_idempotent_transactional_and_compacted_segments(rich):
    """--deep-iteration over the three topics' segments: every batch valid, and the same records (offsets,
    keys, values, control markers) as in Kafka's own segments; producer ids, CRCs and marker times differ."""
    records = {}
    for kind in ("chronolog", "kafka"):
        files = [p for k in ("idempotent", "transactions", "compacted") for p in sorted(rich[k][kind][1].glob("*.log"))]
        text, records[kind] = _dump_records(files, "--deep-iteration", "--print-data-log")
        assert "isvalid: false" not in text
    assert records["chronolog"] == records["kafka"]
    assert any("endTxnMarker: ABORT" in r for r in records["chronolog"])


def test_kafka_verifies_chronolog_indexes_of_rich_segments(rich):
    files = [p for k in ("idempotent", "transactions", "compacted") for ext in (".index", ".timeindex")
             for p in sorted(rich[k]["chronolog"][1].glob(f"*{ext}"))]
    text, _ = _dump_records(files, "--verify-index-only")
    assert "Mismatches" not in text and "not in the log" not in text.lower(), text[-2000:]


# -- chronolog's readers on Kafka's log dir ---------------------------------------------------------------
@pytest.fixture(scope="module")
def kafka_copy(rich, tmp_path_factory):
    """A copy of Kafka's partition dirs of these topics (a log dir as a backup would hold it)."""
    root = tmp_path_factory.mktemp("kafka-copy")
    for kinds in rich.values():
        src = kinds["kafka"][1]
        shutil.copytree(src, root / src.name, ignore=shutil.ignore_patterns("*.deleted", "*.cleaned", "*.swap"))
    return root


def test_chronolog_check_reads_kafka_log_dir(kafka_copy):
    run = chronolog("check", "--data-dir", str(kafka_copy), "--json")
    assert run.rc == 0, run.err
    assert "corrupt" not in run.err.lower()


def test_chronolog_dump_log_verifies_kafka_segments(rich, kafka_copy):
    files = [str(p) for p in sorted(kafka_copy.glob("*/*")) if p.suffix in (".log", ".index", ".timeindex")]
    run = chronolog("dump-log", "--verify-index", *files)
    assert run.rc == 0, (run.out[-2000:], run.err[-2000:])
    run = chronolog("dump-log", "--print-data", *[f for f in files if f.endswith(".log")])
    assert run.rc == 0, run.err[-2000:]
    for codec in CODECS:
        assert f"{codec} 4.4" in run.out


@pytest.mark.parametrize("kind", KINDS_OF_TOPIC)
def test_path_mode_reads_kafka_log_dir_as_the_broker_answers(rich, kafka_copy, kafka_side, kind):
    """`chronolog consume --data-dir` over the copy gives what a read_committed consumer of the Kafka broker
    gets (aborted records and markers left out); `chronolog offsets --data-dir` what ListOffsets answers."""
    topic = rich[kind]["kafka"][0]
    wire = consume(kafka_side, topic, **{"isolation.level": "read_committed"})
    run = chronolog("consume", topic, "--data-dir", str(kafka_copy), "--from", "2000-01-01T00:00:00Z", "--to", "now", "--json")
    assert run.rc == 0, run.err[-2000:]
    read = [json.loads(line) for line in run.out.splitlines() if line.strip()]
    assert [(r["offset"], r["value"]) for r in read] == [(r["offset"], r["value"].decode()) for r in wire]
    stamps = sorted({r["timestamp"] for r in wire})
    for ts in (stamps[0], stamps[len(stamps) // 2], stamps[-1] + 1):
        run = chronolog("offsets", topic, "--time", str(ts), "--data-dir", str(kafka_copy), "--json",
                        "--isolation-level", "read_committed")
        assert run.rc == 0, run.err[-2000:]
        answer = json.loads(run.out)
        expect = list_offsets_admin(kafka_side, topic, 1, [ts], isolation="read_committed")[(0, ts)]
        assert _offset_of(answer) == expect[0], (answer, expect)


def _offset_of(answer) -> int:
    """The offset `chronolog offsets --json` names for partition 0 (-1 when nothing is at/after the time)."""
    part = answer[0] if isinstance(answer, list) else answer.get("partitions", answer)
    if isinstance(part, list):
        part = part[0]
    if isinstance(part, dict) and "0" in part:
        part = part["0"]
    return part["offset"] if part.get("timestamp", 0) is not None and part.get("found", True) else -1
