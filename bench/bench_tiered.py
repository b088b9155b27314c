"""Tiered storage (KIP-405): a one-hour window of a 24-hour topic read from the tier vs from local disk.

One topic, RECORDS records of VALUE_BYTES-byte values spread over 24 hours, 16 MB segments, written twice:
to a plain topic (every segment on local disk) and to a tiered one whose segments were all copied to the
tier and deleted locally. The window (hour 12) is found by time (ListOffsets' lookup) and read whole
(what a fetch loop or `consume --from --to` asks of the log), cold (the tier's caches emptied first) and
warm, on a tier in a local directory and on an S3 API (moto's server, when installed). Ratios: tier time /
local time (lower is better, 1.0 = as fast as local disk), and bytes read from the tier / window bytes.
"""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path

from bench.common import best_of, print_table

RECORDS = int(os.environ.get("CHRONOLOG_BENCH_TIERED_RECORDS", "480000"))
VALUE_BYTES = 180
T0 = 1_700_000_000_000
HOUR = 3_600_000
ROUNDS = 3
CONFIGS = {"segment.bytes": str(16 << 20), "retention.ms": "-1", "message.timestamp.after.max.ms": str(2**62),
           "message.timestamp.before.max.ms": str(2**62)}


def fill(plog) -> None:
    from chronolog.records import SimpleRecord, build_batch
    value = b"<13>Nov 25 10:00:00 host app[123]: " + b"x" * (VALUE_BYTES - 35)
    per_batch = 500
    for first in range(0, RECORDS, per_batch):
        records = [SimpleRecord(T0 + i * 24 * HOUR // RECORDS, None, value)
                   for i in range(first, min(first + per_batch, RECORDS))]
        plog.append(build_batch(records), now=T0 + 24 * HOUR)


def read_window(plog) -> tuple[int, int]:
    start = plog.offset_for_timestamp(T0 + 12 * HOUR).offset
    end = plog.offset_for_timestamp(T0 + 13 * HOUR).offset
    count = size = 0
    for batch in plog.read_batches(start, end):
        count += batch.records_count
        size += batch.size_in_bytes
    return count, size


def s3_location(stack) -> str | None:
    try:
        import boto3
        from moto.server import ThreadedMotoServer
    except ImportError:
        return None
    import logging
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # the server's access log
    for key, value in {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                       "AWS_EC2_METADATA_DISABLED": "true"}.items():
        os.environ.setdefault(key, value)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    stack.append(server.stop)
    boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1").create_bucket(Bucket="bench")
    return f"s3://bench/tier?region=us-east-1&endpoint_override=127.0.0.1:{port}&scheme=http"


def main() -> None:
    from chronolog.config import BrokerConfig
    from chronolog.storage import LogManager

    stack: list = []
    with tempfile.TemporaryDirectory(prefix="chronolog-bench-tiered-") as tmp:
        base = Path(tmp)
        local = LogManager(base / "local", BrokerConfig())
        local.startup(background=False)
        local.create_topic("logs", 1, CONFIGS)
        fill(local.get_log("logs", 0))
        local_log = local.get_log("logs", 0)
        window = read_window(local_log)
        local_s = best_of(lambda: read_window(local_log), ROUNDS)
        rows = [("read of hour 12 of 24", "seconds", "tier / local", "tier bytes read / window bytes")]
        rows.append(("local disk", f"{local_s:.4f}", "1.00", "-"))
        tiers = [("tier in a directory", str(base / "tier"))]
        try:
            s3 = s3_location(stack)
            if s3 is not None:
                tiers.append(("tier on S3 (moto)", s3))
            for label, location in tiers:
                manager = LogManager(base / label.split()[-1].strip("()"), BrokerConfig({
                    "remote.log.storage.system.enable": "true", "remote.log.storage.dir": location}))
                manager.startup(background=False)
                manager.create_topic("logs", 1, {**CONFIGS, "remote.storage.enable": "true",
                                                 "local.retention.ms": "1"})
                plog = manager.get_log("logs", 0)
                fill(plog)
                now = T0 + 48 * HOUR
                for _ in range(3):
                    manager.remote_logs.run_once(manager.opened_logs(), now)
                    manager.run_retention_once(now)
                remote = plog.remote
                tier = remote.tier

                def cold(remote=remote, plog=plog, tier=tier) -> None:
                    for cache in (remote.caches.indexes, remote.caches.ranges):
                        cache.forget(tier, "")
                    remote._changed()
                    assert read_window(plog) == window

                tier.reset_counters()
                cold()
                fetched = sum(tier.bytes_read.values())
                cold_s = best_of(cold, ROUNDS)
                warm_s = best_of(lambda plog=plog: read_window(plog), ROUNDS)
                rows.append((f"{label}, cold", f"{cold_s:.4f}", f"{cold_s / local_s:.2f}",
                             f"{fetched / window[1]:.2f}"))
                rows.append((f"{label}, warm", f"{warm_s:.4f}", f"{warm_s / local_s:.2f}", "0"))
                manager.shutdown()
        finally:
            local.shutdown()
            for stop in stack:
                stop()
        print(f"{RECORDS} records over 24 h, window {window[0]} records / {window[1]} bytes, best of {ROUNDS}")
        print_table(rows)
