"""The wire-level differential fuzzer: valid requests generated from Kafka's message schemas (wirefuzz.py),
the same ones sent raw to chronolog and to Kafka 4.4, every error code of the answers compared.

`CHRONOLOG_FUZZ_REQUESTS` requests (by default 2,000 in make test and 20,000 in make test-long, over every
API chronolog serves), `CHRONOLOG_FUZZ_SEED` the seed. Each request reaches both brokers at once (sent to
both before either answer is read), and none is sent while a classic group's timer may fire on one broker
and not yet on the other (wirefuzz.GroupTimers). A difference is either fixed, or explained in `KNOWN` with
the bullet of docs/differences.md that gives its reason, or the case is not generated (wirefuzz.FIXES, each
with its reason). The APIs of `OPEN` (none now) would still differ in ways listed in docs/differences.md
("Wire fuzzer"): their differences are printed, and fail the test only with `CHRONOLOG_FUZZ_STRICT=1`. The
test fails on any other difference and prints one example of each kind.
"""

from __future__ import annotations

import collections
import datetime
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.differential import wirefuzz
from tests.scale import scaled

REQUESTS = int(os.environ.get("CHRONOLOG_FUZZ_REQUESTS") or scaled(2_000, 20_000))
SEED = int(os.environ.get("CHRONOLOG_FUZZ_SEED", "4404"))
# CHRONOLOG_FUZZ_APIS=0,1,2: only these API keys (to look into one API's differences)
ONLY = {int(k) for k in os.environ.get("CHRONOLOG_FUZZ_APIS", "").split(",") if k.strip()}
STRICT = os.environ.get("CHRONOLOG_FUZZ_STRICT", "") not in ("", "0")
# APIs whose error codes still differ from Kafka 4.4's on some generated requests (docs/differences.md, "Wire
# fuzzer", lists what differs for each): none now. The ACL, client-quota, SCRAM, DescribeTopicPartitions,
# CreateTopics, DeleteTopics, DeleteRecords, CreatePartitions, ElectLeaders, config (32, 33, 44), transaction
# (22, 24-26, 28, 65, 66), group (8, 9, 11-16, 42, 47, 68, 69) and share-group APIs (76-79, 90-92) left this
# list: they agree on every generated request.
OPEN: dict[int, str] = {}
API_VERSIONS_V3 = 3


def _versions(wire: wirefuzz.Wire) -> dict[int, tuple[int, int]]:
    body = wire.call(18, API_VERSIONS_V3, wirefuzz.build(18, API_VERSIONS_V3, {
        "client_software_name": "wirefuzz", "client_software_version": "1"}, {}))
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in body.api_keys}


def common_versions(ours: dict[int, tuple[int, int]], theirs: dict[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """Each API chronolog serves, over the versions both brokers serve and kio has schemas for. Produce v0-2
    are advertised by both for old librdkafka but refused (KAFKA-18659): from v3."""
    out = {}
    for key, (low, high) in ours.items():
        assert key in theirs, f"chronolog serves API {key}, Kafka 4.4 does not"
        low, high = max(low, theirs[key][0], 3 if key == 0 else 0), min(high, theirs[key][1])
        while high >= low:
            try:
                wirefuzz.request_class(key, high)
                break
            except Exception:
                high -= 1
        assert high >= low, f"no common version of API {key}"
        out[key] = (low, high)
    return out


def _topic_ids(wire: wirefuzz.Wire, names: list[str]) -> dict[str, uuid.UUID]:
    body = wire.call(3, 12, wirefuzz.build(3, 12, {"topics": [{"name": n} for n in names],
                                                  "allow_auto_topic_creation": False}, {}))
    ids = {t.name: t.topic_id for t in body.topics}
    assert set(ids) == set(names) and all(i is not None and i.int for i in ids.values()), ids
    return ids


def _coordinators_ready(wire: wirefuzz.Wire, timeout: float = 60, groups: tuple[str, ...] = ()) -> None:
    """Both coordinators' topics made and loaded (FindCoordinator makes them, as KafkaApis does): before, group
    and transaction requests answer what a broker still starting answers, at different moments on each.
    `groups`: also each of these ids' partition of `__consumer_offsets` and of `__transaction_state` loaded
    (Kafka loads their 50 partitions one by one: an OffsetFetch answers COORDINATOR_LOAD_IN_PROGRESS, an
    InitProducerId COORDINATOR_LOAD_IN_PROGRESS or NOT_COORDINATOR meanwhile), and a first block of producer
    ids fetched (Kafka's RPCProducerIdManager answers the first InitProducerId COORDINATOR_LOAD_IN_PROGRESS
    while it asks its controller for one)."""
    deadline = time.monotonic() + timeout
    fetch = {"groups": [{"group_id": g, "topics": None} for g in groups if g], "require_stable": False}
    describe = {"transactional_ids": [g for g in groups if g]}
    not_found = 105  # TRANSACTIONAL_ID_NOT_FOUND: the id's partition is loaded
    while True:
        body = wire.call(10, 4, wirefuzz.build(10, 4, {"key_type": 0, "coordinator_keys": ["fz-ready"]}, {}))
        txn = wire.call(10, 4, wirefuzz.build(10, 4, {"key_type": 1, "coordinator_keys": ["fz-ready"]}, {}))
        loading = wire.call(9, 8, wirefuzz.build(9, 8, fetch, {})).groups if fetch["groups"] else ()
        txns = wirefuzz.error_codes(wire.call(65, 0, wirefuzz.build(65, 0, describe, {}))) if describe[
            "transactional_ids"] else ()
        ids = wire.call(22, 1, wirefuzz.build(22, 1, {"transactional_id": None, "transaction_timeout": datetime.timedelta(seconds=60)}, {}))
        if not any(c.error_code for b in (body, txn) for c in b.coordinators) and not any(
                g.error_code for g in loading) and all(code in (0, not_found) for _, code in txns) and not \
                ids.error_code:
            return
        assert time.monotonic() < deadline, (body, txn)
        time.sleep(0.1)


TRANSACTION_APIS = frozenset({22, 24, 25, 26, 28})


def _transactions_settled(wire: wirefuzz.Wire, transactional_ids: tuple[str, ...], timeout: float = 30) -> None:
    """None of these ids in PrepareCommit/PrepareAbort: Kafka answers EndTxn (and the InitProducerId that
    fences a transaction) once the prepared state is logged and writes the markers afterwards, where
    chronolog writes them before answering; meanwhile Kafka answers CONCURRENT_TRANSACTIONS."""
    deadline = time.monotonic() + timeout
    listing = {"state_filters": ["PrepareCommit", "PrepareAbort"], "producer_id_filters": []}
    while True:
        body = wire.call(66, 0, wirefuzz.build(66, 0, listing, {}))
        if not any(t.transactional_id in transactional_ids for t in body.transaction_states):
            return
        assert time.monotonic() < deadline, body
        time.sleep(0.02)


# -- differences explained ----------------------------------------------------------------------------------
# (api key, predicate on (version, values, chronolog's codes, Kafka's codes)) -> the reason, which
# docs/differences.md gives in full. Each is pinned by a test of chronolog's side where it is documented.
Codes = list[tuple[str, int]]


def _only(ours: Codes, theirs: Codes, our_code: int, their_code: int, at_most: int) -> bool:
    """The answers differ only in up to `at_most` resources or topics answered `our_code` by chronolog where
    Kafka answered `their_code`."""
    extra = collections.Counter(c for _, c in ours) - collections.Counter(c for _, c in theirs)
    missing = collections.Counter(c for _, c in theirs) - collections.Counter(c for _, c in ours)
    return set(extra) == {our_code} and set(missing) == {their_code} and extra.total() == missing.total() <= at_most


def _broker_changes(version: int, values: dict, ours: Codes, theirs: Codes) -> bool:
    """A broker resource whose change Kafka validates (success) and chronolog refuses (INVALID_REQUEST)."""
    changing = [r for r in values.get("resources") or () if r["resource_type"] == 4 and any(
        c.get("config_operation", 0) != 1 for c in r["configs"])]
    return _only(ours, theirs, 42, 0, len(changing))


def _small_segments(version: int, values: dict, ours: Codes, theirs: Codes) -> bool:
    """segment.bytes under Kafka's 1 MiB floor: INVALID_CONFIG in Kafka, taken by chronolog, whose checks go on
    (UNKNOWN_TOPIC_OR_PARTITION, success, ...)."""
    def small(c: dict) -> bool:
        return c.get("name") == "segment.bytes" and (c.get("value") or "").lstrip("-").isdigit() and \
            14 <= int(c["value"]) < 1 << 20
    holders = values.get("topics") or values.get("resources") or ()
    count = sum(1 for h in holders if any(small(c) for c in h.get("configs") or ()))
    extra = collections.Counter(c for _, c in theirs) - collections.Counter(c for _, c in ours)
    return count > 0 and set(extra) == {40} and extra.total() <= count


KNOWN: list[tuple[int, Callable[[int, dict, Codes, Codes], bool], str]] = [
    # docs/differences.md, "Admin": broker configs are not changed at run time (test_admin_configs.py pins it)
    (33, _broker_changes, "broker configs not changed at run time"),
    (44, _broker_changes, "broker configs not changed at run time"),
    # docs/differences.md, "Configuration": segment.bytes down to 14 bytes (test_admin_create.py pins it)
    (19, _small_segments, "segment.bytes below 1 MiB"),
    (33, _small_segments, "segment.bytes below 1 MiB"),
    (44, _small_segments, "segment.bytes below 1 MiB"),
]


def explained(api_key: int, version: int, values: dict, ours: Codes, theirs: Codes) -> str | None:
    for key, matches, reason in KNOWN:
        if key == api_key and matches(version, values, ours, theirs):
            return reason
    return None


def run(chronolog_side: Any, kafka_side: Any, count: int, seed: int) -> tuple[int, dict, collections.Counter]:
    prefix = f"fz{seed}-{count}"
    topics = {f"{prefix}-a": ({}, 3), f"{prefix}-b": ({}, 1), f"{prefix}-c": ({"cleanup.policy": "compact"}, 1)}
    for side in (chronolog_side, kafka_side):
        for name, (configs, partitions) in topics.items():
            side.create_topic(name, partitions, configs)
    pools = wirefuzz.Pools(topics=tuple(topics), missing_topics=(f"{prefix}-missing", f"{prefix}-gone"),
                           groups=(f"{prefix}-g", f"{prefix}-g2"), transactional_ids=(f"{prefix}-t", f"{prefix}-t2"),
                           users=(f"{prefix}-u", f"{prefix}-u2"),
                           partitions={name: partitions for name, (_, partitions) in topics.items()},
                           share_groups=(f"{prefix}-s", f"{prefix}-s2"))
    ours_wire, theirs_wire = wirefuzz.Wire(chronolog_side.raw.port), wirefuzz.Wire(kafka_side.raw.port)
    try:
        apis = common_versions(_versions(ours_wire), _versions(theirs_wire))
        if ONLY:
            apis = {k: v for k, v in apis.items() if k in ONLY}
        for wire in (ours_wire, theirs_wire):
            _coordinators_ready(wire, groups=pools.groups + pools.transactional_ids + pools.share_groups)
        ids = (_topic_ids(ours_wire, list(topics)), _topic_ids(theirs_wire, list(topics)))
        differences: dict[tuple, tuple] = {}
        sent = collections.Counter()
        timers = wirefuzz.GroupTimers()
        for api_key, version, values in wirefuzz.requests(apis, count, seed, pools):
            wires = (ours_wire, theirs_wire)
            timers.wait()
            sent_at = time.monotonic()
            deadlines = [wire.send(api_key, version, wirefuzz.build(api_key, version, values, known))
                         for wire, known in zip(wires, ids, strict=True)]  # both sent, then both read
            answers = [wire.receive(api_key, version, d) for wire, d in zip(wires, deadlines, strict=True)]
            for body, known in zip(answers, ids, strict=True):  # each broker's producers, for ProducerRefs
                wirefuzz.track_producers(api_key, values, body, known)
            if api_key in TRANSACTION_APIS:
                _transactions_settled(theirs_wire, pools.transactional_ids)
            ours, theirs = (wirefuzz.error_codes(body) for body in answers)
            timers.note(api_key, values, [ours, theirs], sent_at, time.monotonic())
            sent[api_key] += 1
            if ours != theirs and explained(api_key, version, values, ours, theirs) is None:
                kind = (api_key, tuple(sorted(set(ours) ^ set(theirs))))
                differences.setdefault(kind, (version, values, ours, theirs))
        return len(apis), differences, sent
    finally:
        ours_wire.close()
        theirs_wire.close()


def _report(differences: dict) -> str:
    return "\n".join(f"API {key} v{version}: chronolog {ours} Kafka {theirs}\n    {values}" for (key, _), (
        version, values, ours, theirs) in sorted(differences.items(), key=lambda i: i[0][0]))


@pytest.mark.timeout(120 + REQUESTS * 0.15)  # about 0.03 s a request on both brokers; a bound for a hung one
def test_wire_fuzz_error_codes_agree(chronolog_side, kafka_side, capsys):
    api_count, differences, sent = run(chronolog_side, kafka_side, REQUESTS, SEED)
    assert len(sent) == api_count and sum(sent.values()) == REQUESTS  # every API chronolog serves, all sent
    assert ONLY or api_count >= 40
    open_ones = {kind: d for kind, d in differences.items() if kind[0] in OPEN and not STRICT}
    failing = {kind: d for kind, d in differences.items() if kind not in open_ones}
    with capsys.disabled():
        if open_ones:
            print(f"\nwire fuzzer: {len(open_ones)} kinds of difference in the open APIs "
                  f"({', '.join(sorted({OPEN[k] for k, _ in open_ones}))})")
    if os.environ.get("CHRONOLOG_FUZZ_REPORT"):  # every kind of difference, one example each, to this file
        with open(os.environ["CHRONOLOG_FUZZ_REPORT"], "w") as out:
            out.write(_report(differences) + "\n")
    assert not failing, f"{len(failing)} kinds of difference:\n" + _report(failing)


# -- the cases the generator leaves out, pinned on both brokers (docs/differences.md) ------------------------
def _one(wire: wirefuzz.Wire, api_key: int, version: int, values: dict, ids: dict) -> Codes:
    return wirefuzz.error_codes(wire.call(api_key, version, wirefuzz.build(api_key, version, values, ids)))


def test_cases_left_out_of_the_fuzzer_answer_as_documented(chronolog_side, kafka_side):
    from chronolog.records import SimpleRecord, build_batch

    topic = f"fz-pinned-{SEED}"
    for side in (chronolog_side, kafka_side):
        side.create_topic(topic, 2)
    batch = build_batch([SimpleRecord(int(time.time() * 1000), b"k", b"v")])
    produce = {"acks": 1, "timeout": 1000, "transactional_id": None}
    garbage = {**produce, "topic_data": [{"name": topic, "partition_data": [
        {"index": 0, "records": batch}, {"index": 1, "records": b"\x00" * 40}]}]}
    null_records = {**produce, "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": None}]}]}
    twice = {**produce, "topic_data": [{"name": topic, "partition_data": [
        {"index": 0, "records": batch}, {"index": 0, "records": batch}]}]}
    null_id = {"max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "session_epoch": -1, "replica_id": -1,
               "topics": [{"topic_id": None, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                            "partition_max_bytes": 1 << 20}]}]}
    nameless = {"topics": [{"topic_id": None, "name": None}], "allow_auto_topic_creation": False}
    share_key = {"key_type": 2, "coordinator_keys": ["g:AAAAAAAAAAAAAAAAAAAAAA:0"]}  # group:topic id:partition
    fetch_isolation_2 = {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 2,
                         "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
                             {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                              "current_leader_epoch": -1, "last_fetched_epoch": -1, "log_start_offset": -1}]}]}
    answers = {}
    for kind, side in (("chronolog", chronolog_side), ("kafka", kafka_side)):
        wire = wirefuzz.Wire(side.raw.port, timeout=3)
        try:
            answers[kind] = {
                # a corrupt batch: chronolog fails its partition, Kafka every partition of the request
                "garbage": _one(wire, 0, 11, garbage, {}),
                # null records: chronolog answers INVALID_RECORD, Kafka 4.4 never answers
                "null records": _one(wire, 0, 11, null_records, {}),
                # a partition twice with valid records: answered once (KafkaApis' map), as Kafka does
                "twice": _one(wire, 0, 11, twice, {}),
                # a null topic id in Fetch v13+: UNKNOWN_TOPIC_ID on both
                "null id": _one(wire, 1, 13, null_id, {}),
                # a Metadata topic with neither name nor id: UNKNOWN_SERVER_ERROR in Kafka
                "nameless": _one(wire, 3, 12, nameless, {}),
                # a share group's coordinator (KIP-932): chronolog has no share groups
                "share key": _one(wire, 10, 6, share_key, {}),
                # isolation level 2: Kafka fails with UNKNOWN_SERVER_ERROR, chronolog reads uncommitted
                "isolation 2": _one(wire, 1, 12, fetch_isolation_2, {}),
            }
        finally:
            wire.close()
    p = "responses.partition_responses.error_code"
    assert answers["chronolog"] == {
        "garbage": [(p, 0), (p, 2)], "null records": [(p, 87)], "share key": [("coordinators.error_code", 42)],
        "twice": [(p, 0)], "null id": [("error_code", 0), ("responses.partitions.error_code", 100)],
        "nameless": [("topics.error_code", 17)],
        "isolation 2": [("error_code", 0), ("responses.partitions.error_code", 0)]}
    kafka_share = answers["kafka"].pop("share key")
    assert kafka_share in ([("coordinators.error_code", 0)], [("coordinators.error_code", 15)])  # found, or soon
    assert answers["kafka"] == {
        "garbage": [(p, 2), (p, 2)], "null records": [(wirefuzz.TIMED_OUT, -1)], "twice": [(p, 0)],
        "null id": [("error_code", 0), ("responses.partitions.error_code", 100)],
        "nameless": [("topics.error_code", -1)],
        "isolation 2": [("error_code", -1), ("responses.partitions.error_code", -1)]}
