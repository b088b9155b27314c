"""The KIP-848 consumer group records of `__consumer_offsets` against bytes worked out by hand from Kafka's
schemas (group-coordinator/src/main/resources/common/message/ConsumerGroup*.json) and the message generator's
rules for flexible versions: compact strings and arrays (unsigned varint of length + 1, 0 for null), UUIDs as
16 big-endian bytes, a tagged-fields section after every struct, and a nullable tagged struct written as its
tag, its size + 1, the presence varint 1, then the struct (MessageDataGenerator)."""

from __future__ import annotations

import uuid

import pytest

from chronolog.errors import CorruptMessageError
from chronolog.records import group_records as gr

U = uuid.UUID(bytes=bytes(range(16)))


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", "").replace("|", ""))


def test_keys_are_version_prefixed_with_the_record_type():
    # ConsumerGroupMetadataKey: type 3, GroupId as an int16-length string (keys are not flexible)
    assert gr.consumer_group_key(3, "grp") == h("0003 0003 677270")
    assert gr.consumer_group_key(4, "g") == h("0004 0001 67")
    assert gr.consumer_group_key(6, "g") == h("0006 0001 67")
    # ConsumerGroupMemberMetadataKey (5), TargetAssignmentMember (7), CurrentMemberAssignment (8)
    assert gr.consumer_member_key(5, "g", "m-1") == h("0005 0001 67 0003 6d2d31")
    assert gr.consumer_member_key(7, "g", "m") == h("0007 0001 67 0001 6d")
    assert gr.consumer_member_key(8, "g", "m") == h("0008 0001 67 0001 6d")
    assert gr.read_key(h("0008 0001 67 0001 6d")) == gr.ConsumerGroupMemberKey(8, "g", "m")
    assert gr.read_key(h("0006 0001 67")) == gr.ConsumerGroupKey(6, "g")
    with pytest.raises(ValueError):
        gr.consumer_group_key(5, "g")
    with pytest.raises(ValueError):
        gr.consumer_member_key(3, "g", "m")


def test_epoch_values():
    # version 0 | Epoch int32 | no tagged fields
    assert gr.consumer_group_metadata_value(7) == h("0000 00000007 00")
    assert gr.target_assignment_metadata_value(300) == h("0000 0000012c 00")
    assert gr.read_epoch_value(h("0000 00000007 00")) == 7
    with pytest.raises(CorruptMessageError):
        gr.read_epoch_value(h("0001 00000007 00"))  # only version 0 exists
    with pytest.raises(CorruptMessageError):
        gr.read_epoch_value(h("0000 00000007 00 ff"))  # bytes past the end


def test_partition_metadata_value():
    value = gr.partition_metadata_value([gr.TopicMetadata(U, "t", 3)])
    # 1 topic (02) | TopicId | TopicName "t" (02 74) | NumPartitions 3 | PartitionMetadata [] (01) | tags | tags
    assert value == h("0000 02" + U.hex + "02 74 00000003 01 00 00")
    assert gr.read_partition_metadata_value(value) == (gr.TopicMetadata(U, "t", 3),)
    racks = gr.TopicMetadata(U, "t", 1, ((0, ("r1",)),))
    raw = gr.partition_metadata_value([racks])
    assert raw == h("0000 02" + U.hex + "02 74 00000001 02 00000000 02 03 7231 00 00 00")
    assert gr.read_partition_metadata_value(raw) == (racks,)


def test_member_metadata_value_of_a_consumer_protocol_member():
    v = gr.ConsumerGroupMemberValue("i", None, "c", "/h", ("b", "a"), None, 300000, "uniform")
    raw = gr.member_metadata_value(v)
    # InstanceId "i" | RackId null | ClientId "c" | ClientHost "/h" | SubscribedTopicNames sorted [a, b] |
    # SubscribedTopicRegex null | RebalanceTimeoutMs 300000 | ServerAssignor "uniform" | no tagged fields
    assert raw == h("0000 | 02 69 | 00 | 02 63 | 03 2f68 | 03 02 61 02 62 | 00 | 000493e0 | 08 756e69666f726d | 00")
    assert gr.read_member_metadata_value(raw) == gr.ConsumerGroupMemberValue("i", None, "c", "/h", ("a", "b"), None,
                                                                            300000, "uniform")


def test_member_metadata_value_of_a_classic_member_has_the_tagged_struct():
    classic = gr.ClassicMemberMetadata(45000, (("range", b"\x00\x01"),))
    v = gr.ConsumerGroupMemberValue(None, None, "c", "/h", ("t",), None, 60000, None, classic)
    raw = gr.member_metadata_value(v)
    # ... | 1 tagged field: tag 0, size 17 (the struct's 16 bytes + the presence varint), presence 1 |
    # SessionTimeoutMs 45000 | SupportedProtocols [1]: Name "range", Metadata 0x0001, tags | the struct's tags
    assert raw == h("0000 | 00 | 00 | 02 63 | 03 2f68 | 02 02 74 | 00 | 0000ea60 | 00 |"
                    "01 00 11 01 | 0000afc8 | 02 | 06 72616e6765 | 03 0001 | 00 | 00")
    assert gr.read_member_metadata_value(raw) == v
    # an unknown tagged field (tag 5) is skipped beside it
    other = raw[:-20] + h("02 00 11 01") + raw[-16:] + h("05 02 abcd")
    assert gr.read_member_metadata_value(other) == v


def test_target_and_current_assignment_values():
    raw = gr.target_assignment_member_value(((U, (0, 2)),))
    # TopicPartitions [1]: TopicId | Partitions [0, 2] | tags | tags
    assert raw == h("0000 02" + U.hex + "03 00000000 00000002 00 00")
    assert gr.read_target_assignment_member_value(raw) == ((U, (0, 2)),)
    assert gr.target_assignment_member_value(()) == h("0000 01 00")
    cur = gr.CurrentMemberAssignment(5, 4, gr.MEMBER_UNREVOKED_PARTITIONS, ((U, (1,)),), ((U, (2,)),))
    raw = gr.current_assignment_value(cur)
    # MemberEpoch 5 | PreviousMemberEpoch 4 | State 1 (int8) | AssignedPartitions | PartitionsPendingRevocation
    assert raw == h("0000 00000005 00000004 01 02" + U.hex + "02 00000001 00 02" + U.hex + "02 00000002 00 00")
    assert gr.read_current_assignment_value(raw) == cur
    static_left = gr.CurrentMemberAssignment(-2, 3, 0, (), ())
    assert gr.current_assignment_value(static_left) == h("0000 fffffffe 00000003 00 01 01 00")


def test_truncated_values_are_refused():
    raw = gr.current_assignment_value(gr.CurrentMemberAssignment(5, 4, 0, ((U, (1,)),), ()))
    for n in range(len(raw)):
        with pytest.raises(CorruptMessageError):
            gr.read_current_assignment_value(raw[:n])
