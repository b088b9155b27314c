"""The C index search (`chronolog.storage._headers.floor_slot`) gives exactly the Python binary search's
answer (`AbstractIndex._largest_lower_bound_slot` with it switched off) on both index kinds and every field
searched: offset index keys, offset index positions, time index timestamps."""

from __future__ import annotations

import random

import pytest

from chronolog.storage import index as index_module
from chronolog.storage.index import _POSITION_FIELD, OffsetIndex, TimeIndex

pytestmark = pytest.mark.skipif(index_module._native_floor_slot is None,
                                reason="the C index search was not built (no compiler)")

EXTREMES = [-2**63, -2**31 - 1, -2**31, -1, 0, 1, 2**31 - 1, 2**31, 2**63 - 1]


def _both(idx, target: int, field, monkeypatch) -> tuple[int, int]:
    native = idx._largest_lower_bound_slot(target, field)
    with monkeypatch.context() as m:
        m.setattr(index_module, "_native_floor_slot", None)
        python = idx._largest_lower_bound_slot(target, field)
    return native, python


def _targets(rng: random.Random, keys: list[int]) -> list[int]:
    near = [k + d for k in rng.sample(keys, min(len(keys), 40)) for d in (-1, 0, 1)] if keys else []
    return EXTREMES + near + [rng.randrange(-2**40, 2**40) for _ in range(40)]


@pytest.mark.parametrize("seed", range(6))
def test_offset_index_keys_and_positions(tmp_path, seed, monkeypatch):
    rng = random.Random(seed)
    idx = OffsetIndex(tmp_path / f"{seed}.index", base_offset=rng.choice([0, 1000, 2**40]), max_index_size=80_000)
    rel = pos = 0
    keys, positions = [], []
    for _ in range(rng.choice([0, 1, 2, 7, 100, 5000])):
        rel += rng.choice([1, 1, 15, 3000])
        pos += rng.choice([0, 61, 4096, 1 << 20])
        idx.append(idx.base_offset + rel, pos)
        keys.append(rel)
        positions.append(pos)
    compared = 0
    for target in _targets(rng, keys):
        native, python = _both(idx, target, None, monkeypatch)
        assert native == python, target
        compared += native >= 0
    for target in _targets(rng, positions):
        native, python = _both(idx, target, _POSITION_FIELD, monkeypatch)
        assert native == python, target
    assert compared > 0 or not keys
    if keys:  # and through the public lookups
        assert idx.lookup(idx.base_offset + keys[-1]).position == positions[-1]
        assert idx.position_floor(positions[-1] + 1) == positions[-1]


@pytest.mark.parametrize("seed", range(4))
def test_time_index_timestamps(tmp_path, seed, monkeypatch):
    rng = random.Random(100 + seed)
    idx = TimeIndex(tmp_path / f"{seed}.timeindex", base_offset=0, max_index_size=120_000)
    ts = rng.choice([-2**62, 0, 1_700_000_000_000])
    stamps = []
    for i in range(rng.choice([1, 3, 500, 5000])):
        ts += rng.choice([1, 1000, 2**31, 2**33])
        idx.maybe_append(ts, i)
        stamps.append(ts)
    for target in _targets(rng, stamps):
        native, python = _both(idx, target, None, monkeypatch)
        assert native == python, target


def test_a_count_beyond_the_buffer_is_refused():
    """The C side checks the count against the buffer it is given instead of reading past it."""
    with pytest.raises(ValueError):
        index_module._native_floor_slot(bytes(16), 3, 8, 0, False, 5)
    with pytest.raises(ValueError):
        index_module._native_floor_slot(bytes(16), 2, 8, 6, False, 5)
    assert index_module._native_floor_slot(bytes(16), 2, 8, 4, False, 5) == 1
