"""Offline readers honour `isolation.level` (read_uncommitted by default, as Kafka's tools and Spark):
`PartitionLog.open_readonly` finds the LSO from producer snapshots and the log, `DataDirSource` reads,
watermarks and time lookups apply it (ListOffsets: nothing at or past the LSO), control batches are never
records, and `dump-log` prints markers and `.txnindex` files as kafka-dump-log.sh does."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from chronolog.cli.main import app
from chronolog.errors import ChronologError
from chronolog.records import SimpleRecord, build_batch
from chronolog.storage import PartitionLog
from chronolog.timetravel.sources import DataDirSource
from tests.storage.helpers import NOW, open_log

P, Q, R = 501, 502, 503


def txn(pid: int, seq: int, n: int, ts: int, value: bytes) -> bytes:
    return build_batch([SimpleRecord(ts + i, None, value) for i in range(n)], producer_id=pid, producer_epoch=0,
                       base_sequence=seq, is_transactional=True)


def plain(ts: int, value: bytes) -> bytes:
    return build_batch([SimpleRecord(ts, None, value)])


def write(plog: PartitionLog) -> None:
    plog.append(plain(NOW, b"plain-0"), now=NOW)                   # 0
    plog.append(txn(P, 0, 2, NOW + 10, b"aborted"), now=NOW)       # 1-2
    plog.append(txn(Q, 0, 2, NOW + 20, b"committed"), now=NOW)     # 3-4
    plog.roll()
    plog.append(plain(NOW + 30, b"plain-5"), now=NOW)              # 5
    plog.append_control(P, 0, False, 0, now=NOW + 40)              # 6 ABORT
    plog.append_control(Q, 0, True, 0, now=NOW + 41)               # 7 COMMIT
    plog.append(plain(NOW + 50, b"plain-8"), now=NOW)              # 8
    plog.append(txn(R, 0, 1, NOW + 60, b"open"), now=NOW)          # 9: never ended
    plog.append(plain(NOW + 70, b"plain-10"), now=NOW)             # 10


@pytest.fixture(params=["clean", "crash_copy"])
def data_dir(tmp_path, request):
    plog = open_log(tmp_path / "live")
    write(plog)
    if request.param == "clean":
        plog.close()
        return tmp_path / "live"
    plog.flush()  # a copy of a live broker's dir: no snapshot at the log end, the active segment open
    shutil.copytree(tmp_path / "live", tmp_path / "copy")
    plog.close()
    return tmp_path / "copy"


def values(records) -> list[bytes]:
    return [r.value for r in records]


def test_readonly_log_finds_the_lso_without_writing(data_dir):
    before = sorted((p.name, p.stat().st_size) for p in (data_dir / "t-0").iterdir())
    plog = PartitionLog.open_readonly(data_dir / "t-0")
    assert plog.last_stable_offset == 9 and plog.log_end_offset == 11
    assert plog.ongoing_transactions() == [(R, 0, 9)]
    assert plog.aborted_transactions(0, 9) == [(P, 1)]
    plog.close()
    assert sorted((p.name, p.stat().st_size) for p in (data_dir / "t-0").iterdir()) == before


def test_data_dir_source_reads_by_isolation_level(data_dir):
    source = DataDirSource(data_dir)
    everything = values(source.read("t", 0, 0, 100))
    assert everything == [b"plain-0", b"aborted", b"aborted", b"committed", b"committed", b"plain-5",
                          b"plain-8", b"open", b"plain-10"]  # no control records, even uncommitted
    assert values(source.read("t", 0, 0, 100, isolation="read_committed")) == [
        b"plain-0", b"committed", b"committed", b"plain-5", b"plain-8"]
    assert values(source.read("t", 0, 2, 4, isolation="read_committed")) == [b"committed"]
    assert source.watermarks("t", 0) == (0, 11)
    assert source.watermarks("t", 0, isolation="read_committed") == (0, 9)
    with pytest.raises(ChronologError):
        list(source.read("t", 0, 0, 100, isolation="committed"))
    source.close()


def test_time_lookups_never_answer_past_the_lso(data_dir):
    source = DataDirSource(data_dir)
    (uncommitted,) = source.offsets_for_time("t", NOW + 60, [0]).values()
    assert (uncommitted.offset, uncommitted.found) == (9, True)
    (committed,) = source.offsets_for_time("t", NOW + 60, [0], isolation="read_committed").values()
    assert (committed.offset, committed.found, committed.end_offset) == (9, False, 9)
    (early,) = source.offsets_for_time("t", NOW + 30, [0], isolation="read_committed").values()
    assert (early.offset, early.found) == (5, True)
    source.close()


def run(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_dump_log_prints_markers_and_txnindex(data_dir):
    seg = data_dir / "t-0" / "00000000000000000005.log"
    text = run("dump-log", str(seg))
    assert ("baseOffset: 6 lastOffset: 6 count: 1 baseSequence: -1 lastSequence: -1 producerId: 501 "
            "producerEpoch: 0 partitionLeaderEpoch: 0 isTransactional: true isControl: true position:") in text
    assert (f"| offset: 6 CreateTime: {NOW + 40} keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
            "endTxnMarker: ABORT coordinatorEpoch: 0") in text
    assert "endTxnMarker: COMMIT coordinatorEpoch: 0" in text
    index = data_dir / "t-0" / "00000000000000000005.txnindex"
    assert run("dump-log", str(index)).splitlines()[1:] == [
        "version: 0 producerId: 501 firstOffset: 1 lastOffset: 6 lastStableOffset: 3"]
    (report,) = json.loads(run("dump-log", "--json", str(index)))
    assert report["aborted"] == [{"version": 0, "producer_id": 501, "first_offset": 1, "last_offset": 6,
                                  "last_stable_offset": 3}]
    (dumped,) = json.loads(run("dump-log", "--json", str(seg)))
    control = [b for b in dumped["batches"] if b["is_control"]]
    assert [c["control"][0]["type"] for c in control] == ["ABORT", "COMMIT"]


def test_readonly_aborted_ranges_for_an_offline_reader(data_dir):
    plog = PartitionLog.open_readonly(data_dir / "t-0")
    assert plog.aborted_ranges(0, plog.last_stable_offset) == [(P, 1, 6)]
    assert plog.aborted_ranges(7, 9) == []
    plog.close()


def test_a_data_dir_by_uri_reads_committed_the_same(data_dir):
    from chronolog.timetravel.opener import open_data_dir
    local, remote = DataDirSource(data_dir), open_data_dir(data_dir.as_uri())
    for isolation in ("read_uncommitted", "read_committed"):
        assert remote.watermarks("t", 0, isolation=isolation) == local.watermarks("t", 0, isolation=isolation)
        assert values(remote.read("t", 0, 0, 100, isolation=isolation)) == values(
            local.read("t", 0, 0, 100, isolation=isolation))
    assert remote.log("t", 0).aborted_ranges(0, 9) == [(P, 1, 6)]
    local.close()
    remote.close()


def test_kafka_written_partition_without_transactions_is_stable_to_its_end(kafka_segments_dir):
    plog = PartitionLog.open_readonly(kafka_segments_dir)
    assert plog.ongoing_transactions() == [] and plog.last_stable_offset == plog.log_end_offset
    assert plog.aborted_ranges(0, plog.log_end_offset) == []
    tail = plog.log_end_offset - 50
    assert [r.offset for r in plog.read_records(tail, isolation="read_committed")] == list(range(tail, tail + 50))
    plog.close()
