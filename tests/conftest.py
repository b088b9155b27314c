"""Fixtures shared by every test package."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = (REPO.parent / "shared" / "data").resolve()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real inputs nobody here wrote: loghub syslog, Kafka-written segments, legacy v0 sets."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found beside the repo ({SHARED_DATA})")
    return SHARED_DATA


@pytest.fixture(scope="session")
def kafka_segments_dir(shared_data: Path) -> Path:
    return shared_data / "kafka-segments" / "timeindex_test"


# -- Apache Kafka 4.4, the oracle -------------------------------------------------------------------------
# One Kafka broker per test session (per xdist worker): it takes seconds to start and hundreds of MB.
# Tests that need their own settings start a KafkaBroker themselves.
# Its background tasks run as in Kafka's integration tests: retention checked every 500 ms from the start, the
# cleaner looking for dirty logs every 200 ms (Kafka's defaults: 5 min after a first wait of 30 s, and 15 s).
# tests/differential starts chronolog with these settings too.
KAFKA_TEST_CONFIGS = {
    "log.retention.check.interval.ms": "500",
    "log.initial.task.delay.ms": "0",
    "log.cleaner.backoff.ms": "200",
}


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory):
    from chronolog.testing.kafka import KafkaBroker, kafka_available

    reason = kafka_available()
    if reason:
        pytest.skip(f"Apache Kafka cannot run here: {reason}")
    broker = KafkaBroker(configs=KAFKA_TEST_CONFIGS, base=tmp_path_factory.mktemp("kafka"))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop(clean=False)  # its data is deleted with the session's tmp dir


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory):
    """Three combined KRaft nodes, for tests that need partitions led by different brokers."""
    from chronolog.testing.kafka import KafkaCluster, kafka_available

    reason = kafka_available()
    if reason:
        pytest.skip(f"Apache Kafka cannot run here: {reason}")
    cluster = KafkaCluster(3, base=tmp_path_factory.mktemp("kafka3"))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop(clean=False)


# -- the order the files run in ---------------------------------------------------------------------------
# xdist (`--dist loadfile`) hands files to its workers in collection order. Collected alphabetically, some of
# the longest files (Spark examples in testing/, the Java tools) came last and one worker ran them alone while
# the others idled; the longest first leaves the short ones to fill the gaps at the end. The slowest files
# of a `--durations=0` run, slowest first; a file not listed keeps its place after them.
SLOW_FIRST = (
    "console/test_console_against_kafka.py",  # the scope of the cluster files (CLUSTER_FILES): about 220 s
    # the two Spark scopes (SPARK_SCOPES) next: xdist deals the first ten scopes out in turn, two a worker
    "spark/test_sink.py", "spark/test_pipeline.py",
    "compat/test_franz_go_suite.py", "testing/test_plugin.py", "jvm/test_kafka_tools.py",
    "bench/test_bench_kafka.py", "compat/test_transactions.py", "testing/test_docs.py",
    "jvm/test_streams_groups.py", "spark/test_local_cluster.py", "spark/test_sink_native.py",
    "jvm/test_share_consumer.py", "spark/test_source.py", "compat/test_eos_groups.py",
    "differential/test_share_groups.py", "console/test_console_browser.py", "compat/test_share_consumers.py",
    "reliability/test_disk_full.py", "storage/test_tiered_kafka.py", "jvm/test_java_client.py",
    "spark/test_errors.py", "jvm/test_streams_eos.py", "console/test_console_http.py", "jvm/test_java_txn_v2.py",
    "compat/test_consumer_protocol.py", "spark/test_connect.py", "spark/test_remote_path.py",
    "storage/test_tiered_crash.py", "cli/test_groups_streams.py", "spark/test_stream.py",
    "differential/test_admin_clients.py", "compat/test_clients.py", "console/test_console_groups.py",
    "differential/test_list_offsets_log.py", "jvm/test_connect.py", "differential/test_admin_configs.py",
    "spark/test_option_semantics.py", "reliability/test_damaged_copy.py", "differential/test_readers.py",
    "cli/test_kafka_habits.py", "storage/test_cleaner_native.py", "storage/test_cleaner_crash.py",
    "reliability/test_transactions_crash.py", "spark/test_kafka_connector_parity.py",
    "reliability/test_many_partitions.py", "storage/test_live_index.py", "spark/test_tiered_source.py",
    "reliability/test_load.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    tests = Path(__file__).resolve().parent

    def file_rank(item: pytest.Item) -> int:
        try:
            return rank.get(Path(str(item.path)).resolve().relative_to(tests).as_posix(), len(rank))
        except ValueError:
            return len(rank)

    items.sort(key=file_rank)  # stable: a file's own tests keep their order


# The files that use the session's three-node Kafka cluster (`kafka_cluster`): one scope for xdist, so they run
# on one worker and one cluster starts (three JVMs, about 1.5 GB) instead of one on each worker.
CLUSTER_FILES = frozenset({
    "tests/console/test_console_against_kafka.py", "tests/spark/test_source_against_kafka.py",
    "tests/timetravel/test_more_tools_against_kafka.py", "tests/timetravel/test_tools_against_kafka.py",
    "tests/timetravel/test_tools_leaders_move.py",
})


# The files that use tests/spark/conftest.py's session SparkSession, in two scopes of about the same length:
# each worker that runs one of them starts a SparkSession (a JVM, 30-45 s under the suite's load), so two
# scopes start two instead of one on every worker.
SPARK_SCOPES = {path: scope for scope, paths in {
    "spark-a": ("sink", "stream", "errors", "option_semantics", "sasl_read", "arrow_modes", "isolation", "options"),
    "spark-b": ("pipeline", "source", "sink_native", "remote_path", "tiered_source", "replay_to_kafka",
                "kafka_connector_parity", "replay_to", "damaged_path"),
}.items() for path in (f"tests/spark/test_{name}.py" for name in paths)}


def pytest_xdist_make_scheduler(config: pytest.Config, log):  # noqa: ANN201 (xdist's own types)
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    # xdist reorders the files by their number of tests unless told not to (--loadscope-reorder, on by
    # default): the few-test slow files then started last, and one worker ran them alone at the end.
    config.option.loadscopereorder = False

    class ClusterFilesTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "kafka_cluster" if path in CLUSTER_FILES else SPARK_SCOPES.get(path, path)

    return ClusterFilesTogether(config, log)
