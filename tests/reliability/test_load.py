"""A bounded load test: 3 confluent-kafka producer processes (acks=all, 4000 records/s each) for 5 s (15 s in
the long run, tests/scale.py) against a broker subprocess, read meanwhile by a group of 2 confluent-kafka
consumers and by a kafka-python consumer in a group of its own. Every acknowledged record must reach each
group exactly once, with no client error, and the broker's peak RSS (VmHWM) must stay under 1 GiB. The
figures (records/s, MB/s, peak RSS) are recorded as test properties and written to `load-summary.json` in
the test's tmp dir; `python -m bench load` prints the same run as a table."""

from __future__ import annotations

import json

from tests.reliability.loadrun import run_load
from tests.scale import scaled

PEAK_RSS_BOUND_MB = 1024
# Sustained, not flat out: kafka-python reads some 30k records/s here, so an unthrottled run would spend
# most of its time waiting for it to drain. `python -m bench load` measures the unthrottled rate.
RATE_PER_PRODUCER = 4000
# Some 60,000 records in 5 s already cross many fetches, commits and segment rolls of both groups.
SECONDS = scaled(5.0, 15.0)


def test_three_producers_and_two_groups_for_some_seconds(tmp_path, record_property):
    result = run_load(tmp_path / "data", producers=3, group_consumers=2, kafka_python=True, seconds=SECONDS,
                      rate=RATE_PER_PRODUCER)
    summary = result.as_dict()
    (tmp_path / "load-summary.json").write_text(json.dumps(summary, indent=2))
    for key in ("acked", "produce_records_per_s", "produce_mb_per_s", "drain_seconds", "broker_vmhwm_mb",
                "broker_vmrss_mb"):
        record_property(key, summary[key])
    assert not result.errors, result.errors[:5]
    assert result.acked > 1000
    for group in ("load-group", "load-kafka-python"):
        assert result.missing[group] == 0, f"{group}: {result.missing[group]} acknowledged records never read"
        assert result.duplicates[group] == 0, f"{group}: {result.duplicates[group]} records read twice"
        assert result.consumed[group] == result.acked
    assert 0 < result.broker_vmhwm_mb < PEAK_RSS_BOUND_MB
