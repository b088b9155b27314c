"""Log cleaner benchmark: chronolog's cleaner against Apache Kafka 4.4's own cleaner on the same logs, on this
machine, in the same run (target: chronolog at least 2x Kafka, uncompressed and zstd).

The logs: keyed records of about 100 bytes (10,000 keys, no tombstones), produced by librdkafka in batches
of at most 10 to a Kafka topic of 4 MiB segments, uncompressed and zstd (the producer's codec, level 3);
the whole log is dirty. Kafka writes them with `cleanup.policy=delete`; its segment files are copied for
chronolog (the files are the same format), then the topic is switched to `compact` and Kafka's cleaner
cleans it. A first topic is cleaned untimed, so that Kafka's cleaner runs JIT-compiled code.

The figure on both sides is Kafka's own: its cleaner's log line (`LogCleaner.recordStats`: "%.1f MB of log
processed in %.1f seconds (%.1f MB/sec)": the copy pass's bytes read, in MiB, over the whole cleaning's
seconds, offset map included), read from the broker's server log; chronolog's the same quotient of its
`CleanerStats`, measured right after Kafka's cleaning of the same topic (one after the other, so that
both see the load of the moment). Each side's best of RUNS topics, from the page cache on both sides
(Kafka has just written its log; chronolog's copy was just written). Both chronolog paths are shown, C
(records/_clean.c) and pure Python; the ratio is the C path's.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from pathlib import Path

from bench.common import print_table
from chronolog.config import TopicConfig
from chronolog.storage import PartitionLog
from chronolog.storage.cleaner import Cleaner, log_to_clean

KEYS = 10_000
RECORDS = 200_000
RUNS = 3
SEGMENT_BYTES = 4 << 20
TOPIC_CONFIG = {"cleanup.policy": "delete", "segment.bytes": str(SEGMENT_BYTES), "min.compaction.lag.ms": "0",
                "message.timestamp.after.max.ms": str(2**62), "message.timestamp.before.max.ms": str(2**62)}
KAFKA_CONFIGS = {"log.cleaner.backoff.ms": "100", "log.cleaner.threads": "1", "num.partitions": "1"}
# LogCleaner.recordStats' summary line (`%,.1f`: thousands may be grouped)
_LINE = re.compile(r"cleaned log (\S+)-0 \(dirty section.*?\n\s*([\d,.]+) MB of log processed in ([\d,.]+) seconds "
                   r"\(([\d,.]+) MB/sec\)", re.S)


def _produce(kafka, topic: str, codec: str) -> None:
    import random

    from confluent_kafka import Producer

    rng = random.Random(1)
    producer = Producer(kafka.client_config(**{"compression.type": codec, "batch.num.messages": 10,
                                               "linger.ms": 50, "enable.idempotence": False, "acks": "all",
                                               "log_level": 0}))
    for i in range(RECORDS):
        producer.produce(topic, key=b"key-%06d" % rng.randrange(KEYS), value=bytes(rng.getrandbits(8)
                         for _ in range(8)) * 11, partition=0)
        if i % 10_000 == 9_999:
            producer.flush()
    producer.flush()


def _kafka_line(kafka, topic: str, timeout: float = 300) -> tuple[float, float]:
    """(MB, MB/sec) of Kafka's cleaner line for `topic`, polled from the server log (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in _LINE.finditer(kafka.server_log.read_text(errors="replace")):
            if m.group(1) == topic:
                return float(m.group(2).replace(",", "")), float(m.group(4).replace(",", ""))
        time.sleep(0.2)
    raise TimeoutError(f"Kafka's cleaner did not log a cleaning of {topic} within {timeout:.0f} s")


def _compact(kafka, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": kafka.bootstrap, "log_level": 0})
    res = ConfigResource("TOPIC", topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(30)


def _copy_logs(kafka, topic: str, dest: Path) -> None:
    """The topic's `.log` files (chronolog builds their indexes on open); the producer's last batch was
    acknowledged, so every file is whole."""
    src = kafka.log_dir / f"{topic}-0"
    dest.mkdir(parents=True)
    for path in sorted(src.glob("*.log")):
        shutil.copy(path, dest)


def chronolog_mb_per_sec(source: Path, work: Path, native: bool) -> float:
    """Kafka's log-line MB/sec of one chronolog cleaning of a fresh copy of `source`."""
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(source, work)
    cfg = TopicConfig.from_kafka({**TOPIC_CONFIG, "cleanup.policy": "compact"})
    plog = PartitionLog.open(work, cfg)
    now = int(time.time() * 1000) + 10**9
    ltc, _ = log_to_clean(("b", 0), plog, None, now)
    cleaner = Cleaner(native=native)
    start = time.perf_counter()
    _end, stats = cleaner.clean(ltc, now)
    seconds = time.perf_counter() - start
    plog.close()
    return stats.bytes_read / (1 << 20) / seconds


def main() -> None:
    from chronolog.testing.kafka import BENCH_JVM_OPTS, KafkaBroker, kafka_available

    reason = kafka_available()
    if reason:
        print(f"cleaner bench skipped: Apache Kafka cannot run here ({reason})")
        return
    native_built = Cleaner().native
    paths = [("C", True), ("Python", False)] if native_built else [("Python", False)]
    rows = [("log", "MB", "Kafka 4.4 MB/sec", *(f"chronolog {p} MB/sec" for p, _ in paths), "ratio (target >= 2)")]
    with tempfile.TemporaryDirectory() as tmp, \
            KafkaBroker(configs=KAFKA_CONFIGS, jvm_opts=BENCH_JVM_OPTS) as kafka:
        warm = kafka.create_topic("warmup", 1, TOPIC_CONFIG)
        _produce(kafka, warm, "zstd")
        _compact(kafka, warm)
        _kafka_line(kafka, warm)
        for label, codec in (("uncompressed", "none"), ("zstd", "zstd")):
            figures = []
            ours: list[list[float]] = [[] for _ in paths]
            for run in range(RUNS):
                topic = kafka.create_topic(f"{codec}-{run}", 1, TOPIC_CONFIG)
                _produce(kafka, topic, codec)
                source = Path(tmp) / f"{topic}-0"
                _copy_logs(kafka, topic, source)
                _compact(kafka, topic)
                figures.append(_kafka_line(kafka, topic))
                # right after Kafka's cleaning, not beside it: both sides see the machine's load of the moment
                for i, (_p, native) in enumerate(paths):
                    ours[i].append(chronolog_mb_per_sec(source, Path(tmp) / "work" / "b-0", native))
            mb = figures[0][0]
            kafka_best = max(f[1] for f in figures)
            ours = [max(figs) for figs in ours]
            rows.append((label, f"{mb:.1f}", f"{kafka_best:.1f}", *(f"{x:.1f}" for x in ours),
                         f"{ours[0] / kafka_best:.1f}x"))
    print_table(rows)


if __name__ == "__main__":
    main()
