"""The append path's inlined pure-Python walk (`batch._scan_records`) against the one record cursor it
inlines (`record_cursor(validate=True)`): the same (min, max) timestamp deltas on valid bodies, the same
error message on lying ones (a flipped, cut, inserted or dropped byte, a wrong count)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chronolog.errors import InvalidRecordError
from chronolog.records import SimpleRecord, build_batch
from chronolog.records.batch import HEADER_SIZE, _scan_records, record_cursor

SETTINGS = settings(max_examples=400, derandomize=True, database=None, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

records = st.lists(st.builds(
    SimpleRecord,
    timestamp=st.integers(0, 2**42),
    key=st.one_of(st.none(), st.binary(max_size=200)),
    value=st.one_of(st.none(), st.binary(max_size=9000)),
    headers=st.lists(st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=20))), max_size=2),
), min_size=1, max_size=12)


def verdict(fn, body: bytes, count: int):
    try:
        return fn(body, count)
    except InvalidRecordError as exc:
        return str(exc)


def cursor(body: bytes, count: int) -> tuple[int, int]:
    if count <= 0:
        raise InvalidRecordError(f"batch claims {count} records in {len(body)} bytes")
    stamps = [t for _s, _e, t, _o, _p in record_cursor(body, count, validate=True)]
    return min(stamps), max(stamps)


@SETTINGS
@given(recs=records, data=st.data())
def test_the_inlined_walk_gives_the_cursors_verdict(recs, data):
    body = bytearray(build_batch(recs)[HEADER_SIZE:])
    count = len(recs)
    kind = data.draw(st.sampled_from(["none", "flip", "cut", "insert", "drop", "count"]))
    if kind != "none" and body:
        at = data.draw(st.integers(0, len(body) - 1))
        if kind == "flip":
            body[at] ^= data.draw(st.integers(1, 255))
        elif kind == "cut":
            del body[at:]
        elif kind == "insert":
            body[at:at] = bytes([data.draw(st.integers(0, 255))])
        elif kind == "drop":
            del body[at]
        else:
            count = data.draw(st.integers(-2, count + 3))
    assert verdict(_scan_records, bytes(body), count) == verdict(cursor, bytes(body), count)
