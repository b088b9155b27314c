"""Small builders shared by the storage tests."""

from __future__ import annotations

from chronolog.config import TopicConfig
from chronolog.records import CompressionType, SimpleRecord, build_batch
from chronolog.storage import PartitionLog

NOW = 1_700_000_000_000
# Timestamp bounds wide open, so tests choose any timestamps relative to NOW.
WIDE = {"message.timestamp.after.max.ms": str(2**62), "message.timestamp.before.max.ms": str(2**62)}


def open_log(tmp_path, **overrides) -> PartitionLog:
    """A partition `t-0` under tmp_path; keyword overrides use snake_case Kafka names."""
    cfg = dict(WIDE)
    cfg.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
    return PartitionLog.open(tmp_path / "t-0", TopicConfig.from_kafka(cfg))


def batch(*timestamps: int, value: bytes = b"v" * 40, codec: CompressionType = CompressionType.NONE) -> bytes:
    return build_batch([SimpleRecord(t, None, value) for t in timestamps], compression=codec)


B = len(batch(NOW))  # one single-record batch: 61-byte header + 47-byte record
