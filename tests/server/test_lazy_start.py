"""A broker's start does only what answering its first clients needs (issue #26): the group and transaction
coordinators start after the listeners open (at the first request that needs them, or shortly after), and
code for segments, compaction, SCRAM credentials, ACLs and compression is imported when first used. These tests run
brokers in fresh interpreters, so what a start imports is seen whole."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

# Imported by nothing a start on an empty data dir needs. (What an error path may need is imported at start all
# the same: an import needs a descriptor, which a broker out of them does not have; hence json, shutil and ctypes
# are not in this list.)
DEFERRED = ["chronolog.server.coordinator", "chronolog.server.transactions", "chronolog.records.group_records",
            "chronolog.storage.cleaner", "chronolog.storage.log", "chronolog.storage.segment",
            "chronolog.records.batch", "chronolog.security.credentials", "chronolog.security.acl",
            "chronolog.security.scram", "tempfile", "cramjam", "zstandard"]


def _run(tmp_path, body: str, **params) -> dict:
    """Runs `body` (the inside of `async def main(broker)`, the broker started on an empty data dir and not yet
    stopped, `params` in the dict `P`) in a fresh interpreter; `body` returns a dict, printed as JSON."""
    code = textwrap.dedent("""
        import asyncio, sys
        from chronolog.server.broker import Broker
        P = {params!r}

        async def main(broker):
        {body}

        async def run():
            broker = Broker({data!r}, port=0)
            await broker.start()
            try:
                return await main(broker)
            finally:
                if not getattr(broker, "stopped_by_test", False):
                    await broker.stop()

        result = asyncio.run(run())
        import json
        print(json.dumps(result))
        """).format(body=textwrap.indent(textwrap.dedent(body), "    "), data=str(tmp_path / "data"), params=params)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_start_imports_neither_the_coordinators_nor_code_used_later(tmp_path):
    result = _run(tmp_path, """
        # nothing awaited since start(): the coordinators' timer cannot have fired yet
        return {"loaded": sorted(m for m in P["deferred"] if m in sys.modules),
                "coordinator": broker.state.coordinator is not None,
                "transactions": broker.state.transactions is not None}
        """, deferred=DEFERRED)
    assert result == {"loaded": [], "coordinator": False, "transactions": False}


def test_the_coordinators_start_on_their_own_soon_after_the_listeners_open(tmp_path):
    result = _run(tmp_path, """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while broker.state.transactions is None and loop.time() < deadline:
            await asyncio.sleep(0.01)  # polling for the state, bounded
        return {"coordinator": broker.state.coordinator is not None and broker.state.coordinator.loaded,
                "transactions": broker.state.transactions is not None}
        """)
    assert result == {"coordinator": True, "transactions": True}


def _frame(api_key: int, version: int, body: bytes, correlation_id: int = 7) -> bytes:
    """A request frame without its size prefix: header v1 (client id "t") and `body`."""
    return (api_key.to_bytes(2, "big") + version.to_bytes(2, "big") + correlation_id.to_bytes(4, "big")
            + (1).to_bytes(2, "big") + b"t" + body)


@pytest.mark.parametrize("first", ["metadata", "find_coordinator"])
def test_the_first_requests_are_answered_and_a_group_request_waits_for_the_coordinators(tmp_path, first):
    """Metadata is answered while the coordinators have not started; FindCoordinator (a group request)
    starts them and is answered once they have, with the coordinator's address."""
    metadata_v0_all = (0).to_bytes(4, "big")  # an empty topic list: every topic
    find_coordinator_v0 = (5).to_bytes(2, "big") + b"group"
    frame = _frame(3, 0, metadata_v0_all) if first == "metadata" else _frame(10, 0, find_coordinator_v0)
    result = _run(tmp_path, """
        answer = await broker._handle(P["frame"], "127.0.0.1")
        return {"answered": answer is not None and answer[4:8] == (7).to_bytes(4, "big"),
                "error": int.from_bytes(answer[8:10], "big") if P["first"] == "find_coordinator" else 0,
                "coordinators": broker.state.transactions is not None}
        """, frame=frame, first=first)
    assert result["answered"]
    assert result["error"] == 0
    assert result["coordinators"] == (first == "find_coordinator")


def test_a_stop_while_the_coordinators_start_stops_them_too(tmp_path):
    result = _run(tmp_path, """
        task = broker._start_coordinators()
        await asyncio.sleep(0)  # the start has begun (its imports run in a thread)
        broker.stopped_by_test = True
        await broker.stop()
        txns, groups = broker.state.transactions, broker.state.coordinator
        return {"done": task.done(), "started": txns is not None and groups is not None,
                "stopped": not txns._timers and all(t.done() or t.cancelling() for t in (groups._reaper, groups._retention))}
        """)
    assert result == {"done": True, "started": True, "stopped": True}
