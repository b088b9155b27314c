"""`chronolog groups list|describe|delete`: consumer groups, as kafka-consumer-groups.sh shows them, with
lag in records and in record time (what a replay tool is asked: how far behind in hours, not offsets); share
groups (KIP-932) as kafka-share-groups.sh shows them and streams groups (KIP-1071) as kafka-streams-groups.sh
shows them, with the same two lags."""

from __future__ import annotations

from pathlib import Path

import typer

from chronolog.cli.common import (
    TIME_HELP,
    BootstrapOpt,
    CommandConfigOpt,
    DataDirOpt,
    XOpt,
    broker,
    emit_json,
    open_source,
    table,
)
from chronolog.errors import ChronologError
from chronolog.timetravel.groups import admin_result, group_state
from chronolog.timetravel.share_groups import share_client
from chronolog.timetravel.streams_groups import describe_any_group, tasks_text
from chronolog.timetravel.timefmt import format_time, parse_time

groups_app = typer.Typer(help="List, describe and delete consumer groups; list and describe share and streams "
                         "groups.", no_args_is_help=True)


@groups_app.command("list")
def list_(bootstrap_server: str = BootstrapOpt, as_json: bool = typer.Option(False, "--json"),
          x: list[str] = XOpt, command_config: Path | None = CommandConfigOpt) -> None:
    """Consumer, share and streams groups, their types and states (ListGroups)."""
    source = broker(bootstrap_server, x, command_config)
    try:
        listed = admin_result(source.admin.list_consumer_groups(request_timeout=15), "list groups")
        shares = _other_groups(source)
    finally:
        source.close()
    found = {g.group_id: {"group": g.group_id, "type": _group_type(g), "state": group_state(g.state)}
             for g in listed.valid}
    found.update((r["group"], r) for r in shares)
    rows = sorted(found.values(), key=lambda r: r["group"])
    if as_json:
        emit_json(rows)
    else:
        table("groups", ["group", "type", "state"], [[r["group"], r["type"], r["state"]] for r in rows])
    if listed.errors:  # a broker that did not answer: its groups are missing above (Kafka's tool fails whole)
        said = "; ".join(dict.fromkeys(e.str() if hasattr(e, "str") else str(e) for e in listed.errors))
        typer.echo(f"chronolog: warning: the list is incomplete: {said}", err=True)
        raise typer.Exit(1)


def _group_type(listed: object) -> str:
    """`ConsumerGroupType.CLASSIC` -> `classic` (librdkafka says UNKNOWN for brokers before KIP-848)."""
    kind = str(getattr(listed, "type", "")).split(".")[-1].lower()
    return "classic" if kind in ("", "unknown", "none") else kind


def _other_groups(source: object) -> list[dict]:
    """The share and streams groups (librdkafka's list leaves them out), over the same TLS and SASL configs;
    none with a SASL mechanism these requests do not speak (GSSAPI, OAUTHBEARER)."""
    try:
        client = share_client(source)
    except ChronologError:
        return []
    try:
        return [r for r in client.list_groups() if r["type"] in ("share", "streams")]
    finally:
        client.close()


def _duration(ms: int | None) -> str | None:
    if ms is None:
        return None
    s, rest = divmod(ms, 1000)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    text = (f"{d}d" if d else "") + (f"{h}h" if h else "") + (f"{m}m" if m else "") + f"{s}.{rest:03d}s"
    return text


@groups_app.command()
def describe(group: str, bootstrap_server: str = BootstrapOpt, as_json: bool = typer.Option(False, "--json"),
             x: list[str] = XOpt, command_config: Path | None = CommandConfigOpt) -> None:
    """A group's members and, per partition, committed offset, end offset, lag in records and in time."""
    source = broker(bootstrap_server, x, command_config)
    try:
        info = describe_any_group(source, group)
    finally:
        source.close()
    if as_json:
        emit_json(info)
        return
    if info.get("type") == "share":
        _print_share(info)
        return
    if info.get("type") == "streams":
        _print_streams(info)
        return
    table(f"group {group} ({info['state']}): {len(info['members'])} member(s)",
          ["topic", "partition", "committed", "log end", "lag (records)", "lag (record time)", "member"],
          [[r["topic"], r["partition"], r["committed"], r["log_end"], r["lag"], _duration(r["lag_ms"]), r["member"]]
           for r in info["partitions"]])
    if info["members"]:
        table("members", ["member id", "client id", "host", "partitions"],
              [[m["member_id"], m["client_id"], m["host"], ", ".join(m["partitions"])] for m in info["members"]])


def _print_share(info: dict) -> None:
    table(f"share group {info['group']} ({info['state']}): {len(info['members'])} member(s)",
          ["topic", "partition", "start offset", "log end", "lag (records)", "lag (record time)", "members"],
          [[r["topic"], r["partition"], r["start_offset"], r["log_end"], r["lag"], _duration(r["lag_ms"]),
            len(r["members"])] for r in info["partitions"]])
    if info["members"]:
        table("members", ["member id", "client id", "host", "partitions"],
              [[m["member_id"], m["client_id"], m["host"], ", ".join(m["partitions"])] for m in info["members"]])


def _print_streams(info: dict) -> None:
    table(f"streams group {info['group']} ({info['state']}): {len(info['members'])} member(s), group epoch "
          f"{info['group_epoch']}, topology epoch {info['topology_epoch']}",
          ["topic", "partition", "committed", "log end", "lag (records)", "lag (record time)", "member"],
          [[r["topic"], r["partition"], r["committed"], r["log_end"], r["lag"], _duration(r["lag_ms"]), r["member"]]
           for r in info["partitions"]])
    if info["members"]:
        table("members", ["member id", "epoch", "process", "client id", "host", "active tasks", "standby tasks",
                          "warm-up tasks"],
              [[m["member_id"], m["member_epoch"], m["process_id"], m["client_id"], m["host"],
                tasks_text(m["active"]), tasks_text(m["standby"]), tasks_text(m["warmup"])] for m in info["members"]])


@groups_app.command()
def delete(groups: list[str] = typer.Argument(..., help="Group ids."), bootstrap_server: str = BootstrapOpt,
           x: list[str] = XOpt, command_config: Path | None = CommandConfigOpt) -> None:
    """Delete groups and their committed offsets (DeleteGroups); refused for a group with members
    (NON_EMPTY_GROUP), as kafka-consumer-groups.sh --delete."""
    source = broker(bootstrap_server, x, command_config)
    try:
        futures = source.admin.delete_consumer_groups(list(groups), request_timeout=15)
        for g in groups:
            admin_result(futures[g], f"delete group {g}")
            typer.echo(f"deleted group {g}")
    finally:
        source.close()



def lag(group: str = typer.Option(..., "--group"), bootstrap_server: str = BootstrapOpt,
        as_json: bool = typer.Option(False, "--json"), x: list[str] = XOpt,
        command_config: Path | None = CommandConfigOpt) -> None:
    """How far behind a group is, per partition: in records and in record time (the lag `groups
    describe` shows, without the members). A share group's lag runs from its share-partition start offset."""
    source = broker(bootstrap_server, x, command_config)
    try:
        info = describe_any_group(source, group)
    finally:
        source.close()
    kind = info.get("type", "consumer")
    position = "start_offset" if kind == "share" else "committed"
    rows = [{k: r[k] for k in ("topic", "partition", position, "log_end", "lag", "lag_ms")}
            for r in info["partitions"]]
    if as_json:
        emit_json({"group": group, "type": kind, "state": info["state"], "partitions": rows})
        return
    title = f"lag of {'' if kind == 'consumer' else kind + ' '}group {group} ({info['state']})"
    table(title, ["topic", "partition", position.replace("_", " "), "log end", "lag (records)", "lag (record time)"],
          [[r["topic"], r["partition"], r[position], r["log_end"], r["lag"], _duration(r["lag_ms"])] for r in rows])


def group_history(group: str = typer.Option(..., "--group"),
                  topic: str | None = typer.Option(None, "--topic", help="Only this topic's partitions."),
                  at: str | None = typer.Option(None, "--at", help="Committed positions as of this time (without "
                                                "it: every commit still in the topic). " + TIME_HELP),
                  bootstrap_server: str = BootstrapOpt, data_dir: str | None = DataDirOpt,
                  as_json: bool = typer.Option(False, "--json"), x: list[str] = XOpt,
                  command_config: Path | None = CommandConfigOpt) -> None:
    """Where a group was at a time: its commits in __consumer_offsets replayed up to --at (over a broker or
    a data dir). The history reaches as far back as compaction left it."""
    from chronolog.timetravel.group_history import group_events, positions_at

    when = parse_time(at) if at is not None else None
    source = open_source(bootstrap_server, data_dir, x, command_config)
    try:
        events = [e for e in group_events(source, group) if topic is None or e.topic == topic]
    finally:
        source.close()
    if when is None:
        rows = [{"time": e.timestamp, "topic": e.topic, "partition": e.partition, "offset": e.offset}
                for e in events]
        if as_json:
            emit_json({"group": group, "commits": rows})
        else:
            table(f"commits of group {group}", ["time", "topic", "partition", "offset"],
                  [[format_time(r["time"]), r["topic"], r["partition"],
                    "deleted" if r["offset"] is None else r["offset"]] for r in rows])
        return
    found = positions_at(events, when, topic)
    rows = [{"topic": t, "partition": p, "offset": pos.offset, "committed_at": pos.committed_at}
            for (t, p), pos in sorted(found.items())]
    if as_json:
        emit_json({"group": group, "at": when, "partitions": rows})
        return
    if not rows:
        typer.echo(f"group {group} had no committed offsets{f' for {topic}' if topic else ''} at "
                   f"{format_time(when)} (in what __consumer_offsets still holds)")
        return
    table(f"group {group} at {format_time(when)}", ["topic", "partition", "committed offset", "committed at"],
          [[r["topic"], r["partition"], r["offset"], format_time(r["committed_at"])] for r in rows])


def register(app: typer.Typer) -> None:
    app.add_typer(groups_app, name="groups")
    app.command("lag")(lag)
    app.command("group-history")(group_history)
