"""KIP-848 consumer groups (`group.protocol=consumer`) driven by librdkafka, beside classic groups, and the
cluster view of Kafka 4.x admin clients. Mirrors the group coordinator's `GroupMetadataManagerTest`
(consumerGroupHeartbeat: joining, leaving, revocation before reassignment, offset commits with member epochs;
classic/consumer conversion of empty groups) and `KafkaApisTest.testDescribeCluster`."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.brokerproc import BrokerProcess
from tests.waiting import poll_until

pytestmark = pytest.mark.compat

CONFIGS = {"group.consumer.heartbeat.interval.ms": "300", "group.consumer.session.timeout.ms": "6000"}


@pytest.fixture
def kbroker(tmp_path):
    proc = BrokerProcess(tmp_path / "data", CONFIGS).start()
    yield proc
    proc.stop()


def _topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the answer came
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)


def _produce(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for part in range(partitions):
        for i in range(per_partition):
            p.produce(topic, value=b"%d-%d" % (part, i), partition=part)
    assert p.flush(30) == 0


def _consumer(bootstrap: str, group: str, protocol: str = "consumer", **extra) -> Consumer:
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
            "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    if protocol == "classic":
        conf["session.timeout.ms"] = 6000
    conf.update(extra)
    return Consumer(conf)


def _poll_all(consumers: list[Consumer], until, timeout: float = 30.0) -> dict[int, list]:
    """Polls every consumer in turn until `until(received)` holds; received: consumer index -> messages."""
    received: dict[int, list] = {i: [] for i in range(len(consumers))}
    deadline = time.monotonic() + timeout
    while not until(received) and time.monotonic() < deadline:
        for i, c in enumerate(consumers):
            m = c.poll(0.1)
            if m is not None and not m.error():
                received[i].append(m)
    return received


def _parts(c: Consumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


def test_consumer_group_heartbeat_two_members_leave_and_commits(kbroker):
    """consumerGroupHeartbeat: two members split four partitions with no overlap (the second member's share is
    revoked from the first before it is handed over); commits carry the member epoch; when one leaves, the
    other gets every partition and resumes from the committed offsets."""
    _topic(kbroker.bootstrap, "kip848", 4)
    _produce(kbroker.bootstrap, "kip848", 4, 5)
    a, b = _consumer(kbroker.bootstrap, "g848"), _consumer(kbroker.bootstrap, "g848")
    a.subscribe(["kip848"])
    b.subscribe(["kip848"])
    seen = _poll_all([a, b], lambda r: len(_parts(a)) == 2 and len(_parts(b)) == 2
                     and len({(m.partition(), m.offset()) for msgs in r.values() for m in msgs}) >= 20)
    assert _parts(a) | _parts(b) == {0, 1, 2, 3} and not _parts(a) & _parts(b)
    # Every record is read: a may have read a partition before b joined and it moved to b (after a revoked
    # it); with nothing committed b reads it again from the start, so records may come twice, none is lost.
    pairs = [(m.partition(), m.offset()) for msgs in seen.values() for m in msgs]
    assert len(pairs) >= 20 and set(pairs) == {(p, o) for p in range(4) for o in range(5)}
    for c in (a, b):  # each member commits its own partitions' end (offset 5), with its member epoch
        c.commit(offsets=[TopicPartition("kip848", p, 5) for p in _parts(c)], asynchronous=False)

    admin = AdminClient({"bootstrap.servers": kbroker.bootstrap})
    desc = admin.describe_consumer_groups(["g848"])["g848"].result(15)
    assert len(desc.members) == 2 and str(desc.state).upper().endswith("STABLE")
    assert sorted(p.partition for m in desc.members for p in m.assignment.topic_partitions) == [0, 1, 2, 3]

    b.close()  # leaves the group (member epoch -1): a gets b's partitions
    assert poll_until(lambda: (a.poll(0.1), len(_parts(a)) == 4)[1], 30)
    _produce(kbroker.bootstrap, "kip848", 4, 1)
    more = _poll_all([a], lambda r: len(r[0]) >= 4)
    assert sorted((m.partition(), m.offset()) for m in more[0]) == [(p, 5) for p in range(4)]
    committed = a.committed([TopicPartition("kip848", p) for p in range(4)], timeout=10)
    assert [tp.offset for tp in committed] == [5, 5, 5, 5]
    a.close()


def test_consumer_group_range_assignor_and_describe(kbroker):
    """The `range` server assignor (RangeAssignorTest): co-partitioned topics land on the same member."""
    _topic(kbroker.bootstrap, "ra", 2)
    _topic(kbroker.bootstrap, "rb", 2)
    a = _consumer(kbroker.bootstrap, "grange", **{"group.remote.assignor": "range"})
    b = _consumer(kbroker.bootstrap, "grange", **{"group.remote.assignor": "range"})
    a.subscribe(["ra", "rb"])
    b.subscribe(["ra", "rb"])

    def settled() -> bool:
        a.poll(0.05)
        b.poll(0.05)
        return len(a.assignment()) == 2 and len(b.assignment()) == 2

    assert poll_until(settled, 30)
    for c in (a, b):
        assert len({tp.partition for tp in c.assignment()}) == 1  # ra-N and rb-N together
    a.close()
    b.close()


def test_mixed_group_classic_member_in_consumer_group(kbroker):
    """As Kafka 4.x (classicGroupJoinToConsumerGroup, whatever the migration policy): offsets committed by a
    classic group are read by the consumer group that takes the (empty) id over; a classic librdkafka
    consumer then joins that non-empty consumer group and the server-side assignor shares the partitions
    between the two kinds of member (the consumer-protocol member revokes first); each reads and commits its
    own; when the classic member leaves its partition goes back; once the group is empty a classic consumer
    takes the id back, offsets and all."""
    _topic(kbroker.bootstrap, "mixed", 2)
    _produce(kbroker.bootstrap, "mixed", 2, 3)
    classic = _consumer(kbroker.bootstrap, "gmix", "classic")
    classic.subscribe(["mixed"])
    got = _poll_all([classic], lambda r: len(r[0]) >= 6)
    assert len(got[0]) == 6
    classic.commit(offsets=[TopicPartition("mixed", p, 2) for p in range(2)], asynchronous=False)
    classic.close()

    modern = _consumer(kbroker.bootstrap, "gmix")
    modern.subscribe(["mixed"])
    resumed = _poll_all([modern], lambda r: len(r[0]) >= 2)
    assert sorted((m.partition(), m.offset()) for m in resumed[0]) == [(0, 2), (1, 2)]

    mixed = _consumer(kbroker.bootstrap, "gmix", "classic")
    mixed.subscribe(["mixed"])

    def shared() -> bool:
        modern.poll(0.05)
        mixed.poll(0.05)
        return len(_parts(modern)) == 1 and len(_parts(mixed)) == 1
    assert poll_until(shared, 30), (_parts(modern), _parts(mixed))
    assert _parts(modern) | _parts(mixed) == {0, 1}
    _produce(kbroker.bootstrap, "mixed", 2, 2)  # offsets 3 and 4 of each partition
    # a member may first read again what was fetched but not committed before the move (offset 2): only the
    # new records count
    read = _poll_all([modern, mixed], lambda r: all(sum(m.offset() >= 3 for m in r[i]) >= 2 for i in (0, 1)))
    for i, c in enumerate((modern, mixed)):
        (part,) = _parts(c)
        assert sorted((m.partition(), m.offset()) for m in read[i] if m.offset() >= 3) == [(part, 3), (part, 4)]
        c.commit(offsets=[TopicPartition("mixed", part, 5)], asynchronous=False)
    mixed.close()
    assert poll_until(lambda: (modern.poll(0.05), _parts(modern) == {0, 1})[1], 30)
    modern.close()

    again = _consumer(kbroker.bootstrap, "gmix", "classic")
    again.subscribe(["mixed"])
    assert poll_until(lambda: (again.poll(0.1), len(again.assignment()) == 2)[1], 30)
    committed = again.committed([TopicPartition("mixed", p) for p in range(2)], timeout=10)
    assert [tp.offset for tp in committed] == [5, 5]
    again.close()


def test_describe_cluster(kbroker):
    """KafkaApisTest.testDescribeCluster: the admin client's describe_cluster (DescribeCluster)."""
    admin = AdminClient({"bootstrap.servers": kbroker.bootstrap})
    cluster = admin.describe_cluster(request_timeout=15).result(15)
    assert cluster.cluster_id == "chronolog-cluster" or cluster.cluster_id
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(1, "127.0.0.1", kbroker.port)] or \
        [(n.host, n.port) for n in cluster.nodes] == [("127.0.0.1", kbroker.port)]
    assert cluster.controller is not None and cluster.controller.id == cluster.nodes[0].id
    with_ops = admin.describe_cluster(include_authorized_operations=True, request_timeout=15).result(15)
    assert {op.name for op in with_ops.authorized_operations} == {
        "CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "ALTER", "DESCRIBE"}
    _topic(kbroker.bootstrap, "described", 2)
    topics = admin.describe_topics(TopicCollection(["described"]), include_authorized_operations=True)
    desc = topics["described"].result(15)
    assert [p.id for p in desc.partitions] == [0, 1]
    assert {op.name for op in desc.authorized_operations} >= {"READ", "WRITE", "DESCRIBE", "DELETE"}


@pytest.mark.parametrize("how", ["restart", "sigkill"])
def test_consumer_group_survives_broker_restart(kbroker, how):
    """The group's records in __consumer_offsets (GroupMetadataManager.replay): after a clean restart or a SIGKILL
    the member's heartbeats with its member id and epoch go on (no UNKNOWN_MEMBER_ID / FENCED_MEMBER_EPOCH, so
    librdkafka neither revokes nor loses its partitions), its assignment stays, its committed position is read
    back with its epoch (OffsetFetch v9), and it reads on from where it was."""
    _topic(kbroker.bootstrap, "restart", 2)
    _produce(kbroker.bootstrap, "restart", 2, 2)
    events: list[str] = []
    c = _consumer(kbroker.bootstrap, "grestart")
    c.subscribe(["restart"], on_revoke=lambda _c, ps: events.append("revoke") if ps else None,
                on_lost=lambda _c, ps: events.append("lost"))
    got = _poll_all([c], lambda r: len(r[0]) >= 4)
    assert len(got[0]) == 4 and _parts(c) == {0, 1}
    c.commit(offsets=[TopicPartition("restart", 0, 2), TopicPartition("restart", 1, 1)], asynchronous=False)
    member = c.memberid()
    if how == "sigkill":
        kbroker.kill()
        kbroker.start()
    else:
        kbroker.restart()
    _produce(kbroker.bootstrap, "restart", 2, 1)
    more = _poll_all([c], lambda r: len(r[0]) >= 2, timeout=45)
    assert sorted((m.partition(), m.offset()) for m in more[0]) == [(0, 2), (1, 2)]
    # a few heartbeats later nothing was revoked or lost, and the member is the same one
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        c.poll(0.1)
    assert events == [] and c.memberid() == member and _parts(c) == {0, 1}
    committed = c.committed([TopicPartition("restart", 0), TopicPartition("restart", 1)], timeout=15)
    assert [(tp.partition, tp.offset) for tp in committed] == [(0, 2), (1, 1)]
    admin = AdminClient({"bootstrap.servers": kbroker.bootstrap})
    desc = admin.describe_consumer_groups(["grestart"])["grestart"].result(15)
    assert [m.member_id for m in desc.members] == [member]
    c.close()


def test_consumer_group_regex_subscription(kbroker):
    """librdkafka's `^`-prefixed subscription under group.protocol=consumer sends SubscribedTopicRegex; the
    broker resolves it, and a matching topic created later is assigned too."""
    _topic(kbroker.bootstrap, "rx-a", 1)
    _topic(kbroker.bootstrap, "other", 1)
    c = _consumer(kbroker.bootstrap, "gregex", **{"topic.metadata.refresh.interval.ms": 1000})
    c.subscribe(["^rx-.*"])
    assert poll_until(lambda: (c.poll(0.1), {tp.topic for tp in c.assignment()} == {"rx-a"})[1], 30)
    _topic(kbroker.bootstrap, "rx-b", 1)
    assert poll_until(lambda: (c.poll(0.1), {tp.topic for tp in c.assignment()} == {"rx-a", "rx-b"})[1], 30)
    c.close()


def test_static_member_comes_back(kbroker):
    """librdkafka with group.instance.id under group.protocol=consumer: close() is a static leave (epoch -2),
    and a new consumer with the same instance id takes the same partitions back without a new group epoch."""
    _topic(kbroker.bootstrap, "static", 4)
    conf = {"group.instance.id": "worker-1"}
    a = _consumer(kbroker.bootstrap, "gstatic", **conf)
    b = _consumer(kbroker.bootstrap, "gstatic", **{"group.instance.id": "worker-2"})
    a.subscribe(["static"])
    b.subscribe(["static"])

    def settled() -> bool:
        a.poll(0.05)
        b.poll(0.05)
        return len(_parts(a)) == 2 and len(_parts(b)) == 2
    assert poll_until(settled, 30)
    mine = _parts(a)
    admin = AdminClient({"bootstrap.servers": kbroker.bootstrap})
    before = admin.describe_consumer_groups(["gstatic"])["gstatic"].result(15)
    a.close()
    again = _consumer(kbroker.bootstrap, "gstatic", **conf)
    again.subscribe(["static"])
    assert poll_until(lambda: (again.poll(0.1), b.poll(0.05), _parts(again) == mine)[2], 30)
    after = admin.describe_consumer_groups(["gstatic"])["gstatic"].result(15)
    assert sorted(m.group_instance_id for m in after.members) == ["worker-1", "worker-2"]
    assert len(before.members) == len(after.members) == 2
    again.close()
    b.close()


def test_consumer_group_sigkilled_mid_rebalance(kbroker):
    """SIGKILLs while a second member joins (its records and the first member's revocation in flight), twice:
    each time the broker comes back with a group that replays, both librdkafka members go on with no fatal
    error (no GROUP_ID_NOT_FOUND), end with disjoint partitions covering the topic, and every record
    produced is read by one of them."""
    _topic(kbroker.bootstrap, "crash848", 4)
    errors: list = []
    conf = {"error_cb": lambda e: errors.append(e) if e.fatal() else None}
    a = _consumer(kbroker.bootstrap, "gcrash", **conf)
    a.subscribe(["crash848"])
    seen: set = set()

    def drain(consumers, until, timeout=60.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for c in consumers:
                m = c.poll(0.05)
                if m is not None and not m.error():
                    seen.add((m.partition(), m.offset()))
            if until():
                return True
        return False
    _produce(kbroker.bootstrap, "crash848", 4, 3)
    assert drain([a], lambda: len(seen) == 12)
    b = None
    for round_ in range(2):
        if b is None:
            b = _consumer(kbroker.bootstrap, "gcrash", **conf)
            b.subscribe(["crash848"])
        drain([a, b], lambda b=b: bool(b.assignment()) or len(_parts(a)) < 4, timeout=15)  # rebalance under way
        kbroker.kill()
        kbroker.start()
        _produce(kbroker.bootstrap, "crash848", 4, 3)
        total = 12 * (round_ + 2)
        assert drain([a, b], lambda b=b, total=total: len(seen) == total and len(_parts(a)) + len(_parts(b)) == 4
                     and not _parts(a) & _parts(b)), (len(seen), _parts(a), _parts(b))
    assert errors == []
    assert _parts(a) | _parts(b) == {0, 1, 2, 3}
    a.close()
    b.close()
