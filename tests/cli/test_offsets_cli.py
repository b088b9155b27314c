"""`dump-log --offsets-decoder`, `group-history`, `reset-offsets --to-group-position-at` and `lag`: over a data
dir written with commit times we control, and over a real broker with confluent-kafka's commits."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from chronolog.config import BrokerConfig
from chronolog.records.group_records import GroupMetadataValue, MemberMetadata
from chronolog.server.offsets_topic import OffsetStore
from chronolog.storage import LogManager
from tests.brokerproc import BrokerProcess
from tests.cli.conftest import assert_one_line_error, chronolog
from tests.waiting import poll_until

T0 = 1_700_000_000_000
SUB = b"\x00\x01" + b"\x00\x00\x00\x01\x00\x01t" + b"\xff\xff\xff\xff" + b"\x00\x00\x00\x00"  # v1: [t], no owned
ASSIGN = b"\x00\x01" + b"\x00\x00\x00\x01\x00\x01t" + b"\x00\x00\x00\x01\x00\x00\x00\x00" + b"\xff\xff\xff\xff"


@pytest.fixture
def offsets_dir(tmp_path):
    """A data dir whose __consumer_offsets (1 partition) holds, at known times: a commit, a group metadata
    record, a transactional commit and its COMMIT marker, an aborted one, a tombstone."""
    config = BrokerConfig({"offsets.topic.num.partitions": "1"})
    logs = LogManager(tmp_path / "data", config)
    logs.startup(background=False)
    now = [T0]
    store = OffsetStore(logs, config, clock=lambda: now[0])
    store.commit("g", [("t", 0, 5, 2, "meta"), ("t", 1, 50, -1, None)])
    now[0] = T0 + 1000
    store.store_group("g", GroupMetadataValue("consumer", 1, "range", "m1", T0 + 1000, (
        MemberMetadata("m1", "c", "/127.0.0.1", 45000, SUB, ASSIGN, 300000, None),)))
    now[0] = T0 + 2000
    store.txn_commit("g", 9, 0, [("t", 0, 7, -1, None)])
    store.write_markers(9, 0, True, None)
    now[0] = T0 + 3000
    store.txn_commit("g", 10, 0, [("t", 0, 99, -1, None)])
    store.write_markers(10, 0, False, None)
    now[0] = T0 + 4000
    store.delete_offsets("g", [("t", 1)])
    now[0] = T0 + 5000
    store.commit("other", [("u", 0, 3, -1, None)])
    logs.shutdown()
    return tmp_path / "data"


def test_dump_log_decodes_offsets_records_as_kafka_does(offsets_dir):
    r = chronolog("dump-log", "--offsets-decoder", str(offsets_dir / "__consumer_offsets-0" / "00000000000000000000.log"))
    assert r.rc == 0, r.err
    lines = [ln for ln in r.out.splitlines() if ln.startswith("| ")]
    key = '{"type":"1","data":{"group":"g","topic":"t","partition":0}}'
    assert lines[0] == (f"| offset: 0 CreateTime: {T0} key: {key} payload: "
                        f'{{"version":"3","data":{{"offset":5,"leaderEpoch":2,"metadata":"meta","commitTimestamp":{T0}}}}}')
    assert lines[1].endswith('payload: {"version":"3","data":{"offset":50,"leaderEpoch":-1,"metadata":"",'
                             f'"commitTimestamp":{T0}}}}}')
    assert lines[2] == (f'| offset: 2 CreateTime: {T0 + 1000} key: {{"type":"2","data":{{"group":"g"}}}} payload: '
                        '{"version":"3","data":{"protocolType":"consumer","generation":1,"protocol":"range",'
                        f'"leader":"m1","currentStateTimestamp":{T0 + 1000},"members":[{{"memberId":"m1",'
                        '"groupInstanceId":null,"clientId":"c","clientHost":"/127.0.0.1","rebalanceTimeout":300000,'
                        '"sessionTimeout":45000,"subscription":{"topics":["t"],"userData":null,"ownedPartitions":[]},'
                        '"assignment":{"assignedPartitions":[{"topic":"t","partitions":[0]}],"userData":null}}]}}')
    assert "endTxnMarker: COMMIT coordinatorEpoch: 0" in r.out and "endTxnMarker: ABORT coordinatorEpoch: 0" in r.out
    tombstone = '{"type":"1","data":{"group":"g","topic":"t","partition":1}}'
    assert f"| offset: 7 CreateTime: {T0 + 4000} key: {tombstone} payload: <DELETE>" in lines
    plain = chronolog("dump-log", "--print-data", str(offsets_dir / "__consumer_offsets-0" / "00000000000000000000.log"))
    assert '"type"' not in plain.out  # without the decoder the bytes are printed as they are


def test_group_history_over_a_data_dir(offsets_dir):
    def at(when: int, *extra: str) -> dict:
        r = chronolog("group-history", "--group", "g", "--at", str(when), "--data-dir", str(offsets_dir), "--json",
                      *extra)
        assert r.rc == 0, r.err
        return {(p["topic"], p["partition"]): (p["offset"], p["committed_at"]) for p in json.loads(r.out)["partitions"]}

    assert at(T0 - 1) == {}
    assert at(T0) == {("t", 0): (5, T0), ("t", 1): (50, T0)}
    assert at(T0 + 2500) == {("t", 0): (7, T0 + 2000), ("t", 1): (50, T0)}  # the committed transaction
    assert at(T0 + 3500) == {("t", 0): (7, T0 + 2000), ("t", 1): (50, T0)}  # the aborted one never counts
    assert at(T0 + 4000) == {("t", 0): (7, T0 + 2000)}                     # the tombstone
    assert at(T0 + 4000, "--topic", "nope") == {}
    r = chronolog("group-history", "--group", "g", "--data-dir", str(offsets_dir), "--json")
    assert [(c["time"], c["partition"], c["offset"]) for c in json.loads(r.out)["commits"]] == [
        (T0, 0, 5), (T0, 1, 50), (T0 + 2000, 0, 7), (T0 + 4000, 1, None)]
    text = chronolog("group-history", "--group", "g", "--at", "2023-11-14T22:13:22.500Z", "--data-dir",
                     str(offsets_dir)).out
    assert "t" in text and "7" in text and "50" in text


def test_group_history_without_the_topic_is_one_clear_line(tmp_path):
    LogManager(tmp_path / "empty", BrokerConfig()).startup(background=False)
    r = chronolog("group-history", "--group", "g", "--at", "1h ago", "--data-dir", str(tmp_path / "empty"))
    assert_one_line_error(r, "__consumer_offsets")


# -- against a broker ---------------------------------------------------------------------------------------------
def _wait_past(ms: int) -> int:
    """The wall clock in ms once it is past `ms` (polled; commit records carry the broker's clock)."""
    assert poll_until(lambda: int(time.time() * 1000) > ms, 5, interval=0.001)
    return int(time.time() * 1000)


def test_reset_to_the_groups_position_at_a_time_and_lag(tmp_path):
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        bs = broker.bootstrap
        admin = AdminClient({"bootstrap.servers": bs})  # kept alive until the answer came
        admin.create_topics([NewTopic("t", 2)])["t"].result(15)
        producer = Producer({"bootstrap.servers": bs, "linger.ms": 0})
        for i in range(20):  # record times we control: one second apart
            producer.produce("t", value=b"v%d" % i, partition=i % 2, timestamp=T0 + i * 1000)
        assert producer.flush(15) == 0
        member = Consumer({"bootstrap.servers": bs, "group.id": "app", "enable.auto.commit": False,
                           "session.timeout.ms": 6000, "auto.offset.reset": "earliest"})
        member.subscribe(["t"])
        assert poll_until(lambda: member.poll(0.2) is not None or bool(member.assignment()), 30)
        member.commit(offsets=[TopicPartition("t", 0, 4), TopicPartition("t", 1, 3)], asynchronous=False)
        good = _wait_past(int(time.time() * 1000))  # after the good commit, before the bad deploy's
        _wait_past(good)
        member.commit(offsets=[TopicPartition("t", 0, 10), TopicPartition("t", 1, 10)], asynchronous=False)

        refused = chronolog("reset-offsets", "--group", "app", "--topic", "t", "--to-group-position-at", str(good),
                            "--execute", "--bootstrap-server", bs)
        assert_one_line_error(refused, "active member")
        member.close()

        history = chronolog("group-history", "--group", "app", "--at", str(good), "--bootstrap-server", bs, "--json")
        assert history.rc == 0, history.err
        assert {(p["partition"], p["offset"]) for p in json.loads(history.out)["partitions"]} == {(0, 4), (1, 3)}

        lag = chronolog("lag", "--group", "app", "--bootstrap-server", bs, "--json")
        assert lag.rc == 0, lag.err
        rows = {r["partition"]: r for r in json.loads(lag.out)["partitions"]}
        # partition 0 holds records 0,2,..,18 (offsets 0-9): committed 10 = at the end, no lag
        assert (rows[0]["lag"], rows[0]["lag_ms"]) == (0, 0)
        assert (rows[1]["lag"], rows[1]["lag_ms"]) == (0, 0)

        assert poll_until(lambda: "EMPTY" in chronolog("groups", "list", "--bootstrap-server", bs).out, 30)
        reset = chronolog("reset-offsets", "--group", "app", "--topic", "t", "--to-group-position-at", str(good),
                          "--execute", "--bootstrap-server", bs, "--json")
        assert reset.rc == 0, reset.err
        assert {(r["partition"], r["current"], r["new"]) for r in json.loads(reset.out)["partitions"]} == {
            (0, 10, 4), (1, 10, 3)}
        lag = json.loads(chronolog("lag", "--group", "app", "--bootstrap-server", bs, "--json").out)
        rows = {r["partition"]: r for r in lag["partitions"]}
        # partition 0: offset 4 is record 8 (T0+8s), its last is record 18 (T0+18s): 6 records, 10 s behind
        assert (rows[0]["committed"], rows[0]["lag"], rows[0]["lag_ms"]) == (4, 6, 10_000)
        assert (rows[1]["committed"], rows[1]["lag"], rows[1]["lag_ms"]) == (3, 7, 12_000)
        text = chronolog("lag", "--group", "app", "--bootstrap-server", bs).out
        assert "10.000s" in text and "12.000s" in text
    finally:
        broker.stop()


def test_dump_log_decodes_consumer_group_records(tmp_path):
    """KIP-848 records (key types 3-8) print through their schemas' JSON converters (GroupCoordinatorRecordSerde
    and the generated *JsonConverter): keys with groupId/memberId, topic ids as Uuid.toString, a classic
    member's classicMemberMetadata, tombstones as <DELETE>."""
    import uuid

    from chronolog.records import group_records as gr
    config = BrokerConfig({"offsets.topic.num.partitions": "1"})
    logs = LogManager(tmp_path / "data", config)
    logs.startup(background=False)
    store = OffsetStore(logs, config, clock=lambda: T0)
    tid = uuid.UUID(bytes=bytes(range(16)))
    classic = gr.ClassicMemberMetadata(45000, (("range", b"\x00\x01"),))
    store.write_records("g", [
        (gr.consumer_member_key(5, "g", "m1"), gr.member_metadata_value(gr.ConsumerGroupMemberValue(
            None, "r1", "c", "/127.0.0.1", ("t",), None, 300000, "uniform", classic))),
        (gr.consumer_group_key(4, "g"), gr.partition_metadata_value([gr.TopicMetadata(tid, "t", 2)])),
        (gr.consumer_group_key(3, "g"), gr.consumer_group_metadata_value(4)),
        (gr.consumer_member_key(7, "g", "m1"), gr.target_assignment_member_value(((tid, (0, 1)),))),
        (gr.consumer_group_key(6, "g"), gr.target_assignment_metadata_value(4)),
        (gr.consumer_member_key(8, "g", "m1"), gr.current_assignment_value(
            gr.CurrentMemberAssignment(4, 3, 2, ((tid, (0,)),), ()))),
        (gr.consumer_member_key(8, "g", "m0"), None),
    ])
    logs.shutdown()
    r = chronolog("dump-log", "--offsets-decoder", str(tmp_path / "data" / "__consumer_offsets-0" /
                                                        "00000000000000000000.log"))
    assert r.rc == 0, r.err
    payloads = [ln.split(" key: ", 1)[1] for ln in r.out.splitlines() if ln.startswith("| ")]
    tid_s = "AAECAwQFBgcICQoLDA0ODw"
    assert payloads == [
        '{"type":"5","data":{"groupId":"g","memberId":"m1"}} payload: {"version":"0","data":{"instanceId":null,'
        '"rackId":"r1","clientId":"c","clientHost":"/127.0.0.1","subscribedTopicNames":["t"],'
        '"subscribedTopicRegex":null,"rebalanceTimeoutMs":300000,"serverAssignor":"uniform",'
        '"classicMemberMetadata":{"sessionTimeoutMs":45000,"supportedProtocols":[{"name":"range","metadata":"AAE="}]}}}',
        '{"type":"4","data":{"groupId":"g"}} payload: {"version":"0","data":{"topics":[{"topicId":"' + tid_s + '",'
        '"topicName":"t","numPartitions":2,"partitionMetadata":[]}]}}',
        '{"type":"3","data":{"groupId":"g"}} payload: {"version":"0","data":{"epoch":4}}',
        '{"type":"7","data":{"groupId":"g","memberId":"m1"}} payload: {"version":"0","data":{"topicPartitions":'
        '[{"topicId":"' + tid_s + '","partitions":[0,1]}]}}',
        '{"type":"6","data":{"groupId":"g"}} payload: {"version":"0","data":{"assignmentEpoch":4}}',
        '{"type":"8","data":{"groupId":"g","memberId":"m1"}} payload: {"version":"0","data":{"memberEpoch":4,'
        '"previousMemberEpoch":3,"state":2,"assignedPartitions":[{"topicId":"' + tid_s + '","partitions":[0]}],'
        '"partitionsPendingRevocation":[]}}',
        '{"type":"8","data":{"groupId":"g","memberId":"m0"}} payload: <DELETE>',
    ]
