"""A KIP-848 consumer group's state in `__consumer_offsets`: written as the group changes, replayed at start
(GroupMetadataManager.replay / onLoaded), tombstones when a member leaves or the group goes. Each test runs a
coordinator, stops it, starts another on the same data dir and compares."""

from __future__ import annotations

import asyncio

from chronolog.config import BrokerConfig
from chronolog.errors import ErrorCode
from chronolog.records import group_records as gr
from chronolog.server.classic_group import Group
from chronolog.server.coordinator import GroupCoordinator

CONFIG = {"group.consumer.heartbeat.interval.ms": "300", "offsets.topic.num.partitions": "1"}


def start(path) -> GroupCoordinator:
    c = GroupCoordinator(path, BrokerConfig(CONFIG))

    async def go() -> None:
        await c.start()
        for task in (c._reaper, c._retention):  # timers are not under test here
            task.cancel()
    asyncio.run(go())
    for name, n in (("foo", 4), ("bar", 2)):
        if not c.store.logs.has_topic(name):
            c.store.logs.create_topic(name, n, {})
    return c


def stop(c: GroupCoordinator) -> None:
    asyncio.run(c.stop())


def hb(c, member_id, epoch, subscribed=None, owned=None, group="g", **kw):
    return c.consumer.heartbeat(group, member_id, epoch, instance_id=kw.get("instance_id"), rack_id=kw.get("rack_id"),
                                rebalance_timeout_ms=kw.get("rebalance_timeout_ms", 5000), subscribed=subscribed,
                                regex=kw.get("regex"), assignor=kw.get("assignor"), owned=owned, client_id="c",
                                client_host="/127.0.0.1", topics=c.store.logs.topics())


def snapshot(c, group="g"):
    g = c.consumer.groups[group]
    members = {mid: (m.instance_id, m.rack_id, m.epoch, m.previous_epoch, m.assigned, m.revoking, sorted(m.names),
                     m.subscribed, m.regex, m.assignor, m.rebalance_timeout_ms, m.static_left, m.classic_protocols,
                     m.session_timeout_ms)
               for mid, m in g.members.items()}
    return g.epoch, g.assignment_epoch, g.assignor, g.topic_sizes, g.target, members, g.state


def records(c):
    """The offsets partition's KIP-848 records, oldest first: (key, value or None)."""
    plog = c.store.logs.get_log(gr.CONSUMER_OFFSETS_TOPIC, 0)
    out = []
    for rec in plog.read_records(plog.log_start_offset):
        if gr.key_version(rec.key) >= 3:
            out.append((gr.read_key(rec.key), None if rec.value is None else bytes(rec.value)))
    return out


def test_a_reconciling_group_comes_back_as_it_was(tmp_path):
    """Mid-rebalance (m1 revoking, m2 waiting for what m1 still holds): epochs, assignments, pending revocations,
    targets and subscriptions survive; both members go on with the epochs they hold."""
    c = start(tmp_path)
    hb(c, "m1", 0, ["foo"], {}, instance_id="i-1", rack_id="r1", assignor="range")
    r2 = hb(c, "m2", 0, ["foo", "bar"], {})
    r1 = hb(c, "m1", 1, None, {"foo": frozenset({0, 1, 2, 3})})
    assert r1["member_epoch"] == 1 and c.consumer.groups["g"].members["m1"].revoking
    before = snapshot(c)
    assert before[-1] == "Reconciling"
    stop(c)

    c = start(tmp_path)
    assert snapshot(c) == before
    # m1 reports its revocation with the epoch it held before the restart and moves to the new one
    done = hb(c, "m1", 1, None, r1["assignment"])
    assert (done["error_code"], done["member_epoch"]) == (0, 2)
    got = hb(c, "m2", r2["member_epoch"], None, {})
    assert got["error_code"] == 0 and got["assignment"]
    assert hb(c, "m2", got["member_epoch"] + 1, None, got["assignment"])["error_code"] == ErrorCode.FENCED_MEMBER_EPOCH
    assert hb(c, "nobody", 1, None, {})["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    # commits are checked against the restored epochs (ConsumerGroup.validateOffsetCommit)
    assert c.commit("g", done["member_epoch"], "m1", [("foo", 0, 5, -1, None)]) == 0
    # an older epoch goes for partitions held since then (KIP-1251), not below it nor above the member's
    assert c.commit("g", 1, "m1", [("foo", 0, 5, -1, None)]) == 0
    assert c.commit("g", 0, "m1", [("foo", 0, 5, -1, None)]) == ErrorCode.STALE_MEMBER_EPOCH
    assert c.commit("g", done["member_epoch"] + 1, "m1", [("foo", 0, 5, -1, None)]) == ErrorCode.STALE_MEMBER_EPOCH
    for _ in range(3):  # m1 and m2 heartbeat until both hold their targets
        for mid in ("m1", "m2"):
            m = c.consumer.groups["g"].members[mid]
            hb(c, mid, m.epoch, None, m.assigned)
    assert c.consumer.groups["g"].state == "Stable"
    stable = snapshot(c)
    stop(c)
    c = start(tmp_path)
    assert snapshot(c) == stable
    # steady heartbeats after the restart change nothing, and write nothing
    count = len(records(c))
    for mid in ("m1", "m2"):
        m = c.consumer.groups["g"].members[mid]
        assert hb(c, mid, m.epoch, None, m.assigned)["error_code"] == 0
    assert len(records(c)) == count
    stop(c)


def test_a_member_leaving_and_the_group_deleted_leave_tombstones(tmp_path):
    """removeMember: current assignment, target and subscription tombstones, then the new group epoch;
    ConsumerGroup.createGroupTombstoneRecords when the group is deleted: nothing of it comes back."""
    c = start(tmp_path)
    hb(c, "m1", 0, ["foo"], {})
    hb(c, "m2", 0, ["foo"], {})
    assert hb(c, "m2", -1)["error_code"] == 0
    tail = records(c)[-6:]
    assert [(k.kind, getattr(k, "member_id", None), v is None) for k, v in tail[:3]] == [
        (8, "m2", True), (7, "m2", True), (5, "m2", True)]
    assert (tail[3][0].kind, gr.read_epoch_value(tail[3][1])) == (3, 3)  # the group epoch after the leave
    stop(c)
    c = start(tmp_path)
    assert list(c.consumer.groups["g"].members) == ["m1"] and c.consumer.groups["g"].epoch == 3
    assert hb(c, "m1", -1)["error_code"] == 0
    c.commit("g", -1, "", [("foo", 1, 3, -1, None)])
    plog = c.store.logs.get_log(gr.CONSUMER_OFFSETS_TOPIC, 0)
    count = len(list(plog.read_records(plog.log_start_offset)))
    assert c.delete_group("g") == 0
    kinds = [gr.key_version(r.key) for r in plog.read_records(plog.log_start_offset)][count:]
    # the group's own tombstones, its offset's, and no classic GroupMetadata tombstone (as Kafka deletes a
    # consumer group)
    assert sorted(kinds) == [1, 3, 4, 6]  # (its members' were written when they left)
    last: dict = {}
    for k, v in records(c):
        last[k] = v
    assert last and all(v is None for v in last.values())  # every key of the group ends in its tombstone
    stop(c)
    c = start(tmp_path)
    assert "g" not in c.consumer.groups and "g" not in c.groups
    assert hb(c, "m1", 1, None, {})["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND  # as Kafka: the group is gone
    stop(c)


def test_static_leave_and_classic_member_survive(tmp_path):
    """A static member's temporary leave (epoch -2) and a classic member inside the consumer group
    (ClassicMemberMetadata, the tagged field) come back: the instance takes its partitions back under a new id,
    the classic member's generation is its epoch."""
    c = start(tmp_path)
    hb(c, "s1", 0, ["foo"], {}, instance_id="inst")
    a = hb(c, "s1", 1, None, {"foo": frozenset({0, 1, 2, 3})})
    assert a["error_code"] == 0
    sub = b"\x00\x00\x00\x00\x00\x01\x00\x03foo\xff\xff\xff\xff"  # ConsumerProtocolSubscription v0 of "foo"
    joined = asyncio.run(c.join("g", "", None, "cl", "/127.0.0.1", 6000, 6000, "consumer", [("range", sub)], False,
                                c.store.logs.topics()))
    assert joined["error_code"] == 0
    classic_id = joined["member_id"]
    assert hb(c, "s1", -2, instance_id="inst")["error_code"] == 0
    before = snapshot(c)
    stop(c)
    c = start(tmp_path)
    g = c.consumer.groups["g"]
    assert g.members["s1"].static_left and g.members[classic_id].classic_protocols == [("range", sub)]
    assert g.members[classic_id].session_timeout_ms == 6000
    assert c.consumer.classic_heartbeat("g", g.members[classic_id].epoch, classic_id) in (0, ErrorCode.REBALANCE_IN_PROGRESS)
    back = hb(c, "s2", 0, ["foo"], {}, instance_id="inst")
    # it holds what it held, less what the classic member's arrival moves away (revoked first)
    assert back["error_code"] == 0 and back["assignment"] == before[4]["s1"] != before[5]["s1"][4]
    assert c.consumer.groups["g"].members["s2"].revoking == {"foo": before[5]["s1"][4]["foo"] - before[4]["s1"]["foo"]}
    assert "s1" not in c.consumer.groups["g"].members
    stop(c)


def test_empty_classic_group_becoming_a_consumer_group_drops_its_metadata(tmp_path):
    """maybeDeleteEmptyClassicGroup writes the classic group's tombstone: after a restart the id is a consumer
    group only, and its offsets stayed."""
    c = start(tmp_path)
    c.groups["idle"] = Group("idle")
    c._store_group(c.groups["idle"])
    c.commit("idle", -1, "", [("foo", 0, 7, -1, None)])
    assert hb(c, "m1", 0, ["foo"], {}, group="idle")["error_code"] == 0
    stop(c)
    c = start(tmp_path)
    assert "idle" in c.consumer.groups and "idle" not in c.groups
    assert c.fetch_offsets("idle", [("foo", 0)]) == {("foo", 0): (7, -1, "")}
    assert [g["group_id"] for g in c.list_groups()] == ["idle"]
    stop(c)


# -- commits written off the event loop --------------------------------------------------------------------
def test_commit_is_answered_and_visible_only_once_durable_and_the_loop_goes_on(tmp_path):
    """OffsetCommit's append and fsync run in a worker thread (commit_async): until the write returned, the
    commit is not answered and its offset is not readable, while the event loop answers other requests."""
    import threading

    c = start(tmp_path)
    c.commit("g0", -1, "", [("foo", 0, 1, -1, None)])  # the offsets topic exists
    gate, entered = threading.Event(), threading.Event()
    write = c.store.write_commit

    def slow_write(group, items):
        entered.set()
        assert gate.wait(30)
        return write(group, items)
    c.store.write_commit = slow_write

    async def go() -> None:
        task = asyncio.ensure_future(c.commit_async("g0", -1, "", [("foo", 0, 5, -1, None)]))
        for _ in range(3000):  # until the write started in its thread (bounded)
            if entered.is_set():
                break
            await asyncio.sleep(0.01)
        assert hb(c, "m1", 0, ["foo"], {})["error_code"] == 0  # the loop is free meanwhile
        assert not task.done() and c.fetch_offsets("g0", [("foo", 0)])[("foo", 0)][0] == 1
        gate.set()
        assert await task == 0
        assert c.fetch_offsets("g0", [("foo", 0)])[("foo", 0)][0] == 5
    asyncio.run(go())
    stop(c)


def test_commits_applied_out_of_order_keep_the_last_written(tmp_path):
    """Writes take a sequence number in log order; a commit whose thread finishes last but was written first
    does not overwrite a later one in memory, so memory matches what a restart reads back."""
    c = start(tmp_path)
    first = [("foo", 0, 10, -1, None)]
    second = [("foo", 0, 20, -1, None)]
    w1 = c.store.write_commit("g", first)
    w2 = c.store.write_commit("g", second)
    c.store.apply_commit("g", second, *w2)
    c.store.apply_commit("g", first, *w1)  # late
    assert c.fetch_offsets("g", [("foo", 0)])[("foo", 0)][0] == 20
    c.store.delete_offsets("g", [("foo", 0)])
    c.store.apply_commit("g", second, *w2)  # older than the tombstone
    assert ("g", "foo", 0) not in c.store.offsets
    stop(c)
    c = start(tmp_path)
    assert ("g", "foo", 0) not in c.store.offsets
    stop(c)


def test_the_offsets_topic_is_loaded_off_the_event_loop(tmp_path):
    """GroupCoordinator.start reads __consumer_offsets in a worker thread: the event loop runs meanwhile, and
    what waits on `wait_loaded` (the broker's group requests) goes on only once the load is done."""
    import threading

    c = start(tmp_path)
    c.commit("g", -1, "", [("foo", 0, 3, -1, None)])
    stop(c)
    c = GroupCoordinator(tmp_path, BrokerConfig(CONFIG))
    gate, entered = threading.Event(), threading.Event()
    load = c.store.load

    def slow_load() -> None:
        entered.set()
        assert gate.wait(30)
        load()
    c.store.load = slow_load

    async def go() -> None:
        starting = asyncio.ensure_future(c.start())
        waiter = asyncio.ensure_future(c.wait_loaded())
        for _ in range(3000):  # the loop turns while the load runs (bounded)
            if entered.is_set():
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0)
        assert entered.is_set() and not c.loaded and not waiter.done() and not starting.done()
        gate.set()
        await asyncio.wait_for(waiter, 30)
        await starting
        assert c.loaded and c.fetch_offsets("g", [("foo", 0)])[("foo", 0)][0] == 3
        await c.stop()
    asyncio.run(go())


def test_every_piece_of_state_reaches_the_log(tmp_path):
    """The records are re-encoded only when what they are made from changed: after each change below (of one
    field each, assignments replaced as the coordinator replaces them), what was written equals a fresh
    encoding of the whole group, and a restart brings the last state back."""
    c = start(tmp_path)
    hb(c, "m1", 0, ["foo"], {})
    hb(c, "m2", 0, ["foo", "bar"], {}, instance_id="i2")
    for _ in range(3):
        for mid in ("m1", "m2"):
            m = c.consumer.groups["g"].members[mid]
            hb(c, mid, m.epoch, None, m.assigned)
    g = c.consumer.groups["g"]
    m1, m2 = g.members["m1"], g.members["m2"]
    mutations = [
        lambda: (setattr(m1, "assigned", {"foo": frozenset({0})}), g.target.__setitem__("m1", {"foo": frozenset({0})})),
        lambda: setattr(m1, "assigned", {"foo": frozenset({0}), "bar": frozenset({1})}),
        lambda: setattr(m2, "revoking", {"bar": frozenset({0})}),
        lambda: setattr(m2, "previous_epoch", 7),
        lambda: setattr(m1, "epoch", 9),
        lambda: setattr(m2, "static_left", True),
        lambda: setattr(m1, "client_id", "other"),
        lambda: setattr(m1, "client_host", "/10.0.0.1"),
        lambda: setattr(m1, "rack_id", "r9"),
        lambda: setattr(m1, "rebalance_timeout_ms", 1234),
        lambda: (setattr(m1, "names", ("bar", "foo")), setattr(m1, "subscribed", ("bar", "foo"))),
        lambda: setattr(m1, "regex", "f.*"),
        lambda: setattr(m1, "assignor", "range"),
        lambda: (setattr(m2, "classic_protocols", [("range", b"\x00")]), setattr(m2, "session_timeout_ms", 7000)),
        lambda: setattr(m2, "session_timeout_ms", 8000),
        lambda: setattr(g, "topic_sizes", {"foo": 4}),
        lambda: setattr(g, "epoch", 11),
        lambda: setattr(g, "assignment_epoch", 10),
        lambda: g.target.__setitem__("m2", {"bar": frozenset({0, 1})}),
    ]
    for i, mutate in enumerate(mutations):
        mutate()
        c.consumer.persist("g")
        written = dict(c.consumer.group_store.written["g"])
        c.consumer.group_store._encoded.clear()
        assert dict(c.consumer.group_store._image(g)) == written, f"change {i} not written"
    last = snapshot(c)
    stop(c)
    c = start(tmp_path)
    again = snapshot(c)
    # a static member's leave comes back as epoch 0 (it reconciles again when its instance returns)
    assert again[5]["m2"][11] and last[5]["m2"][11]
    # (the group's assignor is not a record: it is the members' choice, worked out again)
    assert again[:2] + again[3:5] == last[:2] + last[3:5] and again[5]["m1"] == last[5]["m1"]
    stop(c)


def test_heartbeat_is_answered_once_its_records_are_durable_and_the_loop_goes_on(tmp_path):
    """heartbeat_async hands the group's changed records to the group-state writer thread: the member is
    answered after the write, other groups' heartbeats and commits are answered meanwhile, and a write that
    fails answers NOT_COORDINATOR and is carried by the group's next write."""
    import threading

    from chronolog.errors import KafkaStorageErrorError

    c = start(tmp_path)
    hb(c, "x1", 0, ["bar"], {}, group="other")  # the offsets topic exists
    gate, entered = threading.Event(), threading.Event()
    write = c.store.write_records

    def slow(group, records):
        if group == "g":
            entered.set()
            assert gate.wait(30)
        return write(group, records)
    c.store.write_records = slow

    def hb_async(member_id, epoch, subscribed=None, owned=None, group="g"):
        return c.consumer.heartbeat_async(group, member_id, epoch, instance_id=None, rack_id=None,
                                          rebalance_timeout_ms=5000, subscribed=subscribed, regex=None, assignor=None,
                                          owned=owned, client_id="c", client_host="/127.0.0.1",
                                          topics=c.store.logs.topics())

    async def go() -> None:
        task = asyncio.ensure_future(hb_async("m1", 0, ["foo"], {}))
        for _ in range(3000):  # until the write is in its thread (bounded)
            if entered.is_set():
                break
            await asyncio.sleep(0.01)
        assert entered.is_set() and not task.done()
        assert await c.commit_async("plain", -1, "", [("bar", 0, 1, -1, None)]) == 0  # the loop is free
        assert not task.done()
        gate.set()
        answer = await task
        assert (answer["error_code"], answer["member_epoch"]) == (0, 1)
    asyncio.run(go())
    c.store.write_records = write
    m1 = c.consumer.groups["g"].members["m1"]
    assert gr.consumer_member_key(8, "g", "m1") in c.consumer.group_store.written["g"]

    def failing(group, records):
        raise KafkaStorageErrorError("disk full")
    c.store.write_records = failing
    refused = asyncio.run(c.consumer.heartbeat_async(
        "g", "m1", m1.epoch, instance_id=None, rack_id=None, rebalance_timeout_ms=7000, subscribed=None, regex=None,
        assignor=None, owned=m1.assigned, client_id="c", client_host="/127.0.0.1", topics=c.store.logs.topics()))
    assert refused["error_code"] == ErrorCode.NOT_COORDINATOR  # its new rebalance timeout was not written
    c.store.write_records = write
    assert hb(c, "m2", 0, ["bar"], {})["error_code"] == 0  # the next write of the group (other records)
    stop(c)
    c = start(tmp_path)
    assert c.consumer.groups["g"].members["m1"].rebalance_timeout_ms == 7000  # carried by that next write
    assert sorted(c.consumer.groups["g"].members) == ["m1", "m2"]
    stop(c)
