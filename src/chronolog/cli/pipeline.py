"""`chronolog pipeline run`: the syslog pipeline end to end (what `make run` runs)."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from chronolog.cli.common import TIME_HELP, console, table
from chronolog.cli.demo import DEFAULT_INPUT
from chronolog.errors import ChronologError
from chronolog.timetravel.timefmt import format_time, parse_time

pipeline_app = typer.Typer(help="The syslog -> broker -> Spark pipeline.", no_args_is_help=True)


@pipeline_app.command("run")
def run(
    data_dir: Path = typer.Option(Path("var/pipeline/data"), "--data-dir", help="Data dir of the embedded broker."),
    input_dir: Path = typer.Option(DEFAULT_INPUT, "--input", help="Folder of syslog *.log files."),
    year: int = typer.Option(2024, help="Year of the syslog times (syslog lines carry none); UTC."),
    from_: str | None = typer.Option(None, "--from", help="Window start (inclusive). " + TIME_HELP),
    to: str | None = typer.Option(None, "--to", help="Window end (exclusive). " + TIME_HELP),
    out: Path = typer.Option(Path("var/pipeline/out"), "--out", help="Parquet, report.json and the chart go here."),
    master: str = typer.Option("local[2]", help="Spark master (local[N], spark://..., yarn)."),
    bootstrap_server: str | None = typer.Option(None, "--bootstrap-server",
                                                help="Use this broker instead of starting an embedded one."),
    rows: int = typer.Option(25, help="Rows of the per-hour table to print (all are in report.json)."),
    replay_to: str | None = typer.Option(None, "--replay-to", metavar="TOPIC",
                                         help="Also re-ingest the window into TOPIC with its original timestamps "
                                              "(through the Spark sink; created if missing, appended to if not)."),
    replay_bootstrap_server: str | None = typer.Option(None, "--replay-bootstrap-server", metavar="HOST:PORT",
                                                       help="The broker --replay-to writes to (e.g. an Apache "
                                                            "Kafka cluster; default: the broker read from)."),
) -> None:
    """Ingest syslog files with their syslog times as CreateTime, then parse, count and chart a window
    with Spark through the chronolog source."""
    from chronolog.server.embedded import EmbeddedBroker
    from chronolog.spark.pipeline import ingest, prepare_out, read_syslog_files, replay_window, run_job

    files = sorted(Path(input_dir).glob("*.log"))
    if not files:
        raise ChronologError(f"no *.log files in {input_dir}")
    read_syslog_files(files, year)  # refuse unreadable input before starting anything
    t1 = parse_time(from_) if from_ else None
    t2 = parse_time(to) if to else None
    con = console()
    started = time.monotonic()

    def log(msg: str) -> None:
        con.print(f"[dim]{time.monotonic() - started:6.1f}s[/] {msg}")

    embedded = None
    if bootstrap_server is None:
        embedded = EmbeddedBroker(data_dir).start()
        bootstrap_server = embedded.bootstrap
        log(f"embedded broker on {bootstrap_server} (data dir {data_dir})")
    try:
        with con.status("ingesting syslog files"):
            result = ingest(bootstrap_server, files, year, log)
        log(f"{result.lines} lines in topic syslog")
        prepare_out(out)
        with con.status("starting Spark"):
            from chronolog.spark.session import session
            spark = session(master, "chronolog-pipeline")
        log(f"Spark {spark.version} on {master}")
        try:
            with con.status("running the Spark job"):
                report = run_job(spark, bootstrap_server, files, t1, t2, out, log)
            if replay_to:
                with con.status(f"replaying the window into {replay_to}"):
                    report["replayed"] = replay_window(spark, bootstrap_server, t1, t2, replay_to, log,
                                                       target_bootstrap=replay_bootstrap_server)
        finally:
            spark.stop()
    finally:
        if embedded is not None:
            embedded.stop()
    window = f"{format_time(t1) if t1 else 'the beginning'} .. {format_time(t2) if t2 else 'the end'}"
    log(f"window {window}: {report['lines_in_window']} lines -> {report['parquet']}")
    table(f"events per hour, host and program (first {rows} of {len(report['per_hour'])})",
          ["hour (UTC)", "host", "program", "events"],
          [[r["hour"], r["host"], r["program"], r["count"]] for r in report["per_hour"][:rows]])
    table("top messages", ["count", "message"], [[r["count"], r["message"][:110]] for r in report["top_messages"]])
    log(f"chart: {report['chart']}; report: {out / 'report.json'}")


def register(app: typer.Typer) -> None:
    app.add_typer(pipeline_app, name="pipeline")
