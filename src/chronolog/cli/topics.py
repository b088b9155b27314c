"""`chronolog topics list|describe|create|alter` and `chronolog describe-segments`."""

from __future__ import annotations

from pathlib import Path

import typer

from chronolog.cli.common import BootstrapOpt, DataDirOpt, emit_json, table
from chronolog.cli.serve import parse_configs
from chronolog.errors import ChronologError
from chronolog.timetravel.sources import open_data_dir, open_source
from chronolog.timetravel.timefmt import format_time

topics_app = typer.Typer(help="List, describe, create and alter topics.", no_args_is_help=True)


def _admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": bootstrap})


def _result(future, what: str):
    from confluent_kafka import KafkaException
    try:
        return future.result(15)
    except KafkaException as exc:
        raise ChronologError(f"{what}: {exc.args[0].str()}") from None


@topics_app.command("list")
def list_(bootstrap_server: str = BootstrapOpt, data_dir: str | None = DataDirOpt,
          as_json: bool = typer.Option(False, "--json")) -> None:
    """Topics and their partition counts."""
    source = open_source(bootstrap_server, data_dir)
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
             as_json: bool = typer.Option(False, "--json")) -> None:
    """Per partition: start and end offsets; and the topic's configs (broker only)."""
    source = open_source(bootstrap_server, data_dir)
    configs: dict[str, str] = {}
    try:
        parts = [(p, *source.watermarks(topic, p)) for p in source.partitions(topic)]
        if data_dir is None:
            from confluent_kafka.admin import ConfigResource
            resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
            admin = _admin(bootstrap_server)
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
def create(topic: str, partitions: int = typer.Option(1), config: list[str] = typer.Option([], "--config", "-c"),
           bootstrap_server: str = BootstrapOpt) -> None:
    """Create a topic (configs by Kafka's names, e.g. -c retention.ms=86400000)."""
    from confluent_kafka.admin import NewTopic
    admin = _admin(bootstrap_server)  # keep the client alive until its futures resolve
    futures = admin.create_topics([NewTopic(topic, partitions, 1, config=parse_configs(config))])
    _result(futures[topic], f"create {topic}")
    typer.echo(f"created {topic} with {partitions} partition(s)")


@topics_app.command()
def alter(topic: str, config: list[str] = typer.Option([], "--config", "-c", help="key=value to set"),
          delete_config: list[str] = typer.Option([], "--delete-config", help="key to reset to its default"),
          bootstrap_server: str = BootstrapOpt) -> None:
    """Change topic configs at run time (IncrementalAlterConfigs)."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in parse_configs(config).items()]
    entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in delete_config]
    if not entries:
        raise ChronologError("nothing to change: give --config key=value or --delete-config key")
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
    admin = _admin(bootstrap_server)
    _result(admin.incremental_alter_configs([resource])[resource], f"alter {topic}")
    typer.echo(f"altered {topic}")


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
        source = open_data_dir(data_dir)
        rows = []
        for p in source.partitions(topic):
            for seg in source.log(topic, p).segments:
                first = seg.first_timestamp()
                rows.append({"partition": p, "base_offset": seg.base_offset, "size": seg.size,
                             "first_timestamp": first, "largest_timestamp": seg.max_timestamp_so_far,
                             "time_index_entries": seg.time_index.entries,
                             "time_index_first": seg.time_index.entry(0).timestamp if seg.time_index.entries else None,
                             "time_index_last": seg.time_index.last_entry().timestamp if seg.time_index.entries else None})
        if plot is not None:
            _plot(topic, rows, plot)
        if as_json:
            emit_json(rows)
            return
        table(f"{topic}: segments", ["partition", "base offset", "bytes", "first record time", "largest timestamp",
                                     "time index entries", "time index covers"],
              [[r["partition"], r["base_offset"], r["size"], format_time(r["first_timestamp"]),
                format_time(r["largest_timestamp"]), r["time_index_entries"],
                f"{format_time(r['time_index_first'])} .. {format_time(r['time_index_last'])}"
                if r["time_index_entries"] else "-"] for r in rows])


def _plot(topic: str, rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    from datetime import UTC, datetime

    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 1.5 + 0.6 * len({r["partition"] for r in rows})))
    for r in rows:
        if r["first_timestamp"] is None or r["largest_timestamp"] < 0:
            continue
        start = datetime.fromtimestamp(r["first_timestamp"] / 1000, UTC)
        end = datetime.fromtimestamp(r["largest_timestamp"] / 1000, UTC)
        ax.barh(r["partition"], end - start, left=start, height=0.6, edgecolor="black")
        ax.text(start, r["partition"], str(r["base_offset"]), va="center", fontsize=7)
    ax.set_ylabel("partition")
    ax.set_title(f"{topic}: segments on a time axis (label: base offset)")
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
