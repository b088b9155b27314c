"""The syncs of a cleaning are Kafka's, in Kafka's order (`Cleaner.cleanSegments`, `LogSegment.flush`,
`LocalLog.replaceSegments`): for every group, each of its `.cleaned` files (log, offset index, time index,
and the `.txnindex` when it keeps an aborted transaction) is synced once, all of them before the group's
first rename; then exactly one directory sync, after the group's last rename and before the next group's
first. No other file is synced (not the replaced segments' indexes). Both the C and the Python path, whose
syncs and swaps run in a thread of their own while the next group is copied."""

from __future__ import annotations

import os
import threading

import pytest

from chronolog.config import TopicConfig
from chronolog.storage import PartitionLog
from chronolog.storage.cleaner import Cleaner, log_to_clean
from tests.storage.test_cleaner_crash import CONFIG, DAY, NOW, build


def _events(directory, native: bool, monkeypatch) -> list[tuple[str, str]]:
    """(kind, name) of every fsync and rename in the partition directory during one whole cleaning."""
    events: list[tuple[str, str]] = []
    lock = threading.Lock()
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        path = os.readlink(f"/proc/self/fd/{fd}")
        real_fsync(fd)
        with lock:
            events.append(("fsync", "<dir>" if os.path.isdir(path) else os.path.basename(path)))

    def replace(src, dst, *args, **kwargs):
        real_replace(src, dst, *args, **kwargs)
        with lock:
            events.append(("rename", f"{os.path.basename(src)}>{os.path.basename(dst)}"))

    plog = PartitionLog.open(directory, TopicConfig.from_kafka(CONFIG))
    try:
        ltc, _ = log_to_clean(("t", 0), plog, None, NOW + DAY)
        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "replace", replace)
        try:
            _end, stats = Cleaner(native=native).clean(ltc, NOW + DAY)
        finally:
            monkeypatch.undo()
    finally:
        plog.close()
    assert stats.groups >= 3
    return events


@pytest.mark.parametrize("native", [True, False])
def test_each_group_syncs_its_files_once_then_the_directory_once(tmp_path, native, monkeypatch):
    if native and not Cleaner().native:
        pytest.skip("the C extension is not built")
    build(tmp_path / "t-0")
    events = _events(tmp_path / "t-0", native, monkeypatch)
    # each group's events end with its directory sync
    groups: list[list[tuple[str, str]]] = [[]]
    for event in events:
        groups[-1].append(event)
        if event == ("fsync", "<dir>"):
            groups.append([])
    assert groups.pop() == []  # nothing after the last group's directory sync
    assert len(groups) >= 3
    kept_txn = False
    for group in groups:
        first_rename = next(i for i, (k, _n) in enumerate(group) if k == "rename")
        synced, rest = [n for _k, n in group[:first_rename]], group[first_rename:-1]
        assert all(k == "fsync" for k, _n in group[:first_rename])
        base = rest[0][1].split(".")[0]
        cleaned = [f"{base}{s}.cleaned" for s in (".log", ".index", ".timeindex")]
        if f"{base}.txnindex.cleaned" in synced:
            cleaned.append(f"{base}.txnindex.cleaned")
            kept_txn = True
        assert sorted(synced) == sorted(cleaned), (base, synced)  # each once, nothing else, before any rename
        assert all(k == "rename" for k, _n in rest), group  # no sync between the renames
        assert rest[-1][1] == f"{base}.log.swap>{base}.log"  # the swap's last rename, then the one dir sync
    assert kept_txn  # the fixture's aborted transaction stays in one group's .txnindex
