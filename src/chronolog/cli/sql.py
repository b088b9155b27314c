"""`chronolog sql`: one SQL query over a time window of a topic, in DuckDB (the `sql` extra), without a JVM.

The window comes from `chronolog.arrow.read_window` (exact, late records included) as Arrow batches in
the Spark source's schema, and is given to DuckDB as a table named after the topic (also `records`).
Only the columns the query names are decoded (a `count(*)` copies no values); a query that names the
table once is streamed, otherwise the window is read into memory once. Spark stays the engine for the
pipeline and for data that outgrows a machine; this is the quick answer at a terminal.
"""

from __future__ import annotations

import re
from pathlib import Path

import typer

from chronolog.cli.common import (
    BOOTSTRAP_HELP,
    DATA_DIR_HELP,
    TIME_HELP,
    CommandConfigOpt,
    XOpt,
    client_conf,
    console,
    writable_file,
)
from chronolog.errors import ChronologError

FORMATS = ("table", "csv", "json", "parquet")


def _used_columns(query: str, names: list[str]) -> list[str]:
    """The schema's columns the query can refer to: all with a `*`, else those named in it (a superset
    is harmless: a word that is not a column reference only costs its decoding)."""
    text = re.sub(r"(?i)count\s*\(\s*\*\s*\)", "count()", query)
    if re.search(r"(^|[\s,(.])\*", text):
        return names
    used = [n for n in names if re.search(rf"(?i)(?<![\w$]){re.escape(n)}(?![\w$])", text)]
    return used or ["offset"]  # always decoded: no key, value or header bytes are copied


def _mentions(query: str, table: str) -> int:
    return len(re.findall(rf"(?i)(?<![\w$]){re.escape(table)}(?![\w$])", query))


def run_query(query: str, source: str, topic: str, start: int | None, end: int | None, *,
              partitions: list[int] | None = None, include_headers: bool = False,
              isolation_level: str = "read_uncommitted", client_conf: dict | None = None):
    """(duckdb connection, relation) of `query` over the window; the caller prints or copies it."""
    try:
        import duckdb
    except ImportError:
        raise ChronologError("chronolog sql needs DuckDB: pip install 'chronolog[sql]'") from None
    from chronolog.timetravel.arrow import arrow_schema, read_window

    names = arrow_schema(include_headers).names
    columns = _used_columns(query, names)
    reader = read_window(source, topic, start, end, partitions=partitions, include_headers=include_headers,
                         columns=columns, isolation_level=isolation_level, client_conf=client_conf)
    con = duckdb.connect()
    data = reader if _mentions(query, topic) + _mentions(query, "records") <= 1 else reader.read_all()
    con.register("records", data)
    if topic != "records":
        con.register(topic, data)
    try:
        return con, con.sql(query)
    except duckdb.Error as exc:
        raise ChronologError(f"query failed: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _print_table(rel, limit: int | None) -> None:
    from rich.table import Table
    result = rel.fetch_arrow_table() if limit is None else rel.limit(limit).fetch_arrow_table()
    t = Table()
    for name in result.column_names:
        t.add_column(name)
    for row in result.to_pylist():
        t.add_row(*("NULL" if v is None else str(v) for v in row.values()))
    out = console()
    out.print(t)
    if limit is not None and result.num_rows == limit:
        out.print(f"(first {limit} rows; --limit 0 prints all)")


def register(app: typer.Typer) -> None:
    @app.command()
    def sql(
        query: str = typer.Argument(..., help="The SQL (DuckDB's dialect). The window is the table named "
                                    "after the topic (quote it if needed: \"my-topic\"), also called records. "
                                    "Columns: key, value, topic, partition, offset, timestamp, timestampType "
                                    "[, headers]."),
        output: Path | None = typer.Argument(None, help="The file for --format csv, json or parquet "
                                             "(csv and json go to stdout without one)."),
        topic: str = typer.Option(..., "--topic", "-t", help="The topic to read."),
        from_: str | None = typer.Option(None, "--from", help="Start of the window (inclusive). " + TIME_HELP
                                         + " Default: the log start."),
        to: str | None = typer.Option(None, "--to", help="End of the window (exclusive). Default: the log end."),
        fmt: str = typer.Option("table", "--format", help="table | csv | json (one object a line) | parquet."),
        partitions: str | None = typer.Option(None, help="Comma-separated partitions (default: all)."),
        headers: bool = typer.Option(False, "--headers", help="Add the headers column."),
        read_committed: bool = typer.Option(False, "--read-committed", help="Skip aborted transactions and "
                                            "stop at the last stable offset (isolation.level=read_committed)."),
        limit: int = typer.Option(1000, "--limit", min=0, help="Rows printed as a table (0: all)."),
        bootstrap_server: str = typer.Option("127.0.0.1:9092", "--bootstrap-server", "-b", help=BOOTSTRAP_HELP),
        data_dir: str | None = typer.Option(None, "--data-dir", help=DATA_DIR_HELP),
        x: list[str] = XOpt,
        command_config: Path | None = CommandConfigOpt,
    ) -> None:
        """Run one SQL query in DuckDB over the records of TOPIC with FROM <= timestamp < TO (late records
        included), read from a broker or a data dir without Spark, and print the result as a table, or
        write it as CSV, JSON lines or Parquet."""
        from chronolog.timetravel.timefmt import parse_time

        if fmt not in FORMATS:
            raise ChronologError("--format is table, csv, json or parquet")
        if fmt == "parquet" and output is None:
            raise ChronologError("--format parquet needs an output FILE after the query")
        if fmt == "table" and output is not None:
            raise ChronologError("an output FILE goes with --format csv, json or parquet")
        t1 = parse_time(from_) if from_ else None
        t2 = parse_time(to) if to else None
        if t1 is not None and t2 is not None and t2 <= t1:
            raise ChronologError("--to must be after --from")
        try:
            parts = [int(p) for p in partitions.split(",")] if partitions else None
        except ValueError:
            raise ChronologError("--partitions takes numbers: 0,2,5") from None
        source = data_dir if data_dir is not None else bootstrap_server
        if data_dir is not None and "://" not in data_dir and not Path(data_dir).is_dir():
            raise ChronologError(f"data dir {data_dir} does not exist")
        if data_dir is not None and (x or command_config):
            raise ChronologError("-X and --command-config are client configs: they go with --bootstrap-server, "
                                 "not --data-dir")
        conf = client_conf(bootstrap_server, x, command_config) if data_dir is None else None
        import duckdb
        con, rel = run_query(query, source, topic, t1, t2, partitions=parts, include_headers=headers,
                             isolation_level="read_committed" if read_committed else "read_uncommitted",
                             client_conf=conf)
        try:
            if rel is None:
                return  # a statement without a result
            if fmt == "table":
                _print_table(rel, limit or None)
                return
            target = str(writable_file(output, "FILE")) if output is not None else "/dev/stdout"
            options = {"csv": "FORMAT csv, HEADER true", "json": "FORMAT json", "parquet": "FORMAT parquet"}[fmt]
            rel.to_view("chronolog_result")
            con.execute(f"COPY chronolog_result TO '{target.replace(chr(39), chr(39) * 2)}' ({options})")
        except duckdb.Error as exc:
            raise ChronologError(f"query failed: {_first_line(exc)}") from None
        finally:
            con.close()
