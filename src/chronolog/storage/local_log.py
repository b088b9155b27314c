"""The swap of segments (Kafka's `LocalLog.replaceSegments`) and its recovery after a crash (`LogLoader`).

A cleaned segment is written as `<base>.*.cleaned` files. The swap renames them to `.swap` (the `.log`
last: that rename commits), the old segments' files to `.deleted` (their `.log` last), then the `.swap`
files to their final names (the `.log` last). A crash at any step is finished or undone by
`recover_swaps` at the next open; `SwapResolvedFiles` reads such a directory as that open will see it,
without changing it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from pathlib import Path

from chronolog.diskio import fsync_dir
from chronolog.storage.minima import MINIMA_SUFFIX
from chronolog.storage.segment import DELETED_SUFFIX, LOG_SUFFIX, LogSegment
from chronolog.storage.txnindex import TXN_INDEX_SUFFIX

log = logging.getLogger("chronolog.storage.log")

CLEANED_SUFFIX = ".cleaned"  # LogFileUtils.CLEANED_FILE_SUFFIX
SWAP_SUFFIX = ".swap"  # LogFileUtils.SWAP_FILE_SUFFIX
_OTHER_SUFFIXES = (".index", ".timeindex", TXN_INDEX_SUFFIX, MINIMA_SUFFIX)


class SegmentsChangedError(Exception):
    """A replaced segment changed since its copy was made (retention, DeleteRecords, truncation, deletion
    of the topic): nothing was swapped."""


def has_interrupted_swap(directory: Path) -> bool:
    """Whether a partition directory holds files of a swap a crash interrupted (`.swap` or `.cleaned`)."""
    try:
        return any(n.endswith((SWAP_SUFFIX, CLEANED_SUFFIX)) for n in os.listdir(directory))
    except OSError:
        return False


def _swap_order(base: int, suffix: str) -> list[str]:
    """File names of a segment, its `.log` last: the `.log`'s rename is the step that commits."""
    return [f"{base:020d}{s}{suffix}" for s in (".index", ".timeindex", TXN_INDEX_SUFFIX, LOG_SUFFIX)]


def _undo_swap(directory: Path, base: int) -> None:
    for suffix in (CLEANED_SUFFIX, SWAP_SUFFIX):
        for name in _swap_order(base, suffix):
            (directory / name).unlink(missing_ok=True)


class LocalLog:
    """The segment list of a partition as Kafka's `LocalLog` keeps it; `PartitionLog` (`UnifiedLog`) is
    built on it. Every method is called under the log's lock."""

    def replace_segments(self, base: int, old: list[LogSegment], sizes: dict[int, int], *,
                         step: Callable[[str], None] | None = None) -> None:
        """`LocalLog.replaceSegments` under the log's lock: the segment written as `<base>.*.cleaned` takes
        the place of `old`. Its files go `.cleaned` -> `.swap` (the `.log` last: that rename commits), the
        old segments' files -> `.deleted` (their `.log` last), `.swap` -> final names (the `.log` last);
        only then does the in-memory segment list change, so a failure part way leaves the running log
        reading the old segments through their open files, and the next open finishes the swap
        (`recover_swaps`). Raises `SegmentsChangedError`, with nothing swapped, when an old segment's size
        is no longer its `sizes` entry or it left the list. `step` is called with each step's name (a test
        seam: `swap:<file>`, `deleted:<base>`, `final:<file>`)."""
        directory = self.dir
        with self.lock:
            # Appends and rolls go on meanwhile; what invalidates the copy is a replaced segment that
            # retention, DeleteRecords or truncation removed, or a truncation that made it active and cut it.
            if self._closed or any(s not in self.segments or s is self.active or s.size != sizes[s.base_offset]
                                   for s in old):
                raise SegmentsChangedError(f"{self.topic}-{self.partition} changed while it was cleaned")
            committed = False
            renamed: list[Path] = []
            for seg in old:  # their files are renamed under them below: none may be closed and reopened by name
                seg.keep_files_open()
            try:
                for name in _swap_order(base, CLEANED_SUFFIX):
                    src = directory / name
                    if src.exists():
                        os.replace(src, directory / (name[:-len(CLEANED_SUFFIX)] + SWAP_SUFFIX))
                        committed = name.endswith(LOG_SUFFIX + CLEANED_SUFFIX)
                        if step is not None:
                            step("swap:" + name[:-len(CLEANED_SUFFIX)])
                # Committed: from here a crash is finished by `recover_swaps` at the next open.
                for seg in old:
                    for path in sorted(seg.files(), key=lambda p: p.name.endswith(LOG_SUFFIX)):
                        if path.exists():
                            target = path.with_name(path.name + DELETED_SUFFIX)
                            os.replace(path, target)
                            renamed.append(target)
                    if step is not None:
                        step(f"deleted:{seg.base_offset}")
                for name in _swap_order(base, SWAP_SUFFIX):
                    src = directory / name
                    if src.exists():
                        os.replace(src, directory / name[:-len(SWAP_SUFFIX)])
                        if step is not None:
                            step("final:" + name[:-len(SWAP_SUFFIX)])
                # One directory sync for the whole swap, after the last rename, as `LocalLog.replaceSegments`
                # (`Utils.flushDir`); its renames (`atomicMoveWithFallback(..., false)`) flush nothing. The
                # new segment's data was synced by its writer before the first rename.
                fsync_dir(directory)
            except BaseException as exc:
                if not committed:
                    _undo_swap(directory, base)
                    raise
                # Committed: finish the swap now as the next open would (the old segments stay readable
                # through their open files until the segment list changes below).
                log.warning("%s-%d: the swap of cleaned segment %d failed after it was committed (%s); finishing "
                            "it", self.topic, self.partition, base, exc)
                try:
                    # the `.cleaned` files of the next group, being written meanwhile, stay (the next open
                    # drops any left over)
                    recover_swaps(directory, drop_cleaned=False)
                except BaseException:
                    log.error("%s-%d: the swap of cleaned segment %d could not be finished; the next start "
                              "finishes it", self.topic, self.partition, base)
                    raise
            cfg = self.config
            seg = LogSegment(directory, base, index_interval_bytes=cfg.index_interval_bytes,
                             max_index_size=cfg.segment_index_bytes, time_index_style=self.time_index_style)
            at = self.segments.index(old[0])
            for old_seg in old:
                self.segments.remove(old_seg)
                old_seg.close_for_delete()
            seg.is_last = False
            seg._offset_limit_after = self.segments[at].base_offset
            seg.on_become_inactive(loading=True)
            self.segments.insert(at, seg)
            self._segment_created_ms.setdefault(base, self.clock())
            self._segments_version += 1
            self.remove_after_delay(renamed)
            log.info("%s-%d: swapped in cleaned segment %d for segment(s) %s", self.topic, self.partition, base,
                     [s.base_offset for s in old])


# -- recovery of an interrupted swap (LogLoader) -------------------------------------------------------
def _next_offset_of(path: Path) -> int | None:
    """The offset after the last whole batch of a `.log` file (headers only), None when it has none."""
    nxt = None
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        pos = 0
        while pos + 27 <= size:
            f.seek(pos)
            head = f.read(27)
            base = int.from_bytes(head[0:8], "big", signed=True)
            length = int.from_bytes(head[8:12], "big", signed=True)
            if length < 14 or pos + 12 + length > size:
                break
            delta = int.from_bytes(head[23:27], "big", signed=True) if head[16] == 2 else 0
            nxt = base + delta + 1
            pos += 12 + length
    return nxt


def recover_swaps(directory: Path, *, drop_cleaned: bool = True) -> None:
    """`LogLoader`'s handling of an interrupted swap: `.cleaned` files go (unless `drop_cleaned` is
    False: a running cleaner finishing a failed swap, whose next group's are being written); `.swap` files
    without a `<base>.log.swap` go (the swap had not committed: the old segments are intact); a
    `<base>.log.swap` replaces every segment whose base offset lies in its offset range, and its files take
    their final names. Idempotent, so a crash during this repair is repaired the same way at the next open."""
    names = [e.name for e in directory.iterdir()]
    for name in names:
        if drop_cleaned and name.endswith(CLEANED_SUFFIX):
            (directory / name).unlink(missing_ok=True)
    swap_bases = {int(n[:20]) for n in names if n.endswith(LOG_SUFFIX + SWAP_SUFFIX) and n[:20].isdigit()}
    for name in names:
        if name.endswith(SWAP_SUFFIX) and not name.endswith(LOG_SUFFIX + SWAP_SUFFIX) and \
                (not name[:20].isdigit() or int(name[:20]) not in swap_bases):
            (directory / name).unlink(missing_ok=True)
    for base in sorted(swap_bases):
        swap_log = directory / f"{base:020d}{LOG_SUFFIX}{SWAP_SUFFIX}"
        end = _next_offset_of(swap_log)
        end = base if end is None else end
        log_bases = sorted(int(n[:20]) for n in os.listdir(directory)
                           if n.endswith(LOG_SUFFIX) and len(n) == 24 and n[:20].isdigit())
        for old in log_bases:
            if base <= old < max(end, base + 1):
                for suffix in _OTHER_SUFFIXES:  # its other files first, the .log last
                    (directory / f"{old:020d}{suffix}").unlink(missing_ok=True)
                (directory / f"{old:020d}{LOG_SUFFIX}").unlink(missing_ok=True)
        for name in _swap_order(base, SWAP_SUFFIX):
            src = directory / name
            if src.exists():
                os.replace(src, directory / name[:-len(SWAP_SUFFIX)])
        with contextlib.suppress(OSError):
            fsync_dir(directory)
        log.info("%s: completed the swap of cleaned segment %d interrupted by a crash (offsets %d-%d)",
                 directory, base, base, end - 1)


class _LocalFile:
    """A local file as `storage.readonly.RandomAccess`."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_RDONLY)

    def read_at(self, nbytes: int, offset: int) -> bytes:
        return os.pread(self._fd, nbytes, offset)

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class SwapResolvedFiles:
    """A partition directory as the next writable open will see it after `recover_swaps`, without changing
    it (`storage.readonly.ReadOnlyFiles`): a `<base>.log.swap` and its `.swap` indexes stand for the
    segment at `base`, the segments in its offset range are hidden, `.cleaned` files and unmatched `.swap`
    files are ignored. So a tool reading a copy of a data dir a crash left mid-swap (or a live one at that
    moment) answers as the broker will."""

    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)
        real = os.listdir(self.dir)
        swap_bases = {int(n[:20]) for n in real if n.endswith(LOG_SUFFIX + SWAP_SUFFIX) and n[:20].isdigit()}
        hidden: set[int] = set()
        for base in swap_bases:
            end = _next_offset_of(self.dir / f"{base:020d}{LOG_SUFFIX}{SWAP_SUFFIX}")
            end = base + 1 if end is None else max(end, base + 1)
            hidden |= {int(n[:20]) for n in real if n.endswith(LOG_SUFFIX) and len(n) == 24 and n[:20].isdigit()
                       and base <= int(n[:20]) < end}
        self._map: dict[str, str] = {}
        for name in real:
            if name.endswith(CLEANED_SUFFIX):
                continue
            if name.endswith(SWAP_SUFFIX):  # before the hidden test: a swap's base is that of a segment it hides
                if name[:20].isdigit() and int(name[:20]) in swap_bases:
                    self._map[name[:-len(SWAP_SUFFIX)]] = name
                continue
            if name[:20].isdigit() and int(name[:20]) in hidden:
                continue
            self._map.setdefault(name, name)

    def names(self) -> list[str]:
        return list(self._map)

    def open(self, name: str) -> _LocalFile:
        return _LocalFile(self.dir / self._map.get(name, name))

    def read(self, name: str) -> bytes | None:
        real = self._map.get(name)
        if real is None:
            return None
        try:
            return (self.dir / real).read_bytes()
        except OSError:
            return None

    def mtime_ms(self, name: str) -> int:
        return int(os.stat(self.dir / self._map.get(name, name)).st_mtime * 1000)

    def identity(self, name: str) -> tuple:
        st = os.stat(self.dir / self._map.get(name, name))
        return ("swap-resolved", str(self.dir / self._map.get(name, name)), st.st_size, st.st_mtime_ns)
