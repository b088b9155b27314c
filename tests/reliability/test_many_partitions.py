"""Thousands of partitions on one broker under an ordinary open-files limit (issue: bounded open files,
fast recovery, clean failure at the limit). The broker runs as a subprocess whose RLIMIT_NOFILE is set
before exec (`ulimit -n`); clients are confluent-kafka."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from tests.reliability.manypartitions import LimitedBroker, nofile_limit, run
from tests.scale import scaled


def _error_of(future) -> KafkaError:
    with pytest.raises(Exception) as info:
        future.result(30)
    return info.value.args[0]


def test_a_create_past_a_tiny_limit_leaves_no_trace_and_says_why(tmp_path):
    """Under `ulimit -n 20` the open-file cache's floor (16) plus the broker's own descriptors do not fit:
    creating 30 partitions runs out of descriptors. Nothing of the topic (or of the added partitions)
    stays in Metadata or on disk, the answer is KAFKA_STORAGE_ERROR naming the cause and the figures, and
    the broker logs one ERROR line; it keeps serving (a small topic is created and grown after)."""
    broker = LimitedBroker(tmp_path / "data", 20)
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("small", 1, 1)])["small"].result(30)
        err = _error_of(admin.create_topics([NewTopic("big", 30, 1)])["big"])
        assert err.code() == KafkaError.KAFKA_STORAGE_ERROR
        assert "Too many open files" in err.str() and "limit 20 (ulimit -n)" in err.str(), err.str()
        err = _error_of(admin.create_partitions([NewPartitions("small", 30)])["small"])
        assert err.code() == KafkaError.KAFKA_STORAGE_ERROR and "Too many open files" in err.str()
        md = admin.list_topics(timeout=10)
        assert "big" not in md.topics and len(md.topics["small"].partitions) == 1
        names = sorted(p.name for p in broker.data_dir.iterdir())
        assert not [n for n in names if n.startswith("big") or re.fullmatch(r"small-([1-9]\d*)", n)], names
        errors = [line for line in broker.log_text().splitlines() if line.startswith("ERROR")]
        assert len(errors) == 2 and all("files open, limit 20" in line for line in errors), errors
        admin.create_partitions([NewPartitions("small", 2)])["small"].result(30)
        assert len(admin.list_topics(timeout=10).topics["small"].partitions) == 2
    finally:
        broker.stop()


def test_an_open_files_budget_at_the_limit_is_refused_with_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "chronolog.cli.main", "serve", "--data-dir", str(tmp_path / "d"),
                           "--port", "0", "--config", "chronolog.log.open.files.max=300"],
                          capture_output=True, text=True, timeout=60, preexec_fn=nofile_limit(256))
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines[-1].endswith("chronolog.log.open.files.max=300 is not below the open-files limit 256 (ulimit -n): "
                              "sockets and other files need descriptors too"), proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_thousands_of_partitions_under_a_small_ulimit(tmp_path):
    """The issue's operator run: far more partitions than descriptors, topics of 100 partitions created, 10
    records produced into each, every partition read back, one ListOffsets by time over all of them, a clean
    stop and restart (the stop exits by itself, the restart trusts its marker) and a restart after SIGKILL
    (which recovers), then everything read again: every record is there, no lookup is off,
    and the broker never logs EMFILE nor holds more descriptors than its limit. (Before the open-file cache
    each partition held 5 descriptors: about 200 partitions fit under 1024, 50 under 256.)
    `make test` runs 2,000 partitions under ulimit -n 256, about 10 s; the long run (tests/scale.py) the
    issue's 10,000 under 1024, about one minute."""
    topics, limit = scaled((20, 256), (100, 1024))
    partitions = topics * 100
    res = run(tmp_path / "data", topics=topics, per_topic=100, limit=limit, records=10)
    assert not res.errors, res.errors
    # The SIGTERM stop finished by itself (it is SIGKILLed after 120 s) and left a marker the restart trusted.
    assert res.clean_stop_rc == 0 and res.clean_opened_how == "after a clean shutdown", res
    assert res.kill_opened_how == "recovered from the recovery points", res
    assert res.list_offsets_exact == partitions
    assert res.read_records == 10 * partitions and res.after_restarts_records == 10 * partitions, res.read_missing
    assert 0 < res.peak_fds <= limit
