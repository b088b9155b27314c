"""What users of Kafka's own tools expect, against the real broker: consume --follow / --max-messages,
groups list/describe/delete with lag in records and time, topics delete and more partitions, client
configs for TLS and SASL (-X, --command-config), and the tools saying when retention deleted records."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from chronolog.timetravel.timefmt import now_ms
from tests.brokerproc import BrokerProcess
from tests.cli.conftest import assert_one_line_error, chronolog
from tests.waiting import readable

BASE = 1_700_000_000_000


def _produce(bootstrap: str, topic: str, stamps: list[int], partition: int = 0, prefix: str = "v") -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for i, ts in enumerate(stamps):
        p.produce(topic, value=f"{prefix}{i}".encode(), key=b"k", partition=partition, timestamp=ts)
    assert p.flush(30) == 0


def _follow(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "chronolog.cli.main", "consume", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _readline(proc: subprocess.Popen, timeout: float = 30) -> str:
    assert readable(proc.stdout, timeout), "no line from consume --follow"
    return proc.stdout.readline()


def test_follow_prints_the_window_then_new_records_until_max_messages(cli_broker):
    b = cli_broker.bootstrap
    assert chronolog("topics", "create", "tail", "--partitions", "2", "-b", b).rc == 0
    start = now_ms() - 60_000
    _produce(b, "tail", [start - 3_600_000], prefix="old")  # before the window: never printed
    _produce(b, "tail", [start + 1], prefix="early")         # in it, before the follower starts
    proc = _follow("tail", "--follow", "--from", str(start), "--max-messages", "4", "-b", b, "--format", "json")
    try:
        assert json.loads(_readline(proc))["value"] == "early0"
        _produce(b, "tail", [now_ms()] * 3, partition=1, prefix="new")
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill() if proc.poll() is None else None
    assert proc.returncode == 0, err
    assert [json.loads(line)["value"] for line in out.splitlines()] == ["new0", "new1", "new2"]


def test_follow_stops_on_ctrl_c_and_on_timeout(cli_broker):
    b = cli_broker.bootstrap
    assert chronolog("topics", "create", "quiet", "-b", b).rc == 0
    r = chronolog("consume", "quiet", "--follow", "--timeout-ms", "300", "-b", b)
    assert r.rc == 0 and r.out == "" and r.err == ""
    _produce(b, "quiet", [now_ms()])
    proc = _follow("quiet", "--follow", "--from", "1h ago", "-b", b)
    try:
        assert "quiet-0@0" in _readline(proc)
        os.kill(proc.pid, signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
    finally:
        proc.kill() if proc.poll() is None else None
    assert proc.returncode in (0, 130) and "Traceback" not in err, err  # 130: Ctrl-C before the tail began
    assert_one_line_error(chronolog("consume", "quiet", "--from", "1h ago", "--timeout-ms", "5", "-b", b),
                          "--timeout-ms goes with --follow")
    assert_one_line_error(chronolog("consume", "quiet", "-b", b), "give --from")


def test_max_messages_in_a_window(cli_broker):
    b = cli_broker.bootstrap
    assert chronolog("topics", "create", "maxm", "-b", b).rc == 0
    _produce(b, "maxm", [BASE + i for i in range(10)])
    r = chronolog("consume", "maxm", "--from", str(BASE + 2), "--max-messages", "3", "-b", b, "--format", "raw")
    assert r.rc == 0 and r.out == "v2\nv3\nv4\n"


def test_groups_list_describe_lag_and_delete(cli_broker):
    b = cli_broker.bootstrap
    assert chronolog("topics", "create", "lagged", "-b", b).rc == 0
    stamps = [BASE + i * 60_000 for i in range(10)]
    _produce(b, "lagged", stamps)
    consumer = Consumer({"bootstrap.servers": b, "group.id": "lag-g", "enable.auto.commit": False,
                         "session.timeout.ms": 6000})
    try:
        consumer.subscribe(["lagged"])
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert consumer.assignment()
        info = json.loads(chronolog("groups", "describe", "lag-g", "-b", b, "--json").out)
        assert [(r["partition"], r["committed"], r["lag"]) for r in info["partitions"]] == [(0, None, None)]
        consumer.commit(offsets=[TopicPartition("lagged", 0, 2)], asynchronous=False)
        listed = json.loads(chronolog("groups", "list", "-b", b, "--json").out)
        assert {"group": "lag-g", "type": "classic", "state": "STABLE"} in listed
        info = json.loads(chronolog("groups", "describe", "lag-g", "-b", b, "--json").out)
        assert info["state"] == "STABLE" and len(info["members"]) == 1
        assert info["members"][0]["partitions"] == ["lagged-0"]
        [row] = info["partitions"]
        assert (row["committed"], row["log_end"], row["lag"]) == (2, 10, 8)
        assert row["lag_ms"] == stamps[9] - stamps[2] and row["member"] == info["members"][0]["member_id"]
        table = chronolog("groups", "describe", "lag-g", "-b", b).out
        assert "7m0.000s" in table
        assert_one_line_error(chronolog("groups", "delete", "lag-g", "-b", b), "delete group lag-g")
    finally:
        consumer.close()
    r = chronolog("groups", "delete", "lag-g", "-b", b)
    assert r.rc == 0, r.err
    assert "lag-g" not in chronolog("groups", "list", "-b", b).out
    assert_one_line_error(chronolog("groups", "describe", "lag-g", "-b", b), "does not exist")


def test_topics_delete_and_more_partitions(cli_broker):
    b = cli_broker.bootstrap
    assert chronolog("topics", "create", "grow", "-b", b).rc == 0
    r = chronolog("topics", "alter", "grow", "--partitions", "3", "-b", b)
    assert r.rc == 0, r.err
    assert json.loads(chronolog("topics", "list", "-b", b, "--json").out)["grow"] == 3
    assert_one_line_error(chronolog("topics", "alter", "grow", "--partitions", "2", "-b", b), "add partitions")
    assert chronolog("topics", "delete", "grow", "-b", b).rc == 0
    assert "grow" not in json.loads(chronolog("topics", "list", "-b", b, "--json").out)
    assert_one_line_error(chronolog("topics", "delete", "grow", "-b", b), "delete grow")


def test_tools_say_when_retention_deleted_the_records(tmp_path):
    broker = BrokerProcess(tmp_path / "data", {"log.retention.check.interval.ms": "200",
                                               "file.delete.delay.ms": "0"}).start()
    try:
        b = broker.bootstrap
        assert chronolog("topics", "create", "old", "-b", b).rc == 0
        lines = "".join(f"2005-06-14T15:00:{i:02d}Z line {i}\n" for i in range(20))
        r = chronolog("produce", "old", "--time-field", "1", "-b", b, stdin=lines)
        assert r.rc == 0 and "older than the topic's retention.ms=604800000" in r.err
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            out = json.loads(chronolog("offsets", "old", "--time", "2005-06-14", "-b", b, "--json").out)
            if out["partitions"][0]["start_offset"] == 20:
                break
            time.sleep(0.2)
        note = "every record deleted by retention (log start offset 20)"
        assert note in out["partitions"][0]["note"]
        r = chronolog("consume", "old", "--from", "2005-06-14", "-b", b)
        assert r.rc == 0 and r.out == "" and note in r.err
        _produce(b, "old", [now_ms()])
        note = "T is before the log start: earlier records deleted by retention (log start offset 20)"
        r = chronolog("reset-offsets", "--group", "g", "--topic", "old", "--to-datetime", "2005-06-14", "-b", b,
                      "--json")
        assert json.loads(r.out)["partitions"][0]["note"] == note
        r = chronolog("consume", "old", "--from", "2005-06-14", "-b", b)
        assert r.rc == 0 and len(r.out.splitlines()) == 1 and note in r.err
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def sasl_ssl_broker(tmp_path_factory):
    trustme = pytest.importorskip("trustme")
    from chronolog.security.credentials import CredentialStore
    base = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(base / "ca.pem"))
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(base / "server.pem"))
    data = base / "data"
    data.mkdir()
    CredentialStore(data).upsert("alice", "SCRAM-SHA-512", "alice-secret")
    proc = BrokerProcess(data, {"listeners": "SASL_SSL://127.0.0.1:0", "ssl.keystore.location": str(base / "server.pem"),
                                "sasl.enabled.mechanisms": "SCRAM-SHA-512"}).start()
    yield proc, base
    proc.stop()


def test_client_configs_reach_every_command_over_sasl_ssl(sasl_ssl_broker):
    proc, base = sasl_ssl_broker
    b = proc.bootstrap_for("SASL_SSL")
    props = base / "client.properties"
    props.write_text(f"# as kafka-topics.sh --command-config takes it\nsecurity.protocol=SASL_SSL\n"
                     f"ssl.ca.location={base / 'ca.pem'}\nsasl.mechanism=SCRAM-SHA-512\n")
    auth = ["-b", b, "--command-config", str(props), "-X", "sasl.username=alice", "-X", "sasl.password=alice-secret"]
    assert chronolog("topics", "create", "secure", *auth).rc == 0
    r = chronolog("produce", "secure", "--time-field", "1", "--time-format", "epoch_ms", *auth,
                  stdin=f"{BASE} a\n{BASE + 1} b\n")
    assert r.rc == 0, r.err
    r = chronolog("consume", "secure", "--from", str(BASE), *auth, "--format", "raw")
    assert r.rc == 0 and r.out == f"{BASE} a\n{BASE + 1} b\n", r.err
    r = chronolog("offsets", "secure", "--time", str(BASE + 1), *auth, "--json")
    assert json.loads(r.out)["partitions"][0]["offset"] == 1
    for args in (["topics", "list"], ["topics", "describe", "secure"], ["groups", "list"],
                 ["reset-offsets", "--group", "sg", "--topic", "secure", "--to-earliest", "--execute"],
                 ["groups", "describe", "sg"]):
        r = chronolog(*args, *auth)
        assert r.rc == 0, (args, r.err)
    # a wrong password is one line, not a hang or librdkafka's log
    wrong = [*auth[:-1], "sasl.password=wrong"]
    r = chronolog("topics", "list", *wrong)
    assert_one_line_error(r, "authentication failed with ", "invalid credentials with SASL mechanism SCRAM-SHA-512")



def test_a_certificate_from_another_ca_is_one_line_naming_tls(sasl_ssl_broker):
    """The broker's certificate checked against a CA that did not sign it: librdkafka's verify error, at once."""
    import trustme
    proc, base = sasl_ssl_broker
    other = base / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    r = chronolog("topics", "list", "-b", proc.bootstrap_for("SASL_SSL"), "-X", "security.protocol=SASL_SSL",
                  "-X", f"ssl.ca.location={other}", "-X", "sasl.mechanism=SCRAM-SHA-512",
                  "-X", "sasl.username=alice", "-X", "sasl.password=alice-secret")
    assert_one_line_error(r, "TLS handshake failed with ", "certificate verify failed")

def test_a_java_tools_properties_file_works(sasl_ssl_broker):
    """The file a Kafka user already has for kafka-topics.sh --command-config: JAAS line included."""
    proc, base = sasl_ssl_broker
    b = proc.bootstrap_for("SASL_SSL")
    props = base / "java.properties"
    props.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                     f"ssl.ca.location={base / 'ca.pem'}\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                     'username="alice" password="alice-secret";\n')
    r = chronolog("topics", "list", "-b", b, "--command-config", str(props), "--json")
    assert r.rc == 0, r.err
    props.write_text(props.read_text() + "ssl.truststore.location=/etc/kafka/truststore.jks\n")
    assert_one_line_error(chronolog("topics", "list", "-b", b, "--command-config", str(props)),
                          "ssl.truststore.location", "ssl.ca.location")


def test_follow_survives_a_broker_restart(tmp_path):
    broker = BrokerProcess(tmp_path / "data").start()
    proc = None
    try:
        b = broker.bootstrap
        assert chronolog("topics", "create", "restarted", "-b", b).rc == 0
        _produce(b, "restarted", [now_ms()], prefix="before")
        proc = _follow("restarted", "--follow", "--from", "1h ago", "--max-messages", "3", "-b", b, "--format", "raw")
        assert _readline(proc) == "before0\n"
        broker.restart()
        _produce(b, "restarted", [now_ms(), now_ms()], prefix="after")
        out, err = proc.communicate(timeout=90)
        assert proc.returncode == 0, err
        assert out == "after0\nafter1\n" and "Traceback" not in err
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        broker.stop()
