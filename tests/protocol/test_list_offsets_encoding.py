"""ListOffsets responses framed by hand (codec.encode_list_offsets_response) against kio's encoder and decoder
for every ListOffsets version we serve."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.protocol.kio_path import framed_as_kio

VERSIONS = range(1, 12)
text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)
partition = st.fixed_dictionaries({
    "partition_index": st.integers(0, 2**31 - 1),
    "error_code": st.sampled_from([0, 3, 29, 35, 42, 74, 75]),
    "timestamp": st.integers(-1, 2**63 - 1),
    "offset": st.integers(-1, 2**63 - 1),
    "leader_epoch": st.integers(-1, 2**31 - 1),
    "old_style_offsets": st.just([]),
})
response = st.fixed_dictionaries({
    "throttle_time": st.integers(0, 10_000),
    "topics": st.lists(st.fixed_dictionaries({"name": text, "partitions": st.lists(partition, max_size=4)}),
                       max_size=3),
})


@settings(max_examples=300, deadline=None)
@given(values=response, version=st.sampled_from(VERSIONS), correlation_id=st.integers(-2**31, 2**31 - 1))
def test_list_offsets_framing_equals_kio_for_every_version(values, version, correlation_id):
    body = framed_as_kio(2, version, correlation_id, values)
    assert [(p.partition_index, p.offset, p.timestamp) for t in body.topics for p in t.partitions] == \
        [(p["partition_index"], p["offset"], p["timestamp"]) for t in values["topics"] for p in t["partitions"]]
