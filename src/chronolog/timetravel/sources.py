"""Where time lookups and replays get their answers: any Kafka-protocol broker (through librdkafka) or a
data dir on disk (through the storage layer, read-only). Both give the same answers for the same log.

Seed 001's failures are ruled out here: every requested partition gets an answer; a partition with
nothing at or after T answers with its end offset and `found=False` instead of an empty answer.

Every read takes `isolation` ("read_uncommitted", the default, or "read_committed") as a Kafka consumer's
`isolation.level`: under read_committed the end offset is the last stable offset, a time lookup never
answers at or past it (Kafka's ListOffsets), and records of aborted transactions are not returned. A data
dir applies its `.txnindex` files and producer snapshots for that itself.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from chronolog.errors import ChronologError, UnknownTopicOrPartitionError
from chronolog.records import Record
from chronolog.storage.basics import parse_log_dir_name
from chronolog.storage.txnindex import ISOLATION_LEVELS, READ_COMMITTED, READ_UNCOMMITTED
from chronolog.timetravel.offsetanswer import OffsetAtTime

if TYPE_CHECKING:  # the storage engine is imported when a data dir is opened: a broker's tools start without it
    from chronolog.storage import PartitionLog

T = TypeVar("T")
# Errors of a leader or coordinator that moved or is still loading, and librdkafka's local codes for a
# connection to a node that died: librdkafka's admin calls do not flag them all retriable, but the cluster
# answers again once the partitions or the group have a new home
_MOVING = frozenset({-195, -187, -137,  # _TRANSPORT, _ALL_BROKERS_DOWN, _DESTROY_BROKER
                     5, 6, 14, 15, 16,  # LEADER_NOT_AVAILABLE, NOT_LEADER, COORDINATOR_LOAD/_NOT_AVAILABLE, NOT_COORDINATOR
                     74, 75, 78})  # FENCED/UNKNOWN_LEADER_EPOCH, OFFSET_NOT_AVAILABLE (a new leader's high
#                                   watermark not caught up yet: Kafka's clients retry it)
OFFSET_INVALID = -1001


def _isolation(isolation: str) -> str:
    if isolation not in ISOLATION_LEVELS:
        raise ChronologError(f"isolation level {isolation!r}: use read_uncommitted or read_committed")
    return isolation


class DataDirSource:
    """A data dir (ours, or a copy of a Kafka log dir), opened read-only. A single partition directory (e.g.
    one copied out of a Kafka log dir, whatever its name) is a topic named after the directory with one
    partition. What differs between a local path and a URI (`timetravel.remote.RemoteDataDirSource`) is
    only how partition directories are listed and opened: `_partition_dirs` and `_open`."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise ChronologError(f"data dir {self.path} does not exist")
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._found: set[tuple[str, int]] | None = None
        self.name = self.path.name
        self.where = str(self.path)  # for messages
        self.single = any(self.path.glob("*.log"))

    def _partition_dirs(self) -> set[str]:
        """Names of the subdirectories that hold segment files."""
        return {e.name for e in self.path.iterdir() if e.is_dir() and any(e.glob("*.log"))}

    def _open(self, directory: str | None) -> PartitionLog:
        """The partition in subdirectory `directory` (None: the data dir itself), read-only."""
        from chronolog.storage import PartitionLog
        return PartitionLog.open_readonly(self.path if directory is None else self.path / directory)

    def _present(self) -> set[tuple[str, int]]:
        """(topic, partition) of every partition directory, listed once per source."""
        if self._found is None:
            found = set()
            for name in self._partition_dirs():
                try:
                    found.add(parse_log_dir_name(name))
                except ValueError:
                    continue
            self._found = found
        return self._found

    def topics(self) -> dict[str, int]:
        if self.single:
            return {self.name: 1}
        out: dict[str, int] = {}
        for topic, p in self._present():
            out[topic] = max(out.get(topic, 0), p + 1)
        return out

    def partitions(self, topic: str) -> list[int]:
        if self.single:
            if topic != self.name:
                raise UnknownTopicOrPartitionError(f"{self.where} holds only {self.name!r}")
            return [0]
        parts = sorted(p for t, p in self._present() if t == topic)
        if not parts:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} not found in {self.where}")
        return parts

    def log(self, topic: str, partition: int) -> PartitionLog:
        key = (topic, partition)
        if key not in self._logs:
            if self.single:  # whatever the caller calls it (a Spark task names the topic it was asked for)
                self._logs[key] = self._open(None)
            else:
                if key not in self._present():
                    raise UnknownTopicOrPartitionError(f"{topic}-{partition} not found in {self.where}")
                self._logs[key] = self._open(f"{topic}-{partition}")
        return self._logs[key]

    def _end(self, plog: PartitionLog, isolation: str) -> int:
        return plog.last_stable_offset if _isolation(isolation) == READ_COMMITTED else plog.log_end_offset

    def watermarks(self, topic: str, partition: int, *, isolation: str = READ_UNCOMMITTED) -> tuple[int, int]:
        """(log start, end) offsets; the end is the last stable offset under read_committed."""
        plog = self.log(topic, partition)
        return plog.log_start_offset, self._end(plog, isolation)

    def offsets_for_time(self, topic: str, ts: int, partitions: list[int] | None = None, *,
                         isolation: str = READ_UNCOMMITTED) -> dict[int, OffsetAtTime]:
        out = {}
        for p in partitions or self.partitions(topic):
            plog = self.log(topic, p)
            end = self._end(plog, isolation)
            found = plog.offset_for_timestamp(ts)
            if found is not None and found.offset >= end:
                found = None  # `Partition.fetchOffsetForTimestamp`: nothing past the last fetchable offset
            out[p] = OffsetAtTime(p, found.offset if found else end, found.timestamp if found else -1,
                                  found is not None, plog.log_start_offset, end)
        return out

    def read(self, topic: str, partition: int, start: int, end: int, *,
             isolation: str = READ_UNCOMMITTED) -> Iterator[Record]:
        yield from self.log(topic, partition).read_records(start, end, isolation=_isolation(isolation))

    def close(self) -> None:
        """Release the segment files: read-only logs hold file descriptors and index maps, and a Spark
        worker that runs many tasks would otherwise collect them until the garbage collector runs."""
        logs, self._logs = list(self._logs.values()), {}
        for plog in logs:
            plog.close()


class BrokerSource:
    """Any Kafka-protocol broker, through librdkafka (confluent-kafka).

    Its clients live from here to `close()`, which destroys every one of them in the caller's thread: a
    client left to the garbage collector is destroyed in whatever thread collects it, possibly one of
    librdkafka's own (an admin result's callback runs Python there), where destroying a client is
    forbidden (librdkafka's rd_kafka_destroy: "called from librdkafka owned thread") and can crash the
    process. A closed source refuses any further use instead of making new clients."""

    def __init__(self, bootstrap: str, timeout: float = 15.0) -> None:
        from confluent_kafka.admin import AdminClient

        self.bootstrap = bootstrap
        self.timeout = timeout
        conf = {"bootstrap.servers": bootstrap, "socket.connection.setup.timeout.ms": int(timeout * 1000)}
        self._admin = AdminClient(conf)
        self._conf = conf
        self._consumers: dict = {}  # isolation level -> confluent_kafka.Consumer

    @property
    def admin(self):
        """The AdminClient; a `ChronologError` once the source is closed (a destroyed librdkafka handle
        must never be called)."""
        self._check_open()
        return self._admin

    def _check_open(self) -> None:
        if self._admin is None:
            raise ChronologError(f"the clients of {self.bootstrap} were closed")

    @property
    def consumer(self):
        return self._consumer(READ_UNCOMMITTED)

    def _consumer(self, isolation: str):
        """A consumer per isolation level (librdkafka's default is read_committed; Kafka's tools and Spark
        default to read_uncommitted), made when first used."""
        from confluent_kafka import Consumer
        self._check_open()
        if _isolation(isolation) not in self._consumers:
            self._consumers[isolation] = Consumer({
                **self._conf, "group.id": "chronolog-tools", "enable.auto.commit": False,
                "enable.partition.eof": True, "allow.auto.create.topics": False, "isolation.level": isolation})
        return self._consumers[isolation]

    def topics(self) -> dict[str, int]:
        md = self._metadata()
        return {name: len(t.partitions) for name, t in md.topics.items() if not name.startswith("__")}

    def _metadata(self, topic: str | None = None):
        """Metadata through the consumer, whose `allow.auto.create.topics=false` makes librdkafka ask
        with allowAutoTopicCreation=false (the AdminClient asks with true): a read-only tool never creates
        a mistyped topic on a broker with auto.create.topics.enable."""
        from confluent_kafka import KafkaException
        try:
            return self.consumer.list_topics(topic, timeout=self.timeout)
        except KafkaException as exc:
            raise ChronologError(f"cannot reach {self.bootstrap}: {kafka_words(exc)}") from None

    def partitions(self, topic: str) -> list[int]:
        md = self._metadata(topic)
        t = md.topics.get(topic)
        if t is None or t.error is not None or not t.partitions:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} not found on {self.bootstrap}")
        return sorted(t.partitions)

    @property
    def retry_for(self) -> float:
        """A dead node's partitions get new leaders after its broker session expires (9 s by default in
        KRaft, broker.session.timeout.ms): retriable errors are retried this long."""
        return max(60.0, 4 * self.timeout)

    def retrying(self, fn: Callable[..., T], *args: Any) -> T:
        """`_retrying` for readers above this layer (the console's lookups): raise `NoAnswer` from `fn` for
        a partition whose leader never answered."""
        return self._retrying(fn, *args)

    def _retrying(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)`, again while the error is one a moving leader or coordinator gives (a node of the
        cluster died, its partitions' leaders are being elected elsewhere), for at most `retry_for` seconds;
        then the last error stands."""
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + self.retry_for
        while True:
            try:
                return fn(*args)
            except KafkaException as exc:
                if not _moving(exc) or time.monotonic() >= deadline:
                    raise
            except _NoAnswer as exc:
                if time.monotonic() >= deadline:
                    raise ChronologError(f"{exc} within {self.retry_for:.0f} s: start that broker again, or "
                                         "check that the partition has an in-sync replica on another broker") from None
            time.sleep(0.2)  # a back-off between tries, as librdkafka's retry.backoff.ms
            try:  # librdkafka's admin calls ask the leader they cached: ask the cluster where it moved
                self.admin.list_topics(timeout=self.timeout)
            except Exception:  # only a refresh: the next try tells
                pass

    def watermarks(self, topic: str, partition: int, *, isolation: str = READ_UNCOMMITTED) -> tuple[int, int]:
        """(log start, end); the end is the LSO under read_committed (ListOffsets latest with
        isolation_level 1, as the consumer of that level asks it)."""
        return self._retrying(self._watermarks, topic, partition, isolation)

    def _watermarks(self, topic: str, partition: int, isolation: str) -> tuple[int, int]:
        from confluent_kafka import TopicPartition
        if _isolation(isolation) == READ_UNCOMMITTED:
            return self.consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=self.timeout)
        from confluent_kafka import IsolationLevel
        from confluent_kafka.admin import OffsetSpec
        low, _high = self.consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=self.timeout)
        futures = self.admin.list_offsets({TopicPartition(topic, partition): OffsetSpec.latest()},
                                          isolation_level=IsolationLevel.READ_COMMITTED,
                                          request_timeout=self.timeout)
        (fut,) = futures.values()
        return low, fut.result().offset

    def offsets_for_time(self, topic: str, ts: int, partitions: list[int] | None = None, *,
                         isolation: str = READ_UNCOMMITTED) -> dict[int, OffsetAtTime]:
        parts = partitions or self.partitions(topic)
        return self._retrying(self._offsets_for_time, topic, ts, parts, isolation)

    def _offsets_for_time(self, topic: str, ts: int, parts: list[int], isolation: str) -> dict[int, OffsetAtTime]:
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        level = IsolationLevel.READ_COMMITTED if _isolation(isolation) == READ_COMMITTED \
            else IsolationLevel.READ_UNCOMMITTED
        futures = self.admin.list_offsets({TopicPartition(topic, p): OffsetSpec.for_timestamp(ts) for p in parts},
                                          isolation_level=level, request_timeout=self.timeout)
        out = {}
        for tp, fut in futures.items():
            info = fut.result()
            if info.offset == OFFSET_INVALID:  # librdkafka's answer when the leader it asked never answered
                raise _NoAnswer(f"no answer for {topic}-{tp.partition} from its leader")
            low, high = self.watermarks(topic, tp.partition, isolation=isolation)
            found = info.offset >= 0
            out[tp.partition] = OffsetAtTime(tp.partition, info.offset if found else high,
                                             info.timestamp if found else -1, found, low, high)
        return dict(sorted(out.items()))

    def read(self, topic: str, partition: int, start: int, end: int, *,
             isolation: str = READ_UNCOMMITTED) -> Iterator[Record]:
        """Records with start <= offset < end, by assign + poll, with a consumer of that isolation level
        (under read_committed the partition's end is its LSO, and aborted records are skipped by librdkafka)."""
        from confluent_kafka import TopicPartition

        if start >= end:
            return
        consumer = self._consumer(isolation)
        consumer.assign([TopicPartition(topic, partition, start)])
        try:
            for msg in poll_range(consumer, topic, partition, end, self.timeout,
                                  f"timed out reading {topic}-{partition} at offsets [{start}, {end})"):
                headers = tuple((k, v) for k, v in (msg.headers() or []))
                yield Record(msg.offset(), msg.timestamp()[1], msg.key(), msg.value(), headers)
        finally:
            consumer.unassign()

    # -- groups -------------------------------------------------------------------------------------
    def group_state(self, group: str) -> tuple[str, int]:
        """(state, number of active members). A group the broker does not know is DEAD with no members:
        Kafka 4.x answers librdkafka's ConsumerGroupDescribe for it with GROUP_ID_NOT_FOUND."""
        from confluent_kafka import KafkaError, KafkaException

        try:
            result = self._retrying(lambda: self.admin.describe_consumer_groups(
                [group], request_timeout=self.timeout)[group].result())
        except KafkaException as exc:
            if exc.args and getattr(exc.args[0], "code", lambda: None)() == KafkaError.GROUP_ID_NOT_FOUND:
                return "DEAD", 0
            raise
        return str(result.state).split(".")[-1].upper(), len(result.members)

    def committed(self, group: str, topic: str, partitions: list[int]) -> dict[int, int]:
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
        req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in partitions])
        result = self._retrying(lambda: self.admin.list_consumer_group_offsets(
            [req], request_timeout=self.timeout)[group].result())
        return {tp.partition: tp.offset for tp in result.topic_partitions}

    def commit(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
        req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p, o) for p, o in offsets.items()])
        result = self._retrying(lambda: self.admin.alter_consumer_group_offsets(
            [req], request_timeout=self.timeout)[group].result())
        errors = [tp for tp in result.topic_partitions if tp.error is not None]
        if errors:
            raise ChronologError(f"committing offsets for group {group} failed: {kafka_words(errors[0].error)}")

    def close(self) -> None:
        """Close the consumers and destroy the AdminClient here and now; again: nothing."""
        consumers, self._consumers = list(self._consumers.values()), {}
        admin, self._admin = self._admin, None
        closing = [consumer.close for consumer in consumers]
        if admin is not None:  # (not `if admin`: an AdminClient has a len(), its queue length)
            closing.append(lambda: destroy_admin(admin))
        failed: BaseException | None = None
        for close in closing:  # each one, even after one failed (a Ctrl-C, a logger that raised)
            try:
                close()
            except BaseException as exc:
                failed = failed or exc
        if failed is not None:
            raise failed


def destroy_admin(admin) -> None:
    """Destroy an AdminClient in this thread: its `__exit__` (confluent-kafka 2.12 and later; the handle is
    then closed, its later calls raise); before that, dropping the last reference destroys it here."""
    done = getattr(admin, "__exit__", None)
    if done is not None:
        done(None, None, None)


_TOPIC_PARTS = re.compile(r"^([^:]+)(?::([\d,]+))?$")


def parse_topic_partitions(spec: str) -> tuple[str, list[int] | None]:
    """`topic` or `topic:0,2` as kafka-consumer-groups.sh takes them."""
    m = _TOPIC_PARTS.match(spec.strip())
    if not m:
        raise ChronologError(f"cannot read {spec!r} as TOPIC or TOPIC:P,P")
    return m.group(1), [int(p) for p in m.group(2).split(",")] if m.group(2) else None


# librdkafka's error codes (local ones negative) in the tools' words, each with what to do about it
_DOWN = ("a broker it needs stopped answering and no other broker took over in time: start that broker again, or "
         "check that the partition has an in-sync replica on another broker")
_WORDS = {
    -195: _DOWN, -137: _DOWN,  # _TRANSPORT, _DESTROY_BROKER
    -187: "no broker answers: are the brokers of --bootstrap-server running?",  # _ALL_BROKERS_DOWN
    -185: "no answer in time: the broker is overloaded or cut off; run it again, or give more time with "
          "-X socket.timeout.ms=MS",  # _TIMED_OUT
    7: "the broker did not answer in time: it is overloaded; run it again",  # REQUEST_TIMED_OUT
    5: "the partition has no leader yet (an election is under way, or all its replicas are down): run it again "
       "in a few seconds, and check the brokers",  # LEADER_NOT_AVAILABLE
    6: "the partition's leader moved and the new one did not answer in time: run it again",  # NOT_LEADER
    3: "no such topic or partition: `chronolog topics list` shows them",  # UNKNOWN_TOPIC_OR_PART
    -190: "no such partition: `chronolog topics describe TOPIC` shows them",  # _UNKNOWN_PARTITION
    -188: "no such topic: `chronolog topics list` shows them",  # _UNKNOWN_TOPIC
    29: "not allowed to read the topic: ask for DESCRIBE and READ permission on it (an ACL)",
    30: "not allowed to use the consumer group: ask for READ permission on the group (an ACL)",
    31: "not allowed by the cluster's ACLs: ask for the permission the operation needs",
    58: "authentication failed: check sasl.username and sasl.password (-X or --command-config)",
    -169: "authentication failed: check sasl.mechanism, sasl.username and sasl.password (-X or --command-config)",
    -181: "TLS handshake failed: check ssl.ca.location and the broker's certificate (-X or --command-config)",
    35: "the broker does not support this request: it runs too old a Kafka version",  # UNSUPPORTED_VERSION
    -197: "stopped: the client was shutting down (a Ctrl-C?); run it again",  # _DESTROY
    25: "the consumer group is rebalancing or unknown to this coordinator: stop its consumers and run it again",
    14: "the group coordinator is still loading: run it again in a few seconds",  # COORDINATOR_LOAD_IN_PROGRESS
    15: "the group coordinator is not available (the offsets topic has no leader?): check the brokers",
}


_NO_LEADER = ("the partition has no leader: its replicas' brokers are down (start them again) or an election is "
              "under way (run it again in a few seconds)")


def kafka_words(exc: BaseException) -> str:
    """A confluent_kafka.KafkaException (or KafkaError) said in the tools' words with what to do, in one line,
    the client's own code name kept at the end for a search; librdkafka's text for a code not listed."""
    err = exc.args[0] if isinstance(exc, Exception) and exc.args else exc
    code = err.code() if hasattr(err, "code") else None
    words = _WORDS.get(code) if code is not None else None
    if code == -156 and "No leaders found" in (err.str() if hasattr(err, "str") else str(err)):  # _NOENT
        words = _NO_LEADER
    if words is None:
        return err.str() if hasattr(err, "str") else str(err)
    name = err.name() if hasattr(err, "name") else str(code)
    return f"{words} [{name.lstrip('_')}]"


class NoAnswer(Exception):
    """A partition's leader did not answer (it died; a new one is being elected): ask again."""


_NoAnswer = NoAnswer


def _moving(exc: Exception) -> bool:
    """A KafkaException a client retries: a leader or coordinator moving, a connection to a dead node."""
    from confluent_kafka import KafkaError

    err = exc.args[0] if exc.args else None
    if not isinstance(err, KafkaError):
        return False
    return err.retriable() or err.code() in _MOVING


def poll_range(consumer, topic: str, partition: int, end: int, timeout: float, timed_out: str) -> Iterator:
    """The messages of an assigned partition up to `end` (exclusive), polled one by one: the end of the
    partition (an EOF event) or `end` stops it, an error or `timeout` s without a message is one line."""
    from confluent_kafka import KafkaError

    while True:
        msg = consumer.poll(timeout)
        if msg is None:
            raise ChronologError(timed_out)
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                return
            raise ChronologError(f"reading {topic}-{partition}: {kafka_words(msg.error())}")
        if msg.offset() >= end:
            return
        yield msg
        if msg.offset() >= end - 1:
            return
