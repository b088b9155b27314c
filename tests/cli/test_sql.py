"""`chronolog sql` as a person runs it: main(), its output and its exit code. Aggregates over exact
windows (late records included) from a data dir and from the real broker, against brute force; csv,
json and parquet out; a bad query, a missing topic and bad options each give one line and exit 2."""

from __future__ import annotations

import csv
import io
import json
import subprocess

import pytest

from chronolog.config import TopicConfig
from chronolog.records import SimpleRecord, build_batch
from chronolog.storage import PartitionLog
from tests.brokerproc import BrokerProcess
from tests.clirun import chronolog_completed

pytest.importorskip("duckdb")

BASE = 1_700_000_000_000
N = 2000


def stamp(i: int) -> int:
    return BASE + i * 5 - (i * 104729) % 700  # up to 0.7 s late


def sql(*args: str) -> subprocess.CompletedProcess:
    return chronolog_completed("sql", *args)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("sql") / "data"
    cfg = TopicConfig.from_kafka({"message.timestamp.after.max.ms": str(2**62), "segment.bytes": "20000",
                                  "message.timestamp.before.max.ms": str(2**62)})
    for p in range(2):
        plog = PartitionLog.open(root / f"logs-{p}", cfg)
        mine = [i for i in range(N) if i % 2 == p]
        for k in range(0, len(mine), 16):
            plog.append(build_batch([SimpleRecord(stamp(i), None, b"x" * (i % 50)) for i in mine[k:k + 16]]))
        plog.close()
    return root


def window(lo: int, hi: int) -> list[int]:
    return [i for i in range(N) if lo <= stamp(i) < hi]


@pytest.mark.parametrize("lo,hi", [(BASE + 1000, BASE + 2000), (BASE + 3, BASE + 4), (BASE + 9000, BASE + 9500)])
def test_an_aggregate_over_a_window_of_a_data_dir_is_exact(data_dir, lo, hi):
    out = sql("SELECT count(*) AS n, sum(octet_length(value)) AS bytes FROM logs", "--topic", "logs", "--from", str(lo),
              "--to", str(hi), "--data-dir", str(data_dir), "--format", "csv")
    assert out.returncode == 0, out.stderr
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    want = window(lo, hi)
    assert int(rows[0]["n"]) == len(want)
    assert (int(rows[0]["bytes"]) if rows[0]["bytes"] else 0) == sum(i % 50 for i in want)


def test_the_same_query_from_the_broker_serving_that_data(data_dir, tmp_path):
    proc = BrokerProcess(data_dir).start()
    try:
        out = sql('SELECT partition, count(*) AS n FROM "logs" GROUP BY partition ORDER BY partition',
                  "--topic", "logs", "--from", str(BASE + 1000), "--to", str(BASE + 2000), "-b", proc.bootstrap,
                  "--format", "json")
        missing = sql("SELECT count(*) FROM nope", "--topic", "nope", "-b", proc.bootstrap)
    finally:
        proc.stop()
    assert out.returncode == 0, out.stderr
    got = [json.loads(line) for line in out.stdout.splitlines()]
    want = window(BASE + 1000, BASE + 2000)
    assert got == [{"partition": p, "n": sum(1 for i in want if i % 2 == p)} for p in (0, 1)]
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [f"chronolog: error: topic 'nope' not found on {proc.bootstrap}"]


def test_a_table_on_the_terminal_and_parquet_to_a_file(data_dir, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    out = sql('SELECT "offset", partition FROM records ORDER BY partition, "offset" LIMIT 3', "--topic", "logs",
              "--data-dir", str(data_dir))
    assert out.returncode == 0, out.stderr
    assert "offset" in out.stdout and "partition" in out.stdout
    target = tmp_path / "w.parquet"
    out = sql("SELECT * FROM logs", str(target), "--topic", "logs", "--from", str(BASE + 1000), "--to",
              str(BASE + 2000), "--data-dir", str(data_dir), "--format", "parquet")
    assert out.returncode == 0, out.stderr
    table = pq.read_table(target)
    assert table.num_rows == len(window(BASE + 1000, BASE + 2000))
    assert table.column_names == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]


@pytest.mark.parametrize("args,message", [
    (["SELEC nothing", "--topic", "logs"], "chronolog: error: query failed: Parser Error: syntax error"),
    (["SELECT count(*) FROM nope", "--topic", "nope"], "chronolog: error: topic 'nope' not found in"),
    (["SELECT 1", "--topic", "logs", "--format", "xml"], "chronolog: error: --format is table, csv, json or parquet"),
    (["SELECT 1", "--topic", "logs", "--format", "parquet"], "chronolog: error: --format parquet needs an output"),
    (["SELECT 1", "--topic", "logs", "--from", "2024-01-02", "--to", "2024-01-01"],
     "chronolog: error: --to must be after --from"),
    (["SELECT nocolumn FROM logs", "--topic", "logs"], "chronolog: error: query failed: Binder Error"),
])
def test_bad_input_is_one_line_and_a_non_zero_exit(data_dir, args, message):
    out = sql(*args, "--data-dir", str(data_dir))
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), out.stderr


def test_a_count_decodes_no_values():
    from chronolog.cli.sql import _used_columns
    names = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert _used_columns("SELECT count(*) FROM logs WHERE timestamp > now() - INTERVAL 1 HOUR", names) == ["timestamp"]
    assert _used_columns("SELECT * FROM logs", names) == names
    assert _used_columns("SELECT l.* FROM logs l", names) == names
    assert _used_columns("SELECT count(*) FROM logs", names) == ["offset"]
