"""Apache Kafka on loopback, for tests and benches that compare chronolog with the real thing.

`KafkaBroker` formats a KRaft storage dir (`kafka.tools.StorageTool format`) and starts one combined
broker+controller (`kafka.Kafka`) on free loopback ports; `KafkaCluster` starts three such nodes sharing a
quorum, for tests that need partitions led by different brokers. Both take broker configs the way
`TestBroker` does (Kafka's names) and are context managers. `run_tool` runs one of Kafka's command-line
tools (`kafka-topics` and the rest) in a JVM of its own.

The jars come from the repository's `jvm/pom.xml`, which `make` resolves with Maven into `var/jars/kafka`;
`CHRONOLOG_KAFKA_JARS` names another folder. Without Java or the jars, `kafka_available()` says why.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chronolog.errors import ChronologError

KAFKA_VERSION = "4.4.0"
# The settings Kafka's own single-node test harness uses: internal topics with one replica, no wait before
# a group's first rebalance.
SINGLE_NODE_DEFAULTS = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "50",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
}
# Start-up and memory of a JVM for tests: a smaller heap than kafka-server-start.sh's 1 GiB, the client
# compiler only (Kafka starts about twice as fast and a test's load never warms the server compiler).
TEST_JVM_OPTS = ("-Xms256m", "-Xmx768m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
                 "-Djava.awt.headless=true")
BENCH_JVM_OPTS = ("-Xms1g", "-Xmx1g", "-XX:+UseG1GC", "-Djava.awt.headless=true")
TOOLS = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-configs": "org.apache.kafka.tools.ConfigCommand",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-acls": "org.apache.kafka.tools.AclCommand",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
    "kafka-metadata-quorum": "org.apache.kafka.tools.MetadataQuorumCommand",
    "kafka-leader-election": "org.apache.kafka.tools.LeaderElectionCommand",
    "kafka-reassign-partitions": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-delegation-tokens": "org.apache.kafka.tools.DelegationTokenCommand",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-dump-log": "org.apache.kafka.tools.DumpLogSegments",
    "kafka-storage": "kafka.tools.StorageTool",
}


def jars_dir() -> Path:
    """The folder of Kafka's jars: `CHRONOLOG_KAFKA_JARS`, else `var/jars/kafka` of the checkout."""
    env = os.environ.get("CHRONOLOG_KAFKA_JARS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3] / "var" / "jars" / "kafka"


def kafka_available() -> str | None:
    """None when Kafka can run here, else the reason in one line."""
    if shutil.which("java") is None:
        return "java is not on PATH"
    jars = jars_dir()
    if not any(jars.glob("kafka_2.13-*.jar")):
        return f"Kafka's jars are not in {jars} (run `make install`, which resolves jvm/pom.xml)"
    return None


def classpath() -> str:
    return str(jars_dir() / "*")


def _free_ports(count: int) -> list[int]:
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _log4j_config(path: Path) -> Path:
    """Kafka's server log to a file in the node's dir (the cleaner's MB/s line, errors) and nothing to stdout."""
    path.write_text(
        "Configuration:\n"
        "  Appenders:\n"
        "    File:\n"
        "      name: file\n"
        f"      fileName: {path.parent / 'server.log'}\n"
        "      PatternLayout: {pattern: '[%d] %p %m (%c)%n'}\n"
        "  Loggers:\n"
        "    Root: {level: INFO, AppenderRef: [{ref: file}]}\n"
        "    Logger:\n"
        "      - {name: kafka.log.LogCleaner, level: INFO, additivity: false, AppenderRef: [{ref: file}]}\n"
        "      - {name: org.apache.kafka.storage.internals.log.LogCleaner, level: INFO}\n"
        "      - {name: kafka.request.logger, level: WARN}\n"
    )
    return path


def java_command(main_class: str, args: Sequence[str], jvm_opts: Sequence[str] = TEST_JVM_OPTS,
                 log4j: Path | None = None, classes: Path | None = None) -> list[str]:
    """A JVM running `main_class` with Kafka's jars on the classpath (and `classes`, a folder of compiled
    programs of a test, before them)."""
    cmd = ["java", *jvm_opts]
    if log4j is not None:
        cmd.append(f"-Dlog4j2.configurationFile={log4j}")
    else:  # tools: warnings and errors only, as bin/kafka-run-class.sh's tools-log4j2.yaml
        cmd.append("-Dlog4j2.level=WARN")
        cmd.append("-Dlog4j2.rootLevel=WARN")
    path = classpath() if classes is None else f"{classes}{os.pathsep}{classpath()}"
    return [*cmd, "-cp", path, main_class, *args]


def compile_java(out: Path, *sources: Path) -> Path:
    """Compile a test's Java programs against Kafka's jars into `out` (for `java_command(classes=out)`)."""
    proc = subprocess.run(["javac", "-nowarn", "-cp", classpath(), "-d", str(out), *map(str, sources)],
                          capture_output=True, text=True, timeout=180)
    if proc.returncode != 0:
        raise ChronologError(f"javac failed: {proc.stderr.strip()[-2000:]}")
    return out


def run_tool(tool: str, *args: str, input: str | bytes | None = None, timeout: float = 120,
             check: bool = False) -> subprocess.CompletedProcess:
    """Run one of Kafka's CLI tools (`kafka-topics`, `kafka-configs`, ... or a main class) to the end."""
    main_class = TOOLS.get(tool, tool)
    text = not isinstance(input, bytes)
    proc = subprocess.run(java_command(main_class, args, ("-Xmx512m", "-XX:TieredStopAtLevel=1", "-Xshare:auto")),
                          input=input, capture_output=True, text=text, timeout=timeout)
    if check and proc.returncode != 0:
        raise ChronologError(f"{tool} {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return proc


def random_cluster_id() -> str:
    """A cluster id as `kafka-storage random-uuid` makes it: 16 random bytes, URL-safe base64, no padding,
    never starting with "-" (Kafka's `Uuid.randomUuid` draws again, or a tool would read it as an option)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


class _Node:
    """One combined KRaft broker+controller process."""

    def __init__(self, base: Path, node_id: int, port: int, controller_port: int, voters: str,
                 configs: dict[str, str], jvm_opts: Sequence[str]) -> None:
        self.dir = base / f"node-{node_id}"
        self.log_dir = self.dir / "data"
        self.node_id = node_id
        self.port = port
        self.controller_port = controller_port
        self.jvm_opts = tuple(jvm_opts)
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "log.dirs": str(self.log_dir),
            **configs,
        }
        self.dir.mkdir(parents=True, exist_ok=True)
        self.properties = self.dir / "server.properties"
        self.properties.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        self.log4j = _log4j_config(self.dir / "log4j2.yaml")
        self.proc: subprocess.Popen | None = None
        self._stdout: Any = None

    @property
    def server_log(self) -> Path:
        return self.dir / "server.log"

    def format(self, cluster_id: str) -> None:
        cmd = java_command("kafka.tools.StorageTool", ["format", "-t", cluster_id, "-c", str(self.properties),
                                                       "--ignore-formatted"], self.jvm_opts, self.log4j)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise ChronologError(f"kafka-storage format failed: {(proc.stderr or proc.stdout).strip()[-1500:]}")

    def start(self) -> None:
        self._stdout = open(self.dir / "stdout.log", "ab")
        cmd = java_command("kafka.Kafka", [str(self.properties)], self.jvm_opts, self.log4j)
        self.proc = subprocess.Popen([*_DIE_WITH_PARENT, *cmd], stdout=self._stdout, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        if self.running:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)
        if self._stdout is not None:  # start() may bring the node back on its data
            self._stdout.close()
            self._stdout = None

    def terminate(self) -> None:
        """Ask for a clean stop (SIGTERM: Kafka's controlled shutdown) without waiting for it."""
        if self.running:
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 30) -> None:
        """A clean stop, SIGKILL when it takes longer than `timeout`."""
        if self.proc is not None and self.proc.poll() is None:
            self.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        if self._stdout is not None:
            self._stdout.close()
            self._stdout = None

    def tail(self, lines: int = 30) -> str:
        for path in (self.server_log, self.dir / "stdout.log"):
            if path.exists():
                return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        return ""


class KafkaCluster:
    """`nodes` combined KRaft nodes on loopback (1 by default), each a JVM of its own.

    `configs` are broker configs with Kafka's names, laid over `SINGLE_NODE_DEFAULTS` (for one node) or
    replication factor 3 (for three). `base` None: a temporary directory removed by `stop`."""

    def __init__(self, nodes: int = 1, *, configs: dict[str, str] | None = None, base: Path | str | None = None,
                 jvm_opts: Sequence[str] = TEST_JVM_OPTS, start_timeout: float = 90) -> None:
        reason = kafka_available()
        if reason:
            raise ChronologError(f"Apache Kafka cannot run here: {reason}")
        self._own_base = base is None
        self.base = Path(tempfile.mkdtemp(prefix="kafka-test-")) if base is None else Path(base)
        defaults = dict(SINGLE_NODE_DEFAULTS)
        if nodes > 1:
            rf = str(min(3, nodes))
            defaults.update({"offsets.topic.replication.factor": rf, "transaction.state.log.replication.factor": rf,
                             "transaction.state.log.min.isr": "1", "share.coordinator.state.topic.replication.factor": rf,
                             "default.replication.factor": rf, "min.insync.replicas": "1"})
        self.configs = {**defaults, **{str(k): str(v) for k, v in (configs or {}).items()}}
        self.cluster_id = random_cluster_id()
        self.start_timeout = start_timeout
        self._jvm_opts = tuple(jvm_opts)
        self.nodes: list[_Node] = []
        self._make_nodes(nodes)

    def _make_nodes(self, count: int) -> None:
        ports = _free_ports(2 * count)
        voters = ",".join(f"{i + 1}@127.0.0.1:{ports[count + i]}" for i in range(count))
        self.nodes = [_Node(self.base, i + 1, ports[i], ports[count + i], voters, self.configs, self._jvm_opts)
                      for i in range(count)]

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes if n.running) or \
            ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def client_config(self, **extra: Any) -> dict[str, Any]:
        """A librdkafka (confluent-kafka) config for this cluster."""
        return {"bootstrap.servers": self.bootstrap, **extra}

    def start(self) -> KafkaCluster:
        # A free port is only free until someone binds it: other tests start servers while the JVM starts, so
        # a port taken meanwhile means new ports and another try.
        for attempt in range(3):
            try:
                for node in self.nodes:
                    node.format(self.cluster_id)
                for node in self.nodes:
                    node.start()
                self.wait_ready(self.start_timeout)
                return self
            except _PortTaken:
                self._stop_nodes(clean=False)
                if attempt == 2:
                    self.stop(clean=False)
                    raise ChronologError("Kafka could not bind free loopback ports in 3 tries") from None
                self._make_nodes(len(self.nodes))
            except BaseException:
                self.stop(clean=False)
                raise
        return self

    def wait_ready(self, timeout: float) -> None:
        """Until every running node answers Metadata listing all running nodes (polled, bounded)."""
        from confluent_kafka.admin import AdminClient

        want = {n.node_id for n in self.nodes if n.running}
        deadline = time.monotonic() + timeout
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0, "logger": _quiet})
        last = ""
        while time.monotonic() < deadline:
            dead = [n for n in self.nodes if n.proc is not None and n.proc.poll() is not None and n.node_id in want]
            if dead and "Address already in use" in dead[0].tail(200):
                raise _PortTaken()
            if dead:
                raise ChronologError(f"Kafka node {dead[0].node_id} exited {dead[0].proc.returncode}:\n{dead[0].tail()}")
            try:
                md = admin.list_topics(timeout=2)
                if md.cluster_id != self.cluster_id:  # another server took the port before the JVM bound it
                    raise _PortTaken()
                if set(md.brokers) >= want:
                    return
                last = f"brokers {sorted(md.brokers)}"
            except _PortTaken:
                raise
            except Exception as exc:  # not listening yet
                last = str(exc)
            time.sleep(0.1)
        raise ChronologError(f"Kafka did not answer Metadata within {timeout:.0f} s ({last}):\n{self.nodes[0].tail()}")

    def stop(self, clean: bool = True) -> None:
        """Stop every node: SIGTERM to all at once (a node's controlled shutdown waits for its peers), SIGKILL
        after 15 s; `clean=False` kills at once, for data about to be deleted."""
        self._stop_nodes(clean)
        if self._own_base:
            shutil.rmtree(self.base, ignore_errors=True)

    def _stop_nodes(self, clean: bool) -> None:
        if clean:
            for node in self.nodes:
                node.terminate()
        deadline = time.monotonic() + (15 if clean else 0)
        for node in self.nodes:
            node.stop(timeout=max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- small admin conveniences, through librdkafka ------------------------------------------------
    def create_topic(self, name: str | None = None, partitions: int = 1, configs: dict[str, str] | None = None,
                     replication: int | None = None, prefix: str = "t") -> str:
        from confluent_kafka.admin import AdminClient, NewTopic

        name = name or f"{prefix}-{uuid.uuid4().hex[:12]}"
        rf = replication if replication is not None else min(3, len(self.nodes))
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0, "logger": _quiet})
        futures = admin.create_topics([NewTopic(name, partitions, rf, config=dict(configs or {}))],
                                      operation_timeout=30, request_timeout=30)
        futures[name].result(60)
        self._wait_leaders(admin, name, partitions)
        return name

    def _wait_leaders(self, admin: Any, name: str, partitions: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            md = admin.list_topics(name, timeout=5).topics.get(name)
            if md is not None and md.error is None and len(md.partitions) == partitions and \
                    all(p.leader >= 0 for p in md.partitions.values()):
                return
            time.sleep(0.05)
        raise ChronologError(f"topic {name}: no leader for every partition within {timeout:.0f} s")

    def delete_topic(self, name: str) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0, "logger": _quiet})
        admin.delete_topics([name], operation_timeout=30)[name].result(60)


class KafkaBroker(KafkaCluster):
    """One Apache Kafka broker (a combined KRaft node) on loopback."""

    def __init__(self, *, configs: dict[str, str] | None = None, base: Path | str | None = None,
                 jvm_opts: Sequence[str] = TEST_JVM_OPTS, start_timeout: float = 90) -> None:
        super().__init__(1, configs=configs, base=base, jvm_opts=jvm_opts, start_timeout=start_timeout)

    @property
    def port(self) -> int:
        return self.nodes[0].port

    @property
    def log_dir(self) -> Path:
        return self.nodes[0].log_dir

    @property
    def server_log(self) -> Path:
        return self.nodes[0].server_log


# SIGKILL when the thread that started it ends (Linux's PR_SET_PDEATHSIG, set by util-linux's setpriv before
# it execs the JVM; the fixtures start Kafka from the main thread), so a killed test run leaves no Kafka JVM
# holding ports. Not a preexec_fn: Python code between fork and exec can deadlock beside other threads.
_DIE_WITH_PARENT = ("setpriv", "--pdeathsig", "KILL") if shutil.which("setpriv") else ()


class _PortTaken(Exception):
    """A node's port was bound by another server before the JVM bound it."""


class _QuietLogger:
    """librdkafka's log lines while Kafka starts (connection refused) are expected: dropped."""

    def log(self, *args: Any, **kwargs: Any) -> None:
        pass

    def isEnabledFor(self, level: int) -> bool:  # noqa: N802 - the logging.Logger name librdkafka calls
        return False

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


_quiet = _QuietLogger()
