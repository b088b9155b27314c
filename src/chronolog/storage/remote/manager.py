"""The broker's tiered storage (Kafka's `RemoteLogManager`): the tier (`remote.log.storage.dir`), the caches
of its indexes and byte ranges, one `RemoteLog` per partition of a topic with remote.storage.enable, and the
task that every `remote.log.manager.task.interval.ms` copies closed segments and deletes tiered ones past
retention (`RLMCopyTask`, `RLMExpirationTask`). An unreachable or slow tier delays only this task and the
reads of tiered offsets: appends and local reads never wait for it.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from chronolog.config import BrokerConfig
from chronolog.diskio import describe
from chronolog.storage.basics import now_ms
from chronolog.storage.remote.reading import INDEX_CACHE_DIR, RANGE_BYTES, RemoteCaches
from chronolog.storage.remote.remote_log import RemoteLog
from chronolog.storage.remote.tier import Tier, TierError, open_tier

if TYPE_CHECKING:
    from collections.abc import Callable

    from chronolog.storage.log import PartitionLog

log = logging.getLogger("chronolog.storage.remote")


def default_tier_dir(data_dir: Path) -> Path:
    """Where tiered segments go when remote.log.storage.dir is not set: beside the data dir."""
    return data_dir.parent / f"{data_dir.name}-tier"


class RemoteLogManager:
    def __init__(self, data_dir: Path, config: BrokerConfig, tier: Tier | None = None) -> None:
        location = config["remote.log.storage.dir"] or str(default_tier_dir(data_dir))
        self.tier = tier if tier is not None else open_tier(location)
        self.caches = RemoteCaches(config["remote.log.index.file.cache.total.size.bytes"],
                                   config["chronolog.remote.log.reader.cache.bytes"], RANGE_BYTES,
                                   index_dir=data_dir / INDEX_CACHE_DIR)
        self.interval_ms = config["remote.log.manager.task.interval.ms"]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing: set[tuple[str, int]] = set()
        self._logs: Callable[[], dict] | None = None

    # -- partitions -----------------------------------------------------------------------------------
    def attach(self, plog: PartitionLog, checkpointed_start: int) -> None:
        """Give a partition of a tiered topic its `RemoteLog` (listing the tier's records for it)."""
        if not plog.config.remote_storage_enable or plog.remote is not None:
            return
        remote = RemoteLog(plog, self.tier, self.caches)
        try:
            remote.load(checkpointed_start)
        except (TierError, OSError) as exc:
            # The tier is unreachable: the partition serves its local segments; the task lists it again.
            log.error("%s: tier %s not listed: %s; tiered offsets are unreadable until it is", plog.name,
                      self.tier.location, describe(exc) if not isinstance(exc, TierError) else exc)
            remote.pending_start = checkpointed_start
            with plog.lock:
                if checkpointed_start < plog.log_start_offset:
                    plog.log_start_offset = checkpointed_start
        plog.remote = remote

    def config_changed(self, plog: PartitionLog, was_enabled: bool) -> None:
        """After an alteration: tiering turned on attaches; turned off (with remote.log.delete.on.disable,
        which validation required) deletes the tiered segments and the log starts at its first local one."""
        if plog.config.remote_storage_enable:
            self.attach(plog, plog.log_start_offset)
        elif plog.remote is not None:
            remote, plog.remote = plog.remote, None
            remote.delete_all()
            with plog.lock:
                plog.log_start_offset = max(plog.log_start_offset, plog.segments[0].base_offset)

    def forget(self, plog: PartitionLog) -> None:
        """The topic is deleted: so are its tiered segments (Kafka deletes them asynchronously)."""
        remote = plog.remote
        if remote is not None:
            try:
                remote.delete_all()
            except (TierError, OSError) as exc:
                log.error("%s: tiered segments not deleted from %s: %s", plog.name, self.tier.location, exc)

    # -- the task -------------------------------------------------------------------------------------
    def run_once(self, logs: dict, now: int | None = None) -> int:
        """One pass over the tiered partitions: copy, then delete past retention; returns segments copied
        plus deleted. One ERROR line per partition per incident; the next pass tries again."""
        done = 0
        for key, plog in list(logs.items()):
            remote = plog.remote
            if remote is None or remote.closed or plog._closed:
                continue
            try:
                pending = getattr(remote, "pending_start", None)
                if pending is not None:
                    remote.load(pending)
                    remote.pending_start = None
                done += remote.copy_once()
                done += remote.expire_once(plog.clock() if now is None else now)
                if key in self._failing:
                    self._failing.discard(key)
                    log.info("%s: tier reachable again", plog.name)
            except (TierError, OSError) as exc:
                if key not in self._failing:
                    self._failing.add(key)
                    log.error("%s: tiering failed: %s; tried again every %d ms", plog.name, exc, self.interval_ms)
            except Exception:  # the task must survive one bad partition
                log.exception("%s: tiering failed", plog.name)
        return done

    def start(self, logs: Callable[[], dict]) -> None:
        self._logs = logs
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="chronolog-remote-log-manager", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_ms / 1000.0):
            self.run_once(self._logs(), now_ms())

    def stop(self, logs: dict) -> None:
        for plog in logs.values():
            if plog.remote is not None:
                plog.remote.closed = True  # a copy in progress stops after its segment
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
