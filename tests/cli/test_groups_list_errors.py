"""`chronolog groups list` when a broker does not answer ListGroups: librdkafka gives the groups of the
brokers that answered and the others' errors beside them; the list is printed, and a warning line and the
exit status say it is incomplete (Kafka's tool fails the whole listing)."""

from __future__ import annotations

import json
from concurrent.futures import Future

from confluent_kafka import KafkaError
from confluent_kafka.admin import ConsumerGroupListing, ListConsumerGroupsResult
from typer.testing import CliRunner

from chronolog.cli import groups
from chronolog.cli.main import app


class _Source:
    def __init__(self, errors: list) -> None:
        self.admin, self.errors = self, errors

    def list_consumer_groups(self, request_timeout: float) -> Future:
        done: Future = Future()
        done.set_result(ListConsumerGroupsResult(valid=[ConsumerGroupListing("answered", False, "STABLE")],
                                                 errors=self.errors))
        return done

    def close(self) -> None:
        pass


def _list(monkeypatch, errors: list):
    monkeypatch.setattr(groups, "broker", lambda *args: _Source(errors))
    monkeypatch.setattr(groups, "_other_groups", lambda source: [])
    return CliRunner().invoke(app, ["groups", "list", "--json", "-b", "127.0.0.1:1"])


def test_every_broker_answered(monkeypatch):
    result = _list(monkeypatch, [])
    assert result.exit_code == 0, result.output
    assert [r["group"] for r in json.loads(result.stdout)] == ["answered"]
    assert "warning" not in result.stderr


def test_a_broker_that_did_not_answer_is_said(monkeypatch):
    result = _list(monkeypatch, [KafkaError(KafkaError._TIMED_OUT, "Failed to list groups from broker 2")])
    assert result.exit_code == 1
    assert [r["group"] for r in json.loads(result.stdout)] == ["answered"]  # what did answer, still printed
    (line,) = result.stderr.strip().splitlines()
    assert line == ("chronolog: warning: the list is incomplete: Failed to list groups from broker 2")
