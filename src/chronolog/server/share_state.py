"""Durable share-group state (KIP-932) and group configs, the chronolog way.

Kafka keeps each share-partition's state in the `__share_group_state` topic through its share coordinator
(Initialize/Read/Write/DeleteShareGroupState, APIs 83-87) and group configs in the metadata log. One
chronolog broker keeps both in files under `<data dir>/__share_group_state-state/`:

- `<group id, hex>.jsonl`: one JSON line per change of one share-partition: its whole snapshot (start
  offset, end, runs of in-flight states and delivery counts; server/share_partition.py) or its deletion.
  The last line of a partition wins; a torn last line (a killed broker) is skipped; the file is rewritten
  with only the live snapshots once it holds many times more lines than partitions. A line is written
  before the acknowledgement it records is answered, so a SIGKILL loses no acknowledgement (the page cache
  outlives the process; `share.state.fsync=true` adds an fsync per write for power loss).
- `group-configs.json`: the configs set through IncrementalAlterConfigs on GROUP resources.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from chronolog.diskio import write_all, write_atomic

log = logging.getLogger(__name__)

STATE_DIR = "__share_group_state-state"
COMPACT_FACTOR = 20  # rewrite a group's file once it has this many lines per live partition (and 1000 in all)


def _file_name(group_id: str) -> str:
    return group_id.encode().hex() + ".jsonl"


class ShareStateStore:
    def __init__(self, data_dir: Path | str, *, fsync: bool = False) -> None:
        self.dir = Path(data_dir) / STATE_DIR
        self.fsync = fsync
        self._lines: dict[str, int] = {}

    # -- share-partition state -------------------------------------------------------------------------------
    def load(self) -> dict[str, dict[tuple[str, int], dict]]:
        """Every group's live share-partition snapshots: {group: {(topic, partition): snapshot}}."""
        out: dict[str, dict[tuple[str, int], dict]] = {}
        if not self.dir.is_dir():
            return out
        for path in sorted(self.dir.glob("*.jsonl")):
            try:
                group_id = bytes.fromhex(path.stem).decode()
            except ValueError:
                continue
            parts: dict[tuple[str, int], dict] = {}
            lines = 0
            with open(path, encoding="utf-8") as f:
                for line in f:
                    try:
                        entry = json.loads(line)
                    except ValueError:
                        log.warning("share state %s: skipping a torn line", path.name)
                        continue
                    lines += 1
                    key = (entry["t"], int(entry["p"]))
                    if entry.get("deleted"):
                        parts.pop(key, None)
                    else:
                        parts[key] = entry
            self._lines[group_id] = lines
            if parts:
                out[group_id] = parts
        return out

    def write(self, group_id: str, topic: str, partition: int, snapshot: dict | None,
              live: dict[tuple[str, int], dict] | None = None) -> None:
        """Record one share-partition's snapshot (None: deleted). `live`: the group's current snapshots,
        for a compaction."""
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / _file_name(group_id)
        entry = {"t": topic, "p": partition, **(snapshot or {"deleted": True})}
        lines = self._lines.get(group_id, 0) + 1
        if live is not None and lines > 1000 and lines > COMPACT_FACTOR * max(1, len(live)):
            body = "".join(json.dumps({"t": t, "p": p, **s}, separators=(",", ":")) + "\n"
                           for (t, p), s in sorted(live.items()))
            write_atomic(path, body.encode(), sync=self.fsync)
            self._lines[group_id] = len(live)
            return
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            write_all(fd, (json.dumps(entry, separators=(",", ":")) + "\n").encode(), path)
            if self.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        self._lines[group_id] = lines

    def delete_group(self, group_id: str) -> None:
        path = self.dir / _file_name(group_id)
        if path.exists():
            path.unlink()
        self._lines.pop(group_id, None)

    # -- group configs -------------------------------------------------------------------------------------
    def load_configs(self) -> dict[str, dict[str, str]]:
        path = self.dir / "group-configs.json"
        if not path.exists():
            return {}
        try:
            return {g: dict(c) for g, c in json.loads(path.read_text(encoding="utf-8")).items()}
        except ValueError:
            log.error("group configs: %s is unreadable; starting without group configs", path)
            return {}

    def save_configs(self, configs: dict[str, dict[str, str]]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        write_atomic(self.dir / "group-configs.json",
                     json.dumps({g: c for g, c in sorted(configs.items()) if c}, indent=1).encode(), sync=True)
