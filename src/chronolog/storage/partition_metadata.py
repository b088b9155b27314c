"""A topic's identity on disk: its name (Kafka's `Topic.validate`), its id, and the `partition.metadata` file
each partition directory holds (`PartitionMetadataFile`)."""

from __future__ import annotations

import base64
import os
import re
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from chronolog.diskio import fsync_dir, write_atomic
from chronolog.errors import InvalidTopicExceptionError

PARTITION_METADATA = "partition.metadata"
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")


def validate_topic_name(name: str) -> None:
    """Kafka's `Topic.validate`."""
    if not name or name in (".", ".."):
        raise InvalidTopicExceptionError(f"Topic name {name!r} is illegal")
    if len(name) > 249:
        raise InvalidTopicExceptionError(f"Topic name {name!r} is longer than 249 characters")
    if not _LEGAL_TOPIC.match(name):
        raise InvalidTopicExceptionError(f"Topic name {name!r} is illegal, it contains a character other than "
                                         "ASCII alphanumerics, '.', '_' and '-'")


def new_topic_id() -> str:
    """A random topic id in Kafka's base64 form (`Uuid.toString`)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def write_partition_metadata(directory: Path, topic_id: str, *, sync: bool = True) -> None:
    """The partition's `partition.metadata`, unless it is there: two lines, no trailing newline, as Kafka's
    `PartitionMetadataFile` writes it. `sync=False`: not fsynced (the caller syncs many at once)."""
    path = directory / PARTITION_METADATA
    if not path.exists():
        write_atomic(path, f"version: 0\ntopic_id: {topic_id}".encode(), sync=sync)


def sync_new_partitions(directories: list[Path]) -> None:
    """fsync each new partition's partition.metadata and directory, several at once (concurrent fsyncs
    share the file system's journal commits: one request's thousand partitions cost a few commits, not
    two thousand), then the data dir that holds them."""
    def sync(directory: Path) -> None:
        for path in (directory / PARTITION_METADATA, directory):
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    if not directories:
        return
    with ThreadPoolExecutor(min(8, len(directories)), thread_name_prefix="chronolog-create") as pool:
        for _ in pool.map(sync, directories):
            pass
    fsync_dir(directories[0].parent)
