"""A real crash: a subprocess appends and reports each acknowledged offset, we SIGKILL it mid-stream,
reopen, and everything acknowledged must be there with correct lookups."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from chronolog.config import TopicConfig
from chronolog.storage import PartitionLog

WRITER = textwrap.dedent("""
    import sys
    from chronolog.config import TopicConfig
    from chronolog.records import SimpleRecord, build_batch
    from chronolog.storage import PartitionLog
    cfg = TopicConfig.from_kafka({"segment.bytes": "20000", "index.interval.bytes": "500",
                                  "flush.messages": "1", "message.timestamp.after.max.ms": str(2**62)})
    plog = PartitionLog.open(sys.argv[1], cfg)
    i = plog.log_end_offset
    while True:
        ts = 1_000_000 + (i * 7919) % 5000          # out of order on purpose
        info = plog.append(build_batch([SimpleRecord(ts, None, b"rec-%d" % i)]))
        sys.stdout.write(f"{info.first_offset} {ts}\\n")  # acknowledged only after the append returned
        sys.stdout.flush()
        i += 1
""")


def test_sigkill_during_appends_loses_nothing_acknowledged(tmp_path):
    directory = tmp_path / "t-0"
    acked: dict[int, int] = {}
    for round_ in range(3):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(directory)], stdout=subprocess.PIPE,
                                text=True)
        deadline = time.monotonic() + 60
        while len(acked) < 400 * (round_ + 1) and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            off, ts = map(int, line.split())
            acked[off] = ts
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        for line in proc.stdout.read().splitlines():  # acknowledged before the kill landed
            if line.strip():
                off, ts = map(int, line.split())
                acked[off] = ts
        # The kill may also leave a torn batch; simulate the worst case by appending half a batch.
        with open(sorted(directory.glob("*.log"))[-1], "ab") as f:
            f.write(b"\0\0\0\0\0\0\0\0\0\0\0\x50garbage")
    plog = PartitionLog.open(directory, TopicConfig.from_kafka({"segment.bytes": "20000",
                                                                "index.interval.bytes": "500"}))
    stored = {r.offset: r for r in plog.read_records(0)}
    assert len(plog.segments) > 3
    for off, ts in acked.items():
        assert stored[off].timestamp == ts and stored[off].value == b"rec-%d" % off
    assert sorted(stored) == list(range(len(stored)))  # no holes, no duplicates
    for target in range(999_990, 1_005_010, 97):
        want = min((o for o, r in stored.items() if r.timestamp >= target), default=None)
        got = plog.offset_for_timestamp(target)
        assert (got.offset if got else None) == want
    for seg in plog.segments:
        seg.sanity_check()
