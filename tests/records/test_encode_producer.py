"""records/_encode.c with a producer: the batches an idempotent producer sends (KIP-98), each with the
producer id and epoch and the sequence of its first record, numbered on across the batches of one call
and wrapping after 2^31 - 1 as Kafka's DefaultRecordBatch.incrementSequence; the CRC covers them."""

from __future__ import annotations

from array import array
from itertools import accumulate

import pytest

from chronolog.records import RecordBatch, encode

pytestmark = pytest.mark.skipif(not encode.AVAILABLE, reason="the C extensions are not built")


def column(values: list[bytes]) -> tuple:
    return None, array("i", accumulate(map(len, values), initial=0)), b"".join(values), 0


def test_producer_ids_and_sequences():
    values = [b"x" * 100] * 50
    batches = encode.encode_batches(50, None, column(values), None, None, 1_700_000_000_000, 1000,
                                    producer=(7, 3, 2**31 - 20))
    assert len(batches) > 2
    seq = 2**31 - 20
    for raw in batches:
        batch = RecordBatch(raw)
        batch.validate()  # the CRC covers the ids
        count = len(list(batch.records()))
        assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (7, 3, seq)
        seq = (seq + count) % 2**31
    plain = encode.encode_batches(50, None, column(values), None, None, 1_700_000_000_000, 1000)
    assert [len(b) for b in plain] == [len(b) for b in batches]
    assert RecordBatch(plain[0]).producer_id == -1 and RecordBatch(plain[0]).base_sequence == -1


@pytest.mark.parametrize("producer", [(-1, 0, 0), (1, 40000, 0), (1, 0, 2**31)])
def test_bad_producer_refused(producer):
    with pytest.raises(ValueError, match="producer"):
        encode.encode_batches(1, None, column([b"x"]), None, None, 0, 1000, producer=producer)
