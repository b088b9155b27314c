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


def write_data_dir(path, topic: str, batches: dict[int, list[bytes]], configs: dict[str, str] | None = None):
    """A data dir at `path` holding `topic` with one partition per key of `batches`, each given its batches
    through the storage engine, and shut down cleanly (indexes trimmed, checkpoints written)."""
    from chronolog.config import BrokerConfig
    from chronolog.storage import LogManager

    manager = LogManager(path, BrokerConfig())
    manager.startup(background=False)
    manager.create_topic(topic, len(batches), {"message.timestamp.after.max.ms": str(2**62), **(configs or {})})
    for partition, items in batches.items():
        for batch_bytes in items:
            manager.get_log(topic, partition).append(batch_bytes)
    manager.shutdown()
    return path


def counting_preads(monkeypatch) -> list[int]:
    """From now on, the size of every read a segment makes of its file (`LogSegment.pread`) is appended to
    the returned list."""
    from chronolog.storage.segment import LogSegment

    sizes: list[int] = []
    original = LogSegment.pread

    def counting(self, position: int, size: int) -> bytes:
        data = original(self, position, size)
        sizes.append(len(data))
        return data
    monkeypatch.setattr(LogSegment, "pread", counting)
    return sizes
