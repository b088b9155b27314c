"""`chronolog dump-log`: Kafka's kafka-dump-log.sh for `.log`, `.index`, `.timeindex`, `.txnindex` and
producer `.snapshot` files, with time filters and index verification."""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import typer

from chronolog.cli import offsets_decoder
from chronolog.cli.common import TIME_HELP, emit_json
from chronolog.errors import ChronologError, KafkaError
from chronolog.records.control import ControlType, control_type_of, parse_control_record
from chronolog.storage import OffsetIndex, TimeIndex
from chronolog.storage.index import IndexCorruptError
from chronolog.storage.producers import CorruptSnapshotError, ProducerStates
from chronolog.storage.txnindex import TransactionIndex
from chronolog.timetravel.dump import (
    base_offset_of,
    index_sanity,
    log_batches,
    verify_offset_index,
    verify_time_index,
)
from chronolog.timetravel.timefmt import format_time, parse_time


def register(app: typer.Typer) -> None:
    @app.command("dump-log")
    def dump_log(
        paths: list[str] = typer.Argument(..., help=".log, .index, .timeindex, .txnindex or .snapshot files: local paths or "
                                          "URIs pyarrow can open (file://, s3://bucket/prefix/..., ...)"),
        verify_index: bool = typer.Option(False, "--verify-index", help="Check every index entry against the .log."),
        index_sanity_check: bool = typer.Option(False, "--index-sanity", help="Only run the index sanity check."),
        from_: str | None = typer.Option(None, "--from", help="Only batches with records at/after this. " + TIME_HELP),
        to: str | None = typer.Option(None, "--to", help="Only records before this. " + TIME_HELP),
        print_data: bool = typer.Option(False, "--print-data", help="Print every record."),
        as_json: bool = typer.Option(False, "--json"),
        offsets_decoder: bool = typer.Option(False, "--offsets-decoder", help="Decode the records as "
                                             "__consumer_offsets records, as kafka-dump-log.sh does (implies "
                                             "--print-data)."),
    ) -> None:
        """Print segment files and producer snapshots; exit code 1 when verification finds mismatches or a
        snapshot is corrupt."""
        t1 = parse_time(from_) if from_ else None
        t2 = parse_time(to) if to else None
        global _DECODE
        _DECODE = offsets_decoder
        print_data = print_data or offsets_decoder
        problems = 0
        output = []
        with tempfile.TemporaryDirectory(prefix="chronolog-dump-") as tmp:
            for shown, path in _local_files(paths, Path(tmp), with_log=verify_index):
                problems += _dump_one(shown, path, t1, t2, print_data, as_json, verify_index, index_sanity_check,
                                      output)
        if as_json:
            emit_json(output)
        if problems:
            raise typer.Exit(1)


def _local_files(paths: list[str], tmp: Path, with_log: bool) -> Iterator[tuple[str, Path]]:
    """(name to show, local path) per argument. A URI's file is copied into `tmp` first (with its segment's
    .log beside it when an index is to be verified), so the dump reads it as kafka-dump-log.sh reads a
    file: whole, once."""
    for i, given in enumerate(paths):
        if "://" not in given:
            path = Path(given)
            if not path.exists():
                raise ChronologError(f"{path} does not exist")
            yield str(path), path
            continue
        from chronolog.timetravel.remote import redact, resolve

        fs, remote = resolve(given)
        here = tmp / str(i)
        here.mkdir()
        name = PurePosixPath(remote).name
        wanted = [name]
        if with_log and not name.endswith(".log"):
            wanted.append(name.rsplit(".", 1)[0] + ".log")
        for j, file in enumerate(wanted):
            source = str(PurePosixPath(remote).with_name(file))
            try:
                with fs.open_input_stream(source) as src, open(here / file, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
            except (FileNotFoundError, OSError) as exc:
                if j == 0:  # the sibling .log may be missing: verification then says so, as for local files
                    raise ChronologError(f"cannot read {redact(given)}: {exc}") from None
        yield redact(given), here / name


def _dump_one(shown: str, path: Path, t1: int | None, t2: int | None, print_data: bool, as_json: bool,
              verify_index: bool, index_sanity_check: bool, output: list) -> int:
    """Dumps or verifies one file into `output`; the number of mismatches found."""
    if path.suffix == ".log":
        output.append(_dump_log(path, t1, t2, print_data, as_json, shown))
        return 0
    if path.suffix == ".snapshot":
        output.append(_dump_snapshot(path, as_json, shown))
        return 0 if output[-1]["ok"] else 1
    if path.suffix == ".txnindex":
        output.append(_dump_txn_index(path, as_json, shown))
        return 0 if output[-1]["ok"] else 1
    if path.suffix not in (".index", ".timeindex"):
        raise ChronologError(f"{path.name}: expected .log, .index, .timeindex, .txnindex or .snapshot")
    if not (index_sanity_check or verify_index):
        output.append(_dump_index(path, as_json, shown))
        return 0
    if index_sanity_check:
        found = index_sanity(path)
    else:
        found = verify_offset_index(path) if path.suffix == ".index" else verify_time_index(path)
    output.append({"file": shown, "mismatches": [m.__dict__ for m in found], "ok": not found})
    if not as_json:
        sys.stdout.write(f"{shown}: {'OK' if not found else f'{len(found)} mismatch(es)'}\n")
        for m in found:
            sys.stdout.write(f"  entry {m.entry}: {m.problem}\n")
    return len(found)


def _dump_log(path: Path, t1: int | None, t2: int | None, print_data: bool, as_json: bool, shown: str) -> dict:
    out = {"file": shown, "base_offset": base_offset_of(path), "batches": []}
    if not as_json:
        sys.stdout.write(f"Dumping {shown}\n")
    walk = _RecordWalk(path) if print_data or t2 is not None or t1 is not None else None
    for pos, batch in log_batches(path):
        if t1 is not None and batch.max_timestamp < t1:
            continue
        recs = walk.records(batch) if walk is not None else []
        if t2 is not None and recs and min(r.timestamp for r in recs) >= t2:
            continue
        info = {"base_offset": batch.base_offset, "last_offset": batch.last_offset, "count": batch.records_count,
                "position": pos, "max_timestamp": batch.max_timestamp, "timestamp_type": batch.timestamp_type.name,
                "size": batch.size_in_bytes, "magic": batch.magic, "compression": batch.compression.name,
                "crc": batch.crc, "is_valid": batch.verify_crc()}
        producer = ""
        if batch.magic >= 2:
            last_seq = -1 if batch.base_sequence < 0 else (batch.base_sequence + batch.last_offset_delta) % (1 << 31)
            info.update(base_sequence=batch.base_sequence, last_sequence=last_seq, producer_id=batch.producer_id,
                        producer_epoch=batch.producer_epoch, partition_leader_epoch=batch.partition_leader_epoch,
                        is_transactional=batch.is_transactional, is_control=batch.is_control)
            # DumpLogSegments.printBatchLevel's fields for a v2 batch
            producer = (f"baseSequence: {batch.base_sequence} lastSequence: {last_seq} producerId: "
                        f"{batch.producer_id} producerEpoch: {batch.producer_epoch} partitionLeaderEpoch: "
                        f"{batch.partition_leader_epoch} isTransactional: {str(batch.is_transactional).lower()} "
                        f"isControl: {str(batch.is_control).lower()} ")
            if batch.is_control:
                info["control"] = _control_records(batch)
        if print_data:
            info["records"] = [{"offset": r.offset, "timestamp": r.timestamp, **_key_and_value(r)}
                               for r in recs if (t1 is None or r.timestamp >= t1) and (t2 is None or r.timestamp < t2)
                               and not (_DECODE and getattr(batch, "is_control", False))]
        out["batches"].append(info)
        if not as_json:
            sys.stdout.write(f"baseOffset: {info['base_offset']} lastOffset: {info['last_offset']} count: {info['count']} "
                             f"{producer}position: {pos} maxTimestamp: {info['max_timestamp']} ({format_time(info['max_timestamp'])}) "
                             f"size: {info['size']} magic: {info['magic']} compresscodec: {info['compression']} "
                             f"crc: {info['crc']} isvalid: {str(info['is_valid']).lower()}\n")
            for c in info.get("control", []):
                # DumpLogSegments' deep iteration of a control batch: the marker, never the payload
                kind = "LogAppendTime" if batch.timestamp_type == 1 else "CreateTime"
                sys.stdout.write(f"| offset: {c['offset']} {kind}: {c['timestamp']} keySize: {c['key_size']} "
                                 f"valueSize: {c['value_size']} sequence: -1 headerKeys: [] {c['text']}\n")
            for r in info.get("records", []):
                payload = "" if _DECODE and r["value"] is None else f" payload: {r['value']}"
                sys.stdout.write(f"| offset: {r['offset']} CreateTime: {r['timestamp']} key: {r['key']}{payload}\n")
    return out


class _RecordWalk:
    """The records of a `.log` file batch by batch, decoded by the columnar decoder (`records.columns`) in
    one pass over the file's bytes instead of a parse per record in Python. Control batches, which the
    decoder skips as a consumer does, are read record by record: the dump shows them. Bytes the decoder
    refuses make the whole file take the record-by-record walk, so a damaged file dumps (and fails) as
    it always has."""

    def __init__(self, path: Path) -> None:
        from chronolog.errors import CorruptMessageError, InvalidRecordError
        from chronolog.records.columns import decode
        try:
            self.rows = decode(path.read_bytes()).records()
        except (CorruptMessageError, InvalidRecordError):
            self.rows = None
        self.next = 0

    def records(self, batch) -> list:
        if self.rows is None or getattr(batch, "is_control", False):
            return list(batch.records())
        first = self.next
        while self.next < len(self.rows) and self.rows[self.next].offset <= batch.last_offset:
            self.next += 1
        return self.rows[first:self.next]


_DECODE = False  # --offsets-decoder


def _key_and_value(r) -> dict:
    if _DECODE:
        key, payload = offsets_decoder.parse(r.key, r.value, r.offset)
        return {"key": key, "value": payload}
    return {"key": None if r.key is None else r.key.decode("utf-8", "replace"),
            "value": None if r.value is None else r.value.decode("utf-8", "replace")}


def _control_records(batch) -> list[dict]:
    """The records of a control batch as kafka-dump-log.sh describes them: `endTxnMarker: COMMIT
    coordinatorEpoch: N` for a transaction marker, `controlType: NAME(id)` for the others."""
    out = []
    try:
        records = list(batch.records())
    except KafkaError as exc:
        return [{"offset": batch.base_offset, "timestamp": batch.max_timestamp, "key_size": -1, "value_size": -1,
                 "text": f"unreadable: {exc}"}]
    for r in records:
        entry = {"offset": r.offset, "timestamp": r.timestamp, "key_size": -1 if r.key is None else len(r.key),
                 "value_size": -1 if r.value is None else len(r.value)}
        try:
            kind = control_type_of(r.key)
            if kind in (ControlType.ABORT, ControlType.COMMIT):
                marker = parse_control_record(r.key, r.value)
                entry.update(type=kind.name, coordinator_epoch=marker.coordinator_epoch,
                             text=f"endTxnMarker: {kind.name} coordinatorEpoch: {marker.coordinator_epoch}")
            else:
                type_id = int.from_bytes(r.key[2:4], "big", signed=True)
                entry.update(type=kind.name, text=f"controlType: {kind.name}({type_id})")
        except KafkaError as exc:
            entry.update(type=None, text=f"unreadable control record: {exc}")
        out.append(entry)
    return out


def _dump_txn_index(path: Path, as_json: bool, shown: str) -> dict:
    """An aborted-transaction index, as kafka-dump-log.sh prints one (`DumpLogSegments.dumpTxnIndex`)."""
    if not as_json:
        sys.stdout.write(f"Dumping {shown}\n")
    try:
        index = TransactionIndex(path, base_offset_of(path), writable=False)
    except IndexCorruptError as exc:
        sys.stderr.write(f"{shown}: {exc}\n")
        return {"file": shown, "ok": False, "error": str(exc), "aborted": []}
    aborted = []
    for t in index.entries:
        aborted.append({"version": 0, "producer_id": t.producer_id, "first_offset": t.first_offset,
                        "last_offset": t.last_offset, "last_stable_offset": t.last_stable_offset})
        if not as_json:
            sys.stdout.write(f"version: 0 producerId: {t.producer_id} firstOffset: {t.first_offset} "
                             f"lastOffset: {t.last_offset} lastStableOffset: {t.last_stable_offset}\n")
    return {"file": shown, "ok": True, "aborted": aborted}


def _dump_index(path: Path, as_json: bool, shown: str) -> dict:
    base = base_offset_of(path)
    entries = []
    if path.suffix == ".index":
        idx, names = OffsetIndex(path, base, writable=False), ("offset", "position")
    else:
        idx, names = TimeIndex(path, base, writable=False), ("timestamp", "offset")
    _say_if_empty(idx, shown, as_json)
    for i in range(idx.entries):
        e = idx.entry(i)
        entry = {name: getattr(e, name) for name in names}
        entries.append(entry)
        if not as_json:  # `offset: 3 position: 4120`, `timestamp: 1718377200000 offset: 3`
            sys.stdout.write(" ".join(f"{name}: {value}" for name, value in entry.items()) + "\n")
    return {"file": shown, "entries": entries}


def _say_if_empty(idx, shown: str, as_json: bool) -> None:
    """`DumpLogSegments.dumpIndex`'s line for an index without entries (a live index's zero-filled,
    preallocated tail is not entries: `AbstractIndex._written_slots`)."""
    if idx.entries == 0 and not as_json:
        sys.stdout.write(f"{shown} is empty.\n")


def _dump_snapshot(path: Path, as_json: bool, shown: str) -> dict:
    """A producer snapshot, as kafka-dump-log.sh prints one (`DumpLogSegments.dumpProducerIdSnapshot`):
    each producer with its last batch. A corrupt file is reported (Kafka prints the error and goes on)."""
    if not as_json:
        sys.stdout.write(f"Dumping {shown}\n")
    try:
        entries = ProducerStates.from_bytes(path.read_bytes())
    except CorruptSnapshotError as exc:
        sys.stderr.write(f"{shown}: {exc}\n")
        return {"file": shown, "ok": False, "error": str(exc), "producers": []}
    producers = []
    for e in entries:
        last = e.batches[-1] if e.batches else None
        info = {"producer_id": e.producer_id, "producer_epoch": e.epoch, "coordinator_epoch": e.coordinator_epoch,
                "current_txn_first_offset": None if e.txn_first_offset < 0 else e.txn_first_offset,
                "last_timestamp": e.last_timestamp}
        if last is not None:
            info.update(first_sequence=last.first_seq, last_sequence=last.last_seq, last_offset=last.last_offset,
                        offset_delta=last.offset_delta, timestamp=last.timestamp)
        producers.append(info)
        if not as_json:
            txn = "OptionalLong.empty" if e.txn_first_offset < 0 else f"OptionalLong[{e.txn_first_offset}]"
            line = (f"producerId: {e.producer_id} producerEpoch: {e.epoch} coordinatorEpoch: {e.coordinator_epoch} "
                    f"currentTxnFirstOffset: {txn} lastTimestamp: {e.last_timestamp} ")
            if last is not None:
                line += (f"firstSequence: {last.first_seq} lastSequence: {last.last_seq} lastOffset: "
                         f"{last.last_offset} offsetDelta: {last.offset_delta} timestamp: {last.timestamp}")
            sys.stdout.write(line + "\n")
    return {"file": shown, "ok": True, "producers": producers}
