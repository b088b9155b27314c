"""Append validation that producers' single-batch requests meet (the path `PartitionLog.append` takes for
one v2 batch): Kafka's `LogValidator.validateBatch` offset-range check, and the same answers and stored
bytes as the general loop that handles several batches."""

from __future__ import annotations

import struct

import pytest

from chronolog.errors import InvalidRecordError
from chronolog.records import RecordBatch, SimpleRecord, build_batch, crc32c, iter_batches
from tests.storage.helpers import NOW, open_log


def test_a_last_offset_delta_that_disagrees_with_the_record_count_is_refused(tmp_path):
    plog = open_log(tmp_path)
    raw = bytearray(build_batch([SimpleRecord(NOW + i, None, b"v") for i in range(3)]))
    struct.pack_into(">i", raw, 23, 5)  # lastOffsetDelta 5 for 3 records
    struct.pack_into(">I", raw, 17, crc32c(memoryview(raw)[21:]))
    with pytest.raises(InvalidRecordError, match="Inconsistent batch offset range"):
        plog.append(raw, now=NOW)
    assert plog.log_end_offset == 0 and plog.size == 0
    plog.close()


def test_single_batch_appends_store_what_the_general_loop_stores(tmp_path):
    """The replication-style call with two batches goes through the general loop; the same batches one
    request at a time go through the single-batch path: offsets, headers and bytes must be equal."""
    batches = [build_batch([SimpleRecord(NOW + 5 - i, None, b"r%d" % i) for i in range(4)]),
               build_batch([SimpleRecord(-1, None, b"none")]),
               build_batch([SimpleRecord(NOW + 9, b"k", b"v", headers=(("h", b"x"),))])]
    one = open_log(tmp_path / "one")
    infos = [one.append(b, now=NOW) for b in batches]
    together = open_log(tmp_path / "together")
    together.append(batches[0], now=NOW)
    both = together.append(batches[1] + batches[2], now=NOW, origin_client=False)
    assert (infos[1].first_offset, infos[2].last_offset) == (both.first_offset, both.last_offset)
    assert [(i.max_timestamp, i.offset_of_max_timestamp) for i in infos] == [(NOW + 5, 3), (-1, -1), (NOW + 9, 5)]
    assert (both.max_timestamp, both.offset_of_max_timestamp) == (NOW + 9, 5)
    stored = one.read(0, 1 << 20).read_bytes()
    assert stored == together.read(0, 1 << 20).read_bytes()
    for batch in iter_batches(stored):
        assert isinstance(batch, RecordBatch) and batch.verify_crc() and batch.partition_leader_epoch == 0
    one.close()
    together.close()
