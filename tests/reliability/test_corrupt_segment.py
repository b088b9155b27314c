"""A segment corrupted in the middle is reported with its offset range, and the broker keeps serving the rest
of the partition to a real client (librdkafka), after a clean start (found by the first read) and after a
crash (found by recovery). `chronolog check` reports the same range offline."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from chronolog.storage import PartitionLog
from tests.brokerproc import BrokerProcess
from tests.clirun import chronolog_completed

T0 = 1_700_000_000_000
N = 400


def _produce(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("c", 1, 1, config={"segment.bytes": "8192"})])["c"].result(15)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for i in range(N):
        p.produce("c", value=b"value-%04d" % i + b"." * 60, timestamp=T0 + i)
        p.poll(0)
    assert p.flush(30) == 0


def _consume_all(bootstrap: str, expect: int) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "check.crcs": True})
    c.subscribe(["c"])
    got: list[int] = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is None:
                if len(got) >= expect:
                    break
                continue
            assert msg.error() is None, msg.error()
            got.append(msg.offset())
    finally:
        c.close()
    return got


def _zero_two_batches_of_an_old_segment(data_dir) -> tuple[int, int]:
    """Overwrite two whole batches in the middle of the second segment; returns the offsets they held."""
    plog = PartitionLog.open_readonly(data_dir / "c-0")
    seg = plog.segments[1]
    batches = list(seg.batches_from(0))
    (pos, first), (_, second) = batches[3], batches[4]
    plog.close()
    with open(seg.log_path, "r+b") as f:
        f.seek(pos)
        f.write(b"\0" * (first.size_in_bytes + second.size_in_bytes))
    return first.base_offset, second.last_offset


def _check(data_dir) -> tuple[int, dict]:
    out = chronolog_completed("check", "--data-dir", str(data_dir), "--json")
    return out.returncode, json.loads(out.stdout)


@pytest.mark.parametrize("restart", ["clean", "crash"])
def test_corruption_in_an_old_segment_is_reported_and_the_rest_is_served(tmp_path, restart):
    data = tmp_path / "data"
    proc = BrokerProcess(data).start()
    try:
        _produce(proc.bootstrap)
        if restart == "crash":
            proc.kill()  # recovery runs on the next start
        else:
            proc.stop()
        lost_first, lost_last = _zero_two_batches_of_an_old_segment(data)
        assert lost_first > 0 and lost_last < N - 1

        code, report = _check(data)
        assert code == 1 and not report["ok"]
        (problem,) = report["problems"]
        assert (problem["first_offset"], problem["last_offset"]) == (lost_first, lost_last)
        assert _check(data.as_uri()) == (code, report)  # the same through pyarrow's filesystem

        proc.start()
        expected = [o for o in range(N) if not lost_first <= o <= lost_last]
        assert _consume_all(proc.bootstrap, len(expected)) == expected
        # The broker's log names the range (found by recovery after the crash, by the first read otherwise).
        assert f"offsets {lost_first}-{lost_last}" in proc.log_path.read_text()
    finally:
        proc.stop()
    # Nothing was rewritten to hide it: the files still show the same corruption.
    code, report = _check(data)
    assert code == 1 and [(p["first_offset"], p["last_offset"]) for p in report["problems"]] == [(lost_first, lost_last)]


def test_check_passes_on_a_healthy_dir_and_fails_clearly_on_a_missing_one(tmp_path):
    data = tmp_path / "data"
    plog = PartitionLog.open(data / "t-0")
    from chronolog.records import SimpleRecord, build_batch
    plog.append(build_batch([SimpleRecord(T0, None, b"x")]), now=T0)
    plog.close()
    code, report = _check(data)
    assert code == 0 and report == {"partitions": 1, "problems": [], "ok": True}
    out = chronolog_completed("check", "--data-dir", str(tmp_path / "nope"))
    assert out.returncode == 2 and "is not a directory" in out.stderr and "Traceback" not in out.stderr
    assert _check(data.as_uri()) == (code, report)
    out = chronolog_completed("check", "--data-dir", (tmp_path / "nope").as_uri())
    assert out.returncode == 2 and "does not exist" in out.stderr and "Traceback" not in out.stderr


def test_check_reads_producer_snapshots_and_reports_a_corrupt_one(tmp_path, kafka_segments_dir):
    """Kafka's own `.snapshot` files pass; one with a flipped byte (its CRC no longer matches) is reported
    by name, in text and JSON, from a local path and a URI, and the exit code is 1."""
    import shutil

    data = tmp_path / "copy" / "t-0"
    shutil.copytree(kafka_segments_dir, data)
    snapshots = sorted(data.glob("*.snapshot"))
    assert snapshots
    code, report = _check(data.parent)
    assert code == 0 and report["ok"], report
    victim = snapshots[-1]
    raw = bytearray(victim.read_bytes())
    raw[-1] ^= 0x01
    victim.write_bytes(bytes(raw))
    for where in (data.parent, data.parent.as_uri()):
        code, report = _check(where)
        assert code == 1
        (problem,) = report["problems"]
        assert (problem["segment"], problem["problem"]) == (victim.name, "corrupt snapshot")
        assert "CRC" in problem["error"] or "crc" in problem["error"]
    out = chronolog_completed("check", "--data-dir", str(data.parent))
    assert out.returncode == 1 and f"t-0/{victim.name}: corrupt producer snapshot" in out.stdout
    assert "Traceback" not in out.stderr
