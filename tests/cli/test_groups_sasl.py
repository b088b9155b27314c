"""`chronolog groups list` and `groups describe` against a broker that only speaks SASL_SSL (SCRAM-SHA-512, a CA
of its own): share groups are listed and described as over PLAINTEXT, their requests going over the tools' own
connection with the same client configs (TLS, then SASL); the SCRAM client is checked against RFC 7677's
example exchange."""

from __future__ import annotations

import json
import time

import pytest

pytest.importorskip("confluent_kafka", minversion="2.16")
from confluent_kafka import ShareConsumer  # noqa: E402

from chronolog.timetravel.secure_connection import ScramClient  # noqa: E402
from tests.cli.conftest import chronolog  # noqa: E402
from tests.console.test_console_sasl import sasl_broker  # noqa: E402, F401  (fixture: topic "secure", 40 records)


def _x(conf: dict, **override: str) -> list[str]:
    args = ["-b", conf["bootstrap.servers"]]
    for k, v in {**conf, **override}.items():
        if k != "bootstrap.servers":
            args += ["-X", f"{k}={v}"]
    return args


def test_share_group_listed_and_described_over_sasl_ssl(sasl_broker):  # noqa: F811
    proc, conf, base = sasl_broker
    consumer = ShareConsumer({**conf, "group.id": "secure-share", "log_level": 3})
    try:
        consumer.subscribe(["secure"])
        deadline = time.monotonic() + 60
        while True:  # the group exists once the member's first heartbeat is answered
            consumer.poll(0.2)
            r = chronolog("groups", "list", "--json", *_x(conf))
            assert r.rc == 0, r.err
            rows = {g["group"]: g for g in json.loads(r.out)}
            if "secure-share" in rows or time.monotonic() > deadline:
                break
        assert rows["secure-share"]["type"] == "share", rows
        assert rows["secure-group"]["type"] == "classic"  # librdkafka's list, as before
        r = chronolog("groups", "describe", "secure-share", "--json", *_x(conf))
        assert r.rc == 0, r.err
        info = json.loads(r.out)
        assert info["type"] == "share" and info["group"] == "secure-share"
    finally:
        consumer.close()


def test_a_mechanism_the_tools_connection_lacks_leaves_those_groups_out(sasl_broker):  # noqa: F811
    """The share-group client refuses what it cannot speak before connecting; the list is librdkafka's."""
    from chronolog.errors import ChronologError
    from chronolog.timetravel.share_groups import share_client

    class Source:
        bootstrap = "127.0.0.1:1"
        conf = {"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}

    with pytest.raises(ChronologError, match="sasl.mechanism=GSSAPI"):
        share_client(Source())


def test_scram_client_as_rfc_7677():
    """RFC 7677 section 3: SCRAM-SHA-256 of user "user", password "pencil"."""
    c = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert c.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = c.final(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    assert final == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    c.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
