"""A copy of a live data dir, damaged (flipped bytes in one batch's records, in another's max timestamp; or a
segment cut short), read offline and by the broker started on the copy: both skip the same bytes and return
the same records and the same time lookups, and both report the bad range with the same line. Before, the
offline reader printed records of a batch whose CRC fails and answered a time lookup with a record time in
2145; the broker's recovery validates every batch (`LogSegment.recover`) and skips it."""

from __future__ import annotations

import logging
import shutil
import time

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from chronolog.config import BrokerConfig
from chronolog.records import SimpleRecord, build_batch
from chronolog.storage import LogManager, PartitionLog
from chronolog.storage.dirlock import LOCK_FILE
from chronolog.timetravel.sources import BrokerSource, DataDirSource
from tests.brokerproc import BrokerProcess
from tests.clirun import chronolog_completed

T0 = 1_700_000_000_000
BATCHES, PER_BATCH = 30, 4
TOTAL = BATCHES * PER_BATCH


def _live_copy(tmp_path):
    """The data dir of a running writer, copied while it runs (no clean-shutdown marker, no recovery point
    checkpoint yet): what a user gets by copying a broker's data dir."""
    manager = LogManager(tmp_path / "live", BrokerConfig())
    manager.startup(background=False)
    manager.create_topic("d", 1, {"segment.bytes": "2000", "index.interval.bytes": "256", "message.timestamp.after.max.ms": str(2**62),
                                  "retention.ms": "-1"})
    plog = manager.get_log("d", 0)
    for b in range(BATCHES):
        plog.append(build_batch([SimpleRecord(T0 + 1000 * (b * PER_BATCH + i), None, b"value-%03d" % (b * PER_BATCH + i)
                                              + b"." * 40) for i in range(PER_BATCH)]))
    copy = tmp_path / "copy"
    shutil.copytree(tmp_path / "live", copy, ignore=shutil.ignore_patterns(LOCK_FILE))
    manager.shutdown()
    assert len(list((copy / "d-0").glob("*.log"))) >= 3
    return copy


def _batches(copy):
    plog = PartitionLog.open_readonly(copy / "d-0")
    out = [(seg.log_path, pos, batch.base_offset, batch.last_offset, batch.size_in_bytes)
           for seg in plog.segments for pos, batch in seg.batches_from(0)]
    plog.close()
    return out


def _flip(path, position: int, mask: int = 0xFF) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ mask]))


def _flipped(tmp_path) -> tuple:
    copy = _live_copy(tmp_path)
    batches = _batches(copy)
    value_hit, ts_hit = batches[2], batches[9]
    # The last batch of the first segment holds its largest timestamp, which the copy's time index names:
    # a lookup of a time inside it must go on to the next segment, as the broker (whose recovery rebuilt
    # that index without it) answers.
    last_of_first = [b for b in batches if b[0] == batches[0][0]][-1]
    assert last_of_first is batches[5]
    for hit in (value_hit, last_of_first):
        _flip(hit[0], hit[1] + 61 + 20)  # inside the first record's value
    _flip(ts_hit[0], ts_hit[1] + 35 + 2, 0x01)   # maxTimestamp: 2^40 ms (35 years) ahead
    return copy, {o for b in (value_hit, ts_hit, last_of_first) for o in range(b[2], b[3] + 1)}


def _truncated(tmp_path) -> tuple:
    copy = _live_copy(tmp_path)
    batches = _batches(copy)
    first_segment = [b for b in batches if b[0] == batches[0][0]]
    path, pos, base, _last, size = first_segment[-2]
    with open(path, "r+b") as f:
        f.truncate(pos + size // 2)
    return copy, set(range(base, first_segment[-1][3] + 1))


def _offline(copy):
    """Time lookups first, each from a fresh source (nothing found by an earlier read), then the records."""
    lookups = {}
    for t in _times():
        source = DataDirSource(copy)
        try:
            a = source.offsets_for_time("d", t)[0]
        finally:
            source.close()
        lookups[t] = (a.offset, a.timestamp, a.found)
    source = DataDirSource(copy)
    try:
        records = [(r.offset, r.timestamp, r.value) for r in source.read("d", 0, 0, TOTAL)]
    finally:
        source.close()
    return records, lookups


def _times() -> list[int]:
    return [T0 - 1, *(T0 + 1000 * i + 500 for i in range(0, TOTAL, 3)), T0 + 1000 * TOTAL, 5_000_000_000_000]


def _broker(copy):
    broker = BrokerProcess(copy).start()
    try:
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "damaged",
                             "enable.auto.commit": False, "enable.partition.eof": True, "check.crcs": True})
        consumer.assign([TopicPartition("d", 0, 0)])
        records = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                break
            records.append((msg.offset(), msg.timestamp()[1], msg.value()))
        consumer.close()
        source = BrokerSource(broker.bootstrap)
        try:
            lookups = {t: source.offsets_for_time("d", t)[0] for t in _times()}
        finally:
            source.close()
    finally:
        broker.stop()
    return records, {t: (a.offset, a.timestamp, a.found) for t, a in lookups.items()}, broker.log_path.read_text()


@pytest.mark.parametrize("damage", [_flipped, _truncated], ids=["flipped-bytes", "truncated"])
def test_offline_and_broker_reads_of_a_damaged_copy_agree(tmp_path, caplog, damage):
    copy, lost = damage(tmp_path)
    caplog.set_level(logging.ERROR, logger="chronolog")
    offline_records, offline_lookups = _offline(copy)
    assert {o for o, _t, _v in offline_records} == set(range(TOTAL)) - lost
    assert all(t < 4_000_000_000_000 for _o, t, _v in offline_records)  # no record time in 2145
    reports = sorted({r.getMessage().split(";")[0] for r in caplog.records if "are corrupt" in r.getMessage()})
    assert reports

    check = chronolog_completed("check", "--data-dir", str(copy))
    assert check.returncode == 1 and "corrupt" in check.stdout, check.stdout + check.stderr

    broker_records, broker_lookups, broker_log = _broker(copy)
    assert broker_records == offline_records
    assert broker_lookups == offline_lookups
    for line in reports:  # the broker's recovery names the same bytes and offsets
        assert line in broker_log


def test_a_bad_last_batch_of_the_last_segment_is_a_torn_tail_for_both(tmp_path, caplog):
    """Recovery truncates a last segment's invalid tail with nothing valid after it (a torn write); the
    offline reader stops there without reporting corruption (a live segment's last batch may be half
    written while it reads), and both return the records before it."""
    copy = _live_copy(tmp_path)
    path, pos, base, _last, _size = _batches(copy)[-1]
    _flip(path, pos + 61 + 20)
    caplog.set_level(logging.WARNING, logger="chronolog")
    offline_records, offline_lookups = _offline(copy)
    assert [o for o, _t, _v in offline_records] == list(range(base))
    assert not [r for r in caplog.records if "corrupt" in r.getMessage()]
    broker_records, broker_lookups, broker_log = _broker(copy)
    assert broker_records == offline_records and broker_lookups == offline_lookups
    assert "truncating" in broker_log
