"""Making a tool's client: a config librdkafka refuses is one line; a refusal that does not come again was a
Ctrl-C the client's constructor swallowed (confluent-kafka reports a KeyboardInterrupt that lands while it reads
its config as a bad property name), and the tool stops as for a Ctrl-C."""

from __future__ import annotations

import pytest

from chronolog.errors import ChronologError
from chronolog.timetravel import client


class Refusing:
    """A client maker that refuses the first `times` configs as confluent-kafka does, then makes a client."""

    def __init__(self, times: int) -> None:
        self.times = times
        self.calls = 0

    def __call__(self, conf: dict) -> object:
        self.calls += 1
        if self.calls <= self.times:
            raise TypeError("expected configuration property name as type unicode string")
        return object()


def test_a_config_refused_every_time_is_one_line():
    make = Refusing(times=10)
    with pytest.raises(ChronologError, match="^client config: expected configuration property name"):
        client._made(make, {"bootstrap.servers": "127.0.0.1:9"})
    assert make.calls == 2


def test_a_refusal_that_does_not_come_again_is_the_ctrl_c_it_was():
    make = Refusing(times=1)
    with pytest.raises(KeyboardInterrupt):
        client._made(make, {"bootstrap.servers": "127.0.0.1:9"})
    assert make.calls == 2


def test_the_real_client_refuses_a_bad_config_in_one_line():
    from confluent_kafka import Consumer
    with pytest.raises(ChronologError, match="^client config: .*no.such.property"):
        client._made(Consumer, {"bootstrap.servers": "127.0.0.1:9", "group.id": "g", "no.such.property": "1"})
