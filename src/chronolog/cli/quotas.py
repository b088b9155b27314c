"""`chronolog quotas describe|alter`: client quotas of a broker's data dir, with kafka-configs.sh's habits
(`--user`, `--client`, `--user-defaults`, `--client-defaults`, `--add-config k=v,k=v`, `--delete-config k,k`)
and Kafka's quota names (producer_byte_rate, consumer_byte_rate, request_percentage,
controller_mutation_rate). A running broker applies a change to the next request."""

from __future__ import annotations

from pathlib import Path

import typer

from chronolog.cli.common import emit_json, table
from chronolog.errors import ChronologError

quotas_app = typer.Typer(help="Client quotas of a broker (byte rates, request percentage, mutation rate).",
                         no_args_is_help=True)

DataDir = typer.Option(..., "--data-dir", help="The broker's data dir.")
UserOpt = typer.Option(None, "--user", help="A user (the principal's name).")
UserDefaults = typer.Option(False, "--user-defaults", help="The default user quota (<default>).")
ClientOpt = typer.Option(None, "--client", help="A client id.")
ClientDefaults = typer.Option(False, "--client-defaults", help="The default client-id quota (<default>).")


def _entity(user: str | None, user_defaults: bool, client: str | None, client_defaults: bool) -> list:
    from chronolog.security.quotas import CLIENT_ID, USER
    if user is not None and user_defaults:
        raise ChronologError("give --user or --user-defaults, not both")
    if client is not None and client_defaults:
        raise ChronologError("give --client or --client-defaults, not both")
    pairs = []
    if user is not None or user_defaults:
        pairs.append((USER, user))
    if client is not None or client_defaults:
        pairs.append((CLIENT_ID, client))
    return pairs


def _parse_add(values: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in ",".join(values).split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep:
            raise ChronologError(f"--add-config: expected key=value, got {item!r}")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            raise ChronologError(f"--add-config: {key.strip()} must be a number, got {value.strip()!r}") from None
    return out


@quotas_app.command("alter")
def alter(
    data_dir: Path = DataDir,
    user: str | None = UserOpt, user_defaults: bool = UserDefaults,
    client: str | None = ClientOpt, client_defaults: bool = ClientDefaults,
    add_config: list[str] = typer.Option([], "--add-config", help="k=v[,k=v] to set (repeatable)."),
    delete_config: list[str] = typer.Option([], "--delete-config", help="k[,k] to remove (repeatable)."),
) -> None:
    """Set or remove quota values of one entity (user, client id, or both)."""
    from chronolog.security.quotas import QuotaStore, describe_entity, entity

    e = entity(_entity(user, user_defaults, client, client_defaults))
    ops: dict[str, float | None] = dict(_parse_add(add_config))
    for key in ",".join(delete_config).split(","):
        if key.strip():
            if key.strip() in ops:
                raise ChronologError(f"{key.strip()} is both added and deleted")
            ops[key.strip()] = None
    if not ops:
        raise ChronologError("nothing to change: give --add-config and/or --delete-config")
    if not data_dir.is_dir():
        raise ChronologError(f"data dir {data_dir} does not exist")
    QuotaStore(data_dir).alter([(e, ops)])
    typer.echo(f"Completed updating quotas for {describe_entity(e)}.")


@quotas_app.command("describe")
def describe(
    data_dir: Path = DataDir,
    user: str | None = UserOpt, user_defaults: bool = UserDefaults,
    client: str | None = ClientOpt, client_defaults: bool = ClientDefaults,
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Quotas of the entities that match (all without a filter), as DescribeClientQuotas matches them."""
    from chronolog.security.quotas import QuotaStore, describe_entity

    wanted = _entity(user, user_defaults, client, client_defaults)
    found = QuotaStore(data_dir).all() if data_dir.is_dir() else {}
    rows = [(e, v) for e, v in found.items() if all(p in e for p in wanted) and (not wanted or len(e) == len(wanted))]
    if as_json:
        emit_json([{"entity": {t: n for t, n in e}, "values": v} for e, v in rows])
        return
    if not rows:
        typer.echo("No quotas.")
        return
    table("Client quotas", ["ENTITY", "QUOTAS"], [[describe_entity(e), ", ".join(f"{k}={_fmt(x)}" for k, x in sorted(v.items()))]
                                 for e, v in rows])


def _fmt(value: float) -> str:
    return str(int(value)) if value == int(value) else str(value)


def register(app: typer.Typer) -> None:
    app.add_typer(quotas_app, name="quotas")
