"""The consumer protocol's subscription and assignment (records.consumer_protocol) against bytes written
out by hand from Kafka's schemas (ConsumerProtocolSubscription.json, ConsumerProtocolAssignment.json)."""

from __future__ import annotations

import struct

import pytest

from chronolog.records.consumer_protocol import (
    Assignment,
    Subscription,
    read_assignment,
    read_subscription,
    write_assignment,
    write_subscription,
)


def s16(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    return struct.pack(">h", len(text.encode())) + text.encode()


def b32(data: bytes | None) -> bytes:
    return struct.pack(">i", -1) if data is None else struct.pack(">i", len(data)) + data


# v3: topics [orders, audit], userData "ud", ownedPartitions [orders: 0, 2], generationId 7, rackId "r1"
V3 = (struct.pack(">hi", 3, 2) + s16("orders") + s16("audit") + b32(b"ud")
      + struct.pack(">i", 1) + s16("orders") + struct.pack(">iii", 2, 0, 2)
      + struct.pack(">i", 7) + s16("r1"))


def test_reads_every_field_of_v3():
    assert read_subscription(V3) == Subscription(3, ("orders", "audit"), b"ud", (("orders", (0, 2)),), 7, "r1")


def test_writes_what_it_reads():
    assert write_subscription(["orders", "audit"], b"ud", owned={"orders": [2, 0]}, generation_id=7,
                              rack_id="r1") == V3
    for version in range(4):
        data = write_subscription(["t"], None, owned={"t": [1]}, generation_id=3, rack_id="x", version=version)
        sub = read_subscription(data)
        assert (sub.version, sub.topics, sub.user_data) == (version, ("t",), None)
        assert sub.owned_partitions == ((("t", (1,)),) if version >= 1 else ())
        assert sub.generation_id == (3 if version >= 2 else -1)
        assert sub.rack_id == ("x" if version >= 3 else None)


def test_fields_a_version_added_may_be_missing_at_the_end():
    """A client that knew only v0's fields but wrote a higher version: the rest read as their defaults."""
    v0_body = struct.pack(">i", 1) + s16("t") + b32(None)
    assert read_subscription(struct.pack(">h", 3) + v0_body) == Subscription(3, ("t",), None)
    with_owned = struct.pack(">h", 2) + v0_body + struct.pack(">i", 0)
    assert read_subscription(with_owned) == Subscription(2, ("t",), None, (), -1)


def test_a_newer_version_is_read_by_the_fields_known():
    assert read_subscription(struct.pack(">h", 9) + V3[2:]) == Subscription(9, ("orders", "audit"), b"ud",
                                                                             (("orders", (0, 2)),), 7, "r1")


@pytest.mark.parametrize("cut", [1, 3, 7, 12, 20, 30, len(V3) - 1])
def test_truncated_or_garbled_is_a_value_error(cut):
    with pytest.raises(ValueError, match="malformed consumer protocol subscription"):
        read_subscription(V3[:cut])
    if cut > 8:
        garbled = V3[:8] + b"\xff\xfe" + V3[10:]  # not UTF-8 in the first topic name
        with pytest.raises(ValueError):
            read_subscription(garbled)


def test_null_topics_are_malformed_and_names_may_decode_as_java_does():
    with pytest.raises(ValueError, match="malformed consumer protocol subscription"):
        read_subscription(struct.pack(">hii", 0, -1, -1))
    garbled = struct.pack(">hih", 0, 1, 2) + b"\xff\xfe" + b32(None)
    assert read_subscription(garbled, errors="replace").topics == ("\ufffd\ufffd",)


def test_assignment():
    data = struct.pack(">hi", 0, 2) + s16("a") + struct.pack(">ii", 1, 4) + s16("b") + struct.pack(">iii", 2, 0, 1) \
        + b32(None)
    assert write_assignment({"b": [1, 0], "a": [4]}) == data
    assert read_assignment(data) == Assignment(0, (("a", (4,)), ("b", (0, 1))), None)
    assert read_assignment(write_assignment({}, b"u")) == Assignment(0, (), b"u")
    with pytest.raises(ValueError, match="malformed consumer protocol assignment"):
        read_assignment(data[:-1])
