"""The share-partition state machine (server/share_partition.py, Kafka's SharePartition), its durable
snapshots (server/share_state.py) and the simple assignor (server/share_group.py), without a broker."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chronolog.server.share_group import ShareMember, simple_assign
from chronolog.server.share_partition import (
    ACCEPT,
    ACKNOWLEDGED,
    ACQUIRED,
    ARCHIVED,
    AVAILABLE,
    GAP,
    REJECT,
    RELEASE,
    RENEW,
    AckError,
    Batch,
    SharePartition,
)
from chronolog.server.share_state import ShareStateStore

LOCK = 30.0


def acquire(sp: SharePartition, member: str, batches: list[Batch], now: float = 0.0, max_records: int = 500,
            **kw) -> list[tuple[int, int, int]]:
    return sp.acquire(member, batches, max_records=max_records, lock_s=LOCK, now=now, max_in_flight=2000, **kw)


def test_acquire_accept_moves_the_start():
    sp = SharePartition(0)
    assert acquire(sp, "m", [Batch(0, 4), Batch(5, 9)]) == [(0, 9, 1)]
    sp.acknowledge("m", [(0, 9, [ACCEPT])], limit=5, lock_s=LOCK, now=1)
    assert (sp.start, sp.end, sp.records) == (10, 10, {})


def test_release_redelivers_with_a_higher_count_and_reject_archives():
    sp = SharePartition(0)
    acquire(sp, "m", [Batch(0, 2)])
    sp.acknowledge("m", [(0, 2, [RELEASE, ACCEPT, REJECT])], limit=5, lock_s=LOCK, now=1)
    assert sp.start == 0 and sp.records[0].state == AVAILABLE and sp.records[2].state == ARCHIVED
    assert sp.first_acquirable() == 0
    assert acquire(sp, "n", [Batch(0, 2)]) == [(0, 0, 2)]  # only the released one
    sp.acknowledge("n", [(0, 0, [ACCEPT])], limit=5, lock_s=LOCK, now=2)
    assert (sp.start, sp.records) == (3, {})


def test_lock_expiry_and_the_delivery_count_limit():
    sp = SharePartition(0)
    for delivery in (1, 2):
        assert acquire(sp, "m", [Batch(0, 0)], now=delivery * 100) == [(0, 0, delivery)]
        assert not sp.expire(delivery * 100 + LOCK - 1, limit=2)
        assert sp.expire(delivery * 100 + LOCK, limit=2)
    assert sp.start == 1  # delivered twice with a limit of 2: archived, never a third time


def test_acknowledgements_check_the_holder_and_the_state():
    sp = SharePartition(0)
    acquire(sp, "m", [Batch(0, 1)])
    with pytest.raises(AckError):
        sp.acknowledge("other", [(0, 0, [ACCEPT])], limit=5, lock_s=LOCK, now=1)
    with pytest.raises(AckError):  # offset 5 was never acquired
        sp.acknowledge("m", [(0, 0, [ACCEPT]), (5, 5, [ACCEPT])], limit=5, lock_s=LOCK, now=1)
    assert sp.records[0].state == ACQUIRED  # nothing applied
    sp.acknowledge("m", [(0, 1, [RENEW])], limit=5, lock_s=LOCK, now=20)
    assert sp.records[0].deadline == 20 + LOCK and sp.records[0].state == ACQUIRED


def test_aborted_batches_and_gaps_are_archived_markers_acquired():
    """As Kafka 4.4: a transaction marker is acquired like a record; aborted data (read_committed) and
    offsets compacted away never are."""
    sp = SharePartition(0)
    got = acquire(sp, "m", [Batch(0, 1), Batch(2, 2, control=True), Batch(3, 3, aborted=True), Batch(6, 7)])
    assert got == [(0, 2, 1), (6, 7, 1)]  # 4-5 compacted away
    sp.acknowledge("m", [(0, 2, [ACCEPT, ACCEPT, GAP]), (6, 7, [ACCEPT, GAP])], limit=5, lock_s=LOCK, now=1)
    assert sp.start == 8


def test_max_records_batch_optimized_and_strict():
    sp = SharePartition(0)
    assert acquire(sp, "m", [Batch(0, 9), Batch(10, 19)], max_records=3) == [(0, 9, 1)]  # whole batches
    sp2 = SharePartition(0)
    assert acquire(sp2, "m", [Batch(0, 9)], max_records=3, strict=True) == [(0, 2, 1)]


def test_release_member_and_snapshot_round_trip(tmp_path):
    sp = SharePartition(0)
    acquire(sp, "m", [Batch(0, 4)])
    sp.acknowledge("m", [(0, 0, [ACCEPT]), (2, 2, [REJECT])], limit=5, lock_s=LOCK, now=1)
    assert sp.release_member("m", limit=5)
    store = ShareStateStore(tmp_path)
    store.write("g", "t", 0, sp.snapshot())
    (got,) = store.load()["g"].values()
    back = SharePartition.from_snapshot(got)
    assert (back.start, back.end) == (1, 5)
    assert {o: (r.state, r.count) for o, r in back.records.items()} == {
        1: (AVAILABLE, 1), 2: (ARCHIVED, 1), 3: (AVAILABLE, 1), 4: (AVAILABLE, 1)}


def test_store_skips_a_torn_line_and_compacts(tmp_path):
    store = ShareStateStore(tmp_path)
    for i in range(1100):
        sp = SharePartition(i)
        store.write("g", "t", 0, sp.snapshot(), {("t", 0): sp.snapshot()})
    path = next((tmp_path / "__share_group_state-state").glob("*.jsonl"))
    assert len(path.read_text().splitlines()) < 1100  # rewritten with the live snapshot only
    with open(path, "a") as f:
        f.write('{"t": "t", "p": 0, "sta')
    assert ShareStateStore(tmp_path).load()["g"][("t", 0)]["start"] == 1099


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["m", "n"]), st.sampled_from([ACCEPT, RELEASE, REJECT]),
                          st.booleans()), min_size=1, max_size=40))
def test_every_offset_ends_done_once(steps):
    """Whatever members fetch and acknowledge, an accepted offset is never acquired again and the start
    only moves over done offsets."""
    sp = SharePartition(0)
    accepted: set[int] = set()
    now = 0.0
    log = [Batch(i * 3, i * 3 + 2) for i in range(6)]
    for member, kind, expire in steps:
        now += 1
        got = acquire(sp, member, log, now=now, max_records=4)
        offsets = [o for a, z, _ in got for o in range(a, z + 1)]
        assert not set(offsets) & accepted
        if expire:
            sp.expire(now + LOCK, limit=3)
            continue
        for off in offsets:
            sp.acknowledge(member, [(off, off, [kind])], limit=3, lock_s=LOCK, now=now)
            if kind == ACCEPT:
                accepted.add(off)
        assert all(o >= sp.start for o in sp.records)
        assert all(o < sp.start or sp.records[o].state == ACKNOWLEDGED for o in accepted if o in sp.records)


def _member(mid: str, topics: tuple[str, ...], assigned: dict | None = None) -> ShareMember:
    return ShareMember(mid, None, "c", "h", topics, assigned=assigned or {})


@pytest.mark.parametrize("members,partitions", [(1, 4), (3, 2), (4, 4), (5, 3), (2, 5), (7, 1)])
def test_simple_assignor_shares_and_balances(members, partitions):
    ms = {f"m{i}": _member(f"m{i}", ("t",)) for i in range(members)}
    out = simple_assign(ms, {"t": partitions})
    holders = {p: [m for m, a in out.items() if p in a.get("t", ())] for p in range(partitions)}
    sharing = -(-members // partitions)
    assert all(len(h) == sharing for h in holders.values())
    counts = sorted(len(a.get("t", ())) for a in out.values())
    assert counts[-1] - counts[0] <= 1 and counts[0] >= 1


def test_simple_assignor_is_sticky():
    ms = {"a": _member("a", ("t",)), "b": _member("b", ("t",))}
    first = simple_assign(ms, {"t": 4})
    for m, a in first.items():
        ms[m].assigned = a
    ms["c"] = _member("c", ("t",))
    second = simple_assign(ms, {"t": 4})
    assert all(second[m]["t"] <= first[m]["t"] for m in ("a", "b"))


def test_a_batch_spanning_every_offset_is_bounded_by_what_is_in_flight():
    """A batch of one type may name 0 to 2^63-1 (the fuzzer sends it): GAP skips what is not held, any other
    type stops at the first offset not in flight, without walking the range."""
    sp = SharePartition(0)
    acquire(sp, "m", [Batch(0, 2)])
    top = (1 << 63) - 1
    sp.acknowledge("m", [(0, top, [GAP])], limit=5, lock_s=LOCK, now=1)
    assert (sp.start, sp.records) == (3, {})
    acquire(sp, "m", [Batch(3, 4)], now=2)
    with pytest.raises(AckError) as failed:
        sp.acknowledge("m", [(3, top, [ACCEPT])], limit=5, lock_s=LOCK, now=3)
    assert "5" in str(failed.value) and {o: r.state for o, r in sp.records.items()} == {3: ACQUIRED, 4: ACQUIRED}
