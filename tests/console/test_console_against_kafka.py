"""The console in front of Apache Kafka 4.4, the way out of issue 38: loaded with the same records and the same
commits, a console over Kafka answers every page as a console over chronolog does (topics, timelines with
estimated and exact counts, a window's records, groups with lag, a rewind to a time). Over a 3-node cluster
losing a node, each page answers exactly, or with one line saying what failed (502/503); never a partial
window presented as complete."""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from tests.console.conftest import ConsoleProcess, csrf_of, get

BASE = 1_700_000_000_000  # 2023-11-14T22:13:20Z: Kafka keeps it only with retention.ms=-1
PARTS = 3
PER_PART = 240
TOPIC = f"cw-{uuid.uuid4().hex[:8]}"
REWOUND = f"rw-{uuid.uuid4().hex[:8]}"  # the group the rewind test moves
STILL = f"st-{uuid.uuid4().hex[:8]}"    # a group never moved: the cluster test compares it


def stamp(p: int, i: int) -> int:
    """Record i of partition p: one a second, every seventh 90 s late (stored after newer records)."""
    return BASE + p * 333 + i * 1000 - (90_000 if i % 7 == 3 and i > 90 else 0)


STAMPS = {p: [stamp(p, i) for i in range(PER_PART)] for p in range(PARTS)}
COMMITS = {p: 40 + 50 * p for p in range(PARTS)}  # each partition behind by a different lag


LOADING = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE)


def load(bootstrap: str, replication: int = 1) -> None:
    """The same topic, records (keys, JSON values, headers, CreateTimes) and commits on any broker."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTS, replication, config={"retention.ms": "-1"})])[TOPIC].result(30)
    failed: list = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "on_delivery": lambda err, _m: err is not None and failed.append(err)})
    for i in range(PER_PART):
        for p in range(PARTS):
            producer.produce(TOPIC, key=b"k%d" % i, value=json.dumps({"p": p, "i": i}).encode(), partition=p,
                             timestamp=STAMPS[p][i], headers=[("n", b"%d" % i)])
        if i % 40 == 39:
            producer.flush(30)
    assert producer.flush(30) == 0 and not failed, failed[:3]
    for group in (REWOUND, STILL):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
        deadline = time.monotonic() + 60  # a new cluster's offsets topic may still be loading: retried, bounded
        try:
            while True:
                try:
                    c.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in COMMITS.items()], asynchronous=False)
                    break
                except KafkaException as exc:
                    if not exc.args[0].retriable() and exc.args[0].code() not in LOADING \
                            or time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
        finally:
            c.close()


@pytest.fixture(scope="module")
def consoles(chronolog_broker, kafka_broker, tmp_path_factory):
    """(console over chronolog, console over Kafka 4.4), both brokers loaded alike."""
    load(chronolog_broker.bootstrap)
    load(kafka_broker.bootstrap)
    logs = tmp_path_factory.mktemp("consolelogs")
    ours = ConsoleProcess("--bootstrap-server", chronolog_broker.bootstrap, log=logs / "chronolog.log")
    try:
        theirs = ConsoleProcess("--bootstrap-server", kafka_broker.bootstrap, log=logs / "kafka.log")
    except BaseException:
        ours.stop()
        raise
    ours.bootstrap, theirs.bootstrap = chronolog_broker.bootstrap, kafka_broker.bootstrap
    yield ours, theirs
    ours.stop()
    theirs.stop()


def same_page(console, page: str) -> str:
    """A page without what differs by console: the broker's address and the CSRF token."""
    page = page.replace(console.bootstrap, "BROKER")
    return re.sub(r'name="csrf" value="[^"]+"', 'name="csrf" value="TOKEN"', page)


def topic_row(page: str) -> str:
    m = re.search(rf'<tr><td><a href="/topics/{TOPIC}">.*?</tr>', page)
    assert m, page
    return m[0]


def content(page: str) -> str:
    """The page's main part (the header names the broker)."""
    return page.split("<main", 1)[-1]


def chart_data(page: str) -> dict | None:
    m = re.search(r'<script type="application/json" id="timeline-data">(.*?)</script>', page, re.S)
    return json.loads(m[1]) if m else None


TIMELINES = [{}, {"step": 60_000}, {"step": 10_000, "from": BASE + 60_000, "to": BASE + 200_000},
             {"step": 60_000, "count": "exact"}, {"step": 5_000, "from": BASE + 100_000, "to": BASE + 160_000,
                                                  "count": "exact"}]
WINDOWS = [{"from": BASE + 95_000, "to": BASE + 130_000}, {"from": BASE + 95_000, "to": BASE + 130_000, "late": 1},
           {"from": BASE, "to": BASE + 400_000, "format": "hex", "limit": 250},
           {"from": BASE + 95_000, "to": BASE + 130_000, "format": "json", "limit": 20}]


def pages(console, topics: bool = True) -> dict[str, tuple[int, str]]:
    """Every read-only page the console has about TOPIC and the groups, by name, normalized."""
    out = {}
    if topics:
        status, page = get(console.url("/"))
        out["topics"] = (status, topic_row(page) if status == 200 else page)
    for i, q in enumerate(TIMELINES):
        status, body = get(console.url(f"/api/topics/{TOPIC}/timeline", **q))
        out[f"timeline-json-{i}"] = (status, body)
        status, page = get(console.url(f"/topics/{TOPIC}", **q))
        out[f"timeline-{i}"] = (status, content(same_page(console, page)))
    for i, q in enumerate(WINDOWS):
        status, page = get(console.url(f"/topics/{TOPIC}/records", **q))
        out[f"records-{i}"] = (status, content(same_page(console, page)))
        # the next pages, through their links
        n = 0
        while status == 200 and (m := re.search(r'<a id="next" href="([^"]+)"', page)) and n < 5:
            status, page = get(console.url("") + m[1].replace("&amp;", "&"))
            n += 1
            out[f"records-{i}-next-{n}"] = (status, content(same_page(console, page)))
    status, page = get(console.url("/groups"))
    out["groups"] = (status, "\n".join(re.findall(rf'<tr><td><a href="/groups/(?:{REWOUND}|{STILL})">.*?</tr>', page)))
    for group in (STILL, REWOUND):
        status, page = get(console.url(f"/groups/{group}"))
        out[f"group-{group}"] = (status, content(same_page(console, page)))
    return out


def test_every_page_over_kafka_is_the_page_over_chronolog(consoles):
    ours, theirs = consoles
    mine, kafka = pages(ours), pages(theirs)
    assert mine.keys() == kafka.keys()
    for name in mine:
        assert mine[name][0] == 200, (name, mine[name][1][-2000:])
        assert kafka[name] == mine[name], name
    # and the answers are the records' truth, not only alike
    row = re.findall(r'<td class="num">(\d+)</td>', mine["topics"][1])
    assert row[:2] == [str(PARTS), str(PARTS * PER_PART)]
    exact = json.loads(mine["timeline-json-3"][1])
    assert exact["exact"] is True and sum(exact["totals"]) == PARTS * PER_PART
    every = sorted(ts for s in STAMPS.values() for ts in s)
    edges = exact["edges"]
    assert exact["totals"] == [sum(1 for ts in every if a <= ts < b) for a, b in zip(edges, edges[1:], strict=False)]
    assert "records-1-next-1" in mine  # the windows are read through more than one page
    group = mine[f"group-{STILL}"][1]
    assert re.findall(r'<tr><td>[^<]+</td><td class="num">(\d+)</td><td class="num">(\d+)</td>'
                      r'<td class="num">(\d+)</td><td class="num">(\d+)</td>', group) == [
        (str(p), str(o), str(PER_PART), str(PER_PART - o)) for p, o in COMMITS.items()]


def committed(bootstrap: str, group: str, wait: float = 0) -> dict[int, int]:
    """The group's committed offsets on TOPIC, asked again for `wait` s while its coordinator moves."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(TOPIC, p) for p in range(PARTS)])
    deadline = time.monotonic() + wait
    while True:
        try:
            result = admin.list_consumer_group_offsets([req], request_timeout=15)[group].result(15)
            return {tp.partition: tp.offset for tp in result.topic_partitions}
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def rewind(console, group: str, when: int) -> tuple[str, str]:
    """Preview then commit a rewind of `group` on TOPIC to `when`: (the preview, the group page after)."""
    status, page = get(console.url(f"/groups/{group}"))
    assert status == 200, page
    token = csrf_of(page)
    form = {"csrf": token, "topic": TOPIC, "time": str(when)}
    status, preview = get(console.url(f"/groups/{group}/rewind"), {**form, "action": "preview"})
    assert status == 200, preview
    status, done = get(console.url(f"/groups/{group}/rewind"), {**form, "action": "apply"})
    assert status == 200, done
    return content(same_page(console, preview)), content(same_page(console, done))


REWIND_TO = BASE + 120_500  # late records of before it are stored after it: the first offset at or after it
REWIND_WANT = {p: next(i for i, ts in enumerate(s) if ts >= REWIND_TO) for p, s in STAMPS.items()}


def test_a_rewind_over_kafka_is_the_rewind_over_chronolog(consoles):
    ours, theirs = consoles
    mine, kafka = rewind(ours, REWOUND, REWIND_TO), rewind(theirs, REWOUND, REWIND_TO)
    assert kafka == mine
    assert committed(ours.bootstrap, REWOUND) == committed(theirs.bootstrap, REWOUND) == REWIND_WANT
    assert 'id="rewind"' in mine[1] and "rewound to" in mine[1]


# -- a cluster losing a node -------------------------------------------------------------------------------
def one_line_failure(name: str, status: int, body: str) -> str:
    """The message of a page that could not answer: a 502/503 with one line (JSON or HTML) saying what failed."""
    assert status in (502, 503), (name, status, body[-2000:])
    m = re.search(r'<div class="error" role="alert">(.*?)</div>', body, re.S)
    assert m, (name, body[-2000:])
    line = m[1].strip()
    assert line and "\n" not in line and "Traceback" not in body, (name, line)
    return line


def streamed_failure(name: str, body: str) -> str | None:
    """A streamed timeline page has its status sent before counting: a failure is one line at its end, with no
    chart and no partition table."""
    m = re.search(r'<div class="error" role="alert">(.*?)</div>', body, re.S)
    if m is None:
        return None
    assert chart_data(body) is None and 'id="partitions"' not in body, name
    assert "\n" not in m[1].strip(), (name, m[1])
    return m[1].strip()


@pytest.mark.slow
def test_pages_over_a_cluster_losing_a_node_are_exact_or_one_line(kafka_cluster, consoles, tmp_path):
    _ours, single = consoles
    load(kafka_cluster.bootstrap, replication=3)
    want = pages(single)
    want.pop(f"group-{REWOUND}")  # the rewind test may have moved it on the single broker
    every = ",".join(f"127.0.0.1:{n.port}" for n in kafka_cluster.nodes)  # a user's list keeps the dead node
    console = ConsoleProcess("--bootstrap-server", every, log=tmp_path / "cluster.log")
    console.bootstrap = every
    admin = AdminClient({"bootstrap.servers": every})
    coordinator = admin.describe_consumer_groups([STILL], request_timeout=15)[STILL].result(15).coordinator.id
    victim = next(n for n in kafka_cluster.nodes if n.node_id == coordinator)  # its group and its leaders move
    # a topic whose only replica is on the victim: nothing can take over, its pages can only say so
    offline = f"off-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(offline, 1, replica_assignment=[[victim.node_id]],
                                  config={"retention.ms": "-1"})])[offline].result(30)
    producer = Producer({"bootstrap.servers": every, "acks": "all"})
    for i in range(10):
        producer.produce(offline, value=b"o%d" % i, partition=0, timestamp=BASE + i * 1000)
    assert producer.flush(60) == 0
    try:
        assert {k: v for k, v in pages(console).items() if k in want} == want  # the whole cluster: exact
        want.pop("topics")  # with the offline topic, the topics page can only say it cannot answer (below)
        status, page = get(console.url(f"/groups/{REWOUND}"))
        assert status == 200, page
        form = {"csrf": csrf_of(page), "topic": TOPIC, "time": str(REWIND_TO)}
        victim.kill()
        # a rewind at once, its coordinator gone: committed exactly, or one line saying the broker failed
        status, answer = get(console.url(f"/groups/{REWOUND}/rewind"), {**form, "action": "preview"})
        if status == 200:
            status, answer = get(console.url(f"/groups/{REWOUND}/rewind"), {**form, "action": "apply"})
        if status == 200:
            assert "rewound to" in answer and committed(every, REWOUND, wait=90) == REWIND_WANT
        else:
            one_line_failure("rewind", status, answer)
        answered: set[str] = set()
        failures: list[str] = []
        deadline = time.monotonic() + 240  # rounds of every page, while the leaders and the group move
        rounds = 0
        while time.monotonic() < deadline and (rounds < 2 or answered != want.keys()):
            rounds += 1
            for name, (status, body) in pages(console, topics=False).items():
                if name not in want:
                    continue
                if name.startswith("timeline-") and not name.startswith("timeline-json") and status == 200 \
                        and (line := streamed_failure(name, body)) is not None:
                    failures.append(line)
                elif status == 200:
                    assert body == want[name][1], name  # an answer is the whole answer
                    answered.add(name)
                else:
                    failures.append(one_line_failure(name, status, body))
        assert answered == want.keys(), (sorted(want.keys() - answered), failures[-5:])
        # the offline topic: asked again for a bounded time (about a minute), then one line, not an empty window
        for path, q in (("/", {}), (f"/api/topics/{offline}/timeline", {"count": "exact"}),
                        (f"/topics/{offline}/records", {"from": BASE, "to": BASE + 60_000})):
            status, body = get(console.url(path, **q))
            line = one_line_failure(path, status, body)
            assert offline in line or "leader" in line, line
    finally:
        console.stop()
        victim.start()  # the session's cluster whole again for the next test
        kafka_cluster.wait_ready(120)


@pytest.mark.parametrize("code, broker", [(KafkaError._TRANSPORT, True), (KafkaError._ALL_BROKERS_DOWN, True),
                                          (KafkaError.NOT_COORDINATOR, True), (KafkaError.LEADER_NOT_AVAILABLE, True),
                                          (KafkaError.COORDINATOR_LOAD_IN_PROGRESS, True),
                                          (KafkaError.UNKNOWN_TOPIC_OR_PART, False),
                                          (KafkaError.GROUP_AUTHORIZATION_FAILED, False)])
def test_a_rewind_error_line_is_the_broker_s_or_the_request_s(code, broker):
    from chronolog.console.app import broker_failed
    from chronolog.timetravel.sources import kafka_words
    assert broker_failed(f"offsets of group g: {kafka_words(KafkaException(KafkaError(code)))}") is broker
    assert not broker_failed("group g has 1 active member(s) (state STABLE); stop its consumers first")
    assert broker_failed("cannot reach 127.0.0.1:9092: no broker answers: are the brokers of --bootstrap-server "
                         "running? [ALL_BROKERS_DOWN]")
