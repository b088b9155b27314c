"""Fetch what was produced: keys (and none), values (empty and none), headers (repeated, null, non-ASCII
names), timestamps and offsets come back the same from chronolog and Kafka 4.4, through librdkafka and
kafka-python, uncompressed and with each codec, and from several partitions."""

from __future__ import annotations

import pytest

from tests.differential.steps import consume, consume_kafka_python, now_ms, produce

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def _records(base: int) -> list[list[tuple]]:
    return [
        [(b"k0", b"v0", base), (None, b"no key", base + 5), (b"k2", None, base + 1)],
        [(b"k3", b"", base - 1000, [("a", b"1"), ("a", b"2"), ("n", None), ("ünï", b"\xff\x00")])],
        [(b"\x00\xff", b"x" * 5000, base + 2000, [("big", b"y" * 300)]) for _ in range(4)],
        [(b"k8", b"after", base + 1500)],
    ]


@pytest.mark.parametrize("client", ["librdkafka", "kafka-python"])
@pytest.mark.parametrize("codec", CODECS)
def test_fetch_returns_what_was_produced(both, codec, client):
    if client == "kafka-python" and codec in ("snappy", "lz4"):
        from kafka import codec as kp_codec

        if not getattr(kp_codec, f"has_{codec}")():
            pytest.skip(f"kafka-python has no {codec} library here")
    base = (now_ms() - 600_000) // 1000 * 1000
    batches = _records(base)

    def steps(side):
        topic = side.create_topic()
        produced = produce(side, topic, batches, **{"compression.type": codec})
        read = consume(side, topic) if client == "librdkafka" else consume_kafka_python(side, topic)
        return {"produced": produced, "read": read}

    obs = both.same(steps)
    assert [r["offset"] for r in obs["read"]] == list(range(9))


def test_fetch_from_several_partitions_and_offsets(both):
    """Records spread by key over three partitions, then read from the middle of each (seek)."""
    from confluent_kafka import TopicPartition

    base = (now_ms() - 600_000) // 1000 * 1000

    def steps(side):
        topic = side.create_topic(partitions=3)
        for p in range(3):
            produce(side, topic, [[(f"k{p}{i}".encode(), f"v{p}{i}".encode(), base + i) for i in range(6)]],
                    partition=p)
        consumer = side.consumer()
        try:
            consumer.assign([TopicPartition(topic, p, 2 + p) for p in range(3)])
            got = []
            while len(got) < 4 + 3 + 2:
                msg = consumer.poll(5)
                assert msg is not None and not msg.error(), msg and msg.error()
                got.append((msg.partition(), msg.offset(), msg.key(), msg.value(), msg.timestamp()))
            return sorted(got)
        finally:
            consumer.close()

    both.same(steps)
