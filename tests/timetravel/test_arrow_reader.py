"""`chronolog.arrow.read_window` against brute force: exact windows over late (out-of-order) records from a
data dir and from the real broker (raw Fetch), the same table from both; legacy v0 message sets served
by a broker; read_committed over hand-built transactional batches; bad input named in one line."""

from __future__ import annotations

import random
import shutil
import struct
from pathlib import Path

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from chronolog.arrow import read_window
from chronolog.config import TopicConfig
from chronolog.errors import ChronologError, CorruptMessageError
from chronolog.protocol.fetch_client import PartitionFetch
from chronolog.records import SimpleRecord, build_batch, crc32c
from chronolog.records.columns import aborted_ranges
from chronolog.storage import PartitionLog
from chronolog.timetravel.arrow import broker_columns, to_record_batch
from tests.brokerproc import BrokerProcess

BASE = 1_700_000_000_000
N = 3000


def stamp(i: int) -> int:
    """Late records everywhere: a record's time is up to ~0.4 s before the ones around it."""
    return BASE + i * 2 - (i * 7919) % 400


def truth(lo: int | None, hi: int | None) -> list[tuple]:
    return sorted((i % 3, i, stamp(i)) for i in range(N)
                  if (lo is None or stamp(i) >= lo) and (hi is None or stamp(i) < hi))


def as_rows(table: pa.Table) -> list[tuple]:
    """(partition, value index, ms) sorted: offsets differ per partition, values name the record."""
    ts = table.column("timestamp").cast(pa.int64()).to_pylist()
    vals = table.column("value").to_pylist()
    parts = table.column("partition").to_pylist()
    return sorted((p, int(v[1:]), t // 1000) for p, v, t in zip(parts, vals, ts, strict=True))


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("arrow") / "data", {"log.segment.bytes": "60000"}).start()
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    admin.create_topics([NewTopic("logs", 3, 1)])["logs"].result(15)
    producer = Producer({"bootstrap.servers": proc.bootstrap, "linger.ms": 20, "compression.type": "lz4"})
    for i in range(N):
        producer.produce("logs", value=b"v%d" % i, key=None if i % 4 else b"k%d" % i, partition=i % 3,
                         timestamp=stamp(i), headers=[("n", str(i).encode())] if i % 5 == 0 else None)
    assert producer.flush(30) == 0
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def loaded_copy(loaded, tmp_path_factory):
    """A copy of the loaded broker's data dir, read as a data dir (nothing is written after the load, so
    one copy serves every window: copying it for each window took most of their time)."""
    copy = tmp_path_factory.mktemp("arrow-copy") / "copy"
    shutil.copytree(loaded.data_dir, copy, ignore=shutil.ignore_patterns("*.lock", "meta.properties"))
    return copy


WINDOWS = [(BASE + 1000, BASE + 1400), (BASE + 5, BASE + 6), (None, BASE + 300), (BASE + 5900, None),
           (None, None), (BASE + 9000, BASE + 9100)]


@pytest.mark.parametrize("lo,hi", WINDOWS)
def test_windows_are_exact_from_the_broker_and_the_same_from_its_data_dir(loaded, loaded_copy, lo, hi):
    from_broker = read_window(loaded.bootstrap, "logs", lo, hi, include_headers=True).read_all()
    assert as_rows(from_broker) == truth(lo, hi)
    from_dir = read_window(str(loaded_copy), "logs", lo, hi, include_headers=True).read_all()
    assert from_dir.sort_by([("partition", "ascending"), ("offset", "ascending")]).equals(
        from_broker.sort_by([("partition", "ascending"), ("offset", "ascending")]))
    heads = {int(v[1:]): h for v, h in zip(from_broker.column("value").to_pylist(),
                                           from_broker.column("headers").to_pylist(), strict=True)}
    assert all(h == ([{"key": "n", "value": str(i).encode()}] if i % 5 == 0 else []) for i, h in heads.items())


def test_columns_pick_a_subset_and_text_times_are_read(loaded):
    reader = read_window(loaded.bootstrap, "logs", "2023-11-14T22:13:21Z", BASE + 1400, columns=["offset", "partition"])
    assert reader.schema.names == ["offset", "partition"]
    assert reader.read_all().num_rows == len(truth(BASE + 1000, BASE + 1400))


def test_a_missing_topic_and_a_bad_column_are_one_clear_error(loaded, tmp_path):
    with pytest.raises(ChronologError, match="'nope' not found"):
        read_window(loaded.bootstrap, "nope", BASE, BASE + 10)
    with pytest.raises(ChronologError, match="unknown column"):
        read_window(loaded.bootstrap, "logs", BASE, BASE + 10, columns=["size"])
    with pytest.raises(ChronologError, match="end must be after"):
        read_window(loaded.bootstrap, "logs", BASE + 10, BASE)


def _legacy_dir(shared_data, root):
    """A data dir whose one partition holds the real v0 message set a Kafka 0.8.2 broker kept on disk."""
    from tests.records.test_real_data import _message_set_of_fetch_v0
    raw = (shared_data / "legacy-v0" / "fetch1.mytopic.1p.gzip.kafka.0821").read_bytes()
    part = root / "legacy-0"
    part.mkdir(parents=True)
    (part / "00000000000000000000.log").write_bytes(_message_set_of_fetch_v0(raw))
    return (shared_data / "legacy-v0" / "fetch1.txt").read_text().splitlines()


def test_a_broker_serving_legacy_v0_message_sets_reads_by_raw_fetch(shared_data, tmp_path):
    lines = _legacy_dir(shared_data, tmp_path / "data")
    table = read_window(str(tmp_path / "data"), "legacy").read_all()
    assert [v.decode() for v in table.column("value").to_pylist()] == lines
    proc = BrokerProcess(tmp_path / "data").start()
    try:
        got = read_window(proc.bootstrap, "legacy").read_all()
    finally:
        proc.stop()
    assert [v.decode() for v in got.column("value").to_pylist()] == lines
    assert got.column("offset").to_pylist() == list(range(len(lines)))


def test_a_corrupt_batch_names_the_file_and_byte(tmp_path):
    seg = single_record_batches(tmp_path / "t-0", 5)
    raw = bytearray(seg.read_bytes())
    size = len(raw) // 5
    raw[3 * size - 1] = 0x7F  # the last byte of the third batch: its record's header count
    seg.write_bytes(bytes(reseal(raw, 2 * size, size)))
    with pytest.raises(CorruptMessageError) as info:
        read_window(str(tmp_path), "t").read_all()
    assert str(info.value).startswith(f"corrupt record batch in {seg}: at byte {2 * size} (offset 2): ")


def single_record_batches(part_dir: Path, count: int) -> Path:
    """A partition of `count` batches of one record each (value-0, value-1, ... stamped BASE + i), all of
    the same size; its segment file."""
    cfg = TopicConfig.from_kafka({"message.timestamp.after.max.ms": str(2**62)})
    plog = PartitionLog.open(part_dir, cfg)
    for i in range(count):
        plog.append(build_batch([SimpleRecord(BASE + i, None, b"value-%d" % i)]))
    plog.close()
    return part_dir / "00000000000000000000.log"


def reseal(raw: bytearray, pos: int, size: int) -> bytearray:
    """The batch at `pos` with its CRC made right again: bytes the storage layer's checks pass (a writer
    that computed the CRC over bad records) and only the decoder can refuse."""
    struct.pack_into(">I", raw, pos + 17, crc32c(bytes(raw[pos + 21:pos + size])))
    return raw


def test_a_batch_failing_its_crc_is_data_lost_unless_told_to_skip(tmp_path, caplog):
    """The storage layer steps over a batch whose CRC fails (a corrupt range); the reader then fails as
    Spark's source does with failOnDataLoss, or skips it with a warning when told to."""
    seg = single_record_batches(tmp_path / "t-0", 5)
    raw = bytearray(seg.read_bytes())
    raw[3 * (len(raw) // 5) - 2] ^= 0xFF
    seg.write_bytes(bytes(raw))
    with pytest.raises(ChronologError, match="t-0 in .*: data lost: .*offsets 2-2"):
        read_window(str(tmp_path), "t").read_all()
    table = read_window(str(tmp_path), "t", fail_on_data_loss=False).read_all()
    assert table.column("offset").to_pylist() == [0, 1, 3, 4]
    assert any("skipping offsets that cannot be read" in r.getMessage() for r in caplog.records)


class _Answers:
    """Fetch answers as a broker with transactions gives them (no broker here writes control batches
    yet: the storage side arrives with the transactions work)."""

    isolation_level = 1
    bootstrap = "test"

    def __init__(self, records: bytes, aborted, lso: int) -> None:
        self.answer = PartitionFetch(0, 100, lso, 0, tuple(aborted), records)

    def batches(self, topic, partition, start, end, next_offset):
        yield self.answer


def test_read_committed_skips_aborted_transactions_and_stops_at_the_lso():
    def txn(pid: int, base: int, n: int) -> bytes:
        return build_batch([SimpleRecord(BASE + base + i, None, b"%d-%d" % (pid, base + i)) for i in range(n)],
                           base_offset=base, producer_id=pid, producer_epoch=0, is_transactional=True)

    def marker(pid: int, offset: int, commit: bool) -> bytes:
        return build_batch([SimpleRecord(BASE, struct.pack(">hh", 0, int(commit)), struct.pack(">hi", 0, 0))],
                           base_offset=offset, producer_id=pid, producer_epoch=0, is_transactional=True,
                           is_control=True)

    log = (txn(1, 0, 2) + txn(2, 2, 2) + marker(1, 4, False) + build_batch([SimpleRecord(BASE, None, b"plain")],
                                                                           base_offset=5)
           + txn(1, 6, 1) + marker(2, 7, True) + marker(1, 8, True) + txn(2, 9, 3))
    aborted = [(1, 0)]
    assert aborted_ranges(log, aborted) == ((1, 0, 4),)
    schema = pa.schema([pa.field("offset", pa.int64()), pa.field("value", pa.binary())])
    got = [to_record_batch(c, "t", 0, schema) for c in
           broker_columns(_Answers(log, aborted, lso=9), "t", 0, 0, 100, names=schema.names)]
    values = [v for b in got for v in b.column("value").to_pylist()]
    # producer 1's first transaction aborted (0, 1), markers never show, producer 2's open transaction at 9 is the LSO: not read
    assert values == [b"2-2", b"2-3", b"plain", b"1-6"]


@pytest.mark.parametrize("seed", range(3))
def test_random_windows_from_a_data_dir_with_small_segments(tmp_path, seed):
    rnd = random.Random(seed)
    cfg = TopicConfig.from_kafka({"message.timestamp.after.max.ms": str(2**62), "segment.bytes": "2000",
                                  "message.timestamp.before.max.ms": str(2**62)})
    plog = PartitionLog.open(tmp_path / "r-0", cfg)
    stamps = [BASE + rnd.randint(0, 500) for _ in range(400)]
    for i in range(0, 400, 8):
        plog.append(build_batch([SimpleRecord(t, None, b"%d" % (i + j)) for j, t in enumerate(stamps[i:i + 8])],
                                compression=rnd.choice([0, 1, 4])))
    plog.close()
    for _ in range(10):
        lo = BASE + rnd.randint(-10, 510)
        hi = lo + rnd.randint(1, 200)
        table = read_window(str(tmp_path), "r", lo, hi).read_all()
        assert table.column("offset").to_pylist() == [o for o, t in enumerate(stamps) if lo <= t < hi]


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_a_data_dir_with_transactions_reads_as_the_record_reader_by_isolation(tmp_path, isolation):
    """Aborted transactions from the `.txnindex` files and the last stable offset, as the storage layer's
    own reader applies them (tests/timetravel/test_isolation.py's log: an aborted, a committed and an
    open transaction between plain records)."""
    from chronolog.timetravel.sources import DataDirSource
    from tests.storage.helpers import open_log
    from tests.timetravel.test_isolation import write
    plog = open_log(tmp_path)
    write(plog)
    plog.close()
    source = DataDirSource(tmp_path)
    want = [r.value for r in source.read("t", 0, 0, 100, isolation=isolation)]
    source.close()
    got = read_window(str(tmp_path), "t", isolation_level=isolation).read_all().column("value").to_pylist()
    assert got == want
    assert (b"aborted" in got, b"open" in got) == ((isolation == "read_uncommitted"),) * 2


def test_an_unreachable_broker_is_one_clear_error():
    from tests.brokerproc import free_port
    port = free_port()
    with pytest.raises(ChronologError, match=rf"cannot connect to 127.0.0.1:{port}"):
        read_window(f"127.0.0.1:{port}", "t", BASE, BASE + 10)
    with pytest.raises(ChronologError, match="is not HOST:PORT"):
        read_window("nohost", "t")
