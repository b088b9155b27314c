"""Produce validation against chronolog and Kafka 4.4 (`LogValidator`, `ProduceRequest.validateRecords`,
`ReplicaManager.appendRecords`): timestamp bounds, keyless records on compacted topics (per-record errors),
sizes, CRC, magic, batch counts, acks, sequences, unknown topics. Raw Produce requests (the whole answer:
error code, per-record errors, offsets) and librdkafka's delivery reports."""

from __future__ import annotations

import struct

import pytest

from chronolog.records.batch import CRC_OFFSET, CompressionType
from tests.differential.steps import (
    build_batch,
    consume,
    now_ms,
    produce,
    produce_raw,
    raw_call,
    records,
    wait_until,
)

HOUR = 3_600_000
BOUNDED = {"message.timestamp.before.max.ms": "60000", "message.timestamp.after.max.ms": "60000"}


def _answer(part: dict) -> dict:
    """A partition's Produce answer without what differs between brokers (append time only as set/unset)."""
    out = dict(part)
    out.pop("index", None)
    if "log_append_time" in out:
        out["log_append_time_set"] = out.pop("log_append_time") != -1
    out["record_errors"] = [e["batch_index"] for e in out.get("record_errors", [])]
    return out


TIMESTAMP_CASES = {
    "in_bounds": [0, -1000, 1000],
    "too_old": [-2 * HOUR],
    "too_new": [2 * HOUR],
    "one_bad_among_three": [0, -2 * HOUR, 0],
    "old_and_new": [2 * HOUR, 0, -2 * HOUR],
}


@pytest.mark.parametrize("codec", ["none", "gzip"])
@pytest.mark.parametrize("case", sorted(TIMESTAMP_CASES))
def test_timestamp_bounds(both, case, codec):
    """message.timestamp.before/after.max.ms: a batch with one record out of bounds is refused whole,
    INVALID_TIMESTAMP, each such record named in record_errors."""
    now = now_ms()
    stamps = [now + d for d in TIMESTAMP_CASES[case]]
    batch = build_batch(records(stamps), compression=getattr(CompressionType, codec.upper()))

    def steps(side):
        topic = side.create_topic(configs=BOUNDED)
        return {"answer": _answer(produce_raw(side, topic, batch)), "stored": len(consume(side, topic))}

    both.same(steps)


def test_timestamp_bounds_ignored_under_log_append_time(both):
    now = now_ms()

    def steps(side):
        topic = side.create_topic(configs={**BOUNDED, "message.timestamp.type": "LogAppendTime"})
        got = produce_raw(side, topic, build_batch(records([now - 2 * HOUR, now + 2 * HOUR])))
        return {"answer": _answer(got), "types": [r["timestamp_type"] for r in consume(side, topic)]}

    assert both.same(steps)["answer"]["log_append_time_set"] is True


def test_timestamp_bounds_through_librdkafka(both):
    now = now_ms()
    batches = [records([now]), records([now - 2 * HOUR], "old"), records([now + 2 * HOUR], "new"), records([now])]

    def steps(side):
        topic = side.create_topic(configs=BOUNDED)
        return produce(side, topic, batches)

    assert [e for _p, _o, e in both.same(steps)] == [None, "INVALID_TIMESTAMP", "INVALID_TIMESTAMP", None]


KEYLESS = {
    "all_keyed": [b"a", b"b"],
    "one_keyless": [b"a", None, b"c"],
    "two_keyless": [None, b"b", None],
}


@pytest.mark.parametrize("codec", ["none", "gzip", "zstd"])
@pytest.mark.parametrize("case", sorted(KEYLESS))
def test_keyless_records_on_compacted_topic(both, case, codec):
    """Compacted topics refuse records without a key: INVALID_RECORD for the batch, each keyless record's
    index in record_errors (LogValidator.validateKey)."""
    now = now_ms()
    batch = build_batch([(k, b"v", now) for k in KEYLESS[case]], compression=getattr(CompressionType, codec.upper()))

    def steps(side):
        topic = side.create_topic(configs={"cleanup.policy": "compact"})
        return {"answer": _answer(produce_raw(side, topic, batch)), "stored": len(consume(side, topic))}

    both.same(steps)


def test_keyless_tombstones_and_keyed_tombstones(both):
    """A tombstone needs a key too; a keyed one is taken."""
    now = now_ms()

    def steps(side):
        topic = side.create_topic(configs={"cleanup.policy": "compact,delete"})
        keyed = produce_raw(side, topic, build_batch([(b"a", None, now)]))
        keyless = produce_raw(side, topic, build_batch([(None, None, now)]))
        return {"keyed": _answer(keyed), "keyless": _answer(keyless)}

    both.same(steps)


@pytest.mark.parametrize("size", [1500, 2100, 5000])
def test_batch_larger_than_max_message_bytes(both, size):
    """max.message.bytes=2000 (a batch's whole size, header included): MESSAGE_TOO_LARGE above it."""
    now = now_ms()
    batch = build_batch([(b"k", b"x" * (size - 80), now)])

    def steps(side):
        topic = side.create_topic(configs={"max.message.bytes": "2000"})
        return {"size": len(batch), "answer": _answer(produce_raw(side, topic, batch))}

    both.same(steps)


def test_batch_larger_than_broker_message_max_bytes(both):
    """No topic override: the broker's message.max.bytes (1048588 on both) bounds a batch."""
    now = now_ms()
    fits = build_batch([(b"k", b"x" * 1_000_000, now)])
    too_big = build_batch([(b"k", b"x" * 1_100_000, now)])

    def steps(side):
        topic = side.create_topic()
        return [_answer(produce_raw(side, topic, b)) for b in (fits, too_big)]

    assert [a["error_code"] for a in both.same(steps)] == [0, 10]


def test_oversize_through_librdkafka(both):
    now = now_ms()

    def steps(side):
        topic = side.create_topic(configs={"max.message.bytes": "2000"})
        return produce(side, topic, [[(b"k", b"x" * 3000, now)], [(b"k", b"y" * 100, now)]])

    assert [e for _p, _o, e in both.same(steps)] == ["MSG_SIZE_TOO_LARGE", None]


def _corrupt(batch: bytes) -> bytes:
    raw = bytearray(batch)
    raw[-1] ^= 0xFF
    return bytes(raw)


def _bad_crc(batch: bytes) -> bytes:
    raw = bytearray(batch)
    (crc,) = struct.unpack_from(">I", raw, CRC_OFFSET)
    struct.pack_into(">I", raw, CRC_OFFSET, crc ^ 1)
    return bytes(raw)


def _magic(batch: bytes, magic: int) -> bytes:
    raw = bytearray(batch)
    raw[16] = magic
    return bytes(raw)


def _patch(batch: bytes, fmt: str, at: int, value: int, *, crc: bool = True) -> bytes:
    """`batch` with one header field rewritten (and its CRC made right again, unless crc=False)."""
    from chronolog.records.batch import ATTRIBUTES_OFFSET, crc32c

    raw = bytearray(batch)
    struct.pack_into(fmt, raw, at, value)
    if crc:
        struct.pack_into(">I", raw, CRC_OFFSET, crc32c(bytes(raw[ATTRIBUTES_OFFSET:])))
    return bytes(raw)


def _cut_records(batch: bytes, n: int) -> bytes:
    """The last `n` bytes of the records gone, the batch length and CRC made to match."""
    raw = batch[:-n]
    return _patch(_patch(raw, ">i", 8, len(raw) - 12, crc=False), ">h", 21, struct.unpack_from(">h", raw, 21)[0])


def _garbage_gzip(batch: bytes) -> bytes:
    raw = batch[:61] + b"\x1f\x8b not really gzip at all"
    raw = _patch(raw, ">i", 8, len(raw) - 12, crc=False)
    return _patch(raw, ">h", 21, 1)


BAD_BATCHES = {
    "payload_flipped": lambda b: _corrupt(b),
    "crc_wrong": lambda b: _bad_crc(b),
    "magic_1": lambda b: _magic(b, 1),
    "magic_3": lambda b: _magic(b, 3),
    "two_batches": lambda b: b + b,
    "truncated": lambda b: b[:-5],
    "empty": lambda b: b"",
    "trailing_5_bytes": lambda b: b + b"\0" * 5,
    "trailing_partial_batch": lambda b: b + b[:30],
    "size_below_overhead": lambda b: b[:8] + struct.pack(">i", 10) + b[12:],
    "short_header": lambda b: b[:14],
    # header fields a client may not set so, CRC right
    "base_offset_5": lambda b: _patch(b, ">q", 0, 5, crc=False),
    "control_bit": lambda b: _patch(b, ">h", 21, 0x20),
    "transactional_bit_without_producer": lambda b: _patch(b, ">h", 21, 0x10),
    "count_above_records": lambda b: _patch(b, ">i", 57, 3),
    "count_below_records": lambda b: _patch(b, ">i", 57, 1),
    "last_offset_delta_5": lambda b: _patch(b, ">i", 23, 5),
    "producer_id_without_sequence": lambda b: _patch(b, ">q", 43, 7),
    "last_record_cut": lambda b: _cut_records(b, 2),
    "magic_0_valid_crc": lambda b: _magic(b, 0),
}


@pytest.mark.parametrize("case", sorted(BAD_BATCHES))
def test_malformed_batches(both, case):
    now = now_ms()
    batch = BAD_BATCHES[case](build_batch(records([now, now + 1])))

    def steps(side):
        topic = side.create_topic()
        answer = _answer(produce_raw(side, topic, batch))
        return {"answer": answer, "stored": len(consume(side, topic))}

    both.same(steps)


def test_compressed_payload_that_does_not_decompress(both):
    """docs/differences.md: a gzip batch (CRC right) whose payload is not gzip: chronolog answers
    CORRUPT_MESSAGE; Kafka 4.4 answers UNKNOWN_SERVER_ERROR (the codec's exception is no ApiException, so
    ReplicaManager's catch-all answers it, with the log start offset)."""
    batch = _garbage_gzip(build_batch(records([now_ms()])))

    def steps(side):
        topic = side.create_topic()
        return {"answer": _answer(produce_raw(side, topic, batch)), "stored": len(consume(side, topic))}

    c, k = both.run(steps)
    assert c["answer"]["error_code"] == 2 and c["answer"]["log_start_offset"] == -1 and c["stored"] == 0
    assert k["answer"]["error_code"] == -1 and k["answer"]["log_start_offset"] == 0 and k["stored"] == 0


def test_unknown_topic_partition_and_acks(both):
    now = now_ms()
    batch = build_batch(records([now]))

    def steps(side):
        topic = side.create_topic()
        return {"unknown_topic": _answer(produce_raw(side, f"{topic}-absent", batch)),
                "unknown_partition": _answer(produce_raw(side, topic, batch, partition=3)),
                "acks_2": _answer(produce_raw(side, topic, batch, acks=2)),
                "acks_1": _answer(produce_raw(side, topic, batch, acks=1))}

    both.same(steps)


def _init_producer_id(side) -> tuple[int, int]:
    """A producer id for an idempotent producer (retried while Kafka's coordinator loads)."""
    def ask():
        resp = raw_call(side, 22, 4, {"transactional_id": None, "transaction_timeout_ms": 60000,
                                      "producer_id": -1, "producer_epoch": -1})
        return resp if resp["error_code"] == 0 else None

    resp = wait_until(ask, what=f"{side.kind}: a producer id")
    return resp["producer_id"], resp["producer_epoch"]


SEQUENCES = {
    "in_order": [0, 2, 4],
    "duplicate_of_last": [0, 2, 2],
    "duplicate_of_first": [0, 2, 0],
    "gap": [0, 5],
    "first_not_zero": [3],
    "going_back": [0, 2, 1],
}


@pytest.mark.parametrize("case", sorted(SEQUENCES))
def test_idempotent_sequences(both, case):
    """Batches of two records from one idempotent producer with the given base sequences: duplicates answer
    the first append's offset, gaps OUT_OF_ORDER_SEQUENCE_NUMBER (ProducerStateManager)."""
    now = now_ms()

    def steps(side):
        topic = side.create_topic()
        pid, epoch = _init_producer_id(side)
        out = []
        for seq in SEQUENCES[case]:
            batch = build_batch(records([now, now]), producer_id=pid, producer_epoch=epoch, base_sequence=seq)
            out.append(_answer(produce_raw(side, topic, batch)))
        return {"answers": out, "stored": [r["offset"] for r in consume(side, topic)]}

    both.same(steps)


@pytest.mark.parametrize("version", [3, 7, 8, 9, 11, 12])
def test_answer_shape_by_version(both, version):
    """The same good and refused batches at each Produce version both serve (by name: v13 names topics by
    id): offsets, log start offset, per-record errors where the version has them."""
    now = now_ms()
    good = build_batch(records([now, now + 1]))
    keyless = build_batch([(None, b"v", now)])

    def steps(side):
        topic = side.create_topic(configs={"cleanup.policy": "compact"})
        keyed = build_batch([(b"k", b"v", now)])
        return [_answer(produce_raw(side, topic, b, version=version)) for b in (keyed, keyless, good)]

    both.same(steps)


@pytest.mark.parametrize("lie", ["lower", "higher"])
@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_batch_max_timestamp_field_is_recomputed(both, codec, lie):
    """A client's batch whose max_timestamp field is not its records' max: LogValidator writes the records'
    max over it (the stored bytes and the lookups by time show which)."""
    from tests.differential.steps import observe_offsets

    base = (now_ms() - 600_000) // 1000 * 1000
    stamps = [base + 3000, base + 1000, base + 2000]
    wrong = base if lie == "lower" else base + 9000
    batch = build_batch(records(stamps), compression=getattr(CompressionType, codec.upper()), max_timestamp=wrong)

    def steps(side):
        topic = side.create_topic()
        answer = _answer(produce_raw(side, topic, batch))
        raw = b"".join(p.read_bytes() for p in sorted(side.partition_dir(topic).glob("*.log")))
        return {"answer": answer, "stored": raw, **observe_offsets(side, topic, 1, [base, base + 2500, base + 5000],
                                                                  kafka_python=False)}

    obs = both.same(steps)
    assert struct.unpack_from(">q", obs["stored"], 35)[0] == base + 3000
