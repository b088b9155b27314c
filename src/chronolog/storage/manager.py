"""The data dir: topics, their partition logs, persisted topic configs, and the background work
(retention every `log.retention.check.interval.ms`, `flush.ms` flushing, recovery-point checkpoints) that
Kafka's `LogManager` schedules, and the log cleaner's thread (`LogCleaner.CleanerThread`) for compacted
topics."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from chronolog.config import BrokerConfig, TopicConfig, validate_remote_storage, validate_topic_overrides
from chronolog.diskio import FileSystemSync, describe, disk_log, free_bytes, fsync_dir, write_atomic
from chronolog.errors import (
    ChronologError,
    InvalidPartitionsError,
    KafkaError,
    KafkaStorageErrorError,
    PolicyViolationError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from chronolog.storage import filecache
from chronolog.storage.basics import now_ms, parse_log_dir_name
from chronolog.storage.checkpoints import (
    CLEAN_SHUTDOWN,
    CLEANER_CHECKPOINT,
    LOG_START_OFFSET,
    RECOVERY_POINT,
    REPLICATION_OFFSET,
    CheckpointError,
    read_checkpoint,
    write_checkpoint,
)
from chronolog.storage.dirlock import DataDirLock
from chronolog.storage.partition_loading import PartitionLoading, PendingPartition, partition_log_class
from chronolog.storage.partition_metadata import (
    new_topic_id,
    sync_new_partitions,
    validate_topic_name,
    write_partition_metadata,
)

if TYPE_CHECKING:
    from chronolog.storage.cleaner import CleanerStats
    from chronolog.storage.log import PartitionLog
    from chronolog.storage.remote.manager import RemoteLogManager
    from chronolog.storage.time_lookup import LogCaches

log = logging.getLogger(__name__)

TOPICS_FILE = "chronolog-topics.json"


class LogManager(PartitionLoading):
    def __init__(self, data_dir: Path | str, broker_config: BrokerConfig | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.broker_config = broker_config or BrokerConfig()
        self._lock = threading.RLock()
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._topics: dict[str, dict] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._dir_lock = DataDirLock(self.data_dir)
        self.started = False
        self._checkpoint_failure: OSError | None = None
        self._low_space = False
        self._cleaner_thread: threading.Thread | None = None
        self._cleaner_lock = threading.Lock()
        self._cleaner_checkpoints: dict[tuple[str, int], int] = {}
        self._uncleanable: set[tuple[str, int]] = set()
        self.cleaner_clock = now_ms  # tests inject a clock (min/max.compaction.lag.ms, delete.retention.ms)
        self.last_clean: tuple[tuple[str, int], int, CleanerStats] | None = None
        # Lazy start (`startup(lazy=True)`): partitions found on disk and not opened yet, with what opening
        # them needs; opened by the recovery threads in the background or by the first request for them.
        self._pending: dict[tuple[str, int], PendingPartition] = {}
        # Partitions whose open failed (KAFKA_STORAGE_ERROR), with what the start read for them: their
        # checkpoint entries stay as they were until a start opens them.
        self._failed: dict[tuple[str, int], PendingPartition] = {}
        self._load_locks = [threading.Lock() for _ in range(64)]  # striped by partition: one opener each
        self._loaders: list[threading.Thread] = []
        self._clean_start = True
        self._lazy = False
        self._fs_sync: FileSystemSync | None = None  # the data dir's file system, synced once at a clean stop
        self.loaded = threading.Event()  # set once no partition is left to open
        self._caches: LogCaches | None = None
        self._caches_lock = threading.Lock()
        # Tiered storage (KIP-405, storage/remote/): made at start when remote.log.storage.system.enable.
        self.remote_logs: RemoteLogManager | None = None

    # -- lifecycle ----------------------------------------------------------------------------------
    def startup(self, background: bool = True, *, lazy: bool = False) -> None:
        """Open every partition. The data dir's `.lock` is taken first (Kafka's `lockLogDirs`): a second
        writer on the same data dir is refused before it touches a file.

        With `lazy` (the broker's start) the partitions are only listed here: `num.recovery.threads.per.data.dir`
        threads open (and after a crash recover) them in the background, and a request for a partition not
        opened yet opens it itself, or waits for the thread opening it, so it never sees a half-loaded log.
        Kafka answers Metadata only once every log is loaded; the topics and partitions are known from the
        data dir's listing, so here the broker serves at once and the start costs no time per partition.
        A partition that cannot be opened (an I/O error) is then offline (KAFKA_STORAGE_ERROR, one ERROR
        line) instead of stopping the start."""
        if self.data_dir.exists() and not self.data_dir.is_dir():
            raise ChronologError(f"data dir {self.data_dir} is not a directory")
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ChronologError(f"cannot create data dir {self.data_dir}: {exc.strerror}") from None
        self._dir_lock.acquire()
        try:
            # Opened before any partition is written: its sync at the stop reports every write-back error since.
            self._fs_sync = FileSystemSync(self.data_dir)
            self._size_file_cache()
            self._lazy = lazy
            if self.broker_config["remote.log.storage.system.enable"] and self.remote_logs is None:
                from chronolog.storage.remote.manager import RemoteLogManager

                self.remote_logs = RemoteLogManager(self.data_dir, self.broker_config)
            self._open_logs()
        except BaseException:
            for plog in self._logs.values():
                plog.close()
            self._logs.clear()
            self._close_fs_sync()
            self._dir_lock.release()
            raise
        self.started = True
        self._cleaner_checkpoints = {k: v for k, v in read_checkpoint(self.data_dir / CLEANER_CHECKPOINT).items()
                                     if k in self._logs or k in self._pending}
        if lazy:
            self._start_loaders()
        if background:
            self._thread = threading.Thread(target=self._background, name="chronolog-log-manager", daemon=True)
            self._thread.start()
            if self.broker_config["log.cleaner.enable"]:
                self._cleaner_thread = threading.Thread(target=self._clean_loop, name="chronolog-log-cleaner",
                                                        daemon=True)
                self._cleaner_thread.start()
            if self.remote_logs is not None:
                self.remote_logs.start(self.opened_logs)

    def _size_file_cache(self) -> None:
        """Raise the soft open-files limit to the hard one and size the open-file cache from it (or from
        `chronolog.log.open.files.max`); one INFO line with the figures."""
        soft, hard = filecache.raise_open_files_limit()
        limit = filecache.nofile_limit()
        wanted = self.broker_config["chronolog.log.open.files.max"]
        if wanted >= limit:
            raise ChronologError(f"chronolog.log.open.files.max={wanted} is not below the open-files limit {limit} "
                                 "(ulimit -n): sockets and other files need descriptors too")
        capacity = wanted or filecache.default_capacity(limit)
        filecache.configure(capacity)
        log.info("open files limit %d (hard %s); segment files hold at most %d descriptors "
                 "(chronolog.log.open.files.max%s)", limit, "unlimited" if hard == filecache.RLIM_INFINITY else hard,
                 capacity, "" if wanted else ": half the limit")

    def _open_logs(self) -> None:
        lazy = self._lazy
        marker = self.data_dir / CLEAN_SHUTDOWN
        clean = marker.exists()
        self._clean_start = clean
        try:
            recovery = read_checkpoint(self.data_dir / RECOVERY_POINT)
            starts = read_checkpoint(self.data_dir / LOG_START_OFFSET)
        except CheckpointError as exc:  # Kafka takes the log dir offline; our only one: refuse to start
            raise ChronologError(f"log dir {self.data_dir} is offline: {exc}; repair the file or remove it (without "
                                 f"{RECOVERY_POINT} the start recovers every log; without {LOG_START_OFFSET} "
                                 "records deleted by retention or DeleteRecords become readable again)") from None
        self._topics = self._read_topics()
        if not self.broker_config["remote.log.storage.system.enable"]:
            tiered = sorted(n for n, meta in self._topics.items()
                            if str(meta.get("configs", {}).get("remote.storage.enable", "")).lower() == "true")
            if tiered:  # LogConfig.validateRemoteStorageOnlyIfSystemEnabled, as Kafka's start refuses
                raise ChronologError("You have to delete all topics with the property remote.storage.enable=true "
                                     "before disabling tiered storage cluster-wide (remote.log.storage.system."
                                     f"enable=false): {', '.join(tiered)}")
        adopted = False  # the file is rewritten at start only when the directories told more than it
        found = []
        # One listing of the data dir; the entries' types come with it (no stat per partition).
        with os.scandir(self.data_dir) as entries:
            dirs = sorted(entry.name for entry in entries if entry.is_dir())
        for name in dirs:
            try:
                topic, partition = parse_log_dir_name(name)
            except ValueError:
                continue
            if topic not in self._topics:
                # A partition dir without metadata (e.g. copied from Kafka): adopt it with defaults.
                self._topics[topic] = {"partitions": 0, "configs": {}, "topic_id": new_topic_id()}
            if partition >= self._topics[topic]["partitions"]:
                self._topics[topic]["partitions"] = partition + 1
                adopted = True
            key = (topic, partition)
            self._pending[key] = PendingPartition(name, recovery.get(key, 0), starts.get(key, 0))
            found.append(key)
        if not lazy:
            self._open_pending_now(found)
        for topic, meta in self._topics.items():
            for p in range(meta["partitions"]):
                if (topic, p) not in self._logs and (topic, p) not in self._pending:
                    with self._refuse_start_on_io_error(self.data_dir / f"{topic}-{p}"):
                        self._logs[(topic, p)] = self._create_log(topic, p)
        if clean:
            # Gone for good before anything is written (Kafka deletes it at start, KAFKA-10471): a crash of this
            # run must not find a marker that vouches for files this run has since changed.
            with self._refuse_start_on_io_error(marker):
                marker.unlink(missing_ok=True)
                fsync_dir(self.data_dir)
        try:
            if adopted:
                self._write_topics()
        except OSError as exc:  # what it would say is known in memory: written again at the next change
            disk_log.warning("%s not rewritten at start: %s", TOPICS_FILE, describe(exc))
        if not self._pending:
            self.loaded.set()

    @contextlib.contextmanager
    def _refuse_start_on_io_error(self, where: Path) -> Iterator[None]:
        """A partition that cannot be opened for an I/O error (recovery on a full disk rebuilds indexes)
        stops the start with one line, before any client is served, instead of a traceback."""
        try:
            yield
        except OSError as exc:
            raise ChronologError(f"cannot open {where}: {exc.filename or where}: {describe(exc)}; "
                                 f"{free_bytes(self.data_dir)} bytes free in {self.data_dir}") from None

    def _tuned(self, plog: PartitionLog) -> PartitionLog:
        plog.write_retry_ms = self.broker_config["chronolog.log.dir.write.retry.ms"]
        plog.caches = self._log_caches()
        return plog

    def _log_caches(self) -> LogCaches:
        """The lookup caches this broker's logs share (`storage.time_lookup`), made with the first log."""
        with self._caches_lock:  # not the manager's lock: loader threads get here holding a partition's
            if self._caches is None:
                from chronolog.storage.time_lookup import LogCaches

                self._caches = LogCaches.new()
            return self._caches

    def shutdown(self, *, durable: bool = True) -> None:
        """Clean stop: flush, trim indexes, write checkpoints and the clean-shutdown marker. On a full or
        failing disk every file is still closed; the marker is left out when anything could not be made
        durable, so that the next start recovers (`LogManager.shutdown` writes it only after all went well).

        `durable=False` is for data about to be deleted (a test broker's temporary dir): the files are closed
        and nothing is synced, checkpointed or marked clean, so a start on the dir would recover it. The
        clean stop's `syncfs` writes back the whole file system's dirty pages, other programs' too, which
        on a busy disk can take longer than a test waits for a stop."""
        self._stop.set()
        if self.remote_logs is not None:
            self.remote_logs.stop(self.opened_logs())  # a copy in progress ends with its segment
        for loader in self._loaders:
            loader.join()  # each stops after the partition it is opening
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self._cleaner_thread is not None:
            self._cleaner_thread.join(timeout=30)  # the cleaner stops between two batches
        with self._lock:
            if durable:
                clean = self._close_logs()
                clean = self.checkpoint() and clean
                # Partitions never opened in this run are as the last stop left them: after a clean one that
                # is still clean; after a crash they still need their recovery, so the marker is not written.
                clean = clean and (self._clean_start or not self._pending) and not self._failed
            else:
                for plog in self._logs.values():
                    plog.close(sync=False)
                clean = False
            if clean:
                # Only now: every log, index, snapshot and checkpoint it vouches for is durable. Kafka's
                # content (`CleanShutdownFileHandler.write`, no broker epoch here), fsynced as Kafka does.
                try:
                    write_atomic(self.data_dir / CLEAN_SHUTDOWN, b'{"version":0,"brokerEpoch":-1}')
                except OSError as exc:
                    disk_log.error("clean-shutdown marker not written: %s; the next start recovers the logs",
                                   describe(exc))
            self.started = False
            self._close_fs_sync()
        self._dir_lock.release()

    def _close_logs(self) -> bool:
        """Close every opened log so that all of it is durable; True when all of it is.

        Kafka flushes and closes each log in `num.recovery.threads.per.data.dir` threads, one fsync per file.
        Here the logs on the data dir's file system are closed without any fsync (trims, final index entries,
        producer snapshots and sidecars written to the page cache) and then made durable together by one
        `syncfs(2)`: seconds instead of tens of seconds for 10,000 partitions. Only after it succeeded are
        their recovery points moved to the log end; if it fails they stay at the last flush, the checkpoint
        says so and the next start recovers from there. Where syncfs cannot be trusted (not Linux, a kernel
        before 5.8) and for a partition on another file system, each log is flushed file by file, several
        at once (concurrent fsyncs share the journal's commits)."""
        started = time.monotonic()
        fs_sync = self._fs_sync
        together, alone = [], []
        for plog in self._logs.values():
            try:
                covered = fs_sync is not None and fs_sync.covers(plog.dir)
            except OSError:
                covered = False
            (together if covered else alone).append(plog)
        for plog in together:
            plog.close(sync=False)
        if alone:
            with ThreadPoolExecutor(min(8, len(alone)), thread_name_prefix="chronolog-close") as pool:
                for _ in pool.map(lambda plog: plog.close(), alone):
                    pass
        clean = all(plog.closed_cleanly for plog in self._logs.values())
        closed = time.monotonic()
        if together:
            try:
                fs_sync.sync()  # type: ignore[union-attr]
            except OSError as exc:
                disk_log.error("sync of %s at the stop failed: %s; %d bytes free; the recovery points stay at "
                               "the last flush and the next start recovers the logs", self.data_dir,
                               describe(exc), free_bytes(self.data_dir))
                return False
            for plog in together:
                plog.closed_durably()
        if self._logs:
            log.info("%d partitions closed in %.2f s (%d made durable by one syncfs of the data dir's file system, "
                     "%.2f s; %d fsynced file by file)", len(self._logs), time.monotonic() - started, len(together),
                     time.monotonic() - closed if together else 0.0, len(alone))
        return clean

    def _close_fs_sync(self) -> None:
        if self._fs_sync is not None:
            self._fs_sync.close()
            self._fs_sync = None

    def __enter__(self) -> LogManager:
        if not self.started:
            self.startup()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    # -- topics -------------------------------------------------------------------------------------
    def _read_topics(self) -> dict[str, dict]:
        path = self.data_dir / TOPICS_FILE
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (ValueError, OSError) as exc:
            log.error("cannot read %s (%s); topics are rebuilt from partition directories", path, exc)
            return {}

    def _write_topics(self) -> None:
        path = self.data_dir / TOPICS_FILE
        write_atomic(path, json.dumps(self._topics, indent=1, sort_keys=True).encode("utf-8"),
                     tmp=path.with_suffix(".tmp"))

    def _create_log(self, topic: str, partition: int, *, sync: bool = True) -> PartitionLog:
        """`sync=False`: partition.metadata is not fsynced here; the caller syncs a whole request's at once."""
        directory = self.data_dir / f"{topic}-{partition}"
        plog = self._tuned(partition_log_class().open(directory, self.topic_config(topic),
                                             producer_expiration_ms=self.broker_config["producer.id.expiration.ms"]))
        try:
            write_partition_metadata(directory, self._topics[topic]["topic_id"], sync=sync)
        except BaseException:
            plog.delete()
            raise
        if self.remote_logs is not None:
            self.remote_logs.attach(plog, 0)
        return plog

    def _create_logs(self, name: str, partitions: range) -> None:
        """Make the partitions' logs and persist the topic list. When any of it fails (a full disk, no
        descriptor left) nothing stays: the new partitions' logs and directories are removed again, the
        request gets KAFKA_STORAGE_ERROR naming the cause with its figures, and one ERROR line says it."""
        made = []
        new_dirs = []
        try:
            for p in partitions:
                directory = self.data_dir / f"{name}-{p}"
                if not directory.exists():
                    new_dirs.append(directory)
                self._logs[(name, p)] = self._create_log(name, p, sync=False)
                made.append(p)
            sync_new_partitions([self.data_dir / f"{name}-{p}" for p in made])
            self._write_topics()
        except BaseException as exc:
            held = filecache.open_descriptors()  # before the rollback closes anything (-1: none left to look)
            for p in made:
                with contextlib.suppress(OSError):
                    self._logs.pop((name, p)).delete()
            for directory in new_dirs:
                shutil.rmtree(directory, ignore_errors=True)
            if not isinstance(exc, OSError):
                raise
            message = f"cannot create partitions of {name}: {exc.filename or self.data_dir}: {describe(exc)}; "
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                limit = filecache.nofile_limit()
                message += (f"{held if held >= 0 else limit} files open, limit {limit} "
                            f"(ulimit -n); segment files hold at most {filecache.cache().capacity} "
                            "(chronolog.log.open.files.max)")
            else:
                message += f"{free_bytes(self.data_dir)} bytes free in {self.data_dir}"
            disk_log.error("%s; nothing of it was kept", message)
            raise KafkaStorageErrorError(message) from None

    def create_topic(self, name: str, partitions: int = 1, configs: dict[str, str] | None = None) -> None:
        validate_topic_name(name)
        if partitions < 1:
            raise InvalidPartitionsError(f"Number of partitions must be at least 1, got {partitions}")
        overrides = validate_topic_overrides(configs or {})
        validate_remote_storage(TopicConfig.from_kafka(overrides, self.broker_config.topic_defaults()),
                                system_enabled=self.broker_config["remote.log.storage.system.enable"])
        with self._lock:
            if name in self._topics:
                raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
            self.check_partition_budget(partitions)
            self._topics[name] = {"partitions": partitions, "configs": overrides, "topic_id": new_topic_id()}
            try:
                self._create_logs(name, range(partitions))
            except BaseException:  # nothing of a failed create stays in Metadata
                del self._topics[name]
                raise

    def delete_topic(self, name: str) -> None:
        with self._lock:
            if name not in self._topics:
                raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist")
            self._open_topic(name)
            for p in range(self._topics[name]["partitions"]):
                if self._failed.pop((name, p), None) is not None:
                    shutil.rmtree(self.data_dir / f"{name}-{p}", ignore_errors=True)
                plog = self._logs.pop((name, p), None)
                if plog is not None:
                    if self.remote_logs is not None:
                        self.remote_logs.forget(plog)
                    plog.delete()
                self._cleaner_checkpoints.pop((name, p), None)
                self._uncleanable.discard((name, p))
            del self._topics[name]
            self._write_topics()

    def create_partitions(self, name: str, total: int, validate_only: bool = False) -> None:
        """Grow a topic to `total` partitions; `validate_only` runs every check and creates nothing."""
        with self._lock:
            if name not in self._topics:
                raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist")
            current = self._topics[name]["partitions"]
            if total <= current:
                raise InvalidPartitionsError(f"Topic currently has {current} partitions, {total} would not be an "
                                             "increase.")
            self.check_partition_budget(total - current)
            if validate_only:
                return
            self._topics[name]["partitions"] = total
            try:
                self._create_logs(name, range(current, total))
            except BaseException:
                self._topics[name]["partitions"] = current
                raise

    def check_partition_budget(self, more: int) -> None:
        """Refuse partitions beyond `max.broker.partitions` (KIP-578's name; Kafka itself has no cap): each one
        holds a directory, two preallocated index maps and file descriptors, so one request asking for a
        million would otherwise exhaust the process."""
        if more < 1:
            raise InvalidPartitionsError(f"Number of partitions must be at least 1, got {more}")
        limit = self.broker_config["max.broker.partitions"]
        with self._lock:
            held = sum(meta["partitions"] for meta in self._topics.values())
        if held + more > limit:
            raise PolicyViolationError(f"{more} more partitions would make {held + more}, beyond "
                                       f"max.broker.partitions={limit}")

    def topics(self) -> dict[str, int]:
        with self._lock:
            return {name: meta["partitions"] for name, meta in self._topics.items()}

    def topic_id(self, name: str) -> str:
        return self._topics[name]["topic_id"]

    def has_topic(self, name: str) -> bool:
        return name in self._topics

    def topic_overrides(self, name: str) -> dict[str, str]:
        with self._lock:
            if name not in self._topics:
                raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist")
            return dict(self._topics[name]["configs"])

    def topic_config(self, name: str) -> TopicConfig:
        """The stored overrides on the broker's defaults; the rules between configs were checked when the
        overrides were stored (create, alter) and the defaults at broker start, not again here."""
        overrides = self._topics.get(name, {}).get("configs", {})
        return TopicConfig.from_kafka(overrides, self.broker_config.topic_defaults(), validate_values=False)

    def alter_topic_config(self, name: str, set_: dict[str, str] | None = None,
                           delete: list[str] | None = None, *, replace: bool = False) -> None:
        """IncrementalAlterConfigs (set/delete) or AlterConfigs (`replace`): validated, persisted, applied to
        the live logs at once."""
        with self._lock:
            overrides = {} if replace else self.topic_overrides(name)
            overrides.update({k: str(v) for k, v in (set_ or {}).items()})
            for key in delete or []:
                overrides.pop(key, None)
            validate_topic_overrides(overrides)
            config = TopicConfig.from_kafka(overrides, self.broker_config.topic_defaults())
            was_tiered = self.topic_config(name).remote_storage_enable
            validate_remote_storage(config, system_enabled=self.broker_config["remote.log.storage.system.enable"],
                                    was_enabled=was_tiered)
            self._topics[name]["configs"] = overrides
            self._write_topics()
            self._open_topic(name)
            for p in range(self._topics[name]["partitions"]):
                plog = self._logs.get((name, p))
                if plog is not None:
                    plog.update_config(config)
                    if self.remote_logs is not None and (was_tiered or config.remote_storage_enable):
                        self.remote_logs.config_changed(plog, was_tiered)

    def get_log(self, topic: str, partition: int) -> PartitionLog:
        """The partition's log, opened first if the lazy start has not opened it yet (waiting for the
        thread opening it, if one is). KAFKA_STORAGE_ERROR for a partition whose open failed."""
        key = (topic, partition)
        plog = self._logs.get(key)
        if plog is None and key in self._pending:
            plog = self._load(key)
        if plog is None:
            plog = self._logs.get(key)
        if plog is None:
            failed = self._failed.get(key)
            if failed is not None:
                raise KafkaStorageErrorError(f"{topic}-{partition} is offline: it could not be opened at start")
            raise UnknownTopicOrPartitionError(f"This server does not host this topic-partition: "
                                               f"{topic}-{partition}")
        return plog

    def _open_topic(self, name: str) -> None:
        """Open the topic's partitions the lazy start has not opened yet (before a change to all of them)."""
        for key in [k for k in list(self._pending) if k[0] == name]:
            self._load(key)

    def logs(self) -> dict[tuple[str, int], PartitionLog]:
        """Every partition's log; after a lazy start the ones not opened yet are opened first."""
        for key in list(self._pending):
            self._load(key)
        return self.opened_logs()

    def opened_logs(self) -> dict[tuple[str, int], PartitionLog]:
        """The logs opened so far (the background work's: a partition not opened yet has nothing to do)."""
        return dict(self._logs)

    # -- background work ----------------------------------------------------------------------------
    def run_retention_once(self, now: int | None = None) -> int:
        deleted = 0
        for plog in self.opened_logs().values():
            try:
                deleted += plog.delete_old_segments(now)
            except (KafkaError, OSError) as exc:
                log.error("retention failed for %s-%d: %s", plog.topic, plog.partition, exc)
        return deleted

    def run_cleaner_once(self, now: int | None = None) -> tuple[tuple[str, int], int, CleanerStats] | None:
        """One `LogCleaner.CleanerThread.tryCleanFilthiestLog`: clean the filthiest compacted log, if one is
        due, and write `cleaner-offset-checkpoint`. Returns (partition, new checkpoint, stats) or None. A
        log whose cleaning fails is left alone until the next start (`markPartitionUncleanable`)."""
        cfg = self.broker_config
        logs = self.opened_logs()
        if not any(plog.config.compacted for plog in logs.values()):
            return None  # nothing to clean: the cleaner's code is not even imported (a broker's start)
        from chronolog.storage.cleaner import Cleaner, CleaningAbortedError, choose_log

        with self._cleaner_lock:
            now = self.cleaner_clock() if now is None else now
            ltc, resets = choose_log(logs, self._cleaner_checkpoints, now, self._uncleanable)
            if resets:
                self._cleaner_checkpoints.update(resets)
                self._write_cleaner_checkpoints()
            if ltc is None:
                return None
            cleaner = Cleaner(cfg["log.cleaner.dedupe.buffer.size"], cfg["log.cleaner.io.buffer.load.factor"],
                              cfg["log.cleaner.io.max.bytes.per.second"], should_stop=self._stop.is_set,
                              sleep=self._stop.wait)  # a throttled cleaner wakes up for a shutdown
            try:
                end, stats = cleaner.clean(ltc, now)
            except CleaningAbortedError as exc:
                log.info("cleaning of %s-%d aborted: %s", ltc.key[0], ltc.key[1], exc)
                return None
            except (KafkaError, OSError, ValueError) as exc:
                if ltc.log._closed:  # the topic was deleted under it
                    return None
                log.error("cleaning of %s-%d failed, it is not cleaned again until the next start: %s",
                          ltc.key[0], ltc.key[1], describe(exc) if isinstance(exc, OSError) else exc)
                self._uncleanable.add(ltc.key)
                return None
            self._cleaner_checkpoints[ltc.key] = end
            self._write_cleaner_checkpoints()
            mb = stats.bytes_read / 1e6
            log.info("Log cleaner: cleaned %s-%d up to offset %d: %.1f MB in %.3f s (%.1f MB/s), %d of %d records "
                     "kept, %d segment(s) in %d group(s)", ltc.key[0], ltc.key[1], end, mb, stats.seconds,
                     mb / stats.seconds if stats.seconds else 0.0, stats.records_retained, stats.records_read,
                     stats.segments, stats.groups)
            self.last_clean = (ltc.key, end, stats)
            return self.last_clean

    def cleaner_checkpoints(self) -> dict[tuple[str, int], int]:
        """First dirty offset of each compacted partition cleaned so far (`cleaner-offset-checkpoint`)."""
        with self._cleaner_lock:
            return dict(self._cleaner_checkpoints)

    def _write_cleaner_checkpoints(self) -> None:
        try:
            write_checkpoint(self.data_dir / CLEANER_CHECKPOINT, self._cleaner_checkpoints)
        except OSError as exc:  # the next cleaning starts further back: more work, never a wrong answer
            disk_log.warning("%s not written: %s", CLEANER_CHECKPOINT, describe(exc))

    def _clean_loop(self) -> None:
        backoff = self.broker_config["log.cleaner.backoff.ms"] / 1000.0
        while not self._stop.is_set():
            try:
                done = self.run_cleaner_once()
            except Exception:  # the cleaner thread must survive one bad partition
                log.exception("log cleaner failed")
                done = None
            if done is None:
                self._stop.wait(backoff)

    def flush_all(self) -> None:
        for plog in self.opened_logs().values():
            plog.flush()
        self.checkpoint()

    def checkpoint(self) -> bool:
        """Write the three checkpoint files; False when one could not be written (the old file stays,
        which only makes the next recovery start further back). One ERROR line per incident."""
        # A partition not opened yet keeps what the start read for it (its high watermark is not known:
        # replication-offset-checkpoint is informational on a single node). `_pending` is copied first: a
        # partition opened meanwhile is in `_logs` before it leaves `_pending`.
        pending = {**self._failed, **self._pending}
        logs = dict(self._logs)
        recovery = {k: v.recovery_point for k, v in pending.items()}
        recovery.update((k, v.recovery_point) for k, v in logs.items())
        starts = {k: v.log_start_offset for k, v in pending.items()}
        starts.update((k, v.log_start_offset) for k, v in logs.items())
        try:
            write_checkpoint(self.data_dir / RECOVERY_POINT, recovery)
            write_checkpoint(self.data_dir / LOG_START_OFFSET, starts)
            write_checkpoint(self.data_dir / REPLICATION_OFFSET, {k: v.high_watermark for k, v in logs.items()})
        except OSError as exc:
            if self._checkpoint_failure is None:
                disk_log.error("checkpoint %s not written: %s; %d bytes free in %s", exc.filename, describe(exc),
                               free_bytes(self.data_dir), self.data_dir)
            self._checkpoint_failure = exc
            return False
        if self._checkpoint_failure is not None:
            disk_log.info("checkpoints written again")
            self._checkpoint_failure = None
        return True

    def check_free_space(self) -> int:
        """WARN once when the data dir's file system has fewer free bytes than
        `chronolog.log.dir.low.space.bytes`, INFO once it has more again; returns the free bytes."""
        reserve = self.broker_config["chronolog.log.dir.low.space.bytes"]
        free = free_bytes(self.data_dir)
        if reserve <= 0 or free < 0:
            return free
        if free < reserve and not self._low_space:
            self._low_space = True
            disk_log.warning("low disk space: %d bytes free in %s, below chronolog.log.dir.low.space.bytes=%d; "
                             "appends fail with KAFKA_STORAGE_ERROR when it is full", free, self.data_dir, reserve)
        elif free >= reserve and self._low_space:
            self._low_space = False
            disk_log.info("disk space back: %d bytes free in %s", free, self.data_dir)
        return free

    def _background(self) -> None:
        cfg = self.broker_config
        retention_every = cfg["log.retention.check.interval.ms"]
        checkpoint_every = cfg["log.flush.offset.checkpoint.interval.ms"]
        expiration_every = cfg["producer.id.expiration.check.interval.ms"]
        last_retention = last_checkpoint = last_expiration = now_ms()
        while not self._stop.wait(min(1.0, retention_every / 1000.0, expiration_every / 1000.0)):
            now = now_ms()
            try:
                if now - last_retention >= retention_every:
                    self.run_retention_once(now)
                    last_retention = now
                if now - last_expiration >= expiration_every:
                    for plog in self.opened_logs().values():
                        plog.expire_producers(now)
                    last_expiration = now
                self.check_free_space()
                for plog in self.opened_logs().values():
                    try:
                        plog.maybe_flush(now)
                    except OSError as exc:  # an fsync that failed: an incident of that partition
                        plog.write_failed(exc)
                if now - last_checkpoint >= checkpoint_every:
                    self.checkpoint()
                    last_checkpoint = now
            except Exception:  # the background thread must survive one bad partition
                log.exception("log manager background task failed")
