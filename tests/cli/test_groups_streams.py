"""Streams groups (KIP-1071) in `chronolog groups list|describe`, `chronolog lag` and the console's group pages,
checked against the broker's own state (its streams-group coordinator and committed offsets) and against
kafka-streams-groups on the same broker; in the long tier the same against Kafka 4.4 (no coordinator to read). One Kafka Streams app (group.protocol=streams) for the module:
running, its group is STABLE with one member holding every active task and no lag; stopped, with records
written since at known times, the group is EMPTY and lags by those records and their time span."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from confluent_kafka import Producer

from chronolog.testing.kafka import KafkaBroker, run_tool
from tests.cli.conftest import chronolog
from tests.console.conftest import ConsoleProcess, get
from tests.console.test_console_groups import rows_of
from tests.jvm.test_streams_eos import CHUNK, produce_chunk, wait_for
from tests.jvm.test_streams_groups import (  # noqa: F401  (app_classes: the fixture)
    ORACLE_SIDES,
    SESSION,
    STREAMS_GROUP_COMMAND,
    StreamsApp,
    app_classes,
)

pytestmark = pytest.mark.slow
APP = "sgcli"
SRC, DST = "sgcli-in", "sgcli-out"
REPARTITION = f"{APP}-KSTREAM-AGGREGATE-STATE-STORE-0000000002-repartition"
LATE = {0: 4, 1: 1, 2: 0}  # records written per input partition once the app is stopped
BASE_MS = int(time.time() * 1000) - 600_000


@pytest.fixture(scope="module", params=ORACLE_SIDES)
def streams(request, app_classes, tmp_path_factory):  # noqa: F811
    from chronolog.testing import broker

    if request.param == "kafka":
        target = KafkaBroker(configs={**SESSION, "group.streams.min.session.timeout.ms": "6000"})
    else:
        target = broker(tmp_path_factory.mktemp("sgcli"), configs=SESSION)
    with target as b:
        b.create_topic(SRC, 3)
        b.create_topic(DST, 2)
        produce_chunk(b.bootstrap, SRC, 0)
        app = StreamsApp(app_classes, b.bootstrap, APP, SRC, DST, tmp_path_factory.mktemp("state") / "state")
        try:
            wait_for(b.bootstrap, DST, CHUNK, app)
            yield b, app
        finally:
            if app.proc.poll() is None:
                app.kill()


def _on_broker(b, fn):
    """`fn(coordinator)` run on the broker's event loop (its state is the loop's)."""
    async def call():
        return fn(b._embedded.broker.state.coordinator)
    return asyncio.run_coroutine_threadsafe(call(), b._embedded.loop).result(30)


def _broker_state(b) -> tuple[str, dict[str, dict[str, dict[str, list[int]]]], dict[tuple[str, int], int]] | None:
    """The coordinator's own view: group state, member -> kind -> subtopology -> partitions, and offsets
    (None for Kafka, whose coordinator is out of reach)."""
    if not hasattr(b, "_embedded"):
        return None

    def read(coord):
        g = coord.streams.describe(APP)
        members = {m.member_id: {k: {s: sorted(ps) for s, ps in tasks.items() if ps} for k, tasks in m.assigned.items()}
                   for m in g.members.values()}
        offsets = {tp: v[0] for tp, v in coord.fetch_offsets(APP, None).items()}
        return g.state, members, offsets
    return _on_broker(b, read)


def _describe(bootstrap: str) -> dict:
    r = chronolog("groups", "describe", APP, "--json", "-b", bootstrap)
    assert r.rc == 0, r.err
    return json.loads(r.out)


def _until(bootstrap: str, ok, most_s: float = 90) -> dict:
    deadline = time.monotonic() + most_s
    while True:
        info = _describe(bootstrap)
        if ok(info) or time.monotonic() > deadline:
            return info
        time.sleep(0.3)


def _kafka_rows(bootstrap: str, *extra: str) -> list[list[str]]:
    proc = run_tool(STREAMS_GROUP_COMMAND, "--bootstrap-server", bootstrap, "--describe", "--group", APP, *extra)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [line.split() for line in proc.stdout.splitlines() if line.startswith(APP + " ")]


def _kafka_tasks(words: list[str], kind: str) -> dict[str, list[int]]:
    """`ACTIVE: 0:[0,1,2]; 1:[0,1,2];` -> {"0": [0, 1, 2], "1": [0, 1, 2]} (before any TARGET- list)."""
    if f"{kind}:" not in words:
        return {}
    out = {}
    for w in words[words.index(f"{kind}:") + 1:]:
        if w.endswith(":"):
            break
        sid, ps = w.rstrip(";").split(":", 1)
        out[sid] = [int(p) for p in ps.strip("[]").split(",")]
    return out


def test_running_streams_group_listed_and_described(streams, tmp_path):
    b, _app = streams
    bs = b.bootstrap
    info = _until(bs, lambda i: i.get("state") == "STABLE" and all(r["lag"] == 0 for r in i["partitions"])
                  and len(i["partitions"]) == 6)
    truth = _broker_state(b)
    assert info["type"] == "streams" and info["state"] == "STABLE"

    listed = json.loads(chronolog("groups", "list", "--json", "-b", bs).out)
    assert {"group": APP, "type": "streams", "state": "STABLE"} in listed

    # members and tasks: the coordinator's, and kafka-streams-groups'
    if truth is not None:
        state, members, offsets = truth
        assert state == "Stable"
        assert {m["member_id"]: {k: m[k] for k in ("active", "standby", "warmup")} for m in info["members"]} == members
        assert {(r["topic"], r["partition"]): r["committed"] for r in info["partitions"]} == offsets
    [member] = info["members"]
    assert member["active"] == {"0": [0, 1, 2], "1": [0, 1, 2]} and member["standby"] == {}
    assert member["client_id"].startswith(f"{APP}-{member['process_id']}-StreamThread-")
    assert sorted(member["partitions"]) == sorted([f"{SRC}-{p}" for p in range(3)] +
                                                  [f"{REPARTITION}-{p}" for p in range(3)])
    [kafka_member] = _kafka_rows(bs, "--members", "--verbose")
    # GROUP TARGET-ASSIGNMENT-EPOCH TOPOLOGY-EPOCH MEMBER MEMBER-PROTOCOL MEMBER-EPOCH PROCESS CLIENT-ID ...
    assert kafka_member[3] == member["member_id"] and int(kafka_member[5]) == member["member_epoch"]
    assert kafka_member[6] == member["process_id"] and kafka_member[7] == member["client_id"]
    assert int(kafka_member[2]) == info["topology_epoch"] and int(kafka_member[1]) == info["assignment_epoch"]
    assert _kafka_tasks(kafka_member, "ACTIVE") == member["active"]

    # offsets: the coordinator's committed offsets, at each log end (the app has read everything)
    rows = {(r["topic"], r["partition"]): r for r in info["partitions"]}
    assert sum(rows[(SRC, p)]["log_end"] for p in range(3)) == CHUNK
    assert all(r["lag"] == 0 and r["lag_ms"] == 0 and r["member"] == member["member_id"] for r in rows.values())
    kafka = {(w[1], int(w[2])): (int(w[3]), int(w[5]), int(w[6])) for w in _kafka_rows(bs, "--offsets", "--verbose")}
    assert kafka == {tp: (r["committed"], r["log_end"], r["lag"]) for tp, r in rows.items()}

    # the console: listed with its type, its page shows the same members, tasks and offsets
    console = ConsoleProcess("--bootstrap-server", bs, log=tmp_path / "console.log")
    try:
        status, page = get(console.url("/groups"))
        assert status == 200
        assert f'<tr><td><a href="/groups/{APP}">{APP}</a></td><td>streams</td><td>STABLE</td></tr>' in page
        status, page = get(console.url(f"/groups/{APP}"))
    finally:
        console.stop()
    assert status == 200 and 'streams group, state <b id="state">STABLE</b>, 1 member(s)' in page
    assert rows_of(page, "members") == [[member["member_id"], str(member["member_epoch"]), member["process_id"],
                                         member["client_id"], member["host"], "0:[0,1,2] 1:[0,1,2]", "", ""]]
    assert {(r[0], int(r[1])): (int(r[2]), int(r[4])) for r in rows_of(page, "offsets")} == \
        {tp: (r["committed"], 0) for tp, r in rows.items()}
    assert "rewind-form" not in page


def test_stopped_streams_group_lags_in_records_and_time(streams):
    """The app killed, then LATE[p] records written to input partition p one second apart: `lag` and
    `groups describe` say that many records and (n - 1) seconds of record time; the group, its member fenced
    by the session timeout, is EMPTY."""
    b, app = streams
    bs = b.bootstrap
    app.kill()
    producer = Producer({"bootstrap.servers": bs})
    for p, n in LATE.items():
        for i in range(n):
            producer.produce(SRC, value=b"k1,late", partition=p, timestamp=BASE_MS + i * 1000)
    assert producer.flush(30) == 0
    info = _until(bs, lambda i: i.get("state") == "EMPTY")
    truth = _broker_state(b)
    assert info["state"] == "EMPTY" and info["members"] == []

    r = chronolog("lag", "--group", APP, "--json", "-b", bs)
    assert r.rc == 0, r.err
    lag = json.loads(r.out)
    assert lag["type"] == "streams" and lag["state"] == "EMPTY"
    got = {(x["topic"], x["partition"]): x for x in lag["partitions"]}
    if truth is not None:
        state, members, offsets = truth
        assert (state, members) == ("Empty", {})
        assert {tp: x["committed"] for tp, x in got.items()} == offsets
    for p, n in LATE.items():
        row = got[(SRC, p)]
        assert (row["lag"], row["log_end"] - row["committed"]) == (n, n)
        assert row["lag_ms"] == max(0, n - 1) * 1000
    assert all(got[(REPARTITION, p)]["lag"] == 0 for p in range(3))
    assert [{k: x[k] for k in ("topic", "partition", "committed", "log_end", "lag", "lag_ms")}
            for x in info["partitions"]] == lag["partitions"]
    # kafka-streams-groups shows the offsets of the members' active tasks only (StreamsGroupCommand.getOffsets):
    # none for an EMPTY group, where `chronolog groups describe` shows what the group committed
    assert _kafka_rows(bs, "--offsets", "--verbose") == []

    table = chronolog("lag", "--group", APP, "-b", bs).out
    assert "lag of streams group sgcli (EMPTY)" in table and "3.000s" in table
