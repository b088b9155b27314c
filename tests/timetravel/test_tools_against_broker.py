"""Every time-travel command against the real broker (and the same answers offline from its data dir)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from typer.testing import CliRunner

from chronolog.cli.main import app
from tests.brokerproc import BrokerProcess

BASE = 1_700_000_000_000
# partition 0: out of order and duplicate timestamps; partition 1: only old data; partition 2: empty
P0 = [BASE + s for s in (10, 30, 20, 30, 50, 40, 70, 15, 60, 90)]
P1 = [BASE + s for s in (1, 2, 3)]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("tt") / "data").start()
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    admin.create_topics([NewTopic("tt", 3, 1)])["tt"].result(15)
    p = Producer({"bootstrap.servers": proc.bootstrap})
    for part, stamps in ((0, P0), (1, P1)):
        for i, ts in enumerate(stamps):
            p.produce("tt", value=b"p%d-%d" % (part, i), partition=part, timestamp=ts)
    assert p.flush(30) == 0
    yield proc
    proc.stop()


def run(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result.output


def first_at_or_after(stamps, t):
    return next((i for i, ts in enumerate(stamps) if ts >= t), None)


@pytest.mark.parametrize("t", [BASE + 25, BASE + 31, BASE + 91, BASE - 5])
def test_offsets_every_partition_answered(loaded, t):
    out = json.loads(run("offsets", "tt", "--time", str(t), "--bootstrap-server", loaded.bootstrap, "--json"))
    parts = {p["partition"]: p for p in out["partitions"]}
    assert sorted(parts) == [0, 1, 2]
    for part, stamps in ((0, P0), (1, P1), (2, [])):
        want = first_at_or_after(stamps, t)
        got = parts[part]
        if want is None:
            assert not got["found"] and got["offset"] == got["end_offset"] == len(stamps)
        else:
            assert got["found"] and (got["offset"], got["timestamp"]) == (want, stamps[want])


def test_consume_window_is_exact_including_late_records(loaded):
    t1, t2 = BASE + 20, BASE + 60
    out = run("consume", "tt", "--from", str(t1), "--to", str(t2), "--bootstrap-server", loaded.bootstrap,
              "--format", "json")
    got = [(r["partition"], r["offset"], r["timestamp"]) for r in map(json.loads, out.splitlines())]
    want = [(0, i, ts) for i, ts in enumerate(P0) if t1 <= ts < t2]
    assert got == want
    assert (0, 7, BASE + 15) not in got and (0, 5, BASE + 40) in got  # 40 comes after 50: still printed


def test_offline_answers_equal_the_brokers(loaded, tmp_path):
    loaded.stop()
    try:
        copy = tmp_path / "copy"
        shutil.copytree(loaded.data_dir, copy)
        for t in (BASE + 25, BASE + 95):
            online = None
            offline = json.loads(run("offsets", "tt", "--time", str(t), "--data-dir", str(copy), "--json"))
            assert [p["offset"] for p in offline["partitions"]] == [
                first_at_or_after(P0, t) if first_at_or_after(P0, t) is not None else len(P0),
                first_at_or_after(P1, t) if first_at_or_after(P1, t) is not None else len(P1), 0]
            del online
        window = [i for i, ts in enumerate(P0) if BASE + 20 <= ts < BASE + 60]
        for where in (str(copy), copy.as_uri()):  # a local path, and a URI read through pyarrow's filesystem
            out = run("consume", "tt", "--from", str(BASE + 20), "--to", str(BASE + 60), "--data-dir", where,
                      "--format", "json")
            assert [json.loads(x)["offset"] for x in out.splitlines()] == window
        by_uri = json.loads(run("offsets", "tt", "--time", str(BASE + 25), "--data-dir", copy.as_uri(), "--json"))
        assert [p["offset"] for p in by_uri["partitions"]] == [first_at_or_after(P0, BASE + 25), 3, 0]
        segs = json.loads(run("describe-segments", "tt", "--data-dir", str(copy), "--json",
                              "--plot", str(tmp_path / "s.png")))
        assert {s["partition"] for s in segs} == {0, 1, 2} and (tmp_path / "s.png").stat().st_size > 1000
        assert json.loads(run("describe-segments", "tt", "--data-dir", copy.as_uri(), "--json")) == segs
    finally:
        loaded.start()


def test_reset_offsets_refuses_active_group_then_resumes_exactly(loaded):
    from kafka import KafkaConsumer

    member = Consumer({"bootstrap.servers": loaded.bootstrap, "group.id": "rewind", "session.timeout.ms": 6000,
                       "auto.offset.reset": "earliest"})
    member.subscribe(["tt"])
    deadline = time.monotonic() + 60
    while not member.assignment() and time.monotonic() < deadline:
        member.poll(0.2)
    result = CliRunner().invoke(app, ["reset-offsets", "--group", "rewind", "--topic", "tt", "--to-datetime",
                                      str(BASE + 35), "--execute", "--bootstrap-server", loaded.bootstrap])
    assert result.exit_code != 0 and "active member" in str(result.exception) + result.output
    member.close()

    out = json.loads(run("reset-offsets", "--group", "rewind", "--topic", "tt", "--to-datetime", str(BASE + 35),
                         "--execute", "--json", "--bootstrap-server", loaded.bootstrap))
    shown = {r["partition"]: r["new"] for r in out["partitions"]}
    assert shown == {0: first_at_or_after(P0, BASE + 35), 1: len(P1), 2: 0}
    assert {r["partition"]: r["note"] != "" for r in out["partitions"]} == {0: False, 1: True, 2: True}

    consumer = KafkaConsumer("tt", bootstrap_servers=loaded.bootstrap, group_id="rewind", enable_auto_commit=False)

    def at_end() -> bool:
        """Every partition of the group's assignment read to its end (not a quiet spell of some seconds,
        which waited that long each run and could end before a loaded broker answered)."""
        parts = consumer.assignment()
        ends = consumer.end_offsets(list(parts)) if parts else {}
        return len(parts) == 3 and all(consumer.position(tp) >= ends[tp] for tp in parts)
    firsts = {}
    deadline = time.monotonic() + 60  # only ends a hung run
    try:
        while not at_end() and time.monotonic() < deadline:
            for records in consumer.poll(500).values():
                for m in records:
                    firsts.setdefault(m.partition, m.offset)
        assert at_end()
    finally:
        consumer.close()
    assert firsts == {0: shown[0]}  # partitions 1 and 2 have nothing after their new offsets


def test_reset_offsets_other_modes_dry_run(loaded):
    out = json.loads(run("reset-offsets", "--group", "g2", "--topic", "tt:0", "--to-offset", "999", "--json",
                         "--bootstrap-server", loaded.bootstrap))
    assert out["partitions"] == [{"topic": "tt", "partition": 0, "current": None, "new": len(P0), "note": "clamped"}]
    assert not out["executed"]
    out = json.loads(run("reset-offsets", "--group", "g2", "--topic", "tt:0,1", "--to-earliest", "--json",
                         "--bootstrap-server", loaded.bootstrap))
    assert [r["new"] for r in out["partitions"]] == [0, 0]


def test_topics_commands(loaded):
    run("topics", "create", "made", "--partitions", "2", "-c", "retention.ms=3600000",
        "--bootstrap-server", loaded.bootstrap)
    listed = json.loads(run("topics", "list", "--json", "--bootstrap-server", loaded.bootstrap))
    assert listed["made"] == 2
    run("topics", "alter", "made", "-c", "segment.ms=60000", "--bootstrap-server", loaded.bootstrap)
    described = json.loads(run("topics", "describe", "made", "--json", "--bootstrap-server", loaded.bootstrap))
    assert described["configs"]["segment.ms"] == "60000" and described["configs"]["retention.ms"] == "3600000"


def test_dump_log_verifies_kafka_files_and_reports_a_corrupted_copy(kafka_segments_dir, tmp_path):
    files = sorted(str(p) for p in kafka_segments_dir.glob("*index"))
    assert "OK" in run("dump-log", "--verify-index", *files)
    for suffix in (".log", ".index", ".timeindex"):
        shutil.copy(kafka_segments_dir / f"00000000000000022964{suffix}", tmp_path)
    with open(tmp_path / "00000000000000022964.timeindex", "r+b") as f:
        f.seek(12 * 10)
        f.write((1).to_bytes(8, "big"))  # entry 10 gets a wrong timestamp
    with open(tmp_path / "00000000000000022964.index", "r+b") as f:
        f.seek(8 * 3 + 4)
        f.write((12345).to_bytes(4, "big"))  # entry 3 points at the wrong position
    result = CliRunner().invoke(app, ["dump-log", "--verify-index", "--json",
                                      str(tmp_path / "00000000000000022964.index"),
                                      str(tmp_path / "00000000000000022964.timeindex")])
    assert result.exit_code == 1
    reports = json.loads(result.output)
    assert [m["entry"] for m in reports[0]["mismatches"]] == [3]
    assert 10 in [m["entry"] for m in reports[1]["mismatches"]]
    # The same files named by URI (read through pyarrow's filesystem, the .log fetched beside each index)
    uris = [(tmp_path / f"00000000000000022964{s}").as_uri() for s in (".index", ".timeindex")]
    by_uri = CliRunner().invoke(app, ["dump-log", "--verify-index", "--json", *uris])
    assert by_uri.exit_code == 1
    assert [r["mismatches"] for r in json.loads(by_uri.output)] == [r["mismatches"] for r in reports]
    assert [r["file"] for r in json.loads(by_uri.output)] == uris


def test_dump_log_prints_kafka_producer_snapshots_and_reports_a_corrupt_one(kafka_segments_dir, tmp_path):
    snapshot = kafka_segments_dir / "00000000000000022964.snapshot"
    text = run("dump-log", str(snapshot))
    assert ("producerId: 0 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong.empty "
            "lastTimestamp: 1753819244043 firstSequence: 22963 lastSequence: 22963 lastOffset: 22963 "
            "offsetDelta: 0 timestamp: 1753819244043") in text  # kafka-dump-log.sh's line for this file
    (report,) = json.loads(run("dump-log", "--json", snapshot.as_uri()))
    assert report["ok"] and report["producers"][0]["last_offset"] == 22963
    broken = tmp_path / snapshot.name
    data = bytearray(snapshot.read_bytes())
    data[20] ^= 0x10
    broken.write_bytes(bytes(data))
    result = subprocess.run([sys.executable, "-m", "chronolog.cli.main", "dump-log", str(broken)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "CRC mismatch" in result.stderr and "Traceback" not in result.stderr


def test_dump_log_reads_a_segment_by_uri_with_a_time_window(kafka_segments_dir):
    log = sorted(kafka_segments_dir.glob("*.log"))[-1]
    local = json.loads(run("dump-log", "--json", "--from", "2000-01-01T00:00:00Z", str(log)))
    remote = json.loads(run("dump-log", "--json", "--from", "2000-01-01T00:00:00Z", log.as_uri()))
    assert remote[0]["batches"] == local[0]["batches"] and remote[0]["batches"]
    assert remote[0]["file"] == log.as_uri()
    missing = subprocess.run([sys.executable, "-m", "chronolog.cli.main", "dump-log", log.as_uri() + ".nope"],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "cannot read" in missing.stderr and "Traceback" not in missing.stderr
