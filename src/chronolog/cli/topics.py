"""`chronolog topics list|describe|create|alter` and `chronolog describe-segments`."""

from __future__ import annotations

from pathlib import Path

import typer

from chronolog.cli.common import (
    BootstrapOpt,
    CommandConfigOpt,
    DataDirOpt,
    XOpt,
    client_conf,
    emit_json,
    open_source,
    table,
    writable_file,
)
from chronolog.cli.serve import parse_configs
from chronolog.errors import ChronologError
from chronolog.timetravel.client import admin_client, kafka_error_text
from chronolog.timetravel.opener import open_data_dir
from chronolog.timetravel.segments import cleaner_checkpoints, segment_lanes, segment_rows
from chronolog.timetravel.timefmt import format_time

topics_app = typer.Typer(help="List, describe, create, alter and delete topics.", no_args_is_help=True)


def _admin(bootstrap: str, x: list[str] | None = None, command_config: Path | None = None):
    return admin_client(client_conf(bootstrap, x or [], command_config))


def _result(future, what: str):
    from confluent_kafka import KafkaException
    try:
        return future.result(15)
    except KafkaException as exc:
        raise ChronologError(f"{what}: {kafka_error_text(exc)}") from None


@topics_app.command("list")
def list_(bootstrap_server: str = BootstrapOpt, data_dir: str | None = DataDirOpt,
          as_json: bool = typer.Option(False, "--json"), x: list[str] = XOpt,
          command_config: Path | None = CommandConfigOpt) -> None:
    """Topics and their partition counts."""
    source = open_source(bootstrap_server, data_dir, x, command_config)
    try:
        topics = source.topics()
    finally:
        source.close()
    if as_json:
        emit_json(topics)
    else:
        table("topics", ["topic", "partitions"], [[t, n] for t, n in sorted(topics.items())])


@topics_app.command()
def describe(topic: str, bootstrap_server: str = BootstrapOpt, data_dir: str | None = DataDirOpt,
             as_json: bool = typer.Option(False, "--json"), x: list[str] = XOpt,
             command_config: Path | None = CommandConfigOpt) -> None:
    """Per partition: start and end offsets; and the topic's configs (broker only)."""
    source = open_source(bootstrap_server, data_dir, x, command_config)
    configs: dict[str, str] = {}
    try:
        parts = [(p, *source.watermarks(topic, p)) for p in source.partitions(topic)]
        if data_dir is None:
            from confluent_kafka.admin import ConfigResource
            resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
            admin = source.admin
            described = _result(admin.describe_configs([resource])[resource], "describe configs")
            configs = {k: v.value for k, v in described.items()}
    finally:
        source.close()
    if as_json:
        emit_json({"topic": topic, "partitions": [{"partition": p, "start_offset": lo, "end_offset": hi}
                                                  for p, lo, hi in parts], "configs": configs})
        return
    table(f"topic {topic}", ["partition", "start offset", "end offset"], [list(x) for x in parts])
    if configs:
        table(f"{topic} configs", ["config", "value"], [[k, v] for k, v in sorted(configs.items())])


@topics_app.command()
def create(topic: str, partitions: int = typer.Option(1, min=1), config: list[str] = typer.Option([], "--config", "-c"),
           bootstrap_server: str = BootstrapOpt, x: list[str] = XOpt,
           command_config: Path | None = CommandConfigOpt) -> None:
    """Create a topic (configs by Kafka's names, e.g. -c retention.ms=-1 to keep replayed history)."""
    from confluent_kafka.admin import NewTopic
    admin = _admin(bootstrap_server, x, command_config)  # keep the client alive until its futures resolve
    futures = admin.create_topics([NewTopic(topic, partitions, 1, config=parse_configs(config))])
    _result(futures[topic], f"create {topic}")
    typer.echo(f"created {topic} with {partitions} partition(s)")


@topics_app.command()
def alter(topic: str, config: list[str] = typer.Option([], "--config", "-c", help="key=value to set"),
          delete_config: list[str] = typer.Option([], "--delete-config", help="key to reset to its default"),
          partitions: int | None = typer.Option(None, "--partitions", min=1,
                                                help="Grow the topic to this many partitions (CreatePartitions)."),
          bootstrap_server: str = BootstrapOpt, x: list[str] = XOpt,
          command_config: Path | None = CommandConfigOpt) -> None:
    """Change topic configs at run time (IncrementalAlterConfigs) and add partitions, as kafka-topics.sh
    --alter --partitions N (a count can only grow)."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in parse_configs(config).items()]
    entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in delete_config]
    if not entries and partitions is None:
        raise ChronologError("nothing to change: give --config key=value, --delete-config key or --partitions N")
    admin = _admin(bootstrap_server, x, command_config)
    if partitions is not None:
        _result(admin.create_partitions([NewPartitions(topic, partitions)])[topic], f"add partitions to {topic}")
        typer.echo(f"{topic} now has {partitions} partition(s)")
    if entries:
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
        _result(admin.incremental_alter_configs([resource])[resource], f"alter {topic}")
        typer.echo(f"altered {topic}")


@topics_app.command()
def delete(topics: list[str] = typer.Argument(..., help="Topic names (exact: no patterns)."),
           bootstrap_server: str = BootstrapOpt, x: list[str] = XOpt,
           command_config: Path | None = CommandConfigOpt) -> None:
    """Delete topics and their data (DeleteTopics), as kafka-topics.sh --delete."""
    admin = _admin(bootstrap_server, x, command_config)
    futures = admin.delete_topics(list(topics), operation_timeout=15)
    for name in topics:
        _result(futures[name], f"delete {name}")
        typer.echo(f"deleted {name}")


def register(app: typer.Typer) -> None:
    app.add_typer(topics_app, name="topics")

    @app.command("describe-segments")
    def describe_segments(
        topic: str,
        data_dir: str = typer.Option(..., "--data-dir", help="Segments are files: a data dir is needed, a local "
                                     "path or a URI pyarrow can open (file://, s3://bucket/prefix, ...)."),
        plot: Path | None = typer.Option(None, "--plot", help="Draw the segments on a time axis into this PNG."),
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """Per partition, each segment's base offset, size, first and largest timestamps and time-index
        coverage."""
        if plot is not None:
            writable_file(plot, "--plot")
        source = open_data_dir(data_dir)
        rows = segment_rows(source, topic, cleaner_checkpoints(data_dir))
        if plot is not None:
            _plot(topic, rows, plot)
        if as_json:
            emit_json(rows)
            return
        table(f"{topic}: segments", ["partition", "base offset", "bytes", "compaction", "first record time",
                                     "largest timestamp", "time index entries", "time index covers"],
              [[r["partition"], r["base_offset"], r["size"], r["cleaned"] or "-", format_time(r["first_timestamp"]),
                format_time(r["largest_timestamp"]), r["time_index_entries"],
                f"{format_time(r['time_index_first'])} .. {format_time(r['time_index_last'])}"
                if r["time_index_entries"] else "-"] for r in rows])


def _plot(topic: str, rows: list[dict], path: Path) -> dict:
    """Segments as bars from first record time to largest timestamp, one band per partition (integer
    ticks), one lane per overlap inside a band; dates with year in UTC. Returns what was drawn."""
    import matplotlib
    matplotlib.use("Agg")
    from datetime import UTC, datetime, timedelta

    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    lanes = segment_lanes(rows)
    parts = sorted({r["partition"] for r in rows})
    depth = {p: 1 + max([lane for (q, _b), lane in lanes.items() if q == p], default=0) for p in parts}
    band = {}
    y = 0.0
    for p in parts:  # each partition gets a band as tall as its lanes
        band[p] = y
        y += depth[p] + 0.5
    fig, ax = plt.subplots(figsize=(11, 1.8 + 0.45 * y))
    drawn = []
    for r in rows:
        key = (r["partition"], r["base_offset"])
        if key not in lanes:
            continue
        lo = min(r["first_timestamp"], r["largest_timestamp"])
        hi = max(r["first_timestamp"], r["largest_timestamp"])
        start = datetime.fromtimestamp(lo / 1000, UTC)
        end = datetime.fromtimestamp(hi / 1000, UTC)
        ypos = band[r["partition"]] + lanes[key]
        width = max(end - start, timedelta(seconds=1))  # a one-record segment is still visible
        ax.barh(ypos, width, left=start, height=0.8, edgecolor="black", alpha=0.8,
                color=f"C{r['partition'] % 10}",  # one colour per partition band
                hatch="//" if r.get("cleaned") in ("dirty", "partly") else None)  # not yet compacted
        ax.text(start, ypos, f" @{r['base_offset']}", va="center", fontsize=7)
        drawn.append({"partition": r["partition"], "base_offset": r["base_offset"], "lane": lanes[key], "y": ypos,
                      "hatched": r.get("cleaned") in ("dirty", "partly"),
                      "start": mdates.date2num(start), "end": mdates.date2num(start + width)})
    ticks = [band[p] + (depth[p] - 1) / 2 for p in parts]
    # "partition 0", not a bare "0" beside the bars' base-offset labels
    ax.set_yticks(ticks, [f"partition {p}" for p in parts])
    if drawn:  # the first and last bars are drawn whole, off the frame (bars' sticky edges defeat margins)
        spans = [(datetime.fromtimestamp(min(r["first_timestamp"], r["largest_timestamp"]) / 1000, UTC),
                  datetime.fromtimestamp(max(r["first_timestamp"], r["largest_timestamp"]) / 1000, UTC))
                 for r in rows if (r["partition"], r["base_offset"]) in lanes]
        lo, hi = min(a for a, _b in spans), max(b for _a, b in spans) + timedelta(seconds=1)
        pad = (hi - lo) * 0.02
        ax.set_xlim(lo - pad, hi + pad)
    ax.invert_yaxis()
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%Y-%m-%d %H:%M:%S", tz=UTC))
    ax.set_xlabel("record time (UTC)")
    compacted = any(r.get("cleaned") for r in rows)
    ax.set_title(f"{topic}: segments from first record time to largest timestamp (@: base offset"
                 + ("; hatched: not yet compacted)" if compacted else ")"))
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path)
    xlabels = [t.get_text() for t in ax.get_xticklabels()]
    xlim = ax.get_xlim()
    plt.close(fig)
    return {"segments": drawn, "yticks": ticks, "ylabels": [t.get_text() for t in ax.get_yticklabels()],
            "xlabel": ax.get_xlabel(), "xlabels": xlabels, "xlim": xlim}
