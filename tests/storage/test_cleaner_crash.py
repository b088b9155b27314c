"""Crash safety of the cleaner's swap (`.cleaned` -> `.swap` -> final, Kafka's LogLoader rules): an exception
or a SIGKILL at every step, and SIGKILLs at random moments of a throttled cleaning, always leave a log that
opens with the same latest value per key, no record that was not written, no key back after its
tombstone was cleaned, and no `.cleaned`/`.swap` file."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap

import pytest

from chronolog.config import TopicConfig
from chronolog.records import SimpleRecord, build_batch
from chronolog.storage import PartitionLog
from chronolog.storage.cleaner import Cleaner, log_to_clean
from chronolog.storage.cleaner import cleaning as cleaner_mod

NOW = 1_700_000_000_000
DAY = 86_400_000
CONFIG = {"message.timestamp.after.max.ms": str(2**62), "message.timestamp.before.max.ms": str(2**62),
          "cleanup.policy": "compact", "segment.bytes": "5000", "delete.retention.ms": "0",
          "file.delete.delay.ms": "0"}


def build(directory) -> list[tuple]:
    """A log of 8 segments of 2000 bytes (cleaned in groups of two under segment.bytes=5000) with updates,
    tombstones, keys written once, and one transaction aborted; returns what was written."""
    plog = PartitionLog.open(directory, TopicConfig.from_kafka(dict(CONFIG, **{"segment.bytes": "2000"})))
    rng = random.Random(5)
    written = []
    for i in range(200):
        key = f"k{rng.randrange(30)}".encode() if i % 10 else f"once{i}".encode()
        value = None if i % 11 == 10 else f"v{i}".encode()
        off = plog.append(build_batch([SimpleRecord(NOW + i, key, value)]), now=NOW + i).first_offset
        written.append((off, NOW + i, key, value))
        if i == 100:
            plog.append(build_batch([SimpleRecord(NOW + i, b"k1", b"aborted")], producer_id=3, producer_epoch=0,
                                    base_sequence=0, is_transactional=True), now=NOW + i)
            plog.append_control(3, 0, False, 0, now=NOW + i)
    plog.roll()
    plog.close()
    return written


def latest(records) -> dict:
    out = {}
    for _off, _ts, key, value in records:
        out[key] = value
    return {k: v for k, v in out.items() if v is not None}


def read(directory) -> list[tuple]:
    plog = PartitionLog.open(directory, TopicConfig.from_kafka(CONFIG))
    try:
        return [(r.offset, r.timestamp, r.key, r.value) for r in plog.read_records(0, isolation="read_committed")]
    finally:
        plog.close()


def clean_once(directory, now: int = NOW + DAY) -> None:
    plog = PartitionLog.open(directory, TopicConfig.from_kafka(CONFIG))
    try:
        ltc, _ = log_to_clean(("t", 0), plog, None, now)
        Cleaner().clean(ltc, now)
    finally:
        plog.close()


def check_consistent(directory, written) -> list[tuple]:
    got = read(directory)
    assert latest(got) == latest(written)
    last = {}
    for rec in written:
        last[rec[2]] = rec
    assert {r for r in last.values() if r[3] is not None} <= set(got)  # each key's last record, as written
    assert set(got) <= set(written)  # offsets, timestamps, keys and values as written; nothing new
    assert [r[0] for r in got] == sorted(r[0] for r in got)
    leftovers = [n for n in os.listdir(directory) if n.endswith((".cleaned", ".swap"))]
    assert leftovers == []
    return got


@pytest.fixture
def steps(tmp_path):
    """The names of the steps of a whole cleaning of the fixture log."""
    seen = []
    build(tmp_path / "t-0")
    cleaner_mod.STEP_HOOK = seen.append
    try:
        clean_once(tmp_path / "t-0")
    finally:
        cleaner_mod.STEP_HOOK = None
    assert any(s.startswith("deleted:") for s in seen) and any(s.startswith("final:") for s in seen)
    return seen


def test_an_exception_at_each_step_leaves_the_same_data(tmp_path, steps):
    reference = tmp_path / "ref" / "t-0"
    written = build(reference)
    clean_once(reference)
    cleaned = check_consistent(reference, written)
    for n, step in enumerate(steps):
        directory = tmp_path / f"s{n}" / "t-0"
        build(directory)

        def boom(name, step=step):
            if name == step:
                raise OSError(5, "injected failure at " + name)
        cleaner_mod.STEP_HOOK = boom
        plog = PartitionLog.open(directory, TopicConfig.from_kafka(CONFIG))
        try:
            ltc, _ = log_to_clean(("t", 0), plog, None, NOW + DAY)
            try:
                Cleaner().clean(ltc, NOW + DAY)
            except OSError as exc:
                assert "injected" in str(exc)
            # the running log still answers with the written data
            live = [(r.offset, r.timestamp, r.key, r.value) for r in plog.read_records(0, isolation="read_committed")]
            assert latest(live) == latest(written)
        finally:
            cleaner_mod.STEP_HOOK = None
            plog.close()
        check_consistent(directory, written)
        clean_once(directory)  # and a later cleaning compacts all of it
        after = check_consistent(directory, written)
        assert len({r[2] for r in after}) == len(after) <= len(cleaned)


KILLER = textwrap.dedent("""
    import os, signal, sys
    from chronolog.config import TopicConfig
    from chronolog.storage import PartitionLog
    from chronolog.storage.cleaner import cleaning as cleaner_mod
    from chronolog.storage.cleaner import Cleaner, log_to_clean
    directory, step, config, now, rate = sys.argv[1], sys.argv[2], eval(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    def hook(name):
        if name == step:
            os.kill(os.getpid(), signal.SIGKILL)
    cleaner_mod.STEP_HOOK = hook
    plog = PartitionLog.open(directory, TopicConfig.from_kafka(config))
    ltc, _ = log_to_clean(("t", 0), plog, None, now)
    print("cleaning", flush=True)
    Cleaner(max_io_bytes_per_second=rate).clean(ltc, now)
    print("done", flush=True)
""")


def run_killer(directory, step: str, rate: float = 1e308, kill_after: float | None = None) -> str:
    proc = subprocess.Popen([sys.executable, "-c", KILLER, str(directory), step, repr(CONFIG), str(NOW + DAY),
                             str(rate)], stdout=subprocess.PIPE, text=True)
    try:
        if kill_after is not None:
            assert proc.stdout.readline().strip() == "cleaning"
            try:
                proc.wait(timeout=kill_after)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    return out


def test_sigkill_at_each_step_leaves_the_same_data(tmp_path, steps):
    # every step of the first group's swap (the files of base 0), the step that commits each later group's
    # swap (its `.log` renamed to `.swap`), and a few more of the later groups' (the order of the groups'
    # steps varies: a group's syncs overlap the swap before it)
    last = max(i for i, s in enumerate(steps) if s.endswith(("0" * 20 + ".index", "0" * 20 + ".timeindex",
                                                             "0" * 20 + ".log", ":0")))
    first = steps[:last + 1]
    rest = steps[len(first):]
    commits = [s for s in rest if s.startswith("swap:") and s.endswith(".log")]
    later = commits + random.Random(2).sample([s for s in rest if s not in commits],
                                              min(3, len(rest) - len(commits)))
    assert len(first) >= 8 and len(commits) >= 2  # the first group's whole swap, and later groups' commits
    for n, step in enumerate(first + later):
        directory = tmp_path / f"k{n}" / "t-0"
        written = build(directory)
        out = run_killer(directory, step)
        assert "done" not in out
        # a reader of the directory as the crash left it (a copy, a tool) reads what the next start gives
        names = sorted(os.listdir(directory))
        offline = PartitionLog.open_readonly(directory, TopicConfig.from_kafka(CONFIG))
        seen = [(r.offset, r.timestamp, r.key, r.value) for r in offline.read_records(0, isolation="read_committed")]
        offline.close()
        assert sorted(os.listdir(directory)) == names  # nothing changed by reading
        assert seen == check_consistent(directory, written), step
        clean_once(directory)
        check_consistent(directory, written)


def test_sigkill_at_random_moments_of_a_throttled_cleaning(tmp_path):
    rng = random.Random(11)
    directory = tmp_path / "t-0"
    written = build(directory)
    # a throttled cleaner takes about a second; each run is killed at a random moment, then reopened, and
    # the next run cleans what the log holds then
    killed = 0
    for _ in range(8):
        out = run_killer(directory, "never", rate=20_000, kill_after=rng.uniform(0.05, 1.0))
        killed += "done" not in out
        check_consistent(directory, written)
    assert killed >= 1
    clean_once(directory)
    assert latest(check_consistent(directory, written)) == latest(written)
