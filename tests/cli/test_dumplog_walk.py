"""`dump-log` walks a segment's records with the columnar decoder: its output (text and JSON, with
--print-data and the time filters) is byte for byte what the record-by-record walk printed, on segments
a real Kafka broker wrote, on a real broker's legacy v0 message sets, and on a log with every codec,
control batches and a damaged tail."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from chronolog.cli import dumplog
from chronolog.cli.main import app
from chronolog.records import SimpleRecord, build_batch
from chronolog.records.compression import CompressionType
from chronolog.records.control import ControlType, EndTxnMarker, build_control_batch

BASE = 1_700_000_000_000


def dump(monkeypatch, *args: str, record_by_record: bool) -> tuple[int, str]:
    with monkeypatch.context() as m:
        if record_by_record:  # the walk dump-log had before the decoder
            m.setattr(dumplog._RecordWalk, "records", lambda self, batch: list(batch.records()))
        result = CliRunner().invoke(app, ["dump-log", *args])
    return result.exit_code, result.output


def same_both_ways(monkeypatch, path) -> None:
    for extra in ([], ["--json"]):
        for window in ([], ["--from", str(BASE + 5)], ["--to", str(BASE + 40)], ["--from", "1753819153950",
                                                                                  "--to", "1753819155000"]):
            args = [str(path), "--print-data", *window, *extra]
            new = dump(monkeypatch, *args, record_by_record=False)
            assert new == dump(monkeypatch, *args, record_by_record=True), args


def test_kafka_written_segments(monkeypatch, kafka_segments_dir):
    for path in sorted(kafka_segments_dir.glob("*.log"))[:2]:
        same_both_ways(monkeypatch, path)
        assert "payload: kafkaVal-" in dump(monkeypatch, str(path), "--print-data", record_by_record=False)[1]


@pytest.mark.parametrize("name,text", [("fetch1.mytopic.1p.gzip.kafka.0821", "fetch1.txt"),
                                       ("fetch2.mytopic.nocompression.kafka.0900", "fetch2.txt")])
def test_legacy_v0_message_sets(monkeypatch, tmp_path, shared_data, name, text):
    from tests.records.test_real_data import _message_set_of_fetch_v0
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(_message_set_of_fetch_v0((shared_data / "legacy-v0" / name).read_bytes()))
    same_both_ways(monkeypatch, path)
    code, out = dump(monkeypatch, str(path), "--print-data", record_by_record=False)
    lines = (shared_data / "legacy-v0" / text).read_text().splitlines()
    assert code == 0 and out.count("| offset: ") == len(lines)


def test_every_codec_control_batches_and_a_damaged_file(monkeypatch, tmp_path):
    data = b""
    offset = 0
    for i, codec in enumerate(list(CompressionType) * 2):
        recs = [SimpleRecord(BASE + 10 * i + j, None if j % 3 else b"k%d" % j, None if j == 2 else b"v%d" % j,
                             (("h", b"1"),) if j == 1 else ()) for j in range(5)]
        data += build_batch(recs, base_offset=offset, compression=codec, producer_id=7, producer_epoch=0,
                            base_sequence=offset, is_transactional=i % 3 == 0)
        offset += 5
        if i % 3 == 0:
            data += build_control_batch(7, 0, EndTxnMarker(ControlType.COMMIT, 0), BASE + 10 * i + 9,
                                        base_offset=offset)
            offset += 1
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    same_both_ways(monkeypatch, path)
    code, out = dump(monkeypatch, str(path), "--print-data", record_by_record=False)
    assert code == 0 and "endTxnMarker: COMMIT" in out and "key: k0 payload: v0" in out and "payload: None" in out
    # a record that does not fill its stated length: both walks fail the same way, after the same lines
    broken = bytearray(data + build_batch([SimpleRecord(BASE, None, b"x" * 20)], base_offset=offset))
    broken[len(data) + 61] = 0x7E  # the record's length (zigzag 63) runs past its batch
    path.write_bytes(bytes(broken))
    args = [str(path), "--print-data"]
    new = dump(monkeypatch, *args, record_by_record=False)
    assert new == dump(monkeypatch, *args, record_by_record=True)
    assert new[0] != 0 and "key: k0 payload: v0" in new[1]
