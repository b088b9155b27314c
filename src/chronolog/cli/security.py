"""`chronolog users add|list|delete` (SCRAM credentials) and `chronolog acls add|list|remove` (ACLs),
both on a broker's data dir. A running broker picks the changes up (it re-reads either file when it
changed). Option names follow kafka-configs.sh (`--mechanism`, `--iterations`) and kafka-acls.sh
(`--allow-principal`, `--operation`, `--topic`, `--resource-pattern-type`, `--producer`, `--consumer`)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from chronolog.cli.common import emit_json, table
from chronolog.errors import ChronologError

users_app = typer.Typer(help="SCRAM users of a broker (PLAIN logins check the same credentials).",
                        no_args_is_help=True)
acls_app = typer.Typer(help="ACLs of a broker (enforced when authorizer.class.name is set).", no_args_is_help=True)

DataDir = typer.Option(..., "--data-dir", help="The broker's data dir.")


def _data_dir(path: Path) -> Path:
    if path.exists() and not path.is_dir():
        raise ChronologError(f"{path} is not a directory")
    path.mkdir(parents=True, exist_ok=True)
    return path


# -- users -----------------------------------------------------------------------------------------------
def _read_password(password_stdin: bool) -> str:
    if password_stdin:
        line = sys.stdin.readline()
        password = line[:-1] if line.endswith("\n") else line
        password = password[:-1] if password.endswith("\r") else password
    elif sys.stdin.isatty():
        password = typer.prompt("Password", hide_input=True, confirmation_prompt=True)
    else:
        raise ChronologError("no terminal to prompt for a password: pass it on standard input with "
                             "--password-stdin")
    if not password:
        raise ChronologError("the password must not be empty")
    return password


@users_app.command("add")
def users_add(
    name: str = typer.Argument(..., help="User name (the principal is User:NAME)."),
    data_dir: Path = DataDir,
    mechanism: list[str] = typer.Option([], "--mechanism", help="SCRAM-SHA-256 or SCRAM-SHA-512 (repeatable; "
                                        "default: both)."),
    iterations: int = typer.Option(4096, "--iterations", help="PBKDF2 iterations, 4096-16384."),
    password_stdin: bool = typer.Option(False, "--password-stdin", help="Read the password from standard "
                                        "input (one line) instead of prompting."),
) -> None:
    """Add a user or change its password. Only salted SCRAM keys are stored, never the password."""
    from chronolog.security.credentials import CredentialStore, validate_user_name
    from chronolog.security.scram import MECHANISMS

    validate_user_name(name)
    mechanisms = [m.upper() for m in mechanism] or list(MECHANISMS)
    for m in mechanisms:
        if m not in MECHANISMS:
            raise ChronologError(f"unknown mechanism {m}; expected one of {', '.join(MECHANISMS)}")
    password = _read_password(password_stdin)
    store = CredentialStore(_data_dir(data_dir))
    for m in dict.fromkeys(mechanisms):
        store.upsert(name, m, password, iterations)
    print(f"user {name}: {', '.join(dict.fromkeys(mechanisms))} credentials stored in {store.path}")


@users_app.command("list")
def users_list(data_dir: Path = DataDir, as_json: bool = typer.Option(False, "--json")) -> None:
    """Users and their SCRAM mechanisms (iterations)."""
    from chronolog.security.credentials import CredentialStore

    users = CredentialStore(data_dir).users()
    if as_json:
        emit_json(users)
    else:
        table("users", ["user", "mechanisms"],
              [[u, ", ".join(f"{m} ({i})" for m, i in sorted(mechs.items()))] for u, mechs in users.items()])


@users_app.command("delete")
def users_delete(
    name: str = typer.Argument(...),
    data_dir: Path = DataDir,
    mechanism: str | None = typer.Option(None, "--mechanism", help="Remove only this mechanism's credential."),
) -> None:
    """Remove a user (or one of its mechanisms). Its open connections stay authenticated until they close."""
    from chronolog.security.credentials import CredentialStore

    if not CredentialStore(data_dir).delete(name, mechanism.upper() if mechanism else None):
        raise ChronologError(f"no user {name}" + (f" with {mechanism}" if mechanism else ""))
    print(f"user {name}: {mechanism or 'all'} credentials removed")


# -- acls ------------------------------------------------------------------------------------------------
def _resources(topic: list[str], group: list[str], cluster: bool, transactional_id: list[str]) -> list[tuple]:
    out = [("Topic", t) for t in topic] + [("Group", g) for g in group]
    out += [("TransactionalId", t) for t in transactional_id]
    if cluster:
        out.append(("Cluster", "kafka-cluster"))
    return out


def _bindings(allow_principal: list[str], deny_principal: list[str], allow_host: list[str], deny_host: list[str],
              operation: list[str], resources: list[tuple], pattern: str, producer: bool, consumer: bool,
              idempotent: bool) -> list:
    from chronolog.security.acl import AclBinding

    if not allow_principal and not deny_principal:
        raise ChronologError("give --allow-principal or --deny-principal (e.g. User:alice)")
    if not resources:
        raise ChronologError("give a resource: --topic, --group, --cluster or --transactional-id")
    per_resource: dict[tuple, set[str]] = {r: set(operation) for r in resources}
    if producer:  # kafka-acls --producer: WRITE, DESCRIBE, CREATE on the topics (+ IDEMPOTENT_WRITE)
        for r in resources:
            if r[0] == "Topic":
                per_resource[r] |= {"Write", "Describe", "Create"}
        if idempotent:
            per_resource.setdefault(("Cluster", "kafka-cluster"), set()).add("IdempotentWrite")
    if consumer:  # kafka-acls --consumer: READ, DESCRIBE on the topics, READ on the groups
        for r in resources:
            per_resource[r] |= {"Read", "Describe"} if r[0] == "Topic" else {"Read"} if r[0] == "Group" else set()
    if not any(per_resource.values()):
        raise ChronologError("give --operation (read, write, create, delete, alter, describe, describe-configs, "
                             "alter-configs, idempotent-write, cluster-action, all), --producer or --consumer")
    out = []
    for perm, principals, hosts in (("Allow", allow_principal, allow_host), ("Deny", deny_principal, deny_host)):
        for p in principals:
            for h in hosts or ["*"]:
                for (rtype, name), ops in per_resource.items():
                    if not ops:
                        raise ChronologError(f"no operation given for {rtype} {name}")
                    for op in sorted(ops):
                        ptype = pattern if rtype != "Cluster" else "LITERAL"
                        out.append(AclBinding.create(principal_=p, operation_=op, permission_=perm,
                                                     resource_type_=rtype, name=name, pattern_type_=ptype, host=h))
    return out


def _show(bindings: list, title: str, as_json: bool) -> None:
    if as_json:
        emit_json([b.to_json() for b in bindings])
        return
    table(title, ["resource", "pattern", "name", "principal", "host", "operation", "permission"],
          [[b.resource_type, b.pattern_type, b.name, b.principal, b.host, b.operation, b.permission]
           for b in bindings])


AllowPrincipal = typer.Option([], "--allow-principal", help="Principal to allow, e.g. User:alice (repeatable).")
DenyPrincipal = typer.Option([], "--deny-principal", help="Principal to deny (repeatable).")
AllowHost = typer.Option([], "--allow-host", help="Client IP the allow applies to (default: *).")
DenyHost = typer.Option([], "--deny-host", help="Client IP the deny applies to (default: *).")
Operation = typer.Option([], "--operation", help="read, write, create, delete, alter, describe, "
                         "describe-configs, alter-configs, idempotent-write, cluster-action or all (repeatable).")
Topic = typer.Option([], "--topic", help="Topic name or prefix; * is every topic (repeatable).")
Group = typer.Option([], "--group", help="Consumer group name or prefix; * is every group (repeatable).")
Cluster = typer.Option(False, "--cluster", help="The cluster resource (kafka-cluster).")
TransactionalId = typer.Option([], "--transactional-id", help="Transactional id (repeatable).")
PatternType = typer.Option("literal", "--resource-pattern-type", help="literal or prefixed.")


@acls_app.command("add")
def acls_add(
    data_dir: Path = DataDir, allow_principal: list[str] = AllowPrincipal, deny_principal: list[str] = DenyPrincipal,
    allow_host: list[str] = AllowHost, deny_host: list[str] = DenyHost, operation: list[str] = Operation,
    topic: list[str] = Topic, group: list[str] = Group, cluster: bool = Cluster,
    transactional_id: list[str] = TransactionalId, resource_pattern_type: str = PatternType,
    producer: bool = typer.Option(False, "--producer", help="Write, Describe, Create on the topics."),
    consumer: bool = typer.Option(False, "--consumer", help="Read, Describe on the topics, Read on the groups."),
    idempotent: bool = typer.Option(False, "--idempotent", help="With --producer: IdempotentWrite on the cluster."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Add ACLs (one per principal x host x resource x operation)."""
    from chronolog.security.acl import AclStore

    bindings = _bindings(allow_principal, deny_principal, allow_host, deny_host, operation,
                         _resources(topic, group, cluster, transactional_id), resource_pattern_type, producer,
                         consumer, idempotent)
    added = AclStore(_data_dir(data_dir)).add(bindings)
    _show(added, f"added {len(added)} ACLs ({len(bindings) - len(added)} already present)", as_json)


def _filter(principal: str | None, topic: str | None, group: str | None, cluster: bool,
            transactional_id: str | None, operation: str | None, pattern: str | None, permission: str | None):
    from chronolog.security import acl

    resources = [r for r in (("Topic", topic), ("Group", group), ("TransactionalId", transactional_id),
                             ("Cluster", "kafka-cluster" if cluster else None)) if r[1] is not None]
    if len(resources) > 1:
        raise ChronologError("give at most one resource to filter on")
    rtype, name = resources[0] if resources else (None, None)
    return acl.AclFilter(resource_type=rtype, name=name, principal=acl.principal(principal) if principal else None,
                         operation=acl.operation(operation) if operation else None,
                         pattern_type=acl.pattern_type(pattern) if pattern else None,
                         permission=acl.permission(permission) if permission else None)


@acls_app.command("list")
def acls_list(
    data_dir: Path = DataDir,
    principal: str | None = typer.Option(None, "--principal", help="Only this principal's ACLs."),
    topic: str | None = typer.Option(None, "--topic"), group: str | None = typer.Option(None, "--group"),
    cluster: bool = Cluster, transactional_id: str | None = typer.Option(None, "--transactional-id"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """ACLs, optionally only those of one principal or on one resource (exact name)."""
    from chronolog.security.acl import AclStore

    flt = _filter(principal, topic, group, cluster, transactional_id, None, None, None)
    _show(AclStore(data_dir).list(flt), "ACLs", as_json)


@acls_app.command("remove")
def acls_remove(
    data_dir: Path = DataDir,
    principal: str | None = typer.Option(None, "--principal", help="Only this principal's ACLs."),
    topic: str | None = typer.Option(None, "--topic"), group: str | None = typer.Option(None, "--group"),
    cluster: bool = Cluster, transactional_id: str | None = typer.Option(None, "--transactional-id"),
    operation: str | None = typer.Option(None, "--operation"),
    resource_pattern_type: str | None = typer.Option(None, "--resource-pattern-type"),
    permission: str | None = typer.Option(None, "--permission", help="allow or deny."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Remove the ACLs matching every option given (a resource or a principal is required)."""
    from chronolog.security.acl import AclStore

    if not (principal or topic or group or cluster or transactional_id):
        raise ChronologError("give a resource (--topic, --group, --cluster, --transactional-id) or --principal")
    flt = _filter(principal, topic, group, cluster, transactional_id, operation, resource_pattern_type, permission)
    removed = AclStore(data_dir).remove(flt)
    _show(removed, f"removed {len(removed)} ACLs", as_json)


def register(app: typer.Typer) -> None:
    app.add_typer(users_app, name="users")
    app.add_typer(acls_app, name="acls")
