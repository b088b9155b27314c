"""The active segment of a running writer keeps its indexes preallocated with a zero-filled tail. Read
only (tools, `dump-log`, Spark on a live data dir) that tail is not entries: no "Corrupt index ...
rebuilding" warning, and `dump-log --verify-index` stops where Kafka's DumpLogSegments stops ("it is a
sparse file"). A zero slot followed by written bytes is still corruption."""

from __future__ import annotations

import logging
import struct
import subprocess
import sys

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from chronolog.config import BrokerConfig
from chronolog.storage import LogManager, OffsetIndex, TimeIndex
from chronolog.timetravel.sources import DataDirSource
from tests.brokerproc import BrokerProcess
from tests.storage.helpers import NOW, WIDE, batch

INDEX = "00000000000000000000.index"
TIME_INDEX = "00000000000000000000.timeindex"


def _live(tmp_path, n: int = 60) -> LogManager:
    manager = LogManager(tmp_path / "data", BrokerConfig())
    manager.startup(background=False)
    manager.create_topic("t", 1, {**WIDE, "index.interval.bytes": "150"})
    for i in range(n):
        manager.get_log("t", 0).append(batch(NOW + i), now=NOW)
    return manager


def test_reading_a_live_data_dir_counts_only_written_entries_and_does_not_warn(tmp_path, caplog):
    manager = _live(tmp_path)
    try:
        seg = manager.get_log("t", 0).active
        written = (seg.offset_index.entries, seg.time_index.entries)
        assert written[0] > 5 and (tmp_path / "data" / "t-0" / INDEX).stat().st_size > 1 << 20  # preallocated
        offsets = OffsetIndex(seg.offset_index.path, 0, writable=False)
        times = TimeIndex(seg.time_index.path, 0, writable=False)
        assert (offsets.entries, times.entries) == written
        assert offsets.entry(written[0] - 1) == seg.offset_index.last_entry()
        offsets.close(trim=False)
        times.close(trim=False)
        caplog.set_level(logging.WARNING, logger="chronolog")
        source = DataDirSource(tmp_path / "data")
        try:
            assert source.offsets_for_time("t", NOW + 33)[0].offset == 33
            assert len(list(source.read("t", 0, 0, 60))) == 60
        finally:
            source.close()
        assert not [r for r in caplog.records if "Corrupt" in r.getMessage() or "rebuilding" in r.getMessage()]
    finally:
        manager.shutdown()


def test_a_zero_slot_inside_written_entries_is_still_corruption(tmp_path, caplog):
    manager = _live(tmp_path)
    path = manager.get_log("t", 0).active.offset_index.path
    entries = manager.get_log("t", 0).active.offset_index.entries
    manager.shutdown()  # trims the index to its entries
    data = bytearray(path.read_bytes())
    data[8:16] = bytes(8)  # the second entry zeroed, written ones after it
    path.write_bytes(bytes(data) + bytes(8 * 100))
    assert OffsetIndex(path, 0, writable=False).entries == entries
    caplog.set_level(logging.WARNING, logger="chronolog")
    source = DataDirSource(tmp_path / "data")
    try:
        assert len(list(source.read("t", 0, 0, 60))) == 60
    finally:
        source.close()
    assert any("Corrupt index" in r.getMessage() for r in caplog.records)


def test_dump_log_verify_index_on_a_running_brokers_active_segment(tmp_path):
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("live", 1, 1, config={"index.interval.bytes": "200"})])["live"].result(15)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "batch.num.messages": 1})
        for i in range(200):
            producer.produce("live", value=b"x" * 100, timestamp=NOW + i)
            producer.poll(0)
        assert producer.flush(30) == 0
        part = tmp_path / "data" / "live-0"
        for name in (INDEX, TIME_INDEX):
            assert (part / name).stat().st_size > 10_000_000  # the live, preallocated file
            out = subprocess.run([sys.executable, "-m", "chronolog.cli.main", "dump-log", str(part / name),
                                  "--verify-index"], capture_output=True, text=True, timeout=120)
            assert out.returncode == 0 and out.stdout.strip() == f"{part / name}: OK", out.stdout[:500]
            dump = subprocess.run([sys.executable, "-m", "chronolog.cli.main", "dump-log", str(part / name)],
                                  capture_output=True, text=True, timeout=120)
            lines = dump.stdout.splitlines()
            assert dump.returncode == 0 and 10 < len(lines) < 200, len(lines)
            key = "offset: 0 " if name == INDEX else "timestamp: 0 "
            assert not any(line.startswith(key) for line in lines)  # no zero-tail rows
        check = subprocess.run([sys.executable, "-m", "chronolog.cli.main", "check", "--data-dir",
                                str(tmp_path / "data")], capture_output=True, text=True, timeout=120)
        assert check.returncode == 0 and "Corrupt" not in check.stderr, check.stdout + check.stderr
    finally:
        broker.stop()


def test_an_index_file_of_zeros_has_no_entries(tmp_path):
    path = tmp_path / INDEX
    path.write_bytes(bytes(8 * 1000))
    assert OffsetIndex(path, 0, writable=False).entries == 0
    path.write_bytes(struct.pack(">ii", 0, 4200) + bytes(8 * 10))  # one entry at relative offset 0
    assert OffsetIndex(path, 0, writable=False).entries == 1


def test_dump_log_of_an_index_without_entries_says_it_is_empty(tmp_path):
    path = tmp_path / INDEX
    path.write_bytes(bytes(8 * 1000))
    out = subprocess.run([sys.executable, "-m", "chronolog.cli.main", "dump-log", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout == f"{path} is empty.\n", out.stdout + out.stderr


def test_verify_index_stops_before_a_batch_still_being_written(tmp_path):
    manager = _live(tmp_path)
    seg = manager.get_log("t", 0).active
    index, log_file = seg.offset_index.path, seg.log_path
    with open(log_file, "ab") as f:  # the writer's next batch, half written
        f.write(batch(NOW + 99)[:40])
    for name in (index, index.with_suffix(".timeindex")):
        out = subprocess.run([sys.executable, "-m", "chronolog.cli.main", "dump-log", str(name), "--verify-index"],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and out.stdout.strip() == f"{name}: OK", out.stdout + out.stderr
    dump = subprocess.run([sys.executable, "-m", "chronolog.cli.main", "dump-log", str(log_file)],
                          capture_output=True, text=True, timeout=120)
    assert dump.returncode == 2 and "trailing bytes" in dump.stderr  # dumping the .log itself still says so
    manager.shutdown()
