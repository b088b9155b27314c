"""Kafka's CLI tools, unmodified (Kafka 4.4's jars), against one chronolog broker: each works, answers as a
single-node Kafka would, or refuses in one clear line (the first line of its error output). Every run is a
JVM of its own (1-2 s): the tests share one broker and a few topics, and check several things a run."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

from chronolog.testing.kafka import run_tool


def _name(prefix: str = "jvm") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def tool(name: str, broker, *args: str, input: str | None = None, ok: bool = True):
    proc = run_tool(name, "--bootstrap-server", broker.bootstrap, *args, input=input)
    if ok:
        assert proc.returncode == 0, f"{name} {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc


def first_error_line(proc) -> str:
    return next(line for line in (proc.stderr or proc.stdout).splitlines() if line.strip())


@pytest.fixture(scope="module")
def filled(chronolog):
    """A topic of 2 partitions with 6 keyed records written by kafka-console-producer, and the time before."""
    name = _name("filled")
    tool("kafka-topics", chronolog, "--create", "--topic", name, "--partitions", "2")
    before = int(time.time() * 1000)
    lines = "".join(f"k{i}:v{i}\n" for i in range(6))
    tool("kafka-console-producer", chronolog, "--topic", name, "--reader-property", "parse.key=true",
         "--reader-property", "key.separator=:", input=lines)
    assert sum(chronolog.end_offsets(name)) == 6
    return name, before


def test_kafka_topics_create_exits_0(chronolog):
    """The Java AdminClient reads CreateTopics v7's configs of the created topic (`configs.stream()`): a null
    list made `kafka-topics --create` fail with a NullPointerException after creating the topic (and Kafka
    Streams and Connect die creating their internal topics)."""
    name = _name()
    proc = tool("kafka-topics", chronolog, "--create", "--topic", name, "--partitions", "3", "--config",
                "cleanup.policy=compact")
    assert proc.stdout.strip() == f"Created topic {name}."
    assert chronolog.topics()[name] == 3


def test_kafka_topics_describe_alter_list_delete(chronolog):
    name = _name()
    tool("kafka-topics", chronolog, "--create", "--topic", name, "--partitions", "2", "--config",
         "retention.ms=5000")
    described = tool("kafka-topics", chronolog, "--describe", "--topic", name).stdout.splitlines()
    assert described[0].split("\t")[0] == f"Topic: {name}"
    assert "PartitionCount: 2\tReplicationFactor: 1\tConfigs: min.insync.replicas=1,retention.ms=5000" in described[0]
    assert described[1].strip() == f"Topic: {name}\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1\tElr: \tLastKnownElr:"
    tool("kafka-topics", chronolog, "--alter", "--topic", name, "--partitions", "4")
    assert chronolog.topics()[name] == 4
    tool("kafka-topics", chronolog, "--delete", "--topic", name)
    assert name not in chronolog.topics()
    refused = tool("kafka-topics", chronolog, "--create", "--topic", "bad name", ok=False)
    assert refused.returncode == 1
    assert "Topic name is invalid: 'bad name' contains one or more characters other than ASCII alphanumerics" \
        in refused.stdout + refused.stderr


def test_kafka_configs_topic_and_broker(chronolog):
    name = _name()
    tool("kafka-topics", chronolog, "--create", "--topic", name)
    tool("kafka-configs", chronolog, "--alter", "--entity-type", "topics", "--entity-name", name, "--add-config",
         "retention.ms=1000,cleanup.policy=[compact,delete]")
    out = tool("kafka-configs", chronolog, "--describe", "--entity-type", "topics", "--entity-name", name).stdout
    assert out.splitlines() == [
        f"Dynamic configs for topic {name} are:",
        "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,"
        "delete, DEFAULT_CONFIG:log.cleanup.policy=delete}",
        "  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000}"]
    everything = tool("kafka-configs", chronolog, "--describe", "--all", "--entity-type", "topics",
                      "--entity-name", name).stdout.splitlines()
    assert everything[0] == f"All configs for topic {name} are:" and len(everything) == 1 + 37
    assert "  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000}" in everything
    assert "  segment.ms=604800000 sensitive=false synonyms={}" in everything
    broker = tool("kafka-configs", chronolog, "--describe", "--all", "--entity-type", "brokers",
                  "--entity-name", "1").stdout
    assert "  log.retention.hours=168 sensitive=true" not in broker
    assert "  log.retention.hours=168 sensitive=false synonyms={DEFAULT_CONFIG:log.retention.hours=168}" in broker
    defaults = tool("kafka-configs", chronolog, "--describe", "--entity-type", "brokers", "--entity-default").stdout
    assert defaults.splitlines() == [
        "Default configs for brokers in the cluster are:",
        "  min.insync.replicas=1 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:min.insync.replicas=1}"]
    # docs/differences.md: broker configs are not changed at run time
    refused = tool("kafka-configs", chronolog, "--alter", "--entity-type", "brokers", "--entity-default",
                   "--add-config", "log.retention.ms=1000", ok=False)
    assert refused.returncode == 1
    assert "chronolog does not change broker configs at run time: set log.retention.ms in the broker's settings " \
           "and restart it" in refused.stderr.splitlines()[1]


def test_console_consumer_prints_timestamps(chronolog, filled):
    name, before = filled
    out = tool("kafka-console-consumer", chronolog, "--topic", name, "--from-beginning", "--max-messages", "6",
               "--formatter-property", "print.timestamp=true", "--formatter-property", "print.key=true",
               "--group", "jvm-g", "--timeout-ms", "30000").stdout
    rows = sorted(line.split("\t") for line in out.splitlines() if line.startswith("CreateTime:"))
    assert [(k, v) for _, k, v in rows] == [(f"k{i}", f"v{i}") for i in range(6)]
    assert all(before <= int(ts.split(":")[1]) <= int(time.time() * 1000) for ts, _, _ in rows)


def test_consumer_groups_describe_reset_export_import_delete(chronolog, filled, tmp_path: Path):
    name, before = filled
    group = _name("grp")
    tool("kafka-console-consumer", chronolog, "--topic", name, "--from-beginning", "--max-messages", "6",
         "--group", group, "--timeout-ms", "30000")
    described = tool("kafka-consumer-groups", chronolog, "--describe", "--group", group).stdout
    rows = [line.split() for line in described.splitlines() if line.startswith(group)]
    ends = chronolog.end_offsets(name)
    assert sorted((int(r[2]), int(r[3]), int(r[4]), int(r[5])) for r in rows) == \
        [(p, ends[p], ends[p], 0) for p in range(2)]

    def reset(*how: str) -> dict[int, int]:
        out = tool("kafka-consumer-groups", chronolog, "--reset-offsets", "--group", group, "--topic", name, *how,
                   "--execute").stdout
        return {int(r.split()[2]): int(r.split()[3]) for r in out.splitlines() if r.startswith(group)}

    assert reset("--to-datetime", "2020-01-01T00:00:00.000") == {0: 0, 1: 0}
    assert reset("--shift-by", "1") == {0: min(1, ends[0]), 1: min(1, ends[1])}
    assert reset("--by-duration", "PT1H") == {0: 0, 1: 0}
    plan = tool("kafka-consumer-groups", chronolog, "--reset-offsets", "--group", group, "--topic", name,
                "--to-latest", "--export", "--dry-run").stdout
    assert sorted(line for line in plan.splitlines() if line) == [f"{name},{p},{ends[p]}" for p in range(2)]
    (tmp_path / "plan.csv").write_text(plan)
    out = tool("kafka-consumer-groups", chronolog, "--reset-offsets", "--group", group, "--from-file",
               str(tmp_path / "plan.csv"), "--execute").stdout
    assert sorted(int(r.split()[3]) for r in out.splitlines() if r.startswith(group)) == sorted(ends)
    assert tool("kafka-consumer-groups", chronolog, "--delete", "--group", group).stdout.strip() == \
        f"Deletion of requested consumer groups ('{group}') was successful."


def test_get_offsets_by_time_and_delete_records(chronolog, filled, tmp_path: Path):
    name, before = filled
    ends = chronolog.end_offsets(name)
    latest = tool("kafka-get-offsets", chronolog, "--topic", name, "--time", "-1").stdout.split()
    assert latest == [f"{name}:{p}:{ends[p]}" for p in range(2)]
    by_time = tool("kafka-get-offsets", chronolog, "--topic", name, "--time", str(before - 1)).stdout.split()
    assert by_time == [f"{name}:{p}:0" for p in range(2)]
    # kafka-delete-records moves partition 0's start; kafka-get-offsets --time -2 sees it
    plan = tmp_path / "delete.json"
    plan.write_text(json.dumps({"partitions": [{"topic": name, "partition": 0, "offset": 1}], "version": 1}))
    out = tool("kafka-delete-records", chronolog, "--offset-json-file", str(plan)).stdout
    assert f"partition: {name}-0\tlow_watermark: 1" in out
    earliest = tool("kafka-get-offsets", chronolog, "--topic", name, "--time", "-2").stdout.split()
    assert earliest == [f"{name}:0:1", f"{name}:1:0"]


def test_log_dirs_transactions_acls(chronolog, filled):
    name, _ = filled
    out = tool("kafka-log-dirs", chronolog, "--describe", "--topic-list", name).stdout
    report = json.loads(out.splitlines()[-1])
    (broker,) = report["brokers"]
    (log_dir,) = broker["logDirs"]
    assert broker["broker"] == 1 and log_dir["error"] is None
    assert sorted(p["partition"] for p in log_dir["partitions"]) == [f"{name}-0", f"{name}-1"]
    listed = tool("kafka-transactions", chronolog, "list").stdout.splitlines()
    assert listed[0].split() == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    # As a Kafka broker without an authorizer: SECURITY_DISABLED, said in the first line.
    acls = tool("kafka-acls", chronolog, "--list", ok=False)
    assert acls.returncode == 1
    assert "SecurityDisabledException: No Authorizer is configured on the broker" in first_error_line(acls)


def test_one_node_answers_leader_election_reassignments_features_quorum(chronolog, filled, tmp_path: Path):
    name, _ = filled
    # A one-node cluster: every partition already has its preferred leader; nothing is being reassigned.
    out = tool("kafka-leader-election", chronolog, "--election-type", "preferred", "--topic", name,
               "--partition", "0").stdout
    assert out.strip() == f"Valid replica already elected for partitions {name}-0"
    assert tool("kafka-reassign-partitions", chronolog, "--list").stdout.strip() == \
        "No partition reassignments found."
    # docs/differences.md: ApiVersions finalizes the features clients act on, and there is no KRaft quorum
    # to describe (DescribeQuorum is not served: refused in the first line).
    features = {line.split()[1]: line.split("FinalizedVersionLevel:")[1].split()[0]
                for line in tool("kafka-features", chronolog, "describe").stdout.splitlines() if line.strip()}
    assert features == {"share.version": "2", "streams.version": "1", "transaction.version": "2"}
    quorum = tool("kafka-metadata-quorum", chronolog, "describe", "--status", ok=False)
    assert quorum.returncode == 1
    assert first_error_line(quorum) == ("org.apache.kafka.common.errors.UnsupportedVersionException: The node "
                                        "does not support DESCRIBE_QUORUM")
    # No delegation tokens (docs/differences.md): refused as by a Kafka broker without them, on PLAINTEXT.
    config = tmp_path / "client.properties"
    config.write_text("")
    tokens = tool("kafka-delegation-tokens", chronolog, "--describe", "--command-config", str(config), ok=False)
    assert tokens.returncode == 1
    assert "Delegation Token requests are not allowed on PLAINTEXT/1-way SSL channels" in first_error_line(tokens)


def test_dump_log_reads_chronologs_segments(chronolog, filled):
    name, _ = filled
    manager = chronolog._manager()
    logs = [Path(manager.get_log(name, p).dir) for p in range(2)]
    segments = sorted(str(f) for d in logs for f in d.glob("*.log"))
    out = run_tool("kafka-dump-log", "--deep-iteration", "--files", ",".join(segments))
    assert out.returncode == 0, out.stderr
    records = [line for line in out.stdout.splitlines() if line.startswith("| offset:")]
    assert len(records) == sum(chronolog.end_offsets(name)) and "isvalid: false" not in out.stdout
    indexes = sorted(str(f) for d in logs for f in d.glob("*.*index"))
    verified = run_tool("kafka-dump-log", "--verify-index-only", "--files", ",".join(indexes))
    assert verified.returncode == 0, verified.stderr
    assert "Mismatches" not in verified.stdout and "mismatch" not in verified.stdout.lower()
