"""The Spark source with `kafka.isolation.level`, in both modes, over transactions a real transactional
producer (librdkafka) wrote: read_committed returns exactly the committed records, never an aborted one nor
a transaction marker, and nothing of a transaction still open; read_uncommitted returns every data record."""

from __future__ import annotations

import pytest

from tests.brokerproc import BrokerProcess
from tests.compat.test_transactions import TXN_CONFIGS, create_topics, producer

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def txn_data(tmp_path_factory):
    """Per partition: committed, aborted and committed again, then a transaction left open."""
    root = tmp_path_factory.mktemp("txn-spark") / "data"
    proc = BrokerProcess(root, TXN_CONFIGS).start()
    try:
        yield (proc, root, *_write_transactions(proc.bootstrap))
    finally:
        proc.stop()


def _write_transactions(bs: str) -> tuple[list[str], list[str]]:
    create_topics(bs, "tx")
    p = producer(bs, "spark-isolation")
    committed: list[str] = []
    everything: list[str] = []
    for round_, commit in enumerate((True, False, True)):
        p.begin_transaction()
        for i in range(40):
            value = f"r{round_}-{i}"
            p.produce("tx", value=value.encode(), partition=i % 2)
            everything.append(value)
            if commit:
                committed.append(value)
        p.flush(30)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
    p.begin_transaction()  # left open: read_committed stops before it
    for i in range(10):
        p.produce("tx", value=f"open-{i}".encode(), partition=i % 2)
        everything.append(f"open-{i}")
    p.flush(30)
    return committed, everything


def _values(spark, isolation: str, where: dict[str, str]) -> list[str]:
    reader = spark.read.format("chronolog").option("subscribe", "tx").option("kafka.isolation.level", isolation)
    for k, v in where.items():
        reader = reader.option(k, v)
    return sorted(r.value.decode() for r in reader.load().select("value").collect())


@pytest.mark.parametrize("mode", ["kafka.bootstrap.servers", "path"])
def test_read_committed_returns_exactly_the_committed_records(spark, txn_data, mode):
    proc, root, committed, everything = txn_data
    where = {mode: proc.bootstrap if mode == "kafka.bootstrap.servers" else str(root)}
    assert _values(spark, "read_committed", where) == sorted(committed)
    assert _values(spark, "read_uncommitted", where) == sorted(everything)
