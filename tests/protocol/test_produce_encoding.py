"""Produce responses framed by hand (codec.encode_produce_response) against kio's encoder and decoder for
every Produce version we serve."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.protocol.kio_path import framed_as_kio

VERSIONS = range(3, 14)
text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)
partition = st.fixed_dictionaries({
    "index": st.integers(0, 2**31 - 1),
    "error_code": st.sampled_from([0, 2, 10, 18, 45, 87]),
    "base_offset": st.integers(-1, 2**63 - 1),
    "log_append_time": st.just(-1) | st.integers(0, 2**42),
    "log_start_offset": st.integers(-1, 2**63 - 1),
    "record_errors": st.lists(st.fixed_dictionaries(
        {"batch_index": st.integers(0, 100), "batch_index_error_message": st.none() | text}), max_size=2),
    "error_message": st.none() | text,
})
response = st.fixed_dictionaries({
    "throttle_time": st.integers(0, 10_000),
    "responses": st.lists(st.fixed_dictionaries({"name": text, "partition_responses": st.lists(partition, max_size=4)}),
                          max_size=3),
})


@settings(max_examples=300, deadline=None)
@given(values=response, version=st.sampled_from(VERSIONS), correlation_id=st.integers(-2**31, 2**31 - 1))
def test_produce_framing_equals_kio_for_every_version(values, version, correlation_id):
    body = framed_as_kio(0, version, correlation_id, values)
    assert [(p.index, p.base_offset) for t in body.responses for p in t.partition_responses] == \
        [(p["index"], p["base_offset"]) for t in values["responses"] for p in t["partition_responses"]]
