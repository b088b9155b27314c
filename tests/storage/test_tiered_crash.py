"""SIGKILL while segments are copied to the tier, while local copies are deleted and while tiered segments
are deleted by retention (several runs on the same data dir and tier): after each, a restart reads every
acknowledged record exactly once, the tier lists each segment once and whole, and the copies resume."""

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
from tests.storage.test_tiered import s3_tier  # noqa: F401  (the S3 server fixture)

CONFIGS = {"remote.storage.enable": "true", "segment.bytes": "40000", "local.retention.ms": "1",
           "retention.bytes": "400000", "retention.ms": "-1",
           "index.interval.bytes": "1024"}

CHILD = textwrap.dedent('''
    import sys, time
    from pathlib import Path
    from chronolog.config import BrokerConfig
    from chronolog.records import SimpleRecord, build_batch
    from chronolog.storage import LogManager

    data, tier_dir, point = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    configs = eval(sys.argv[4])
    manager = LogManager(data, BrokerConfig({"remote.log.storage.system.enable": "true",
                                             "remote.log.storage.dir": tier_dir}))
    manager.startup(background=False)
    if not manager.has_topic("t"):
        manager.create_topic("t", 1, configs)
    plog = manager.get_log("t", 0)
    tier = manager.remote_logs.tier

    def marked(name, fn):
        def wrapped(*args, **kwargs):
            print(name, flush=True)  # the parent kills on the marker it waits for: inside this call
            time.sleep(0.002)
            return fn(*args, **kwargs)
        return wrapped

    tier.put_file = marked("copy", tier.put_file)
    tier.delete = marked("tier-delete", tier.delete)
    plog._schedule_delete = marked("local-delete", plog._schedule_delete)
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
    """Run the child until it has reached `point` `hits` times, SIGKILL it there; the last acked offset."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(data), str(tier), point, repr(CONFIGS)],
                            stdout=subprocess.PIPE, text=True)
    acked, seen = -1, 0
    deadline = time.monotonic() + 120
    try:
        for line in proc.stdout:
            word, _, rest = line.strip().partition(" ")
            if word == "acked":
                acked = int(rest)
            elif word == point:
                seen += 1
                if seen >= hits:
                    break
            assert time.monotonic() < deadline, f"the child never reached {point}"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    assert seen >= hits, f"the child ended before {point}"
    return acked


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
        return start, len(metas)
    finally:
        manager.shutdown()


@pytest.fixture(params=["dir", "s3"])
def tier(request, tmp_path):
    if request.param == "dir":
        return str(tmp_path / "tier")
    return f"s3://tier/{tmp_path.name}{request.getfixturevalue('s3_tier')}"


@pytest.mark.slow
def test_sigkill_during_copies_and_deletions(tmp_path, tier):
    data = tmp_path / "data"
    starts = []
    for run, (point, hits) in enumerate([("copy", 3), ("local-delete", 2), ("copy", 7), ("tier-delete", 1),
                                         ("local-delete", 5), ("copy", 12), ("tier-delete", 4)]):
        acked = run_and_kill(data, tier, point, hits)
        start, tiered = check(data, tier, acked)
        starts.append(start)
        assert run < 2 or tiered > 0
    assert starts == sorted(starts) and starts[-1] > 0  # retention went on across the kills
