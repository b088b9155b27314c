"""The pytest plugin, run in pytest's own `pytester` (each inner session a subprocess, as a user's run is):
its fixtures work with a real client, topics are isolated between tests, two xdist workers get two
brokers, nothing is left running or on disk after the session, loading it costs nothing, and
`-p no:chronolog` turns it off."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import chronolog
from tests.testing.conftest import python_path

SRC = Path(chronolog.__file__).resolve().parents[1]
# The plugin by module: blocks the entry point first, in case the installed chronolog already has it.
PLUGIN = ["-p", "no:chronolog", "-p", "chronolog.testing.plugin"]


@pytest.fixture(autouse=True)
def _env(monkeypatch, pytester):
    monkeypatch.setenv("PYTHONPATH", python_path(SRC))
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\n")


@pytest.fixture(autouse=True)
def _not_an_xdist_worker(monkeypatch):
    """The inner pytest runs are runs of their own, even when this suite runs under xdist: they must not
    inherit this worker's identity (the reports are named after it)."""
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)


def run(pytester, *args: str, timeout: float = 180):
    return pytester.runpytest_subprocess(*PLUGIN, *args, timeout=timeout)


def port_closed(bootstrap: str) -> bool:
    host, port = bootstrap.rsplit(":", 1)
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex((host, int(port))) != 0


def test_fixtures_give_a_broker_and_a_topic_from_the_marker(pytester):
    pytester.makepyfile("""
        import pytest
        from confluent_kafka import Consumer, Producer, TopicPartition

        @pytest.mark.chronolog_topic(partitions=3, configs={"message.timestamp.type": "LogAppendTime"})
        def test_round_trip(chronolog_broker, chronolog_topic):
            assert chronolog_broker.topics()[chronolog_topic] == 3
            assert chronolog_topic.startswith("test_round_trip-")
            assert chronolog_broker.data_dir.is_dir()
            producer = Producer(chronolog_broker.client_config())
            producer.produce(chronolog_topic, b"hello", partition=2)
            assert producer.flush(30) == 0
            consumer = Consumer(chronolog_broker.client_config(**{"group.id": "g"}))
            consumer.assign([TopicPartition(chronolog_topic, 2, 0)])
            msg = None
            for _ in range(100):
                msg = consumer.poll(0.2)
                if msg is not None:
                    break
            consumer.close()
            assert msg.value() == b"hello" and msg.timestamp()[0] == 2  # LogAppendTime from the marker

        def test_faults_fixture(chronolog_faults, chronolog_broker):
            chronolog_faults.push_errors("Produce", "NOT_LEADER_OR_FOLLOWER")
            assert chronolog_broker.faults.rules()

        def test_faults_were_cleared(chronolog_broker):
            assert chronolog_broker.faults.rules() == []
    """)
    result = run(pytester, "-p", "no:randomly")
    result.assert_outcomes(passed=3)


def test_topics_are_isolated_and_deleted_after_each_test(pytester):
    pytester.makepyfile("""
        from confluent_kafka import Producer
        names = []

        def _produce(broker, topic):
            p = Producer({"bootstrap.servers": broker.bootstrap})
            p.produce(topic, b"mine")
            assert p.flush(30) == 0

        def test_one(chronolog_broker, chronolog_topic):
            _produce(chronolog_broker, chronolog_topic)
            assert chronolog_broker.end_offsets(chronolog_topic) == [1]
            names.append(chronolog_topic)

        def test_two(chronolog_broker, chronolog_topic):
            assert chronolog_topic not in names
            assert chronolog_broker.end_offsets(chronolog_topic) == [0]  # nothing of test_one's
            _produce(chronolog_broker, chronolog_topic)
            names.append(chronolog_topic)

        def test_gone(chronolog_broker):
            assert not set(names) & set(chronolog_broker.topics())
    """)
    run(pytester).assert_outcomes(passed=3)


def test_topics_made_by_chronolog_topics_are_deleted_and_create_topic_lives_for_the_session(pytester):
    pytester.makepyfile("""
        names = {}

        def test_make(chronolog_broker, chronolog_topics):
            made = [chronolog_topics(partitions=2), chronolog_topics(configs={"cleanup.policy": "compact"})]
            assert chronolog_broker.topics()[made[0]] == 2 and made[0].startswith("test_make-")
            names["made"], names["kept"] = made, chronolog_broker.create_topic()

        def test_after(chronolog_broker):
            topics = chronolog_broker.topics()
            assert not set(names["made"]) & set(topics)
            assert names["kept"] in topics  # until the session's broker stops and its data dir goes
    """)
    run(pytester, "-p", "no:randomly").assert_outcomes(passed=2)


def test_a_fault_rule_that_never_fired_is_warned_about(pytester):
    pytester.makepyfile("""
        from confluent_kafka import Producer

        def test_unhit(chronolog_faults):
            chronolog_faults.push_errors("OffsetCommit", "NOT_COORDINATOR")

        def test_hit(chronolog_broker, chronolog_faults):
            rule = chronolog_faults.add_latency(None, 1, count=1)
            Producer(chronolog_broker.client_config()).list_topics(timeout=30)
            assert rule.hits == 1
    """)
    result = run(pytester, "-p", "no:randomly")
    result.assert_outcomes(passed=2, warnings=1)
    result.stdout.fnmatch_lines(["*FaultNotHitWarning: chronolog_faults: rule 1 (OffsetCommit: NOT_COORDINATOR) "
                                 "never fired: the broker got no OffsetCommit request*"])
    assert "rule 2" not in result.stdout.str()


REPORT = """
    import json, os, threading
    from pathlib import Path

    def test_a(chronolog_broker):
        _report(chronolog_broker)

    def test_b(chronolog_broker):
        _report(chronolog_broker)

    def _report(broker):
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        out = Path(os.environ["REPORT_DIR"]) / f"{worker}-{os.getpid()}.json"
        seen = json.loads(out.read_text()) if out.exists() else []
        out.write_text(json.dumps(seen + [[broker.bootstrap, str(broker.data_dir)]]))
"""

CONFTEST = """
    import json, os, threading
    from pathlib import Path

    import pytest

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(session):
        # after every fixture's teardown: no broker thread of ours may still run in this process. Not in
        # pytest_unconfigure: an xdist worker runs that after reporting its end, and a busy controller may
        # already have ended the worker (execnet's exit timeout) before it writes this file
        alive = [t.name for t in threading.enumerate() if t.name.startswith("chronolog")]
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        (Path(os.environ["REPORT_DIR"]) / f"threads-{worker}-{os.getpid()}.json").write_text(json.dumps(alive))
"""


def test_two_xdist_workers_get_two_brokers_and_leave_nothing(pytester, tmp_path, monkeypatch):
    pytest.importorskip("xdist")
    reports = tmp_path / "reports"
    reports.mkdir()
    monkeypatch.setenv("REPORT_DIR", str(reports))
    pytester.makepyfile(REPORT)
    pytester.makeconftest(CONFTEST)
    basetemp = tmp_path / "basetemp"
    result = run(pytester, "-n", "2", "--dist", "each", f"--basetemp={basetemp}")
    result.assert_outcomes(passed=4)
    seen = {p.name: json.loads(p.read_text()) for p in reports.glob("gw*.json")}
    assert len(seen) == 2, seen  # two worker processes
    brokers = [{tuple(x) for x in runs} for runs in seen.values()]
    assert all(len(b) == 1 for b in brokers)  # one broker per worker, shared by its tests
    (a,), (b,) = brokers
    assert a[0] != b[0] and a[1] != b[1]  # two brokers, two data dirs
    for bootstrap, data_dir in (a, b):
        assert port_closed(bootstrap)
        assert not Path(data_dir).exists()
    threads = [json.loads(p.read_text()) for p in reports.glob("threads-*.json")]
    assert len(threads) >= 2 and not any(threads)  # the workers and the controller
    leftovers = [p for p in basetemp.rglob("*") if p.is_file() and "chronolog" in str(p)]
    assert leftovers == []


def test_keep_data_keeps_the_data_dir(pytester, tmp_path, monkeypatch):
    reports = tmp_path / "reports"
    reports.mkdir()
    monkeypatch.setenv("REPORT_DIR", str(reports))
    pytester.makepyfile(REPORT)
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\nchronolog_keep_data = true\n")
    run(pytester, f"--basetemp={tmp_path / 'basetemp'}").assert_outcomes(passed=2)
    ((bootstrap, data_dir),) = {tuple(x) for p in reports.glob("main-*.json") for x in json.loads(p.read_text())}
    assert port_closed(bootstrap)
    assert (Path(data_dir) / "topics.json").exists() or any(Path(data_dir).iterdir())


def test_loading_the_plugin_starts_and_imports_nothing(pytester):
    pytester.makepyfile("""
        import sys, threading

        def test_untouched():
            loaded = sorted(m for m in sys.modules if m.startswith("chronolog"))
            assert loaded == ["chronolog", "chronolog.testing", "chronolog.testing.plugin"], loaded
            assert not [t for t in threading.enumerate() if t.name.startswith("chronolog")]
    """)
    run(pytester).assert_outcomes(passed=1)


def test_ini_options_reach_the_broker(pytester):
    pytester.makeini("""
        [pytest]
        addopts = -p no:cacheprovider
        chronolog_broker_configs =
            num.partitions = 4
            auto.create.topics.enable = true
    """)
    pytester.makepyfile("""
        from confluent_kafka import Producer

        def test_auto_created_with_four_partitions(chronolog_broker):
            p = Producer({"bootstrap.servers": chronolog_broker.bootstrap})
            p.produce("auto-made", b"x")
            assert p.flush(30) == 0
            assert chronolog_broker.topics()["auto-made"] == 4
    """)
    run(pytester).assert_outcomes(passed=1)


@pytest.mark.parametrize("ini, message", [
    ("chronolog_broker_configs = no.such.config=1", "chronolog_broker: Unknown broker config name: no.such.config"),
    ("chronolog_broker_configs = num.partitions", "chronolog_broker_configs: 'num.partitions' is not key=value"),
    ("chronolog_sasl_users = alice", "chronolog_sasl_users: 'alice' is not user:password"),
])
def test_bad_ini_options_fail_in_one_line(pytester, ini, message):
    pytester.makeini(f"[pytest]\naddopts = -p no:cacheprovider\n{ini}\n")
    pytester.makepyfile("def test_x(chronolog_broker):\n    pass\n")
    result = run(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*{message}*"])
    assert "Traceback" not in result.stdout.str()


def test_a_bad_marker_fails_the_test_in_one_line(pytester):
    pytester.makepyfile("""
        import pytest

        @pytest.mark.chronolog_topic(partitons=3)
        def test_typo(chronolog_topic):
            pass

        @pytest.mark.chronolog_topic(configs={"retention.mss": "1"})
        def test_bad_config(chronolog_topic):
            pass
    """)
    result = run(pytester)
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*chronolog_topic takes only keyword arguments*partitons*",
                                 "chronolog_topic: Unknown topic config name: retention.mss"])
    assert "During handling" not in result.stdout.str()


def test_sasl_users_and_tls_from_ini(pytester):
    pytest.importorskip("trustme")
    pytester.makeini("""
        [pytest]
        addopts = -p no:cacheprovider
        chronolog_sasl_users =
            alice:alice-secret
            bob:bob-secret
        chronolog_tls = true
    """)
    pytester.makepyfile("""
        from confluent_kafka import KafkaError, Producer

        def test_users_connect_over_tls(chronolog_broker, chronolog_topic):
            assert chronolog_broker.security_protocol == "SASL_SSL"
            conf = chronolog_broker.client_config("bob")
            assert conf["ssl.ca.location"] and conf["sasl.username"] == "bob"
            p = Producer(conf)
            p.produce(chronolog_topic, b"secret")
            assert p.flush(30) == 0

        def test_a_wrong_password_is_refused(chronolog_broker):
            errors = []
            p = Producer(chronolog_broker.client_config(**{"sasl.password": "wrong", "error_cb": errors.append,
                                                           "log_level": 0}))
            for _ in range(100):
                p.poll(0.1)
                if errors:
                    break
            assert errors and errors[0].code() == KafkaError._AUTHENTICATION

        def test_kafka_python_config(chronolog_broker, chronolog_topic):
            from kafka import KafkaProducer
            p = KafkaProducer(**chronolog_broker.python_client_config("alice"))
            p.send(chronolog_topic, b"x").get(30)
            p.close()
    """)
    run(pytester).assert_outcomes(passed=3)


def _fake_install(tmp_path: Path) -> Path:
    """A dist-info declaring the entry point exactly as pyproject.toml does, as `pip install chronolog` makes."""
    import tomllib

    declared = tomllib.loads((SRC.parent / "pyproject.toml").read_text())["project"]["entry-points"]["pytest11"]
    site = tmp_path / "site"
    info = site / "chronolog_plugin_check-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: chronolog-plugin-check\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[pytest11]\n" + "".join(f"{k} = {v}\n" for k, v in declared.items()))
    return site


def test_installed_the_plugin_is_on_and_p_no_chronolog_turns_it_off(pytester, tmp_path, monkeypatch):
    site = _fake_install(tmp_path)
    monkeypatch.setenv("PYTHONPATH", python_path(site, SRC))
    pytester.makepyfile("def test_x(chronolog_broker):\n    assert chronolog_broker.bootstrap\n")
    on = pytester.runpytest_subprocess(timeout=180)
    on.assert_outcomes(passed=1)
    off = pytester.runpytest_subprocess("-p", "no:chronolog", timeout=180)
    off.assert_outcomes(errors=1)
    off.stdout.fnmatch_lines(["*fixture 'chronolog_broker' not found*"])


def test_the_plugin_module_imports_only_pytest():
    code = ("import sys; import chronolog.testing.plugin; "
            "print(sorted(m for m in sys.modules if m.startswith(('chronolog', 'confluent', 'kio', 'asyncio'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(SRC)}, check=True).stdout
    assert out.strip() == "['chronolog', 'chronolog.testing', 'chronolog.testing.plugin']"
