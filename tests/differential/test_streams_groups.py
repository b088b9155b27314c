"""Streams groups (KIP-1071) over the wire, the same StreamsGroupHeartbeat/Describe sequences to chronolog and
to Kafka 4.4: a member joining with a topology whose internal topics the broker creates, a second member
taking half the tasks (revoked from the first before they are handed over), a member leaving, fencing, a
topology whose source topic is missing, internal topics the broker cannot replicate (or the member may not
create: a broker pair with authorizers of its own), and what StreamsGroupDescribe shows. Group epochs are
compared as "went up", not by value: Kafka bumps the epoch once more while it creates the internal topics
(docs/differences.md)."""

from __future__ import annotations

import time
import uuid

from tests.differential.groups_wire import RETRIABLE, call, coordinator_ready, retry
from tests.differential.test_acl_broker_configs import chronolog_acl, kafka_acl  # noqa: F401 (fixtures)

V = 0  # kio's schema; v1 differs only by fields chronolog fills as Kafka does without a description plugin


def topology(src: str, app: str) -> dict:
    """The count app's topology: subtopology 0 reads `src`, writes the repartition topic subtopology 1 reads."""
    rep, log = f"{app}-agg-repartition", f"{app}-agg-changelog"
    return {"epoch": 0, "subtopologies": [
        {"subtopology_id": "0", "source_topics": [src], "source_topic_regex": [], "state_changelog_topics": [],
         "repartition_sink_topics": [rep], "repartition_source_topics": [], "copartition_groups": []},
        {"subtopology_id": "1", "source_topics": [], "source_topic_regex": [],
         "state_changelog_topics": [{"name": log, "partitions": 0, "replication_factor": 0,
                                     "topic_configs": [{"key": "cleanup.policy", "value": "compact"}]}],
         "repartition_sink_topics": [], "copartition_groups": [],
         "repartition_source_topics": [{"name": rep, "partitions": 0, "replication_factor": 0,
                                        "topic_configs": [{"key": "cleanup.policy", "value": "delete"}]}]}]}


def hb(side, group, member, epoch, *, topo=None, owned=None, process="p1"):
    tasks = None if owned is None else [{"subtopology_id": s, "partitions": sorted(ps)} for s, ps in owned.items()]
    return retry(side, 88, V, group_id=group, member_id=member, member_epoch=epoch, endpoint_information_epoch=0,
                rebalance_timeout=30000 if epoch == 0 else -1, topology=topo,
                active_tasks=[] if epoch == 0 else tasks, standby_tasks=[] if epoch == 0 else (None if owned is None
                                                                                                else []),
                warmup_tasks=[] if epoch == 0 else (None if owned is None else []),
                process_id=process if epoch == 0 else None)


def tasks(answer, old):
    if answer["active_tasks"] is None:
        return old
    return {t["subtopology_id"]: set(t["partitions"]) for t in answer["active_tasks"]}


def settle(side, group, members: dict, timeout: float = 30) -> dict:
    """Heartbeat every member with what it owns until the group is Stable and no answer changes anything
    (Kafka delays assignments by group.streams.initial.rebalance.delay.ms and assignment.interval.ms: bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        changed = False
        for mid, m in members.items():
            # a member still at epoch 0 (Kafka's while it creates the internal topics) joins again
            answer = hb(side, group, mid, m["epoch"], owned=m["tasks"], topo=m.get("topo") if m["epoch"] == 0
                        else None, process=m.get("process", "p1"))
            assert answer["error_code"] == 0, answer
            new = tasks(answer, m["tasks"])
            if new != m["tasks"] or answer["member_epoch"] != m["epoch"]:
                changed = True
            m["tasks"], m["epoch"] = new, answer["member_epoch"]
            m["status"] = sorted(s["status_code"] for s in answer["status"] or [])
        state = call(side, 89, V, group_ids=[group], include_authorized_operations=False)["groups"][0]["group_state"]
        if not changed and state == "Stable":
            return members
        time.sleep(0.2)
    raise AssertionError(f"the group did not settle: {members}")


def count(ts) -> int:
    return sum(len(ps) for ps in ts.values())


def scenario(side) -> dict:
    src = side.create_topic(partitions=3)
    app = f"sg-{uuid.uuid4().hex[:8]}"
    coordinator_ready(side, app)
    obs: dict = {}
    first = hb(side, app, "m1", 0, topo=topology(src, app))
    obs["join"] = (first["error_code"], first["member_epoch"] > 0, first["heartbeat_interval"] > 0)
    topo = topology(src, app)
    members = {"m1": {"epoch": first["member_epoch"], "tasks": tasks(first, {}), "status": [], "topo": topo}}
    settle(side, app, members)
    obs["one member"] = (count(members["m1"]["tasks"]), members["m1"]["status"])
    admin = side.admin()
    made = admin.list_topics(timeout=10).topics
    obs["internal topics"] = sorted((n.replace(app, "APP"), len(made[n].partitions)) for n in made
                                    if n.startswith(app))
    epoch_before = members["m1"]["epoch"]
    second = hb(side, app, "m2", 0, topo=topology(src, app), process="p2")
    # (Kafka's member epoch goes up only once its delayed assignment ran: docs/differences.md)
    obs["second join"] = (second["error_code"], count(tasks(second, {})))
    assert second["member_epoch"] >= epoch_before
    members["m2"] = {"epoch": second["member_epoch"], "tasks": tasks(second, {}), "status": [], "topo": topo,
                     "process": "p2"}
    settle(side, app, members)
    obs["two members"] = sorted(count(m["tasks"]) for m in members.values())
    both = {(s, p) for m in members.values() for s, ps in m["tasks"].items() for p in ps}
    obs["every task once"] = len(both) == 6
    desc = {d["group_id"]: d for d in call(side, 89, V, group_ids=[app, "no-such-group"],
                                             include_authorized_operations=False)["groups"]}
    g = desc[app]
    obs["describe"] = (g["error_code"], g["group_state"], len(g["members"]), g["topology"]["epoch"],
                       [(s["subtopology_id"], [n.replace(src, "SRC") for n in s["source_topics"]],
                         [n.replace(app, "APP") for n in s["repartition_sink_topics"]],
                         [(t["name"].replace(app, "APP"), t["partitions"]) for t in s["repartition_source_topics"]],
                         [(t["name"].replace(app, "APP"), t["partitions"]) for t in s["state_changelog_topics"]])
                        for s in g["topology"]["subtopologies"]],
                       sorted(count({t["subtopology_id"]: t["partitions"] for t in m["assignment"]["active_tasks"]})
                              for m in g["members"]), desc["no-such-group"]["error_code"])
    # fencing: an epoch the member never had; an unknown member
    obs["fenced"] = hb(side, app, "m1", members["m1"]["epoch"] + 10, owned={})["error_code"]
    obs["unknown"] = hb(side, app, "nobody", 1, owned={})["error_code"]
    left = hb(side, app, "m2", -1)
    obs["leave"] = (left["error_code"], left["member_epoch"])
    del members["m2"]
    members["m1"] = {"epoch": 0, "tasks": {}, "status": [], "topo": topo}
    rejoin = hb(side, app, "m1", 0, topo=topology(src, app))  # m1 was fenced above: it joins again
    members["m1"].update(epoch=rejoin["member_epoch"], tasks=tasks(rejoin, {}))
    settle(side, app, members)
    obs["after leave"] = count(members["m1"]["tasks"])
    # a topology whose source topic does not exist: no tasks, MISSING_SOURCE_TOPICS
    other = f"sg-{uuid.uuid4().hex[:8]}"
    coordinator_ready(side, other)
    missing = hb(side, other, "x1", 0, topo=topology(f"absent-{other}", other))
    # (less ASSIGNMENT_DELAYED, 5: chronolog assigns at once, docs/differences.md)
    obs["missing source"] = (missing["error_code"], count(tasks(missing, {})),
                             sorted(s["status_code"] for s in missing["status"] or [] if s["status_code"] != 5))
    gone = call(side, 89, V, group_ids=[other], include_authorized_operations=False)["groups"][0]
    obs["missing describe"] = (gone["group_state"], [(s["subtopology_id"], [n.replace(other, "APP") for n in s[
        "source_topics"]], [(t["name"].replace(other, "APP"), t["partitions"]) for t in s["state_changelog_topics"]])
        for s in gone["topology"]["subtopologies"]])
    return obs


def test_streams_group_sequences_answer_as_kafka(both):
    ours, kafka = scenario(both.chronolog), scenario(both.kafka)
    assert ours == kafka


def other_apis(side) -> dict:
    """The classic and KIP-848 group APIs, and commits, on a streams group's id (with a member)."""
    from tests.differential.groups_wire import join

    src = side.create_topic(partitions=3)
    app = f"sg-{uuid.uuid4().hex[:8]}"
    coordinator_ready(side, app)
    members = {"m1": {"epoch": 0, "tasks": {}, "status": [], "topo": topology(src, app)}}
    settle(side, app, members)
    epoch = members["m1"]["epoch"]
    obs: dict = {}
    obs["join"] = join(side, app, [src])["error_code"]
    obs["848 heartbeat"] = retry(side, 68, 0, group_id=app, member_id="c1", member_epoch=0, rebalance_timeout=30000,
                                 subscribed_topic_names=[src], topic_partitions=[])["error_code"]
    obs["848 describe"] = call(side, 69, 0, group_ids=[app], include_authorized_operations=False)["groups"][0][
        "error_code"]
    described = call(side, 15, 5, groups=[app], include_authorized_operations=False)["groups"][0]
    obs["describe groups"] = (described["error_code"], described["group_state"], described["protocol_type"])
    listed = call(side, 16, 5, states_filter=[], types_filter=["streams"])
    obs["list streams"] = [(g["group_id"] == app, g["group_state"], g["group_type"], g["protocol_type"])
                           for g in listed["groups"] if g["group_id"] == app]
    commit = {"group_id": app, "generation_id_or_member_epoch": epoch, "member_id": "m1",
              "group_instance_id": None, "retention_time": -1,
              "topics": [{"name": src, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                       "committed_leader_epoch": -1, "committed_metadata": ""}]}]}
    obs["commit"] = call(side, 8, 9, **commit)["topics"][0]["partitions"][0]["error_code"]
    obs["stale commit"] = call(side, 8, 9, **{**commit, "generation_id_or_member_epoch": epoch + 1})[
        "topics"][0]["partitions"][0]["error_code"]
    obs["simple commit"] = call(side, 8, 9, **{**commit, "generation_id_or_member_epoch": -1, "member_id": ""})[
        "topics"][0]["partitions"][0]["error_code"]
    # another topology epoch while the group has a member: newer, then older than the group's
    newer = hb(side, app, "m9", 0, topo={**topology(src, app), "epoch": 1}, process="p9")
    obs["newer topology"] = (newer["error_code"], sorted(x["status_code"] for x in newer["status"] or []))
    if newer["error_code"] == 0:
        hb(side, app, "m9", -1)
    obs["delete non-empty"] = call(side, 42, 2, groups_names=[app])["results"][0]["error_code"]
    hb(side, app, "m1", -1)
    obs["delete empty"] = call(side, 42, 2, groups_names=[app])["results"][0]["error_code"]
    return obs


def test_other_group_apis_on_a_streams_group_answer_as_kafka(both):
    ours, kafka = other_apis(both.chronolog), other_apis(both.kafka)
    assert ours == kafka


def _statuses(answer: dict) -> list[tuple[int, str]]:
    """The answer's statuses less ASSIGNMENT_DELAYED (5): chronolog assigns at once (docs/differences.md)."""
    return [(s["status_code"], s["status_detail"]) for s in answer["status"] or [] if s["status_code"] != 5]


def unreplicable(side, src: str, app: str) -> dict:
    """A topology whose changelog asks a replication factor of 3 (then -2, then a bad config) on one broker, its
    repartition topic the default (0); another with factors 0, -1 and 1. Names are the same on both brokers, so
    that Kafka's HashSet order of the topics in a status detail is too."""
    def internal(name: str, factor: int, policy: str) -> dict:
        return {"name": name, "partitions": 0, "replication_factor": factor,
                "topic_configs": [{"key": "cleanup.policy", "value": policy}]}

    def topo(group: str, rep_factor: int, *changelogs: tuple[str, int, str]) -> dict:
        return {"epoch": 0, "subtopologies": [
            {"subtopology_id": "0", "source_topics": [src], "source_topic_regex": [], "state_changelog_topics": [],
             "repartition_sink_topics": [f"{group}-rep"], "repartition_source_topics": [], "copartition_groups": []},
            {"subtopology_id": "1", "source_topics": [], "source_topic_regex": [], "repartition_sink_topics": [],
             "copartition_groups": [], "repartition_source_topics": [internal(f"{group}-rep", rep_factor, "delete")],
             "state_changelog_topics": [internal(f"{group}-{n}-changelog", f, p) for n, f, p in changelogs]}]}

    obs: dict = {}
    made = side.admin().list_topics
    # a bad config is refused by the controller alike (CreateTopics' InvalidConfigException)
    for case, factor, policy in (("three", 3, "compact"), ("minus two", -2, "compact"), ("bad config", 1, "bogus")):
        group = f"{app}-{case.replace(' ', '')}"
        coordinator_ready(side, group)
        log = f"{group}-store-changelog"
        joined = hb(side, group, "m1", 0, topo=topo(group, 0, ("store", factor, policy)))
        obs[f"{case} join"] = (joined["error_code"], joined["member_epoch"] > 0, tasks(joined, {}), _statuses(joined))
        epoch, deadline = joined["member_epoch"], time.monotonic() + 30
        while True:  # Kafka caches the controller's refusal a moment after it answers the join
            answer = hb(side, group, "m1", epoch, owned={})
            detail = " ".join(d for _c, d in _statuses(answer))
            if ("Creation failed" in detail and f"{group}-rep" not in detail) or time.monotonic() > deadline:
                break
            epoch = answer["member_epoch"]
            time.sleep(0.1)
        obs[f"{case} heartbeat"] = (answer["error_code"], tasks(answer, {}), _statuses(answer))
        # the topology not ready: the owned tasks are not checked (a subtopology it does not have is taken)
        again = hb(side, group, "m1", answer["member_epoch"], owned={"nope": {0}})
        obs[f"{case} again"] = (again["error_code"], _statuses(again))
        desc = call(side, 89, V, group_ids=[group], include_authorized_operations=False)["groups"][0]
        obs[f"{case} describe"] = (
            desc["group_state"], desc["group_epoch"] > 0,
            [[(t["name"], t["partitions"], t["replication_factor"]) for t in (*s["repartition_source_topics"],
                                                                              *s["state_changelog_topics"])]
             for s in desc["topology"]["subtopologies"]],
            [count({t["subtopology_id"]: t["partitions"] for t in m["assignment"]["active_tasks"]})
             for m in desc["members"]])
        topics = made(timeout=10).topics
        obs[f"{case} topics"] = (f"{group}-rep" in topics, log in topics)
        hb(side, group, "m1", -1)
    # factors 0 (unset) and -1 (the broker's default) and 1: made, the group runs
    group = f"{app}-fine"
    coordinator_ready(side, group)
    fine = topo(group, 1, ("zero", 0, "compact"), ("default", -1, "compact"))
    members = {"m1": {"epoch": 0, "tasks": {}, "status": [], "topo": fine}}
    settle(side, group, members)
    obs["fine"] = (count(members["m1"]["tasks"]), members["m1"]["status"])
    topics = made(timeout=10).topics
    obs["fine topics"] = sorted((n, len(topics[n].partitions)) for n in topics if n.startswith(group))
    return obs


def test_internal_topics_a_broker_cannot_replicate_answer_as_kafka(both):
    """An internal topic with a replication factor above the broker count, or below -1, is not created on one
    broker: the topology stays not ready (no tasks, the owned-task check off), MISSING_INTERNAL_TOPICS names it
    and, from the heartbeat after the join, why Kafka's controller refused it. StreamsGroupDescribe shows the
    declared factors."""
    src = both.create_topic(partitions=2)
    app = f"sg-{uuid.uuid4().hex[:8]}"
    ours, kafka = unreplicable(both.chronolog, src, app), unreplicable(both.kafka, src, app)
    assert ours == kafka
    assert ours["three heartbeat"][2] == [(3, f"Internal topics are missing: {app}-three-store-changelog; Creation "
                                              f"failed: {app}-three-store-changelog (Unable to replicate the partition "
                                              "3 time(s): The target replication factor of 3 cannot be reached because "
                                              "only 1 broker(s) are registered or some brokers have all their log "
                                              "directories cordoned.).")]


def _unauthorized_internal_topics(port: int, admin: str | None, sasl_port: int, app: str) -> dict:
    """alice may READ the group, DESCRIBE every topic and CREATE the topics named `{app}-ok*`: she joins with
    a topology of four changelogs, two of them not hers to create."""
    import datetime

    import chronolog.protocol.streams_schemas  # noqa: F401  (StreamsGroupHeartbeat v1's schema)
    from tests.differential import wirefuzz
    from tests.differential.test_acl_broker_configs import _login
    from tests.differential.test_wire_fuzz_sweep import streams_join

    topic, group_type, literal, prefixed, allow, read, create, describe = 2, 3, 3, 4, 3, 3, 5, 8

    def call(wire, key: int, version: int, values: dict):
        return wire.call(key, version, wirefuzz.build(key, version, values, {}))

    wire = _login(port, admin)
    try:
        acls = [(group_type, app, prefixed, read), (topic, "*", literal, describe),
                (topic, f"{app}-ok", prefixed, create)]
        made = call(wire, 30, 3, {"creations": [{
            "resource_type": t, "resource_name": n, "resource_pattern_type": p, "principal": "User:alice",
            "host": "*", "operation": o, "permission_type": allow} for t, n, p, o in acls]})
        assert wirefuzz.error_codes(made) == [("results.error_code", 0)] * 3
        src = f"{app}-src"
        created = call(wire, 19, 7, {"topics": [{"name": src, "num_partitions": 1, "replication_factor": 1,
                                                 "assignments": [], "configs": []}],
                                     "timeout": datetime.timedelta(seconds=30), "validate_only": False})
        assert created.topics[0].error_code == 0
    finally:
        wire.close()
    alice = _login(sasl_port, "alice")
    try:
        group = f"{app}-g"
        sub = {"state_changelog_topics": [{"name": f"{app}-{n}-changelog", "partitions": 0, "replication_factor": 1,
                                           "topic_configs": []} for n in ("ok", "no", "ok2", "no2")]}
        join = streams_join(group, "m1", src, sub)
        deadline = time.monotonic() + 30
        # FindCoordinator, then the heartbeat, until the group's coordinator serves it (Kafka's ACLs and offsets
        # partition arrive a moment later)
        while call(alice, 10, 4, {"key_type": 0, "coordinator_keys": [group]}).coordinators[0].error_code:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        while (joined := call(alice, 88, 1, join)).error_code in RETRIABLE and time.monotonic() < deadline:
            time.sleep(0.1)
        obs = {"join": (joined.error_code, [(s.status_code, s.status_detail) for s in joined.status or []
                                            if s.status_code != 5])}
        again = call(alice, 88, 1, {**join, "member_epoch": joined.member_epoch, "topology": None,
                                    "active_tasks": None, "standby_tasks": None, "warmup_tasks": None})
        obs["heartbeat"] = (again.error_code, [(s.status_code, s.status_detail) for s in again.status or []
                                               if s.status_code != 5])
        metadata = call(alice, 3, 12, {"topics": None, "allow_auto_topic_creation": False})
        obs["topics"] = sorted(t.name for t in metadata.topics if t.name.startswith(app))
        return obs
    finally:
        alice.close()


def test_internal_topics_the_member_may_not_create_answer_as_kafka(chronolog_acl, kafka_acl):  # noqa: F811
    """KafkaApis.streamsGroupHeartbeat: a member that may not CREATE every missing internal topic has none of
    them created; MISSING_INTERNAL_TOPICS says which it may not (both brokers with an authorizer, the topics'
    names the same on both so that Kafka's HashSet order is)."""
    app = f"sgacl{uuid.uuid4().hex[:6]}"
    ours = _unauthorized_internal_topics(chronolog_acl.port, "admin", chronolog_acl.port, app)
    theirs = _unauthorized_internal_topics(kafka_acl.port, None, kafka_acl.sasl_port, app)
    assert ours == theirs
    assert theirs["topics"] == [f"{app}-src"]
    # in Kafka's HashSet order, which follows the names' hashes (`ours == theirs` above holds chronolog to it)
    unauthorized = theirs["heartbeat"][1][0][1].rpartition("; Unauthorized to CREATE on topics ")[2]
    assert sorted(unauthorized.rstrip(".").split(", ")) == [f"{app}-no-changelog", f"{app}-no2-changelog"]
