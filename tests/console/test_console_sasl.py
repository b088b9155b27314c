"""The console in front of a broker that only speaks SASL_SSL (SCRAM-SHA-512, a CA of its own): credentials
as the CLI takes them (-X pairs, --command-config), pages and a rewind through them; wrong credentials are a
message on the page."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from chronolog.security.credentials import CredentialStore
from tests.brokerproc import BrokerProcess
from tests.console.conftest import ConsoleProcess, csrf_of, get

trustme = pytest.importorskip("trustme")
BASE = 1_700_000_000_000


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory):
    base = tmp_path_factory.mktemp("sasl")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(base / "ca.pem"))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(base / "server.pem"))
    data = base / "data"
    data.mkdir()
    CredentialStore(data).upsert("admin", "SCRAM-SHA-512", "admin-secret")
    proc = BrokerProcess(data, {"listeners": "SASL_SSL://127.0.0.1:0", "ssl.keystore.location": str(base / "server.pem"),
                                "sasl.enabled.mechanisms": "SCRAM-SHA-512"}).start()
    conf = {"bootstrap.servers": proc.bootstrap_for("SASL_SSL"), "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "admin", "sasl.password": "admin-secret",
            "ssl.ca.location": str(base / "ca.pem")}
    admin = AdminClient(conf)  # kept alive until its future resolves
    admin.create_topics([NewTopic("secure", 1, 1, config={"retention.ms": "-1"})])["secure"].result(15)
    producer = Producer(conf)
    for i in range(40):
        producer.produce("secure", value=b"%d" % i, partition=0, timestamp=BASE + i * 1000)
    assert producer.flush(30) == 0
    c = Consumer({**conf, "group.id": "secure-group", "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition("secure", 0, 40)], asynchronous=False)
    c.close()
    yield proc, conf, base
    proc.stop()


def test_pages_and_a_rewind_through_sasl_ssl(sasl_broker, tmp_path):
    proc, conf, base = sasl_broker
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=admin\n"
                     f"ssl.ca.location={base / 'ca.pem'}\n")
    console = ConsoleProcess("--bootstrap-server", conf["bootstrap.servers"], "--command-config", str(props),
                             "-X", "sasl.password=admin-secret", log=tmp_path / "console.log")
    try:
        status, page = get(console.url("/"))
        assert status == 200 and '<a href="/topics/secure">secure</a>' in page
        status, page = get(console.url("/api/topics/secure/timeline", step=10_000))
        assert status == 200 and '"totals": [10, 10, 10, 10]' in page
        status, page = get(console.url("/groups/secure-group"))
        assert status == 200 and 'state <b id="state">EMPTY</b>' in page
        status, page = get(console.url("/groups/secure-group/rewind"),
                           {"csrf": csrf_of(page), "topic": "secure", "time": str(BASE + 25_000), "action": "apply"})
        assert status == 200 and "rewound to" in page, page
        c = Consumer({**conf, "group.id": "secure-group"})
        try:
            assert c.committed([TopicPartition("secure", 0)], timeout=15)[0].offset == 25
        finally:
            c.close()
    finally:
        console.stop()


def test_wrong_credentials_are_a_message(sasl_broker, tmp_path):
    proc, conf, base = sasl_broker
    console = ConsoleProcess("--bootstrap-server", conf["bootstrap.servers"], "-X", "security.protocol=SASL_SSL",
                             "-X", "sasl.mechanism=SCRAM-SHA-512", "-X", "sasl.username=admin",
                             "-X", "sasl.password=wrong", "-X", f"ssl.ca.location={base / 'ca.pem'}",
                             log=tmp_path / "console.log")
    try:
        status, page = get(console.url("/"))
        assert status == 502 and "Traceback" not in page
        assert 'role="alert"' in page
        assert "authentication failed with " in page and "invalid credentials" in page, page
    finally:
        console.stop()
