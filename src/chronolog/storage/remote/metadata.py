"""What the tier knows of a segment (Kafka's `RemoteLogSegmentMetadata`), one small JSON file per segment
beside its files: `<20-digit base offset>.remote-segment.json`. Kafka keeps these records in the
`__remote_log_metadata` topic; here the record is a file of the tier itself, so the tier is readable on its
own. It is written last, after every file of the segment was copied and checked, and a segment is listed
(read, counted by retention, deleted locally) only once its record says COPY_SEGMENT_FINISHED; a deletion
first rewrites it as DELETE_SEGMENT_STARTED and removes it last (`RemoteLogSegmentState`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

METADATA_SUFFIX = ".remote-segment.json"
COPY_FINISHED = "COPY_SEGMENT_FINISHED"
DELETE_STARTED = "DELETE_SEGMENT_STARTED"
LEADER_EPOCH_SUFFIX = ".leader-epoch-checkpoint"  # the segment's leader epochs (Kafka uploads one per segment)


@dataclass(frozen=True)
class RemoteSegment:
    """One tiered segment: its offsets [base_offset, end_offset], largest record timestamp and the offset
    holding it (what lookups by time and retention need without reading the segment), the `.log`'s size
    and CRC-32, and every copied file with its size (what a check of the copy compares)."""

    base_offset: int
    end_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    size: int
    log_crc32: int
    files: dict[str, int] = field(default_factory=dict)
    segment_id: str = ""
    created_ms: int = 0
    state: str = COPY_FINISHED
    leader_epochs: dict[str, int] = field(default_factory=dict)  # epoch -> its first offset in the segment

    @property
    def name(self) -> str:
        return metadata_name(self.base_offset)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> RemoteSegment:
        values = json.loads(raw)
        return cls(**{k: v for k, v in values.items() if k in cls.__dataclass_fields__})


def metadata_name(base_offset: int) -> str:
    return f"{base_offset:020d}{METADATA_SUFFIX}"


def base_of_metadata(name: str) -> int | None:
    stem = name[:-len(METADATA_SUFFIX)] if name.endswith(METADATA_SUFFIX) else ""
    return int(stem) if stem.isdigit() else None
