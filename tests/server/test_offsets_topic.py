"""`__consumer_offsets`: Kafka's record schemas byte for byte, the store's load, tombstones, transactional
offset commits settled by markers, the one-time migration of the old offsets file, retention."""

from __future__ import annotations

import asyncio
import json
import struct
import zlib

import pytest

from chronolog.config import BrokerConfig
from chronolog.records.control import marker_of
from chronolog.records.group_records import (
    ConsumerGroupKey,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    group_metadata_key,
    group_metadata_value,
    offset_commit_key,
    offset_commit_value,
    read_group_metadata_value,
    read_key,
    read_offset_commit_value,
)
from chronolog.server.coordinator import GroupCoordinator
from chronolog.server.offsets_topic import CONSUMER_OFFSETS_TOPIC, LEGACY_FILE, OffsetStore
from chronolog.storage import LogManager


def s16(text: str | None) -> bytes:
    """A Kafka STRING / NULLABLE_STRING: int16 length (-1 for null), UTF-8 bytes."""
    if text is None:
        return struct.pack(">h", -1)
    return struct.pack(">h", len(text.encode())) + text.encode()


def compact(text: str | None) -> bytes:
    """A COMPACT_(NULLABLE_)STRING: unsigned varint length + 1 (0 for null); lengths here are < 127."""
    if text is None:
        return b"\x00"
    return bytes([len(text.encode()) + 1]) + text.encode()


# -- the schemas, built field by field from Kafka's JSON definitions ---------------------------------------------
def test_offset_commit_key_is_kafkas_bytes():
    # OffsetCommitKey: version int16, group STRING, topic STRING, partition int32 (key version 1 is written)
    expected = struct.pack(">h", 1) + s16("my-group") + s16("orders") + struct.pack(">i", 7)
    assert offset_commit_key("my-group", "orders", 7) == expected
    assert offset_commit_key("my-group", "orders", 7, version=0) == struct.pack(">h", 0) + expected[2:]
    assert read_key(expected) == OffsetCommitKey("my-group", "orders", 7)


def test_offset_commit_value_v3_is_kafkas_bytes():
    # v3: offset int64, leaderEpoch int32, metadata STRING, commitTimestamp int64
    expected = (struct.pack(">h", 3) + struct.pack(">q", 12345) + struct.pack(">i", 4) + s16("meta")
                + struct.pack(">q", 1_700_000_000_123))
    value = OffsetCommitValue(12345, "meta", 1_700_000_000_123, 4)
    assert offset_commit_value(value) == expected
    assert read_offset_commit_value(expected) == value


def test_offset_commit_value_v1_carries_the_expire_timestamp_and_v0_v2_neither_epoch_nor_expiry():
    v1 = (struct.pack(">h", 1) + struct.pack(">q", 9) + s16("") + struct.pack(">q", 1000) + struct.pack(">q", 2000))
    value = OffsetCommitValue(9, "", 1000, -1, 2000)
    assert offset_commit_value(value) == v1  # MetadataVersion.offsetCommitValueVersion(expireTimestamp) = 1
    assert read_offset_commit_value(v1) == value
    for version in (0, 2):
        raw = struct.pack(">h", version) + struct.pack(">q", 9) + s16("x") + struct.pack(">q", 1000)
        assert offset_commit_value(OffsetCommitValue(9, "x", 1000), version=version) == raw
        assert read_offset_commit_value(raw) == OffsetCommitValue(9, "x", 1000, -1, -1)


def test_offset_commit_value_v4_is_flexible():
    # v4: compact string and an empty tagged-field section at the end
    raw = (struct.pack(">h", 4) + struct.pack(">q", 77) + struct.pack(">i", 2) + compact("m")
           + struct.pack(">q", 5) + b"\x00")
    assert offset_commit_value(OffsetCommitValue(77, "m", 5, 2), version=4) == raw
    assert read_offset_commit_value(raw) == OffsetCommitValue(77, "m", 5, 2)
    # a tagged field (unknown to us) is skipped
    tagged = raw[:-1] + b"\x01" + b"\x05" + b"\x02" + b"ab"
    assert read_offset_commit_value(tagged) == OffsetCommitValue(77, "m", 5, 2)


def member(n: int) -> MemberMetadata:
    return MemberMetadata(f"m-{n}", f"client-{n}", f"/10.0.0.{n}", 45000, b"\x00\x01sub", b"\x00\x01as",
                          300000, None if n % 2 else f"instance-{n}")


def test_group_metadata_key_and_value_v3_are_kafkas_bytes():
    assert group_metadata_key("g1") == struct.pack(">h", 2) + s16("g1")
    assert read_key(group_metadata_key("g1")) == GroupMetadataKey("g1")
    value = GroupMetadataValue("consumer", 5, "range", "m-1", 1_700_000_000_000, (member(1), member(2)))
    expected = (struct.pack(">h", 3) + s16("consumer") + struct.pack(">i", 5) + s16("range") + s16("m-1")
                + struct.pack(">q", 1_700_000_000_000) + struct.pack(">i", 2))
    for m in (member(1), member(2)):
        expected += (s16(m.member_id) + s16(m.group_instance_id) + s16(m.client_id) + s16(m.client_host)
                     + struct.pack(">i", m.rebalance_timeout) + struct.pack(">i", m.session_timeout)
                     + struct.pack(">i", len(m.subscription)) + m.subscription
                     + struct.pack(">i", len(m.assignment)) + m.assignment)
    assert group_metadata_value(value) == expected
    assert read_group_metadata_value(expected) == value


def test_group_metadata_value_old_and_flexible_versions():
    empty = GroupMetadataValue("consumer", 3, None, None, -1, ())
    v0 = struct.pack(">h", 0) + s16("consumer") + struct.pack(">i", 3) + s16(None) + s16(None) + struct.pack(">i", 0)
    assert group_metadata_value(empty, version=0) == v0
    assert read_group_metadata_value(v0) == empty
    m = member(2)
    v4 = (struct.pack(">h", 4) + compact("consumer") + struct.pack(">i", 3) + compact("range") + compact("m-2")
          + struct.pack(">q", 10) + bytes([2])
          + compact(m.member_id) + compact(m.group_instance_id) + compact(m.client_id) + compact(m.client_host)
          + struct.pack(">i", m.rebalance_timeout) + struct.pack(">i", m.session_timeout)
          + bytes([len(m.subscription) + 1]) + m.subscription + bytes([len(m.assignment) + 1]) + m.assignment
          + b"\x00" + b"\x00")
    value = GroupMetadataValue("consumer", 3, "range", "m-2", 10, (m,))
    assert group_metadata_value(value, version=4) == v4
    assert read_group_metadata_value(v4) == value


def test_other_key_versions_are_skipped_not_misread():
    # ConsumerGroupMetadataKey (KIP-848) is key version 3: a consumer group's key, not an offset commit;
    # ShareGroupMemberMetadataKey (10) is not kept
    assert read_key(struct.pack(">h", 3) + s16("g")) == ConsumerGroupKey(3, "g")
    assert read_key(struct.pack(">h", 10) + s16("g") + s16("m")) is None


# -- the store --------------------------------------------------------------------------------------------------
def test_partition_is_javas_hash_code_mod_partitions():
    config = BrokerConfig()
    with LogManager_(config) as (_logs, store):
        # "test".hashCode() == 3556498, "hello".hashCode() == 99162322 (java.lang.String)
        assert store.partition_for("test") == 3556498 % 50
        assert store.partition_for("hello") == 99162322 % 50
        assert store.partition_for("") == 0


class LogManager_:
    """A LogManager with an OffsetStore over it, in a fresh directory per use."""

    counter = 0

    def __init__(self, config: BrokerConfig, directory=None, legacy=None, clock=None) -> None:
        import tempfile
        self.tmp = None
        if directory is None:
            self.tmp = tempfile.TemporaryDirectory()
            directory = self.tmp.name
        self.dir = directory
        self.config = config
        self.legacy = legacy
        self.clock = clock

    def __enter__(self):
        self.logs = LogManager(self.dir, self.config)
        self.logs.startup(background=False)
        kwargs = {"clock": self.clock} if self.clock else {}
        self.store = OffsetStore(self.logs, self.config, legacy_dir=self.legacy, **kwargs)
        self.store.load()
        return self.logs, self.store

    def __exit__(self, *exc):
        self.logs.shutdown()
        if self.tmp is not None:
            self.tmp.cleanup()


CFG = BrokerConfig({"offsets.topic.num.partitions": "3"})


def records_of(logs, store, group):
    plog = logs.get_log(CONSUMER_OFFSETS_TOPIC, store.partition_for(group))
    return list(plog.read_records(plog.log_start_offset))


def test_the_topic_is_created_on_the_first_write_only_with_kafkas_configs(tmp_path):
    with LogManager_(BrokerConfig(), tmp_path) as (logs, store):
        assert not logs.has_topic(CONSUMER_OFFSETS_TOPIC)  # a broker without groups opens no file for it
        store.commit("g", [("t", 0, 5, -1, None)])
        assert logs.topics()[CONSUMER_OFFSETS_TOPIC] == 50
        overrides = logs.topic_overrides(CONSUMER_OFFSETS_TOPIC)
        assert overrides["cleanup.policy"] == "compact" and overrides["segment.bytes"] == "104857600"


def test_commits_are_kafka_records_and_load_back(tmp_path):
    now = [1_700_000_000_000]
    with LogManager_(CFG, tmp_path, clock=lambda: now[0]) as (logs, store):
        store.commit("g", [("t", 0, 5, 3, "meta"), ("t", 1, 8, -1, None)])
        now[0] += 1000
        store.commit("g", [("t", 0, 6, 3, "")])
        store.commit("other", [("u", 0, 1, -1, None)])
        recs = records_of(logs, store, "g")
        assert [r.key for r in recs[:3]] == [offset_commit_key("g", "t", 0), offset_commit_key("g", "t", 1),
                                             offset_commit_key("g", "t", 0)]
        assert recs[0].value == offset_commit_value(OffsetCommitValue(5, "meta", 1_700_000_000_000, 3))
        assert recs[2].timestamp == 1_700_000_001_000
    with LogManager_(CFG, tmp_path) as (_logs, store):
        assert store.offsets[("g", "t", 0)] == (6, 3, "")
        assert store.offsets[("g", "t", 1)][0] == 8
        assert store.offsets[("other", "u", 0)][0] == 1
        assert store.commit_times[("g", "t", 0)] == 1_700_000_001_000


def test_deleted_offsets_and_groups_are_tombstones(tmp_path):
    with LogManager_(CFG, tmp_path) as (logs, store):
        store.commit("g", [("t", 0, 5, -1, None), ("t", 1, 6, -1, None)])
        store.commit("h", [("t", 0, 7, -1, None)])
        store.store_group("h", GroupMetadataValue("consumer", 2, "range", None, 1, ()))
        store.delete_offsets("g", [("t", 1)])
        store.store_group("h", None)
        tail = records_of(logs, store, "g")[-1]
        assert tail.key == offset_commit_key("g", "t", 1) and tail.value is None
        h = records_of(logs, store, "h")
        assert (h[-1].key, h[-1].value) == (group_metadata_key("h"), None)
        assert (offset_commit_key("h", "t", 0), None) in [(r.key, r.value) for r in h]
    with LogManager_(CFG, tmp_path) as (_logs, store):
        assert set(store.offsets) == {("g", "t", 0)}
        assert "h" not in store.groups


def test_transactional_commits_wait_for_their_marker_across_restarts(tmp_path):
    with LogManager_(CFG, tmp_path) as (logs, store):
        store.commit("g", [("t", 0, 1, -1, None)])
        store.txn_commit("g", 1000, 0, [("t", 0, 10, -1, None)])
        store.txn_commit("g", 2000, 3, [("t", 1, 20, -1, None)])
        assert store.offsets[("g", "t", 0)][0] == 1
        batches = list(logs.get_log(CONSUMER_OFFSETS_TOPIC, store.partition_for("g")).read_batches(0))
        assert [(b.is_transactional, b.producer_id) for b in batches] == [(False, -1), (True, 1000), (True, 2000)]
    with LogManager_(CFG, tmp_path) as (logs, store):
        assert set(store.pending) == {1000, 2000}  # open transactions: still pending after the restart
        assert store.offsets[("g", "t", 0)][0] == 1
        store.write_markers(1000, 0, True, {store.partition_for("g")})
        store.write_markers(2000, 3, False, None)
        assert store.offsets[("g", "t", 0)][0] == 10 and ("g", "t", 1) not in store.offsets and not store.pending
        plog = logs.get_log(CONSUMER_OFFSETS_TOPIC, store.partition_for("g"))
        markers = [(b.producer_id, marker_of(b).is_commit) for b in plog.read_batches(0) if b.is_control]
        assert markers == [(1000, True), (2000, False)]
        assert plog.last_stable_offset == plog.log_end_offset
    with LogManager_(CFG, tmp_path) as (_logs, store):  # settled by the markers in the log
        assert store.offsets[("g", "t", 0)][0] == 10 and ("g", "t", 1) not in store.offsets and not store.pending


def test_tombstones_drop_pending_transactional_offsets_of_their_partition(tmp_path):
    """OffsetMetadataManager: OffsetDelete and DeleteGroups write tombstones for the offsets open transactions
    hold pending too (deleteOffsets, deleteAllOffsets), and a tombstone, written or replayed, drops every open
    transaction's pending offset of its partition: the commit marker then leaves none of them."""
    with LogManager_(CFG, tmp_path) as (logs, store):
        store.commit("g", [("t", 0, 1, -1, None)])
        store.txn_commit("g", 1000, 0, [("t", 0, 10, -1, None), ("t", 1, 11, -1, None), ("t", 2, 12, -1, None)])
        store.txn_commit("h", 1000, 0, [("t", 0, 13, -1, None)])
        store.delete_offsets("g", [("t", 1)])  # pending only: a tombstone too
        tail = records_of(logs, store, "g")[-1]
        assert (tail.key, tail.value) == (offset_commit_key("g", "t", 1), None)
        assert set(store.pending[1000]) == {("g", "t", 0), ("g", "t", 2), ("h", "t", 0)}
    with LogManager_(CFG, tmp_path) as (logs, store):  # replayed: the tombstone dropped the pending offset
        assert set(store.pending[1000]) == {("g", "t", 0), ("g", "t", 2), ("h", "t", 0)}
        store.store_group("g", None)
        tombstones = {r.key for r in records_of(logs, store, "g") if r.value is None}
        assert tombstones == {offset_commit_key("g", "t", p) for p in (0, 1, 2)} | {group_metadata_key("g")}
        store.write_markers(1000, 0, True, None)
        assert store.offsets == {("h", "t", 0): (13, -1, "")} and not store.pending
    with LogManager_(CFG, tmp_path) as (_logs, store):
        assert store.offsets == {("h", "t", 0): (13, -1, "")} and not store.pending


def test_history_leaves_aborted_commits_out(tmp_path):
    now = [1000]
    with LogManager_(CFG, tmp_path, clock=lambda: now[0]) as (_logs, store):
        store.commit("g", [("t", 0, 1, -1, None)])
        now[0] = 2000
        store.txn_commit("g", 7, 0, [("t", 0, 99, -1, None)])
        store.write_markers(7, 0, False, None)
        now[0] = 3000
        store.commit("g", [("t", 0, 3, -1, None)])
        assert [(e.timestamp, e.offset) for e in store.history("g")] == [(1000, 1), (3000, 3)]


def legacy_frame(record: dict) -> bytes:
    body = json.dumps(record, separators=(",", ":")).encode()
    return struct.pack(">II", len(body), zlib.crc32(body)) + body


def test_the_old_offsets_file_is_migrated_once(tmp_path):
    state = tmp_path / "__consumer_offsets-state"
    state.mkdir()
    old = [{"g": "g", "t": "t", "p": 0, "o": 5, "e": 2, "m": "x"}, {"g": "g", "t": "t", "p": 1, "o": 9, "e": -1, "m": None},
           {"g": "h", "t": "u", "p": 0, "o": 4, "e": -1, "m": None}, {"g": "g", "t": "t", "p": 1, "o": None},
           {"g": "g", "t": "t", "p": 0, "o": 6, "e": 2, "m": "y"},
           {"g": "g", "t": "t", "p": 2, "o": 50, "e": -1, "m": None, "pid": 3},
           {"g": "g", "t": "t", "p": 3, "o": 60, "e": -1, "m": None, "pid": 4}, {"pid": 4, "commit": True}]
    (state / LEGACY_FILE).write_bytes(b"".join(legacy_frame(r) for r in old) + b"\x00\x00\x01")  # torn tail

    async def run():
        coord = GroupCoordinator(state, CFG, logs)
        await coord.start()
        got = coord.fetch_offsets("g", None), coord.fetch_offsets("h", None), coord.has_pending("g", "t", 2)
        await coord.stop()
        return got

    logs = LogManager(tmp_path, CFG)
    logs.startup(background=False)
    g, h, pending = asyncio.run(run())
    assert g == {("t", 0): (6, 2, "y"), ("t", 3): (60, -1, "")} and h == {("u", 0): (4, -1, "")} and pending
    assert not (state / LEGACY_FILE).exists() and (state / (LEGACY_FILE + ".migrated")).exists()
    logs.shutdown()
    logs = LogManager(tmp_path, CFG)  # again: from the topic, nothing migrated twice
    logs.startup(background=False)
    g2, h2, pending2 = asyncio.run(run())
    assert (g2, h2, pending2) == (g, h, pending)
    assert len(records_of(logs, OffsetStore(logs, CFG), "h")) == 1
    logs.shutdown()


def test_retention_tombstones_old_offsets_of_groups_without_members(tmp_path):
    now = [1_000_000]
    with LogManager_(CFG, tmp_path, clock=lambda: now[0]) as (logs, store):
        store.commit("idle", [("t", 0, 1, -1, None)])
        store.commit("busy", [("t", 0, 2, -1, None)])
        now[0] += 60_000
        store.commit("idle", [("t", 1, 3, -1, None)])
        assert store.expire(now[0] + 1, 60_000, lambda g: g == "busy") == 1
        assert set(store.offsets) == {("idle", "t", 1), ("busy", "t", 0)}
        assert records_of(logs, store, "idle")[-1].value is None
    with LogManager_(CFG, tmp_path) as (_logs, store):
        assert set(store.offsets) == {("idle", "t", 1), ("busy", "t", 0)}


def test_a_coordinator_restores_group_generations(tmp_path):
    async def run(first: bool):
        coord = GroupCoordinator(tmp_path / "state", CFG)
        await coord.start()
        if first:
            coord.store.store_group("g", GroupMetadataValue("consumer", 7, "range", "m", 1, ()))
        gen = coord.groups["g"].generation if "g" in coord.groups else None
        await coord.stop()
        return gen

    asyncio.run(run(True))
    assert asyncio.run(run(False)) == 7


def test_a_coordinator_restores_classic_members(tmp_path):
    """ClassicGroup.fromRecord: the members of the last GroupMetadata record come back (Stable), so one that
    goes on with its generation after a restart is known; an empty group comes back Empty."""
    from chronolog.errors import ErrorCode
    from chronolog.records.group_records import MemberMetadata

    async def run(first: bool):
        coord = GroupCoordinator(tmp_path / "state", CFG)
        await coord.start()
        if first:
            member = MemberMetadata("m-1", "cid", "/127.0.0.1", 10000, b"sub", b"assigned", 20000, "inst-1")
            coord.store.store_group("g", GroupMetadataValue("consumer", 7, "range", "m-1", 1, (member,)))
            coord.store.store_group("e", GroupMetadataValue("consumer", 3, None, None, 1, ()))
            await coord.stop()
            return None
        g, e = coord.groups["g"], coord.groups["e"]
        out = (g.state, g.generation, g.leader, g.protocol_name, e.state,
               coord.heartbeat("g", 7, "m-1"), coord.heartbeat("g", 6, "m-1"),
               coord.describe("g")["members"][0]["member_assignment"], g.members["m-1"].group_instance_id)
        await coord.stop()
        return out

    asyncio.run(run(True))
    assert asyncio.run(run(False)) == ("Stable", 7, "m-1", "range", "Empty", 0, ErrorCode.ILLEGAL_GENERATION,
                                       b"assigned", "inst-1")


@pytest.mark.parametrize("value", [b"", b"\x00", struct.pack(">h", 9) + b"\x00" * 8])
def test_unreadable_values_are_refused_with_kafkas_error(value):
    from chronolog.errors import CorruptMessageError
    with pytest.raises(CorruptMessageError):
        read_offset_commit_value(value)


def test_a_full_disk_at_the_topics_creation_answers_not_coordinator_and_keeps_nothing(tmp_path, monkeypatch):
    """The first group write creates the topic; on a full disk nothing of it stays, the commit is answered
    NOT_COORDINATOR (the client retries), and the next commit once there is space creates it and is kept."""
    import errno

    from chronolog.errors import ErrorCode
    from tests.storage.test_write_faults import Faults

    async def run():
        coord = GroupCoordinator(tmp_path / "state", CFG)
        await coord.start()
        faults = Faults(errno.ENOSPC, 1, True).install(monkeypatch)
        first = coord.commit("g", -1, "", [("t", 0, 5, -1, None)])
        made = coord.store.exists()
        faults.on = False
        second = coord.commit("g", -1, "", [("t", 0, 6, -1, None)])
        await coord.stop()
        monkeypatch.undo()
        again = GroupCoordinator(tmp_path / "state", CFG)
        await again.start()
        got = again.fetch_offsets("g", [("t", 0)])
        await again.stop()
        return first, made, faults.hits, second, got

    first, made, hits, second, got = asyncio.run(run())
    assert hits > 0 and first == ErrorCode.NOT_COORDINATOR and not made
    assert second == 0 and got[("t", 0)][0] == 6
