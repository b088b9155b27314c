"""Recovery on real files: the partition a real Kafka broker wrote, copied into a data dir and damaged the
way crashes and disks damage files (a torn tail, a garbage offset index, a zeroed time index, a missing
time index, lost checkpoints, no clean-shutdown marker), then served by the real broker. librdkafka must
read every record that survived, answer every lookup by time as the undamaged files do, and the rebuilt
offset index must be Kafka's own file again."""

from __future__ import annotations

import shutil

import pytest
from confluent_kafka import Consumer, TopicPartition

from chronolog.records import iter_batches
from chronolog.storage import PartitionLog
from tests.brokerproc import BrokerProcess

pytestmark = pytest.mark.compat
TOPIC = "timeindex_test"
TORN_BYTES = 100  # cut from the end of the last segment: its last batch is left torn


def _damage(part, original) -> int:
    """Damages the copy in `part`; returns the log end offset recovery must arrive at."""
    last_log = part / "00000000000000022964.log"
    data = (original / last_log.name).read_bytes()
    last_batch = list(iter_batches(data))[-1]
    with open(last_log, "r+b") as f:
        f.truncate(len(data) - TORN_BYTES)
    (part / "00000000000000007729.index").write_bytes(bytes(range(256)) * 8)  # garbage, not a multiple of 8
    (part / "00000000000000000000.timeindex").write_bytes(bytes(3000))  # zeroed
    (part / "00000000000000015363.timeindex").unlink()  # missing
    return last_batch.base_offset


@pytest.fixture(scope="module")
def damaged(kafka_segments_dir, tmp_path_factory):
    data = tmp_path_factory.mktemp("recovery") / "data"
    part = data / f"{TOPIC}-0"
    shutil.copytree(kafka_segments_dir, part)
    for f in part.iterdir():
        f.chmod(0o644)
    end = _damage(part, kafka_segments_dir)
    truth = [r for r in PartitionLog.open_readonly(kafka_segments_dir).read_records(0) if r.offset < end]
    # The records are from 2025: without log.retention.ms=-1 the first retention pass would delete them.
    proc = BrokerProcess(data, {"log.retention.ms": "-1"}).start()
    yield proc, part, truth, end
    proc.stop()


def test_the_broker_recovers_the_damaged_copy_and_serves_every_surviving_record(damaged):
    proc, _part, truth, end = damaged
    c = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": "recovery", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 10})
    try:
        assert c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10) == (0, end)
        c.assign([TopicPartition(TOPIC, 0, 0)])
        got: list[tuple[int, int, bytes | None]] = []
        while len(got) < end:
            msg = c.poll(10)
            assert msg is not None, f"stalled after {len(got)} of {end} records"
            assert not msg.error(), msg.error()
            got.append((msg.offset(), msg.timestamp()[1], msg.value()))
    finally:
        c.close()
    assert got == [(r.offset, r.timestamp, r.value) for r in truth]


def test_lookups_by_time_on_the_recovered_log_match_the_undamaged_files(damaged):
    proc, _part, truth, end = damaged
    timestamps = [r.timestamp for r in truth]
    lo, hi = min(timestamps), max(timestamps)
    targets = list(range(lo - 3, hi + 3, (hi - lo) // 61)) + [1753819246011, 1753819281927, hi, hi + 1]
    c = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": "recovery-lookups"})
    try:
        for target in targets:  # one partition per request: a repeated partition is an invalid request
            (tp,) = c.offsets_for_times([TopicPartition(TOPIC, 0, target)], timeout=15)
            want = next((r.offset for r in truth if r.timestamp >= target), -1)  # none: -1 (librdkafka: END)
            assert tp.offset == want, (target, tp.offset, want)
    finally:
        c.close()


def test_the_rebuilt_offset_index_is_kafkas_file_again(damaged, kafka_segments_dir):
    proc, part, _truth, _end = damaged
    proc.stop()  # a clean stop trims the indexes to their entries
    name = "00000000000000007729.index"
    assert (part / name).read_bytes() == (kafka_segments_dir / name).read_bytes()
    assert (part / "00000000000000015363.timeindex").exists()
    assert (part / "00000000000000000000.timeindex").read_bytes() != bytes(3000)
    proc.start()  # a clean restart: the marker is there, nothing is recovered, everything still answers
    plog = PartitionLog.open_readonly(part)
    assert [s.base_offset for s in plog.segments] == [0, 7729, 15363, 22964]
