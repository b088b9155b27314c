"""The offline readers on files a real transactional producer (librdkafka, through the broker) wrote: a data
dir read with read_committed returns what a read_committed consumer of the broker returns, while a
transaction is still open and after the broker was killed; dump-log shows the markers and the .txnindex."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from typer.testing import CliRunner

from chronolog.cli.main import app
from chronolog.timetravel.sources import BrokerSource, DataDirSource
from tests.brokerproc import BrokerProcess

pytestmark = pytest.mark.compat


def produce(p: Producer, values: list[bytes]) -> None:
    for v in values:
        p.produce("tx", value=v, partition=0)
    assert p.flush(20) == 0


def test_data_dir_reads_committed_as_a_read_committed_consumer(tmp_path):
    broker = BrokerProcess(tmp_path / "data", {"transaction.state.log.num.partitions": "2"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("tx", 1, 1)])["tx"].result(15)
        p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "offline-readers", "linger.ms": 5})
        p.init_transactions(20)
        p.begin_transaction()
        produce(p, [b"c1", b"c2"])
        p.commit_transaction(20)
        p.begin_transaction()
        produce(p, [b"a1", b"a2"])
        p.abort_transaction(20)
        p.begin_transaction()
        produce(p, [b"c3"])
        p.commit_transaction(20)
        p.begin_transaction()
        produce(p, [b"open"])  # left open while the files are read

        online = BrokerSource(broker.bootstrap)
        want_committed = [b"c1", b"c2", b"c3"]
        assert [r.value for r in online.read("tx", 0, 0, 100, isolation="read_committed")] == want_committed
        offline = DataDirSource(tmp_path / "data")
        assert [r.value for r in offline.read("tx", 0, 0, 100, isolation="read_committed")] == want_committed
        assert [r.value for r in offline.read("tx", 0, 0, 100)] == [b"c1", b"c2", b"a1", b"a2", b"c3", b"open"]
        lso = offline.watermarks("tx", 0, isolation="read_committed")[1]
        assert lso == online.watermarks("tx", 0, isolation="read_committed")[1]
        assert lso < offline.watermarks("tx", 0)[1]
        offline.close()
        online.close()
        broker.kill()  # the open transaction stays open in the files
        after = DataDirSource(tmp_path / "data")
        assert [r.value for r in after.read("tx", 0, 0, 100, isolation="read_committed")] == want_committed
        assert after.watermarks("tx", 0, isolation="read_committed")[1] == lso
        after.close()
    finally:
        broker.stop()

    part = tmp_path / "data" / "tx-0"
    text = CliRunner().invoke(app, ["dump-log", str(part / "00000000000000000000.log")]).output
    assert text.count("endTxnMarker: COMMIT coordinatorEpoch: ") == 2
    assert text.count("endTxnMarker: ABORT coordinatorEpoch: ") == 1
    index = CliRunner().invoke(app, ["dump-log", str(part / "00000000000000000000.txnindex")]).output
    assert "version: 0 producerId: " in index and "firstOffset: 3 lastOffset: 5 lastStableOffset: 6" in index
