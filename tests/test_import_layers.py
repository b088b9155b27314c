"""The import rule of docs/design.md, held: every module of `chronolog` is read with `ast` and its imports
checked against the layer table there (parsed from the page, so the two cannot drift apart).

An import is any `import x` or `from x import y` (relative ones resolved), at module level or inside a
function: an import inside a function only hides a circle or an upward arrow until the function runs. A
module named by a constant string to `importlib.import_module`, `__import__`, `LazyModule` or `load_native`
counts too. Imports under `if TYPE_CHECKING:` are exempt: they never run (annotations only).

The rules: a module imports only its own package and the rows above its row; packages in one row do not
import each other; no two modules import each other, directly or around a loop (each circle is reported as a
path `a -> b -> c -> a`).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import chronolog

PACKAGE = Path(chronolog.__file__).parent
DESIGN = Path(__file__).resolve().parents[1] / "docs" / "design.md"

_NAMED_IMPORTERS = {"import_module", "__import__", "LazyModule", "load_native"}


# -- reading the table ---------------------------------------------------------------------------------
def layer_table(text: str) -> list[list[str]]:
    """The first column of design.md's `| layer | ... |` table, lowest row first: each row the names
    (packages or top-level modules of `chronolog`, backquoted) it holds; `chronolog` is the package itself."""
    rows: list[list[str]] = []
    lines = iter(text.splitlines())
    for line in lines:
        if re.match(r"^\|\s*layer\s*\|", line):
            next(lines)  # the | --- | line
            for row in lines:
                if not row.startswith("|"):
                    break
                first = row.strip("|").split("|")[0]
                rows.append(re.findall(r"`([A-Za-z_][\w]*)`", first))
            break
    return rows


def _ranks() -> dict[str, int]:
    rows = layer_table(DESIGN.read_text(encoding="utf-8"))
    assert rows, f"no `| layer |` table in {DESIGN}"
    ranks: dict[str, int] = {}
    for rank, names in enumerate(rows):
        assert names, f"row {rank} of the layer table names nothing"
        for name in names:
            assert name not in ranks, f"{name} is in two rows of the layer table"
            ranks[name] = rank
    return ranks


# -- reading the modules ---------------------------------------------------------------------------------
def _module_files() -> dict[str, tuple[Path | None, bool]]:
    """Module name -> (file, is a package). C extensions (from their `.c` source) are modules that import
    nothing."""
    out: dict[str, tuple[Path | None, bool]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        out[".".join(parts)] = (path, is_package)
    for path in sorted(PACKAGE.rglob("*.c")):
        out.setdefault(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts), (None, False))
    return out


MODULES = _module_files()


def _known(name: str) -> str | None:
    """The module an imported name loads: itself, or the nearest enclosing package we have."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _nodes(tree: ast.AST):
    """Every node, leaving out the bodies of `if TYPE_CHECKING:` (their `else:` still runs)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def imports_of(module: str) -> dict[str, int]:
    """The chronolog modules `module` imports, each with the line of its first import."""
    path, is_package = MODULES[module]
    if path is None:
        return {}
    package = module if is_package else module.rpartition(".")[0]
    out: dict[str, int] = {}

    def add(name: str, line: int) -> None:
        target = _known(name)
        if target is not None and target != module:
            out.setdefault(target, line)

    for node in _nodes(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "chronolog":
                    add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] != "chronolog":
                continue
            for alias in node.names:  # `from pkg import submodule` loads the submodule
                full = f"{source}.{alias.name}"
                add(full if full in MODULES else source, node.lineno)
        elif isinstance(node, ast.Call) and node.args:
            fn = node.func
            called = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else None
            arg = node.args[0]
            if (called in _NAMED_IMPORTERS and isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                    and arg.value.split(".")[0] == "chronolog"):
                add(arg.value, node.lineno)
    return out


def import_graph() -> dict[str, dict[str, int]]:
    return {m: imports_of(m) for m in MODULES}


# -- circles ---------------------------------------------------------------------------------------------
def circles(graph: dict[str, dict[str, int]] | dict[str, set[str]]) -> list[list[str]]:
    """One circle per strongly connected group of modules (Tarjan), as a path that ends where it starts."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    counter = 0
    for root in sorted(graph):  # iterative Tarjan: no recursion limit on a deep import chain
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))
    return [_path_through(graph, set(g)) for g in sorted(groups)]


def _path_through(graph, group: set[str]) -> list[str]:
    """A shortest circle from the group's first module back to it, inside the group (breadth first)."""
    start = min(group)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for child in sorted(graph[node]):
                if child not in group:
                    continue
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if child not in came_from:
                    came_from[child] = node
                    nxt.append(child)
        frontier = nxt
    raise AssertionError(f"no circle through {start}")  # pragma: no cover (a strongly connected group has one)


def _short(module: str) -> str:
    return module.removeprefix("chronolog.")


# -- the tests -------------------------------------------------------------------------------------------
def _unit(module: str) -> str:
    """The table name a module belongs to: its top-level package or module (`chronolog` for the root)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "chronolog"


def test_every_module_has_a_row_and_every_row_a_module():
    ranks = _ranks()
    units = {_unit(m) for m in MODULES}
    assert sorted(units - set(ranks)) == [], "packages or modules missing from design.md's layer table"
    assert sorted(set(ranks) - units) == [], "names in design.md's layer table that are not in src/chronolog"


def test_no_upward_or_sideways_import():
    ranks = _ranks()
    wrong = []
    for module, targets in sorted(import_graph().items()):
        for target, line in sorted(targets.items()):
            a, b = _unit(module), _unit(target)
            if a != b and ranks[b] >= ranks[a]:
                where = f"{b}'s row comes after {a}'s" if ranks[b] > ranks[a] else f"{a} and {b} share a row"
                wrong.append(f"{_short(module)} (line {line}) imports {_short(target)}: {where} in design.md's table")
    assert wrong == [], "\n".join(wrong)


def test_no_import_circle():
    graph = import_graph()
    lines = []
    for circle in circles(graph):
        steps = " -> ".join(_short(m) for m in circle)
        at = ", ".join(f"{_short(a)}:{graph[a][b]}" for a, b in zip(circle, circle[1:], strict=False))
        lines.append(f"{steps}   (imports at {at})")
    assert lines == [], "import circles:\n" + "\n".join(lines)


def test_finds_circles_and_reads_the_table():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert circles({"a": {"b"}, "b": {"a", "c"}, "c": {"b"}}) == [["a", "b", "a"]]
    assert circles({"a": {"b"}, "b": set()}) == []
    table = "intro\n\n| layer | knows |\n| --- | --- |\n| `x`, `y` | things |\n| `z` | more `q` |\n\nafter\n"
    assert layer_table(table) == [["x", "y"], ["z"]]


def test_reads_every_kind_of_import(tmp_path, monkeypatch):
    """Relative, from-package, in a function, by name; not under TYPE_CHECKING."""
    pkg = tmp_path / "chronolog"
    (pkg / "sub").mkdir(parents=True)
    for name in ("__init__", "a", "b", "c", "d", "sub/__init__", "sub/e"):
        (pkg / f"{name}.py").write_text("")
    (pkg / "sub" / "f.py").write_text(
        "from typing import TYPE_CHECKING\nfrom . import e\nfrom .. import a\nfrom ..b import thing\n"
        "def g():\n    import chronolog.c\nif TYPE_CHECKING:\n    from chronolog import d\n"
        "x = LazyModule('chronolog.sub')\n")
    here = sys.modules[__name__]
    monkeypatch.setattr(here, "PACKAGE", pkg)
    monkeypatch.setattr(here, "MODULES", _module_files())
    assert set(imports_of("chronolog.sub.f")) == {"chronolog.sub.e", "chronolog.a", "chronolog.b", "chronolog.c",
                                                  "chronolog.sub"}
