"""The authorizer's audit trail (security.audit, Kafka's `kafka.authorizer.logger`): a real client's allowed
and denied operations, each logged with principal, host, operation and resource in AclAuthorizer's words,
on `chronolog.authorizer`, routed to a file of its own by a logging configuration (CHRONOLOG_LOG_CONFIG)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from chronolog.security.acl import AclBinding, AclStore
from chronolog.security.credentials import CredentialStore
from tests.brokerproc import BrokerProcess

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]

PASSWORDS = {"alice": "alice-secret", "admin": "admin-secret"}


def _conf(proc: BrokerProcess, user: str) -> dict:
    return {"bootstrap.servers": proc.bootstrap_for("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": PASSWORDS[user]}


def _produce(conf: dict, topic: str) -> list:
    results: list = []
    producer = Producer({**conf, "message.timeout.ms": 10000})
    producer.produce(topic, b"v", on_delivery=lambda err, msg: results.append(err))
    producer.flush(15)
    return results


def test_allowed_and_denied_operations_are_logged_on_their_own_logger(tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    creds = CredentialStore(data)
    for user, password in PASSWORDS.items():
        creds.upsert(user, "SCRAM-SHA-256", password)
    AclStore(data).add([AclBinding.create(principal_="User:alice", operation_="Write", permission_="Allow",
                                          resource_type_="Topic", name="open")])
    trail = tmp_path / "authorizer.log"
    config = tmp_path / "logging.json"
    config.write_text(json.dumps({
        "version": 1,
        "formatters": {"plain": {"format": "%(levelname)s %(name)s: %(message)s"}},
        "handlers": {"trail": {"class": "logging.FileHandler", "filename": str(trail), "formatter": "plain"}},
        "loggers": {"chronolog.authorizer": {"level": "DEBUG", "handlers": ["trail"], "propagate": False}},
    }))
    monkeypatch.setenv("CHRONOLOG_LOG_CONFIG", str(config))
    proc = BrokerProcess(data, {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "SCRAM-SHA-256",
                                "authorizer.class.name": "chronolog", "super.users": "User:admin",
                                "auto.create.topics.enable": "false"}).start()
    try:
        admin = AdminClient(_conf(proc, "admin"))
        for future in admin.create_topics([NewTopic(t, 1, 1) for t in ("open", "secret")]).values():
            future.result(15)
        assert _produce(_conf(proc, "alice"), "open") == [None]
        denied = _produce(_conf(proc, "alice"), "secret")
        assert len(denied) == 1 and denied[0] is not None and denied[0].code() == \
            confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
        refused_before = _refused(trail)
        listed = AdminClient(_conf(proc, "alice")).list_topics(timeout=15)  # all topics: a filter, not a refusal
        assert set(listed.topics) == {"open"}
    finally:
        proc.stop()
    lines = trail.read_text().splitlines()
    allowed = re.compile(r"DEBUG chronolog\.authorizer: Principal = User:alice is Allowed Operation = Write from host "
                         r"= 127\.0\.0\.1 on resource = Topic:LITERAL:open for request = Produce with "
                         r"resourceRefCount = 1$")
    assert any(allowed.match(line) for line in lines), lines
    refused = _refused(trail)
    assert refused and all(re.match(r"INFO chronolog\.authorizer: Principal = User:alice is Denied Operation = "
                                    r"(Describe|Write) from host = 127\.0\.0\.1 on resource = Topic:LITERAL:secret "
                                    r"for request = (Metadata|Produce) with resourceRefCount = 1$", line)
                           for line in refused), lines
    # Listing all topics leaves out 'secret' without a refusal line (Kafka's logIfDenied = false).
    assert refused == refused_before, lines
    assert not any("Principal = User:admin" in line and " is Denied " in line for line in lines)
    # routed: none of it in the broker's own log
    assert "chronolog.authorizer" not in proc.log_path.read_text()


def _refused(trail) -> list[str]:
    return [line for line in trail.read_text().splitlines() if line.startswith("INFO ") and " is Denied " in line]


@pytest.mark.parametrize("content", [None, "{not json", "[loggers]\nkeys=root\n"])
def test_a_bad_logging_configuration_is_one_line(tmp_path, content):
    config = tmp_path / ("logging.json" if content and content.startswith("{") else "logging.ini")
    if content is not None:
        config.write_text(content)
    done = subprocess.run([sys.executable, "-m", "chronolog.cli.main", "serve", "--data-dir", str(tmp_path / "d"),
                           "--port", "0"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "CHRONOLOG_LOG_CONFIG": str(config)})
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("chronolog: error: CHRONOLOG_LOG_CONFIG=") and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
