"""Opening the partitions a data dir holds (Kafka's `LogManager.loadLogs`): eagerly before the start returns,
or lazily by `num.recovery.threads.per.data.dir` threads in the background while the broker serves, a request
for a partition not opened yet opening it itself. The log manager's base class; one partition's open and
recovery are `storage.loader`'s (`LogLoader`).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, NamedTuple

from chronolog.diskio import describe, disk_log, free_bytes

if TYPE_CHECKING:
    from chronolog.storage.log import PartitionLog

log = logging.getLogger("chronolog.storage.manager")  # the manager's logger: its lines keep their name


class PartitionLoading:
    """The log manager's side that opens partitions found at start (`LogManager`'s base class). Uses its
    `data_dir`, `broker_config`, `_logs`, `_pending`, `_failed`, `_load_locks`, `_stop` and `loaded`."""

    def _open_partition(self, key: tuple[str, int], pending: PendingPartition) -> PartitionLog:
        plog = self._tuned(partition_log_class().open(
            self.data_dir / pending.name, self.topic_config(key[0]), recover=not self._clean_start,
            recovery_point=pending.recovery_point, log_start_offset=pending.log_start_offset,
            producer_expiration_ms=self.broker_config["producer.id.expiration.ms"]))
        if self.remote_logs is not None:
            self.remote_logs.attach(plog, pending.log_start_offset)
        return plog

    def _open_pending_now(self, keys: list[tuple[str, int]]) -> None:
        """The eager start: every partition opened before `startup` returns, by Kafka's
        num.recovery.threads.per.data.dir threads; an I/O error stops the start with one line."""
        def open_one(key: tuple[str, int]) -> PartitionLog:
            pending = self._pending[key]
            with self._refuse_start_on_io_error(self.data_dir / pending.name):
                return self._open_partition(key, pending)

        threads = min(self.broker_config["num.recovery.threads.per.data.dir"], max(1, len(keys)))
        with ThreadPoolExecutor(threads, thread_name_prefix="chronolog-recovery") as pool:
            futures = [(key, pool.submit(open_one, key)) for key in keys]
        failure = None
        for key, future in futures:
            try:
                self._logs[key] = future.result()
                del self._pending[key]
            except BaseException as exc:  # the first one is raised once every log is closed again
                failure = failure or exc
        if failure is not None:
            raise failure

    def _start_loaders(self) -> None:
        """Kafka's num.recovery.threads.per.data.dir threads, opening the pending partitions in order."""
        if not self._pending:
            return
        queue = list(self._pending)
        queue.reverse()
        started = time.monotonic()
        left = [0]
        left_lock = threading.Lock()

        def work() -> None:
            while not self._stop.is_set():
                try:
                    key = queue.pop()
                except IndexError:
                    break
                self._load(key)
            with left_lock:
                left[0] -= 1
                last = left[0] == 0
            if last and not self._stop.is_set():
                log.info("%d partitions opened in %.2f s (%s)", len(self._logs), time.monotonic() - started,
                         "after a clean shutdown" if self._clean_start else "recovered from the recovery points")
                self.loaded.set()

        threads = min(self.broker_config["num.recovery.threads.per.data.dir"], len(queue))
        self._loaders = [threading.Thread(target=work, name=f"chronolog-recovery-{i}", daemon=True)
                         for i in range(threads)]
        left[0] = threads
        for thread in self._loaders:
            thread.start()

    def _load(self, key: tuple[str, int]) -> PartitionLog | None:
        """Open a pending partition once: the caller that finds it pending opens it, another one asking
        meanwhile waits on the same lock, and the log is published only once fully loaded. None when the
        partition is not pending (opened meanwhile: see `_logs`; or deleted, or failed: see `_failed`)."""
        with self._load_locks[hash(key) % len(self._load_locks)]:
            plog = self._logs.get(key)
            if plog is not None:
                return plog
            pending = self._pending.get(key)
            if pending is None or self._stop.is_set():
                return None
            try:
                plog = self._open_partition(key, pending)
            except OSError as exc:
                where = self.data_dir / pending.name
                message = (f"cannot open {where}: {exc.filename or where}: {describe(exc)}; "
                           f"{free_bytes(self.data_dir)} bytes free in {self.data_dir}")
                disk_log.error("%s; the partition is offline until the next start", message)
                self._failed[key] = pending
                self._pending.pop(key, None)
                return None
            # Published before it leaves `_pending`, so a reader copying `_pending` then `_logs` (the
            # checkpoints) always finds it in one of them. No manager lock here: a delete or config change
            # holds it while it opens the topic's partitions through this method.
            self._logs[key] = plog
            self._pending.pop(key, None)
            return plog

    def wait_loaded(self, timeout: float | None = None) -> bool:
        """Block until every partition found at start is opened (or failed); True when it is."""
        return self.loaded.wait(timeout)


class PendingPartition(NamedTuple):
    """A partition found at start, not opened yet, with what its checkpoints said (a tuple: 10,000 of
    them are made before the broker serves)."""

    name: str  # the directory's
    recovery_point: int
    log_start_offset: int


def partition_log_class() -> type[PartitionLog]:
    """The segment and log code, imported with the first partition: an empty data dir's start needs none of it."""
    from chronolog.storage.log import PartitionLog

    return PartitionLog
