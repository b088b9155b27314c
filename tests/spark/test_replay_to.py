"""`pipeline run --replay-to`: the window re-ingested into another topic keeps each record's key, value,
headers, partition and CreateTime, and only the window's records."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from chronolog.errors import ChronologError
from chronolog.server.embedded import EmbeddedBroker
from chronolog.spark.pipeline import TOPIC, ingest, replay_window
from chronolog.timetravel.timefmt import parse_time

pytestmark = pytest.mark.spark


def records(bootstrap: str, topic: str, partitions: int, count: int) -> list[tuple]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"replay-check-{topic}", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, at_end = [], set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            at_end.add(m.partition())
            if len(at_end) == partitions and len(out) >= count:
                break
            continue
        out.append((m.partition(), m.key(), m.value(), tuple(m.headers() or ()), m.timestamp()))
    c.close()
    return sorted(out, key=lambda r: r[0])


def test_replay_to_keeps_times_and_partitions(spark, shared_data, tmp_path):
    files = sorted((shared_data / "loghub").glob("*.log"))
    t1, t2 = parse_time("2024-12-10T07:00:00Z"), parse_time("2024-12-10T09:00:00Z")
    with EmbeddedBroker(tmp_path / "data") as broker:
        ingest(broker.bootstrap, files, 2024, print)
        everything = records(broker.bootstrap, TOPIC, len(files), 4000)
        assert len(everything) == 4000
        want = [r for r in everything if t1 <= r[4][1] < t2]
        assert 0 < len(want) < len(everything)
        assert replay_window(spark, broker.bootstrap, t1, t2, "replayed", print) == len(want)
        got = records(broker.bootstrap, "replayed", len(files), len(want))
        with pytest.raises(ChronologError, match="the topic it is read from"):
            replay_window(spark, broker.bootstrap, t1, t2, TOPIC, print)
    assert got == want  # same partition, key, value, headers, CreateTime (type 1), in the same order
