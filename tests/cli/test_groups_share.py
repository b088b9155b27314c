"""`chronolog groups list`, `groups describe` and `lag` show share groups (KIP-932): type, state, members and, per
partition, the share-partition start offset and lag in records and in record time, with the same answers
against chronolog and Kafka 4.4."""

from __future__ import annotations

import json
import time

import pytest

pytest.importorskip("confluent_kafka", minversion="2.16")
from confluent_kafka import Producer, ShareConsumer  # noqa: E402

from tests.cli.conftest import chronolog  # noqa: E402
from tests.groupconfigs import set_group_configs  # noqa: E402

BASE_MS = int(time.time() * 1000) - 3_600_000  # recent: retention.ms keeps them


@pytest.fixture(params=["chronolog", "kafka"])
def broker(request: pytest.FixtureRequest):
    return request.getfixturevalue("chronolog_broker" if request.param == "chronolog" else "kafka_broker")


def _describe(bootstrap: str, group: str) -> dict:
    r = chronolog("groups", "describe", group, "--json", "-b", bootstrap)
    assert r.rc == 0, r.err
    return json.loads(r.out)


def _until(bootstrap: str, group: str, ok, most_s: float = 60, poll=None) -> dict:
    deadline = time.monotonic() + most_s
    while True:
        info = _describe(bootstrap, group)
        if ok(info) or time.monotonic() > deadline:
            return info
        if poll is not None:
            poll()


def test_share_group_listed_and_described_with_lag(broker, request):
    """Twenty records read and acknowledged, the consumer gone, six more written one second apart: each
    partition starts at 10 and lags 3 records and 4 s of record time; while the consumer is there the group
    is STABLE with one member holding both partitions."""
    topic = broker.create_topic(partitions=2, prefix="shlag")
    group = f"g-{topic}"
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(20):
        producer.produce(topic, value=b"old", partition=i % 2, timestamp=BASE_MS + i)
    assert producer.flush(30) == 0
    set_group_configs(broker.bootstrap, group, {"share.auto.offset.reset": "earliest"})

    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "log_level": 3})
    try:
        consumer.subscribe([topic])
        got, deadline = 0, time.monotonic() + 60
        while got < 20 and time.monotonic() < deadline:
            got += len(consumer.poll(0.2) or [])
        assert got == 20

        def poll() -> None:  # implicit acknowledgement: the next poll sends it
            consumer.poll(0.5)

        info = _until(broker.bootstrap, group, lambda i: [r["lag"] for r in i["partitions"]] == [0, 0], poll=poll)
        assert info["type"] == "share" and info["state"] == "STABLE"
        assert [r["lag"] for r in info["partitions"]] == [0, 0]
        assert [r["lag_ms"] for r in info["partitions"]] == [0, 0]
        [member] = info["members"]
        assert member["partitions"] == [f"{topic}-0", f"{topic}-1"]
        assert all(r["members"] == [member["member_id"]] for r in info["partitions"])

        listed = chronolog("groups", "list", "--json", "-b", broker.bootstrap)
        assert listed.rc == 0, listed.err
        assert {"group": group, "type": "share", "state": "STABLE"} in json.loads(listed.out)
    finally:
        consumer.close()

    for i in range(6):
        producer.produce(topic, value=b"new", partition=i % 2, timestamp=BASE_MS + 100_000 + i * 1000)
    assert producer.flush(30) == 0
    info = _until(broker.bootstrap, group, lambda i: i["state"] == "EMPTY" and [r["log_end"] for r in i["partitions"]]
                  == [13, 13])
    assert info["state"] == "EMPTY" and info["members"] == []
    rows = [{k: r[k] for k in ("topic", "partition", "log_end", "lag", "lag_ms", "members")} for r in info["partitions"]]
    assert rows == [{"topic": topic, "partition": p, "log_end": 13, "lag": 3, "lag_ms": 4000, "members": []}
                    for p in (0, 1)]
    # Kafka 4.4 answers the start offset of its last state write, taken before the acknowledgement that
    # moved it (0 here); chronolog the one after it (10)
    starts = {r["start_offset"] for r in info["partitions"]}
    assert starts == {10} if request.node.callspec.params["broker"] == "chronolog" else starts <= {0, 10}

    text = chronolog("groups", "describe", group, "-b", broker.bootstrap)
    assert text.rc == 0, text.err
    assert f"share group {group} (EMPTY): 0 member(s)" in text.out and "4.000s" in text.out

    # `chronolog lag` answers for a share group as `groups describe` does: from the share-partition start offset
    lag = chronolog("lag", "--group", group, "--json", "-b", broker.bootstrap)
    assert lag.rc == 0, lag.err
    got = json.loads(lag.out)
    assert (got["type"], got["state"]) == ("share", "EMPTY")
    assert got["partitions"] == [{k: r[k] for k in ("topic", "partition", "start_offset", "log_end", "lag", "lag_ms")}
                                 for r in info["partitions"]]
    text = chronolog("lag", "--group", group, "-b", broker.bootstrap)
    assert f"lag of share group {group} (EMPTY)" in text.out and "start offset" in text.out and "4.000s" in text.out


def test_unknown_group_is_one_line(broker):
    r = chronolog("groups", "describe", "no-such-group-h13", "-b", broker.bootstrap)
    assert r.rc != 0 and "does not exist" in r.err
    r = chronolog("lag", "--group", "no-such-group-h13", "-b", broker.bootstrap)
    assert r.rc != 0 and "does not exist" in r.err
