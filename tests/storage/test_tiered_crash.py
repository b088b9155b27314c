"""SIGKILL while segments are copied to the tier, while local copies are deleted and while tiered segments
are deleted by retention (several runs on the same data dir and tier): after each, a restart reads every
acknowledged record exactly once, the tier lists each segment once and whole, retention deleted no more
than retention.bytes allows, and the copies resume.

Each kill lands inside the operation it names: the child, at the chosen call, stops there (a copy with half
of a file written, a local deletion with some of a segment's files renamed `.deleted`, a tier deletion with
the files before it gone) and says so; the parent then kills it, so no kill falls between operations."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from chronolog.config import BrokerConfig
from chronolog.storage import LogManager
from chronolog.storage.remote.metadata import METADATA_SUFFIX, RemoteSegment
from tests.scale import scaled
from tests.storage.test_tiered import s3_tier  # noqa: F401  (the S3 server fixture)

CONFIGS = {"remote.storage.enable": "true", "segment.bytes": "40000", "local.retention.ms": "1",
           "retention.bytes": "400000", "retention.ms": "-1",
           "index.interval.bytes": "1024"}

CHILD = textwrap.dedent('''
    import os, sys, time
    from pathlib import Path
    from chronolog.config import BrokerConfig
    from chronolog.records import SimpleRecord, build_batch
    from chronolog.storage import LogManager

    data, tier_dir, point, hits = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
    configs = eval(sys.argv[5])
    manager = LogManager(data, BrokerConfig({"remote.log.storage.system.enable": "true",
                                             "remote.log.storage.dir": tier_dir}))
    manager.startup(background=False)
    if not manager.has_topic("t"):
        manager.create_topic("t", 1, configs)
    plog = manager.get_log("t", 0)
    tier = manager.remote_logs.tier
    seen = {"n": 0}

    def stop_here(name):
        # The chosen call: say so and wait inside it for the parent's SIGKILL.
        print(name, flush=True)
        time.sleep(600)
        raise SystemExit("never killed")

    def at(name):
        if name == point:
            seen["n"] += 1
            return seen["n"] == hits
        return False

    class HalfRead:
        # A copy's source that gives half of the file, then stops the copy with that half written.
        def __init__(self, source, size):
            self.source, self.left = source, size // 2

        def read(self, n):
            if self.left <= 0:
                stop_here("copy")
            data = self.source.read(min(n, self.left))
            self.left -= len(data)
            return data

    put_file = tier.put_file

    def copying(path, source, size):
        if at("copy"):
            if size < 2:
                stop_here("copy")  # nothing to cut in half: stop before the file
            source = HalfRead(source, size)
        return put_file(path, source, size)

    delete = tier.delete

    def deleting(path):
        if at("tier-delete"):
            stop_here("tier-delete")
        return delete(path)

    replace = os.replace

    def renaming(src, dst, *args, **kwargs):
        replace(src, dst, *args, **kwargs)
        if str(dst).endswith(".deleted") and Path(dst).parent.name == "t-0" and at("local-delete"):
            stop_here("local-delete")  # this file renamed, the segment's next ones not yet

    tier.put_file, tier.delete, os.replace = copying, deleting, renaming
    print("ready", flush=True)
    while True:
        for _ in range(10):
            leo = plog.log_end_offset
            records = [SimpleRecord(int(time.time() * 1000), None, str(leo + j).encode() * 20) for j in range(20)]
            info = plog.append(build_batch(records))
            print("acked", info.last_offset, flush=True)
        now = int(time.time() * 1000) + 10_000
        manager.remote_logs.run_once(manager.opened_logs(), now)
        manager.run_retention_once(now)
''')


def run_and_kill(data: Path, tier: str, point: str, hits: int) -> int:
    """Run the child until it stops inside its `hits`-th call at `point`, SIGKILL it there; the last acked
    offset."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(data), str(tier), point, str(hits), repr(CONFIGS)],
                            stdout=subprocess.PIPE, text=True)
    acked, stopped = -1, False
    deadline = time.monotonic() + 120
    try:
        for line in proc.stdout:
            word, _, rest = line.strip().partition(" ")
            if word == "acked":
                acked = int(rest)
            elif word == point:
                stopped = True
                break
            assert time.monotonic() < deadline, f"the child never reached {point}"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    assert stopped, f"the child ended before {point}"
    return acked


def killed_inside(data: Path, tier: str, point: str) -> None:
    """What the kill left shows it fell inside the operation: a half-written copy (a directory tier's
    `.tmp`; an object store shows nothing of an upload cut short), a segment's files partly renamed
    `.deleted`, a tiered segment's record still DELETE_SEGMENT_STARTED."""
    if point == "copy" and "://" not in tier:
        assert list((Path(tier) / "t-0").glob("*.tmp"))
    elif point == "local-delete":
        assert list((data / "t-0").glob("*.deleted"))
    elif point == "tier-delete":
        from chronolog.storage.remote.tier import open_tier
        stored = open_tier(tier)
        records = [RemoteSegment.from_json(stored.read(f"t-0/{n}")) for n in stored.list("t-0")
                   if n.endswith(METADATA_SUFFIX)]
        assert any(r.state == "DELETE_SEGMENT_STARTED" for r in records)


def check(data: Path, tier: str, acked: int) -> tuple[int, int]:
    """Restart on the dirs, check everything; returns (log start offset, tiered segments)."""
    manager = LogManager(data, BrokerConfig({"remote.log.storage.system.enable": "true",
                                             "remote.log.storage.dir": tier}))
    manager.startup(background=False)
    try:
        plog = manager.get_log("t", 0)
        remote = plog.remote
        assert plog.log_end_offset >= acked + 1
        start = plog.log_start_offset
        records = list(plog.read_records(0))
        assert [r.offset for r in records] == list(range(start, plog.log_end_offset))  # once each, no gap
        assert all(r.value == str(r.offset).encode() * 20 for r in records)
        metas = remote.segments
        assert all(a.end_offset + 1 == b.base_offset for a, b in zip(metas, metas[1:], strict=False))
        if metas:
            assert start == metas[0].base_offset  # retention deletes whole segments
            assert metas[-1].end_offset + 1 >= plog.segments[0].base_offset  # the local log continues it
        else:
            assert start == plog.segments[0].base_offset
        files = remote.tier.list("t-0")
        listed = sorted(n for n in files if n.endswith(METADATA_SUFFIX))
        finished = [n for n in listed if RemoteSegment.from_json(remote.tier.read(f"t-0/{n}")).state ==
                    "COPY_SEGMENT_FINISHED"]
        assert finished == [m.name for m in metas]  # each listed once
        for meta in metas:
            for name, size in meta.files.items():
                assert files[name] == size  # whole
        kept = remote.size + sum(seg.size for seg in plog.segments if seg.base_offset > remote.highest_offset)
        assert start == 0 or kept >= int(CONFIGS["retention.bytes"])  # retention deleted no more than it may
        return start, len(metas)
    finally:
        manager.shutdown()


@pytest.fixture(params=["dir", "s3"])
def tier(request, tmp_path):
    if request.param == "dir":
        return str(tmp_path / "tier")
    return f"s3://tier/{tmp_path.name}{request.getfixturevalue('s3_tier')}"


# Where each run is killed, (point, its n-th call in that run): at least five runs inside copies and five
# inside local deletions (the count) in make test, twice that in make test-long (tests/scale.py).
# The call counts differ so that the kills fall on different files of a segment (a copy writes six or seven,
# the metadata record last; a local deletion renames four or five).
KILLS = [("copy", 3), ("local-delete", 2), ("copy", 7), ("tier-delete", 1), ("local-delete", 5), ("copy", 12),
         ("local-delete", 1), ("copy", 16), ("tier-delete", 4), ("local-delete", 3), ("copy", 9),
         ("local-delete", 7)]
KILLS += scaled([], [("copy", 5), ("local-delete", 4), ("copy", 14), ("tier-delete", 2), ("local-delete", 6),
                     ("copy", 20), ("local-delete", 9), ("copy", 6), ("tier-delete", 7), ("local-delete", 8),
                     ("copy", 11), ("local-delete", 10)])


@pytest.mark.slow
def test_sigkill_during_copies_and_deletions(tmp_path, tier):
    data = tmp_path / "data"
    starts = []
    for run, (point, hits) in enumerate(KILLS):
        acked = run_and_kill(data, tier, point, hits)
        killed_inside(data, tier, point)
        start, tiered = check(data, tier, acked)
        starts.append(start)
        assert run < 2 or tiered > 0
    assert starts == sorted(starts) and starts[-1] > 0  # retention went on across the kills
