"""Share groups (KIP-932) on the console's groups pages: listed with their type, and a share group's page
shows what `chronolog groups describe` shows (start offset, lag in records and in record time, members)."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("confluent_kafka", minversion="2.16")
from confluent_kafka import ShareConsumer  # noqa: E402

from tests.console.conftest import get  # noqa: E402
from tests.console.test_console_groups import rows_of  # noqa: E402
from tests.groupconfigs import set_group_configs  # noqa: E402


def test_share_group_listed_and_described(loaded, broker_console):
    bootstrap = loaded.broker.bootstrap
    group = "console-share"
    ends = {p: len(s) for p, s in loaded.truth["late"].items()}
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest"})
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3})
    try:
        consumer.subscribe(["late"])
        deadline = time.monotonic() + 60
        got = 0
        while not got and time.monotonic() < deadline:
            got = len(consumer.poll(0.5) or [])
        assert got
        status, page = get(broker_console.url("/groups"))
        assert status == 200
        assert f'<tr><td><a href="/groups/{group}">{group}</a></td><td>share</td><td>STABLE</td></tr>' in page
    finally:
        consumer.close()
    status, page = get(broker_console.url(f"/groups/{group}"))
    assert status == 200 and 'share group, state <b id="state">EMPTY</b>, 0 member(s)' in page
    rows = rows_of(page, "offsets")
    assert rows and {r[0] for r in rows} == {"late"}
    for r in rows:  # a partition fetched from: its start offset, log end and lag in records and time
        assert int(r[3]) == ends[int(r[1])] and r[6] == "0"
        assert r[2] == "-" or 0 <= int(r[2]) <= ends[int(r[1])]
    assert "rewind-form" not in page
