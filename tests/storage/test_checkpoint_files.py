"""Checkpoint files that cannot be read take the data dir offline (Kafka's `CheckpointFile.read` through
`CheckpointFileWithFailureHandler`, which marks the log dir offline; a broker whose only log dir is offline
stops). Named after `CheckpointFileWithFailureHandlerTest` / `OffsetCheckpointFileWithFailureHandlerTest`."""

from __future__ import annotations

import pytest

from chronolog.errors import ChronologError
from chronolog.storage import LogManager
from chronolog.storage.checkpoints import LOG_START_OFFSET, RECOVERY_POINT, CheckpointError, read_checkpoint
from tests.storage.helpers import NOW, WIDE, batch


@pytest.mark.parametrize("text, message", [
    ("1\n1\nt 0 5\n", "Unrecognised version:1, expected version: 0"),
    ("0\n2\nt 0 5\n", "Expected [2] entries in checkpoint file"),
    ("0\n1\nt 0 5\nt 1 6\n", "Expected [1] entries in checkpoint file"),
    ("0\n1\nt 0\n", "Malformed line in checkpoint file"),
    ("0\n1\nt 0 five\n", "Malformed line in checkpoint file"),
    ("zero\n", "Malformed line in checkpoint file"),
    (b"0\n1\n\xff 0 5\n", "not UTF-8"),
])
def test_should_throw_if_checkpoint_is_unreadable(tmp_path, text, message):
    """OffsetCheckpointFileWithFailureHandlerTest.shouldThrowIfVersionIsNotRecognised,
    shouldThrowIfTheNumberOfEntriesDoesNotMatch(ish) and shouldThrowOnMalformedLine: errors, never empty."""
    path = tmp_path / RECOVERY_POINT
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(CheckpointError, match=message.replace("[", r"\[")):
        read_checkpoint(path)


def test_should_return_empty_for_missing_or_empty_file(tmp_path):
    """CheckpointFile.read: no file, an empty file or a version line alone hold no entries."""
    assert read_checkpoint(tmp_path / "absent") == {}
    (tmp_path / "empty").write_text("")
    assert read_checkpoint(tmp_path / "empty") == {}
    (tmp_path / "version").write_text("0\n")
    assert read_checkpoint(tmp_path / "version") == {}
    (tmp_path / "ok").write_text("0\n2\nt 0 5\nmy topic 1 7\n")  # the topic may contain no space in Kafka;
    with pytest.raises(CheckpointError):  # a line of four fields is malformed
        read_checkpoint(tmp_path / "ok")


def test_unreadable_log_start_checkpoint_takes_the_data_dir_offline(tmp_path):
    """LogManager.loadLogs with LogDirFailureChannel: the dir goes offline and, being the only one, the
    start stops with one clear message; deleted records are not made readable again."""
    with LogManager(tmp_path) as manager:
        manager.create_topic("t", 1, WIDE)
        plog = manager.get_log("t", 0)
        for i in range(4):
            plog.append(batch(NOW + i), now=NOW)
        plog.delete_records_before(2)
    (tmp_path / LOG_START_OFFSET).write_text("0\n3\nt 0 2\n")
    with pytest.raises(ChronologError) as info:
        LogManager(tmp_path).startup(background=False)
    message = str(info.value)
    assert "is offline" in message and "Expected [3] entries" in message and "\n" not in message
    (tmp_path / LOG_START_OFFSET).write_text("0\n1\nt 0 2\n")  # repaired: the lock was released, it starts
    with LogManager(tmp_path) as manager:
        assert manager.get_log("t", 0).log_start_offset == 2
