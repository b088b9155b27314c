"""The raw fetcher's read-ahead (`RawFetcher.prefetch`, what `chronolog consume` uses): the same records as
fetching one answer at a time, over many small answers, with an early stop."""

from __future__ import annotations

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from chronolog.records import SimpleRecord, build_batch
from chronolog.timetravel.arrow import broker_columns
from chronolog.timetravel.fetcher import RawFetcher, _after_whole_batches
from tests.brokerproc import BrokerProcess


def columns(bootstrap: str, prefetch: bool, start: int, end: int, lo=None, hi=None) -> list[tuple]:
    fetcher = RawFetcher(bootstrap, timeout=10, max_bytes=3000)  # many answers, most ending in a torn batch
    fetcher.prefetch = prefetch
    try:
        return [c.as_bytes() for c in broker_columns(fetcher, "t", 0, start, end, lo=lo, hi=hi,
                                                     names=("key", "value"))]
    finally:
        fetcher.close()


def test_read_ahead_reads_what_one_at_a_time_reads(tmp_path):
    proc = BrokerProcess(tmp_path / "data").start()
    try:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        admin.create_topics([NewTopic("t", 1, 1)])["t"].result(15)
        for codec in ("none", "zstd"):
            p = Producer({"bootstrap.servers": proc.bootstrap, "linger.ms": 2, "compression.type": codec,
                          "batch.size": 2000})
            for i in range(1500):
                p.produce("t", b"v%d" % i + b"\xff" * (i % 97), key=b"k%d" % i, partition=0, timestamp=1_000 + i)
            assert p.flush(15) == 0
        want = columns(proc.bootstrap, False, 0, 3000)
        assert sum(c[0] for c in want) == 3000
        assert columns(proc.bootstrap, True, 0, 3000) == want
        assert columns(proc.bootstrap, True, 17, 2222, lo=1_100, hi=1_900) == \
            columns(proc.bootstrap, False, 17, 2222, lo=1_100, hi=1_900)
        fetcher = RawFetcher(proc.bootstrap, timeout=10, max_bytes=3000)
        fetcher.prefetch = True
        try:
            chunks = broker_columns(fetcher, "t", 0, 0, 3000)
            assert len(next(chunks)) > 0
            chunks.close()  # an early stop waits for the read-ahead before the connection is closed
        finally:
            fetcher.close()
    finally:
        proc.stop()


def test_after_whole_batches_stops_at_a_torn_tail():
    one = build_batch([SimpleRecord(1, b"a", b"b"), SimpleRecord(2, None, b"c")], base_offset=40)
    two = build_batch([SimpleRecord(3, None, b"d")], base_offset=42)
    assert _after_whole_batches(one + two) == 43
    assert _after_whole_batches(one + two[:20]) == 42
    assert _after_whole_batches(b"") is None
