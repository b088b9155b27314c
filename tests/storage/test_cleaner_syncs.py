"""The syncs of a cleaning are Kafka's, in Kafka's order (`Cleaner.cleanSegments`, `LogSegment.flush`,
`LocalLog.replaceSegments`): for every group, each of its `.cleaned` files (log, offset index, time index,
and the `.txnindex` when it keeps an aborted transaction) is synced once, all of them before the group's
first rename; then exactly one directory sync, after the group's last rename and before the next group's
first; the groups' swaps one after the other in offset order. No other file is synced (not the replaced
segments' indexes). Both the C and the Python path, whose syncs and swaps run in threads of their own
while the next group is copied (a group's file syncs may overlap the previous group's directory sync)."""

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
    renames = [(i, n.split(">")) for i, (k, n) in enumerate(events) if k == "rename"]
    bases = []
    for _i, (src, _dst) in renames:
        if src.endswith(".index.cleaned"):
            bases.append(src.split(".")[0])
    assert len(bases) >= 3
    dir_syncs = [i for i, e in enumerate(events) if e == ("fsync", "<dir>")]
    assert len(dir_syncs) == len(bases)  # one a group
    file_syncs = [(i, n) for i, (k, n) in enumerate(events) if k == "fsync" and n != "<dir>"]
    assert all(n.endswith(".cleaned") for _i, n in file_syncs), file_syncs  # nothing else is synced
    assert len({n for _i, n in file_syncs}) == len(file_syncs)  # each once
    kept_txn = False
    for g, base in enumerate(bases):
        first = next(i for i, (src, _d) in renames if src == f"{base}.index.cleaned")
        last = next(i for i, (src, _d) in renames if src == f"{base}.log.swap")
        following = next((i for i, (src, _d) in renames if src == f"{bases[g + 1]}.index.cleaned"), None) \
            if g + 1 < len(bases) else len(events)
        mine = {n: i for i, n in file_syncs if n.startswith(base + ".")}
        cleaned = {f"{base}{s}.cleaned" for s in (".log", ".index", ".timeindex")}
        if f"{base}.txnindex.cleaned" in mine:
            cleaned.add(f"{base}.txnindex.cleaned")
            kept_txn = True
        assert set(mine) == cleaned, (base, mine)
        assert max(mine.values()) < first  # all synced before the group's first rename
        assert first < last < following  # swaps one after the other, in offset order
        assert len([i for i in dir_syncs if last < i < following]) == 1, (base, events[first:following])
    assert kept_txn  # the fixture's aborted transaction stays in one group's .txnindex


def test_a_group_whose_syncs_end_first_still_swaps_after_the_previous_one(tmp_path):
    """The first group is held at its `cleaned` step until the second group has synced its files too:
    the second group's swap still waits for the first's, so the swaps end in offset order and the log
    reads the same records."""
    from chronolog.storage.cleaner import cleaning as cleaner_mod

    build(tmp_path / "t-0")
    cleaned_steps: list[str] = []
    second_synced = threading.Event()
    finals: list[int] = []

    def hook(name: str) -> None:
        if name == "cleaned":
            cleaned_steps.append(name)
            if len(cleaned_steps) == 1:
                assert second_synced.wait(timeout=60)
            else:
                second_synced.set()
        elif name.startswith("final:") and name.endswith(".log"):
            finals.append(int(name[len("final:"):][:20]))

    plog = PartitionLog.open(tmp_path / "t-0", TopicConfig.from_kafka(CONFIG))
    try:
        before = [(r.offset, r.key, r.value) for r in plog.read_records(0, isolation="read_committed")]
        ltc, _ = log_to_clean(("t", 0), plog, None, NOW + DAY)
        cleaner_mod.STEP_HOOK = hook
        try:
            _end, stats = Cleaner().clean(ltc, NOW + DAY)
        finally:
            cleaner_mod.STEP_HOOK = None
        after = {r.key: (r.offset, r.value) for r in plog.read_records(0, isolation="read_committed")}
    finally:
        plog.close()
    assert stats.groups >= 3 and len(finals) == stats.groups
    assert finals == sorted(finals)
    last = {}
    for offset, key, value in before:
        last[key] = (offset, value)
    # every key's last record as written (a tombstone stays until a cleaning past its delete horizon)
    assert {k: v for k, v in after.items() if v[1] is not None} == {k: v for k, v in last.items() if v[1] is not None}
