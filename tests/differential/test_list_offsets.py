"""ListOffsets by time against chronolog and Kafka 4.4: the same records, the same questions, through
librdkafka (offsets_for_times, list_offsets with OffsetSpec) and kafka-python, equal answers."""

from __future__ import annotations

import pytest

from tests.differential.steps import (
    build_batch,
    consume,
    list_offsets_admin,
    now_ms,
    observe_offsets,
    produce,
    produce_raw,
    raw_call,
    records,
    time_queries,
)

# Timestamps relative to a base ten minutes ago: old enough to pass message.timestamp.after.max.ms, recent
# enough that the default retention (7 days, checked every 500 ms here) never deletes them.
SHAPES = {
    "in_order": [[0], [1000], [2000], [3000]],
    "late_batches": [[5000], [1000], [3000], [2000], [8000], [7000]],
    "late_in_one_batch": [[5000, 1000, 3000, 2000, 8000, 7000]],
    "duplicates": [[1000, 1000], [2000], [2000, 2000, 3000], [3000]],
    "max_twice": [[1000, 5000], [2000], [5000, 4000]],
    "all_equal": [[4000, 4000, 4000], [4000]],
    "decreasing": [[9000], [8000], [7000, 6000], [5000]],
}


def _shape(shape: str, base: int) -> list[list[tuple]]:
    batches, i = [], 0
    for group in SHAPES[shape]:
        batch = []
        for delta in group:
            batch.append((f"k{i}".encode(), f"v{i}".encode(), base + delta))
            i += 1
        batches.append(batch)
    return batches


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_offsets_for_times_createtime(both, shape):
    base = (now_ms() - 600_000) // 1000 * 1000
    batches = _shape(shape, base)
    stamps = [r[2] for b in batches for r in b]

    def steps(side):
        topic = side.create_topic()
        produced = produce(side, topic, batches)
        return {"produced": produced, **observe_offsets(side, topic, 1, time_queries(stamps))}

    both.same(steps)


def test_log_append_time_topic(both):
    """LogAppendTime: the broker's clock replaces the producer's (timestamps differ between two brokers: only
    whether each lies within the produce window is compared, and which offsets the lookups find)."""
    old = now_ms() - 300_000
    future = now_ms() + 600_000

    def steps(side):
        topic = side.create_topic(configs={"message.timestamp.type": "LogAppendTime"})
        before = now_ms()
        # prebuilt batches: librdkafka may split queued records, and each batch gets its own append time
        for batch in (records([old, old + 1, old + 2]), records([old - 5], "w")):
            assert produce_raw(side, topic, build_batch(batch))["error_code"] == 0
        after = now_ms()
        got = consume(side, topic)
        stamps = [r["timestamp"] for r in got]
        lo = list_offsets_admin(side, topic, 1, ["earliest", "latest", "max_timestamp", 0, old, future])
        return {
            "types": [r["timestamp_type"] for r in got],
            "in_window": all(before <= t <= after for t in stamps),
            "batches_share_a_time": stamps[0] == stamps[1] == stamps[2],
            "lookups": {k: v if isinstance(v, str) else (v[0], v[1] in (-1, *stamps)) for k, v in lo.items()
                        if k[1] != "max_timestamp"},
            # the first offset holding the greatest append time (the two batches may share a millisecond)
            "max_is_first_of_greatest": lo[(0, "max_timestamp")] == (stamps.index(max(stamps)), max(stamps)),
        }

    obs = both.same(steps)
    assert obs["types"] == [2, 2, 2, 2] and obs["in_window"]  # librdkafka's TIMESTAMP_LOG_APPEND_TIME


@pytest.mark.parametrize("layout", ["empty", "idle_partitions"])
def test_empty_and_idle_partitions(both, layout):
    base = (now_ms() - 600_000) // 1000 * 1000

    def steps(side):
        topic = side.create_topic(partitions=3)
        if layout == "idle_partitions":
            produce(side, topic, [records([base + 1000, base + 2000])], partition=1)
        return observe_offsets(side, topic, 3, [0, base, base + 1500, base + 5000])

    both.same(steps)


# ListOffsets' special timestamps at each version both brokers serve: latest -1, earliest -2, max timestamp
# -3 (v7), earliest local -4 (v8), latest tiered -5 (v9), earliest pending upload -6 (v11), and one below.
SPECIALS = [-1, -2, -3, -4, -5, -6, -7]


def _max_version(side, api_key: int) -> int:
    resp = raw_call(side, 18, 3, {"client_software_name": "d", "client_software_version": "1"})
    return next(a["max_version"] for a in resp["api_keys"] if a["api_key"] == api_key)


@pytest.mark.parametrize("version", [1, 4, 6, 7, 8, 9, 10, 11])
def test_special_timestamps_by_version(both, version):
    if version > min(_max_version(s, 2) for s in both):
        pytest.skip(f"ListOffsets v{version} is not served by both brokers")
    base = (now_ms() - 600_000) // 1000 * 1000

    def steps(side):
        topic = side.create_topic()
        produce(side, topic, [records([base + 3000, base + 1000]), records([base + 2000])])
        out = {}
        for ts in SPECIALS:
            body = {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": ts,
                                                "max_num_offsets": 1}]}]}
            part = raw_call(side, 2, version, body)["topics"][0]["partitions"][0]
            out[ts] = part
        return out

    both.same(steps)


def test_unknown_topic_and_partition(both):
    def steps(side):
        topic = side.create_topic()
        out = {}
        for name, p in ((topic, 0), (topic, 5), ("no-such-topic-xyz", 0)):
            body = {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": name, "partitions": [{"partition_index": p, "current_leader_epoch": -1, "timestamp": -1,
                                               "max_num_offsets": 1}]}]}
            out[(name == topic, p)] = raw_call(side, 2, 7, body)["topics"][0]["partitions"][0]
        return out

    both.same(steps)


def test_records_without_timestamps(both):
    """Batches whose records carry no timestamp (-1, as written by old clients' v2 batches): lookups by time
    skip them; max_timestamp over a partition holding only them."""
    base = (now_ms() - 600_000) // 1000 * 1000

    def steps(side):
        only = side.create_topic()
        mixed = side.create_topic()
        answers = [produce_raw(side, only, build_batch(records([-1, -1, -1])))["error_code"]]
        answers.append(produce_raw(side, mixed, build_batch(records([-1, -1])))["error_code"])
        answers.append(produce_raw(side, mixed, build_batch(records([base + 1000, base + 2000])))["error_code"])
        answers.append(produce_raw(side, mixed, build_batch(records([-1])))["error_code"])
        return {"answers": answers,
                "only": observe_offsets(side, only, 1, [0, -1 + 1, base], kafka_python=False),
                "mixed": observe_offsets(side, mixed, 1, [0, base, base + 1000, base + 1500, base + 2001],
                                         kafka_python=False),
                "consumed": [r["timestamp"] for r in consume(side, mixed)]}

    both.same(steps)


@pytest.mark.parametrize("version", [4, 7, 9])
def test_leader_epochs_and_duplicate_partitions(both, version):
    """current_leader_epoch older, equal and newer than the leader's (0 on a fresh topic of one node), and a
    partition asked for twice (INVALID_REQUEST for both of its entries)."""
    if version > min(_max_version(s, 2) for s in both):
        pytest.skip(f"ListOffsets v{version} is not served by both brokers")
    base = (now_ms() - 600_000) // 1000 * 1000

    def part(p: int, epoch: int, ts: int) -> dict:
        return {"partition_index": p, "current_leader_epoch": epoch, "timestamp": ts, "max_num_offsets": 1}

    def steps(side):
        topic = side.create_topic(partitions=2)
        produce(side, topic, [records([base + 1000, base + 2000])])
        out = {}
        for epoch in (-1, 0, 1):
            body = {"replica_id": -1, "isolation_level": 0,
                    "topics": [{"name": topic, "partitions": [part(0, epoch, base + 1500)]}]}
            out[epoch] = raw_call(side, 2, version, body)["topics"][0]["partitions"]
        body = {"replica_id": -1, "isolation_level": 0,
                "topics": [{"name": topic, "partitions": [part(0, -1, -1), part(1, -1, -2), part(0, -1, -2)]}]}
        out["duplicate"] = sorted((p["partition_index"], p["error_code"], p["offset"])
                                  for t in raw_call(side, 2, version, body)["topics"] for p in t["partitions"])
        return out

    both.same(steps)
