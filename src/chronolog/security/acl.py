"""Kafka's ACL model and its authorizer, sans I/O apart from reading the ACL file.

An ACL binding is (principal, host, operation, permission, resource type, pattern type, resource name),
as in `org.apache.kafka.common.acl.AclBinding`. The decision follows `AclAuthorizer.authorize` /
`StandardAuthorizer` (KIP-11, KIP-290):

- a super user (`super.users`) may do everything;
- the ACLs that apply to a resource are those of its type whose pattern matches its name: LITERAL equal
  names, LITERAL `*`, and PREFIXED prefixes of the name;
- if none apply, the answer is `allow.everyone.if.no.acl.found`;
- a matching DENY (principal or `User:*`, host or `*`, the operation or All) wins over any ALLOW;
- ALLOW of Read, Write, Delete or Alter implies Describe; ALLOW of AlterConfigs implies DescribeConfigs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from chronolog.errors import ChronologError
from chronolog.security.files import WatchedJson, locked, write_json_atomic

log = logging.getLogger(__name__)

ACLS_FILE = "chronolog-acls.json"
CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"

# Canonical names with their wire codes (AclOperation, AclPermissionType, ResourceType, PatternType).
OPERATIONS = {"All": 2, "Read": 3, "Write": 4, "Create": 5, "Delete": 6, "Alter": 7, "Describe": 8,
              "ClusterAction": 9, "DescribeConfigs": 10, "AlterConfigs": 11, "IdempotentWrite": 12}
PERMISSIONS = {"Deny": 2, "Allow": 3}
RESOURCE_TYPES = {"Topic": 2, "Group": 3, "Cluster": 4, "TransactionalId": 5}
PATTERN_TYPES = {"LITERAL": 3, "PREFIXED": 4}

# AclEntry.supportedOperations: what each resource type can be granted (All is always accepted).
SUPPORTED_OPERATIONS = {
    "Topic": {"Read", "Write", "Create", "Describe", "Delete", "Alter", "DescribeConfigs", "AlterConfigs"},
    "Group": {"Read", "Describe", "Delete"},
    "Cluster": {"Create", "ClusterAction", "DescribeConfigs", "AlterConfigs", "IdempotentWrite", "Alter",
                "Describe"},
    "TransactionalId": {"Describe", "Write"},
}

# AclAuthorizer: operations whose ALLOW also allows the key.
IMPLIED_BY = {"Describe": {"Describe", "Read", "Write", "Delete", "Alter"},
              "DescribeConfigs": {"DescribeConfigs", "AlterConfigs"}}


_LOOKUP: dict[int, dict[str, str]] = {}


def _canonical(value: str, names: dict[str, int], what: str) -> str:
    """`describe_configs`, `DESCRIBE-CONFIGS` and `DescribeConfigs` are one name (an authorize() per
    partition goes through here, hence the cached lookup table)."""
    table = _LOOKUP.get(id(names))
    if table is None:
        table = _LOOKUP[id(names)] = {}
    found = table.get(value)
    if found is None:
        key = str(value).replace("_", "").replace("-", "").lower()
        for name in names:
            if name.lower() == key:
                found = table[value] = name
                break
        else:
            raise ChronologError(f"unknown {what} {value!r}; expected one of {', '.join(names)}")
    return found


def operation(value: str) -> str:
    return _canonical(value, OPERATIONS, "ACL operation")


def permission(value: str) -> str:
    return _canonical(value, PERMISSIONS, "ACL permission")


def resource_type(value: str) -> str:
    return _canonical(value, RESOURCE_TYPES, "resource type")


def pattern_type(value: str) -> str:
    return _canonical(value, PATTERN_TYPES, "resource pattern type")


def principal(value: str) -> str:
    """`User:alice` (KafkaPrincipal's `type:name`; `User:*` is every user)."""
    kind, sep, name = str(value).partition(":")
    if not sep or not kind or not name:
        raise ChronologError(f"invalid principal {value!r}: expected Type:name, e.g. User:alice")
    return f"{kind}:{name}"


@dataclass(frozen=True, order=True)
class AclBinding:
    resource_type: str
    pattern_type: str
    name: str
    principal: str
    host: str
    operation: str
    permission: str

    @classmethod
    def create(cls, *, principal_: str, operation_: str, permission_: str, resource_type_: str, name: str,
               pattern_type_: str = "LITERAL", host: str = WILDCARD) -> AclBinding:
        """A validated binding with canonical names (what kafka-acls / CreateAcls would accept)."""
        rtype = resource_type(resource_type_)
        op = operation(operation_)
        if op != "All" and op not in SUPPORTED_OPERATIONS[rtype]:
            raise ChronologError(f"resource type {rtype} only supports operations "
                                 f"{', '.join(sorted(SUPPORTED_OPERATIONS[rtype]))}, All")
        if not name:
            raise ChronologError("the resource name must not be empty")
        if rtype == "Cluster" and name != CLUSTER_NAME:
            raise ChronologError(f"the only valid name for the Cluster resource is {CLUSTER_NAME}")
        ptype = pattern_type(pattern_type_)
        if ptype == "PREFIXED" and name == WILDCARD:
            raise ChronologError("a PREFIXED pattern cannot be the wildcard '*'; use LITERAL '*'")
        return cls(rtype, ptype, name, principal(principal_), host or WILDCARD, op, permission(permission_))

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> AclBinding:
        return cls.create(principal_=data["principal"], operation_=data["operation"],
                          permission_=data["permission"], resource_type_=data["resource_type"],
                          name=data["name"], pattern_type_=data.get("pattern_type", "LITERAL"),
                          host=data.get("host", WILDCARD))

    def applies_to(self, rtype: str, name: str) -> bool:
        if self.resource_type != rtype:
            return False
        if self.pattern_type == "PREFIXED":
            return name.startswith(self.name)
        return self.name == name or self.name == WILDCARD


@dataclass(frozen=True)
class AclFilter:
    """None matches anything (AclBindingFilter with ANY). Pattern type "MATCH" with a name selects the
    ACLs that apply to that resource: the literal name, the literal `*` and matching prefixes
    (`ResourcePatternFilter.matches` with PatternType.MATCH)."""

    resource_type: str | None = None
    pattern_type: str | None = None
    name: str | None = None
    principal: str | None = None
    host: str | None = None
    operation: str | None = None
    permission: str | None = None

    def matches(self, b: AclBinding) -> bool:
        wanted = asdict(self)
        if self.pattern_type == "MATCH":
            del wanted["pattern_type"], wanted["name"]
            if self.name is not None and not b.applies_to(b.resource_type, self.name):
                return False
        return all(want is None or want == getattr(b, key) for key, want in wanted.items())


class AclStore:
    """`chronolog-acls.json` in the data dir: `{"version": 1, "acls": [binding, ...]}`."""

    def __init__(self, data_dir: Path | str) -> None:
        self.path = Path(data_dir) / ACLS_FILE
        self._file = WatchedJson(self.path, {"version": 1, "acls": []})
        self._generation = -1
        self._bindings: tuple[AclBinding, ...] = ()

    @property
    def generation(self) -> int:
        self.bindings()
        return self._file.generation

    def bindings(self) -> tuple[AclBinding, ...]:
        data = self._file.get()
        if self._file.generation != self._generation:
            raw = data.get("acls") if isinstance(data, dict) else None
            if not isinstance(raw, list):
                raise ChronologError(f"{self.path}: no 'acls' list")
            out = []
            for item in raw:
                try:
                    out.append(AclBinding.from_json(item))
                except (ChronologError, KeyError, TypeError) as exc:
                    log.error("%s: skipping invalid ACL %r: %s", self.path, item, exc)
            self._bindings = tuple(sorted(set(out)))
            self._generation = self._file.generation
        return self._bindings

    def list(self, flt: AclFilter | None = None) -> list[AclBinding]:
        return [b for b in self.bindings() if flt is None or flt.matches(b)]

    def _write(self, bindings: Iterable[AclBinding]) -> None:
        write_json_atomic(self.path, {"version": 1, "acls": [b.to_json() for b in sorted(set(bindings))]})

    def add(self, new: Iterable[AclBinding]) -> list[AclBinding]:
        """Adds bindings (already present ones are no-ops, as in Kafka); returns those that were new."""
        with locked(self.path):
            current = set(self.bindings())
            added = [b for b in dict.fromkeys(new) if b not in current]
            if added:
                self._write(current | set(added))
            return added

    def remove(self, flt: AclFilter) -> list[AclBinding]:
        with locked(self.path):
            current = self.bindings()
            gone = [b for b in current if flt.matches(b)]
            if gone:
                self._write(b for b in current if not flt.matches(b))
            return gone


def parse_super_users(value: str) -> frozenset[str]:
    """`super.users` is `User:a;User:b` (semicolons: a principal name may contain commas)."""
    return frozenset(principal(p.strip()) for p in (value or "").split(";") if p.strip())


def _applies(b: AclBinding, principal_: str, host: str, ops: set[str]) -> bool:
    """Does binding `b` name this principal (or User:*), this host (or *) and one of `ops` (or All)?"""
    return (b.principal in (principal_, "User:*") and b.host in (host, WILDCARD)
            and (b.operation in ops or b.operation == "All"))


class AclAuthorizer:
    """The decision procedure above over an AclStore, re-indexed whenever the file changed."""

    matches_hosts = True  # RequestContext passes the client's address
    audited = True  # RequestContext logs each decision on chronolog.authorizer (security.audit)

    def __init__(self, store: AclStore, super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self.store = store
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_everyone_if_no_acl_found
        self._indexed = -1
        self._literal: dict[tuple[str, str], list[AclBinding]] = {}
        self._other: dict[str, list[AclBinding]] = {}
        # Checking the file on every call costs a stat per partition; the broker turns this off and
        # calls refresh() once per request instead, so a change still applies to the next request.
        self.auto_refresh = True

    def refresh(self) -> None:
        self._index()

    def _index(self) -> None:
        bindings = self.store.bindings()
        if self.store._generation == self._indexed:
            return
        literal: dict[tuple[str, str], list[AclBinding]] = {}
        other: dict[str, list[AclBinding]] = {}
        for b in bindings:
            if b.pattern_type == "LITERAL" and b.name != WILDCARD:
                literal.setdefault((b.resource_type, b.name), []).append(b)
            else:
                other.setdefault(b.resource_type, []).append(b)
        self._literal, self._other, self._indexed = literal, other, self.store._generation

    def matching_acls(self, rtype: str, name: str) -> list[AclBinding]:
        if self.auto_refresh or self._indexed < 0:
            self._index()
        found = list(self._literal.get((rtype, name), ()))
        found += [b for b in self._other.get(rtype, ()) if b.applies_to(rtype, name)]
        return found

    def authorize(self, principal_: str, operation_: str, resource_type_: str, resource_name: str,
                  host: str = WILDCARD) -> bool:
        op = operation(operation_)
        rtype = resource_type(resource_type_)
        if principal_ in self.super_users:
            return True
        acls = self.matching_acls(rtype, resource_name)
        if not acls:
            return self.allow_if_no_acl

        if any(b.permission == "Deny" and _applies(b, principal_, host, {op}) for b in acls):
            log.debug("denied %s %s on %s:%s (DENY ACL)", principal_, op, rtype, resource_name)
            return False
        allowed = any(b.permission == "Allow" and _applies(b, principal_, host, IMPLIED_BY.get(op, {op})) for b in acls)
        if not allowed:
            log.debug("denied %s %s on %s:%s (no matching ALLOW)", principal_, op, rtype, resource_name)
        return allowed

    def authorize_by_resource_type(self, principal_: str, operation_: str, resource_type_: str,
                                   host: str = WILDCARD) -> bool:
        """Kafka's `Authorizer.authorizeByResourceType` rule: may the principal do `operation` on at least
        one resource of the type? InitProducerId asks this of Write on topics (an idempotent producer).

        First `authorize` on a made-up name ("hardcode"), which grants super users, a wildcard ALLOW and
        allow.everyone.if.no.acl.found. Then, over the bindings of the type naming this principal (or
        User:*), this host (or *) and the operation (or All): a LITERAL `*` DENY denies; a LITERAL `*`
        ALLOW allows; otherwise some ALLOW must not be dominated: a LITERAL allow by a DENY on the same
        name or on a prefix of it, a PREFIXED allow by a PREFIXED DENY on a prefix of it."""
        op = operation(operation_)
        rtype = resource_type(resource_type_)
        if self.authorize(principal_, op, rtype, "hardcode", host):
            return True
        if self.auto_refresh or self._indexed < 0:
            self._index()
        bindings = [b for (t, _), bs in self._literal.items() if t == rtype for b in bs]
        bindings += list(self._other.get(rtype, ()))
        deny: dict[str, set[str]] = {"LITERAL": set(), "PREFIXED": set()}
        allow: dict[str, set[str]] = {"LITERAL": set(), "PREFIXED": set()}
        wildcard_allow = False
        for b in bindings:
            if not _applies(b, principal_, host, {op}):
                continue
            if b.permission == "Deny":
                if b.pattern_type == "LITERAL" and b.name == WILDCARD:
                    return False
                deny.setdefault(b.pattern_type, set()).add(b.name)
            elif b.pattern_type == "LITERAL" and b.name == WILDCARD:
                wildcard_allow = True
            else:
                allow.setdefault(b.pattern_type, set()).add(b.name)
        if wildcard_allow:
            return True
        for pattern_type, names in allow.items():
            for name in names:
                if pattern_type == "LITERAL" and name in deny["LITERAL"]:
                    continue
                # A DENY prefix dominates when it is a non-empty prefix of the ALLOW's name (Kafka grows
                # the prefix one character at a time, so an empty DENY prefix never matches here).
                if not any(name[:i] in deny["PREFIXED"] for i in range(1, len(name) + 1)):
                    return True
        return False
