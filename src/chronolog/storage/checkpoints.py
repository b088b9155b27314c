"""Kafka's checkpoint files (`CheckpointFile`): `recovery-point-offset-checkpoint`,
`log-start-offset-checkpoint`, `replication-offset-checkpoint`.

Format: a version line (0), a count line, then one `topic partition offset` line per entry, each line
ending in a newline. Written to a temp file, fsynced and renamed, so a crash or a failed write leaves the old
or the new file, never a short one (`diskio.write_atomic`).
"""

from __future__ import annotations

from pathlib import Path

from chronolog.diskio import write_atomic
from chronolog.errors import ChronologError

RECOVERY_POINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET = "log-start-offset-checkpoint"
REPLICATION_OFFSET = "replication-offset-checkpoint"
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"  # LogCleanerManager.offsetCheckpointFile
CLEAN_SHUTDOWN = ".kafka_cleanshutdown"


def write_checkpoint(path: Path, offsets: dict[tuple[str, int], int]) -> None:
    lines = ["0", str(len(offsets))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items())]
    write_atomic(path, ("\n".join(lines) + "\n").encode("utf-8"))


class CheckpointError(ChronologError):
    """A checkpoint file that cannot be read: Kafka's `CheckpointFileWithFailureHandler.read` takes the log
    dir offline for it (and a broker whose every log dir is offline stops), rather than reading it as empty
    (an empty log-start-offset checkpoint would make deleted records readable again)."""


def read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """Entries of a checkpoint file (`CheckpointFile.read`): a missing or empty file has none; a wrong
    version, a malformed line or a count that does not match the lines raises CheckpointError with
    Kafka's message."""
    path = Path(path)
    try:
        lines = path.read_bytes().decode("utf-8").splitlines()
    except FileNotFoundError:
        return {}
    except UnicodeDecodeError:
        raise CheckpointError(f"Malformed line in checkpoint file [{path}]: not UTF-8") from None

    def malformed(line: str) -> CheckpointError:
        return CheckpointError(f"Malformed line in checkpoint file [{path}]: {line}")

    def to_int(line: str) -> int:
        try:
            return int(line)
        except ValueError:
            raise malformed(line) from None

    if not lines:
        return {}
    version = to_int(lines[0])
    if version != 0:
        raise CheckpointError(f"Unrecognised version:{version}, expected version: 0 in checkpoint file at: {path}")
    if len(lines) < 2:
        return {}
    expected = to_int(lines[1])
    out = {}
    for line in lines[2:]:
        parts = line.split()
        if len(parts) != 3:
            raise malformed(line)
        try:
            out[(parts[0], int(parts[1]))] = int(parts[2])
        except ValueError:
            raise malformed(line) from None
    if len(lines) - 2 != expected:
        raise CheckpointError(f"Expected [{expected}] entries in checkpoint file [{path}], but found only "
                              f"[{len(lines) - 2}]")
    return out
