"""Kafka's checkpoint files (`CheckpointFile`): `recovery-point-offset-checkpoint`,
`log-start-offset-checkpoint`, `replication-offset-checkpoint`.

Format: a version line (0), a count line, then one `topic partition offset` line per entry, each line
ending in a newline. Written to a temp file, fsynced and renamed, so a crash or a failed write leaves the old
or the new file, never a short one (`diskio.write_atomic`).
"""

from __future__ import annotations

from pathlib import Path

from chronolog.diskio import write_atomic

RECOVERY_POINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET = "log-start-offset-checkpoint"
REPLICATION_OFFSET = "replication-offset-checkpoint"
CLEAN_SHUTDOWN = ".kafka_cleanshutdown"


def write_checkpoint(path: Path, offsets: dict[tuple[str, int], int]) -> None:
    lines = ["0", str(len(offsets))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items())]
    write_atomic(path, ("\n".join(lines) + "\n").encode("utf-8"))


def read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """Entries of a checkpoint file; a missing or malformed file reads as empty (and is rewritten later)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (FileNotFoundError, UnicodeDecodeError):
        return {}
    try:
        if int(lines[0]) != 0:
            return {}
        count = int(lines[1])
        out = {}
        for line in lines[2:2 + count]:
            topic, partition, offset = line.rsplit(" ", 2)
            out[(topic, int(partition))] = int(offset)
        return out if len(out) == count else {}
    except (IndexError, ValueError):
        return {}
