"""The `.txnindex` file (`storage.txnindex`) against Kafka's `TransactionIndex` / `AbortedTxn` rules: 34-byte
entries (int16 version 0, producer id, first offset, last offset, last stable offset, big-endian), a
file created by the first entry, last offsets that must grow, the search that stops on an entry's LSO,
truncation, the sanity check and torn tails."""

from __future__ import annotations

import struct

import pytest

from chronolog.storage.index import IndexCorruptError
from chronolog.storage.txnindex import ENTRY_SIZE, AbortedTxn, TransactionIndex, parse_entries


def test_entry_bytes_are_kafkas_aborted_txn():
    txn = AbortedTxn(producer_id=0x0102030405060708, first_offset=10, last_offset=20, last_stable_offset=15)
    assert ENTRY_SIZE == 34
    assert txn.to_bytes() == struct.pack(">hqqqq", 0, 0x0102030405060708, 10, 20, 15)
    assert txn.to_bytes()[:2] == b"\x00\x00"


def test_file_is_created_by_the_first_entry_and_holds_the_entries(tmp_path):
    path = tmp_path / "00000000000000000100.txnindex"
    index = TransactionIndex(path, 100)
    assert not path.exists() and len(index) == 0
    index.reset()
    index.truncate_to(0)
    assert not path.exists()  # nothing creates it but an entry
    entries = [AbortedTxn(1, 100, 105, 106), AbortedTxn(2, 101, 110, 111)]
    for txn in entries:
        index.append(txn)
    index.close()
    assert path.read_bytes() == b"".join(t.to_bytes() for t in entries)
    assert TransactionIndex(path, 100).entries == entries


def test_last_offsets_must_grow(tmp_path):
    index = TransactionIndex(tmp_path / "x.txnindex", 0)
    index.append(AbortedTxn(1, 0, 10, 11))
    with pytest.raises(ValueError):
        index.append(AbortedTxn(2, 3, 10, 11))
    with pytest.raises(ValueError):
        index.append(AbortedTxn(2, 3, 9, 11))
    index.append(AbortedTxn(2, 3, 11, 12))


def test_collect_matches_kafkas_overlap_and_stop_rule(tmp_path):
    index = TransactionIndex(tmp_path / "x.txnindex", 0)
    index.append(AbortedTxn(1, 0, 10, 11))
    index.append(AbortedTxn(2, 5, 20, 21))
    index.append(AbortedTxn(3, 30, 40, 41))
    # an entry overlaps when last >= fetch offset and first < upper bound
    assert index.collect(11, 15) == ([AbortedTxn(2, 5, 20, 21)], True)  # entry 2's LSO 21 reaches 15: stop
    assert index.collect(0, 5) == ([AbortedTxn(1, 0, 10, 11)], True)
    assert index.collect(21, 30) == ([], True)  # entry 3's LSO 41 >= 30: later segments cannot overlap
    assert index.collect(0, 12) == ([AbortedTxn(1, 0, 10, 11), AbortedTxn(2, 5, 20, 21)], True)
    assert index.collect(41, 50) == ([], False)  # no LSO reaches 50: keep looking in the next segment
    assert index.collect(0, 100) == (index.entries, False)


def test_truncate_drops_entries_whose_marker_is_at_or_after(tmp_path):
    path = tmp_path / "x.txnindex"
    index = TransactionIndex(path, 0)
    for txn in (AbortedTxn(1, 0, 10, 11), AbortedTxn(2, 5, 20, 21), AbortedTxn(3, 30, 40, 41)):
        index.append(txn)
    index.truncate_to(20)
    assert [t.producer_id for t in index.entries] == [1]
    assert path.stat().st_size == ENTRY_SIZE
    index.append(AbortedTxn(4, 12, 15, 16))  # appends go on after the cut
    index.close()
    assert [t.producer_id for t in TransactionIndex(path, 0).entries] == [1, 4]


def test_torn_tail_is_ignored_and_overwritten(tmp_path):
    path = tmp_path / "x.txnindex"
    path.write_bytes(AbortedTxn(1, 0, 10, 11).to_bytes() + b"\x00\x00\x00")
    index = TransactionIndex(path, 0)
    assert index.entries == [AbortedTxn(1, 0, 10, 11)]
    index.append(AbortedTxn(2, 12, 13, 14))
    index.close()
    assert path.read_bytes() == AbortedTxn(1, 0, 10, 11).to_bytes() + AbortedTxn(2, 12, 13, 14).to_bytes()


def test_sanity_check_and_newer_versions(tmp_path):
    path = tmp_path / "x.txnindex"
    path.write_bytes(AbortedTxn(1, 0, 10, 11).to_bytes())
    with pytest.raises(IndexCorruptError):
        TransactionIndex(path, 50).sanity_check()  # an entry ending before the segment's base offset
    TransactionIndex(path, 10).sanity_check()
    with pytest.raises(IndexCorruptError):
        parse_entries(struct.pack(">hqqqq", 1, 1, 0, 10, 11))


def test_read_only_index_is_never_written(tmp_path):
    path = tmp_path / "x.txnindex"
    data = AbortedTxn(1, 0, 10, 11).to_bytes()
    index = TransactionIndex(path, 0, writable=False, data=data)
    assert index.entries == [AbortedTxn(1, 0, 10, 11)] and not path.exists()
    index.truncate_to(0)
    assert not path.exists()
