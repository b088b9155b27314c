"""franz-go's own integration suite (`pkg/kgo`, some 150 tests: produce and consume chains, consumer groups
of both protocols with static members, transactional ETL, admin) run unmodified against chronolog and
against Apache Kafka 4.4 with the same settings: every test that passes on Kafka passes on chronolog, or is
in KNOWN_DIFFERENCES with its reason (each one also in docs/differences.md).

make test runs the whole suite with a small record count (the suite's own KGO_TEST_RECORDS knob) and
without the tests of KNOWN_DIFFERENCES; make test-long runs them on Kafka too, with franz-go's own
500,000 records a chain (docs/compatibility.md has the counts of a run). The module comes through the Go
module proxy at run time: without `go` or the proxy the module skips.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.brokerproc import BrokerProcess
from tests.compat import franz_go
from tests.scale import scaled

REPO = Path(__file__).resolve().parents[2]

# Tests that pass on Kafka 4.4 and not on chronolog, with why. Each name is in docs/differences.md.
KNOWN_DIFFERENCES: dict[str, str] = {}
# Records a chain of TestGroupETL / TestTxnEtl produces and consumes (franz-go's own default: 500,000).
# 2,000 still takes every chain through its joins, leaves, rebalances and transaction aborts; what the
# larger count adds is load on the fetch and commit paths while groups move.
RECORDS = scaled(2_000, 500_000)
# Most of the suite is t.Parallel() and waits on the broker, not the CPU: Go's default of one test per core
# would leave two cores mostly idle.
PARALLEL = 8
# In make test the known differences are left out on both brokers (the share-group tests alone add half a
# minute to Kafka's run); the long tier runs them, so that their entries are checked against Kafka.
SKIP = None if scaled(False, True) or not KNOWN_DIFFERENCES else \
    "^(" + "|".join(map(re.escape, KNOWN_DIFFERENCES)) + ")$"
# A bound only for a hung run (a transactional chain that never commits retries forever): the binary then
# panics and every test still running counts as failed. A whole run takes about a minute, or three.
TIMEOUT = scaled(300, 1800)
# The configs the suite needs beyond Kafka's defaults, on both brokers: groups start rebalancing at once.
CONFIGS = {"group.initial.rebalance.delay.ms": "0"}


@pytest.fixture(scope="module")
def kgo_test(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        return franz_go.build(franz_go.cache_dir(REPO, tmp_path_factory.mktemp("franz-go")))
    except franz_go.Unavailable as exc:
        pytest.skip(f"franz-go's suite cannot run here: {exc}")


@pytest.fixture(scope="module")
def on_chronolog(kgo_test: Path, tmp_path_factory: pytest.TempPathFactory) -> franz_go.Results:
    broker = BrokerProcess(tmp_path_factory.mktemp("franz-go-broker") / "data", CONFIGS).start()
    try:
        return franz_go.run(kgo_test, broker.bootstrap, skip_regex=SKIP, records=RECORDS, parallel=PARALLEL,
                            timeout=TIMEOUT)
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def on_kafka(kgo_test: Path, kafka_broker) -> franz_go.Results:
    # The session's Kafka (tests/conftest.py) has group.initial.rebalance.delay.ms=0 already.
    return franz_go.run(kgo_test, kafka_broker.bootstrap, skip_regex=SKIP, records=RECORDS, parallel=PARALLEL,
                        timeout=TIMEOUT)


def test_what_passes_on_kafka_passes_on_chronolog(on_chronolog: franz_go.Results, on_kafka: franz_go.Results,
                                                  kgo_test: Path, tmp_path: Path):
    """A test lost on chronolog is run again, alone on a new broker, once: some of franz-go's tests race the
    rest of its suite (Test848RegexBrokerResolves stops once it has records from as many topics as it wants,
    and `__consumer_offsets`, which it also subscribes to, holds the other tests' commits). A broken feature
    fails both times, as the two bugs this test found did (docs/compatibility.md)."""
    assert on_kafka.passed(), f"nothing passed on Kafka: {on_kafka.raw[-3000:]}"
    first = sorted(on_kafka.passed() - on_chronolog.passed() - set(KNOWN_DIFFERENCES))
    again = on_chronolog
    if first:
        broker = BrokerProcess(tmp_path / "data", CONFIGS).start()
        try:
            again = franz_go.run(kgo_test, broker.bootstrap, run_regex="^(" + "|".join(first) + ")$",
                                 records=RECORDS, parallel=PARALLEL, timeout=TIMEOUT)
        finally:
            broker.stop()
    lost = sorted(set(first) - again.passed())
    details = "\n".join(f"--- {name} (first {on_chronolog.top.get(name, 'not run')}, then "
                        f"{again.top.get(name, 'not run')})\n{on_chronolog.log(name)}\n{again.log(name)}"
                        for name in lost)
    assert not lost, (f"pass on Kafka, not on chronolog: {lost}\n"
                      f"chronolog {on_chronolog.counts()}, Kafka {on_kafka.counts()}\n{details}")


def test_the_suite_ran_whole_on_chronolog(on_chronolog: franz_go.Results):
    """The binary ended by itself (no panic, no timeout) and ran the suite's produce, group and
    transaction chains: a run that stops early would pass the comparison with fewer tests."""
    assert {"TestGroupETL", "TestTxnEtl", "TestClient_Produce"} <= on_chronolog.passed(), on_chronolog.counts()
    assert "panic:" not in on_chronolog.raw, on_chronolog.raw[-3000:]


def test_the_suite_cleans_up_as_on_kafka(on_chronolog: franz_go.Results, on_kafka: franz_go.Results):
    """After each test the suite deletes its topics and groups and only logs a refusal: a group whose static
    member could not leave (LeaveGroup by group.instance.id, KIP-345) stays non-empty and is not deleted.
    GROUP_ID_NOT_FOUND is not counted: a test whose client closes before its first heartbeat never made its
    group, on either broker (TestConsumeRegexShareSkipsInternal does so when the machine is busy)."""
    def refusals(res: franz_go.Results) -> list[str]:
        return [line.strip() for line in res.raw.splitlines()
                if "unable to delete" in line and "GROUP_ID_NOT_FOUND" not in line]
    assert len(refusals(on_chronolog)) <= len(refusals(on_kafka)), refusals(on_chronolog)[:10]


def test_known_differences_are_documented():
    text = (REPO / "docs" / "differences.md").read_text()
    assert [name for name in KNOWN_DIFFERENCES if name not in text] == []


def test_a_test_cut_short_counts_as_failed():
    """A test the binary was running when it panicked has no final event: parse() fails it."""
    events = "\n".join([
        '{"Action":"run","Test":"TestA"}', '{"Action":"pass","Test":"TestA"}',
        '{"Action":"run","Test":"TestB"}', '{"Action":"run","Test":"TestB/sub"}',
        '{"Action":"output","Test":"TestB","Output":"panic: test timed out\\n"}',
        '{"Action":"run","Test":"TestC"}', '{"Action":"skip","Test":"TestC"}',
    ])
    res = franz_go.parse(events)
    assert res.top == {"TestA": "pass", "TestB": "fail", "TestC": "skip"}
    assert res.counts() == {"passed": 1, "failed": 1, "skipped": 1}
    assert "panic" in res.log("TestB")
