"""The import graph of the package: no cycles, and no import hidden inside a function.

Read from the source (the AST of every module), so a function-local import counts as much as a
module-level one: it is how a cycle usually hides.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import kuitti

PACKAGE_DIR = Path(kuitti.__file__).resolve().parent


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    in_function: bool


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(path): path for path in PACKAGE_DIR.rglob("*.py")}


def _known(name: str) -> str | None:
    """The module ``name`` stands for (``kuitti.models.Receipt`` -> ``kuitti.models``)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imported_names(node: ast.Import | ast.ImportFrom, module: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{node.module}" if node.module else package
    else:
        base = node.module or ""
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def imports() -> Iterator[Import]:
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        in_functions = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            for inner in ast.walk(node)
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for name in _imported_names(node, module):
                target = _known(name)
                if target is not None and target != module:
                    yield Import(module, target, id(node) in in_functions)


def cycles(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_cycles_finds_a_cycle_and_only_cycles() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(edges) == [frozenset({"a", "b", "c"})]


def test_no_import_cycles() -> None:
    edges: dict[str, set[str]] = {}
    for found in imports():
        edges.setdefault(found.importer, set()).add(found.imported)
    assert cycles(edges) == []


def test_no_function_local_imports() -> None:
    local = sorted({(i.importer, i.imported) for i in imports() if i.in_function})
    assert local == []


# -- the layer order (docs/architecture.md, "Layers") ------------------------------------------

LAYERS: tuple[tuple[str, ...], ...] = (
    ("entry",),
    ("http",),
    ("archive",),
    ("posting",),
    ("cards",),
    ("users",),
    ("delivery",),
    ("oauth",),
    ("webhooks", "receipts"),
    ("partners",),
    ("core",),
)
"""Top to bottom: a module imports modules of its own unit or of a lower layer, never of a
higher one; the units of one layer import each other in one direction only."""

ENTRY_MODULES = frozenset(
    {"app", "asgi", "cli", "cli_helpers", "db_cli", "demo", "service_cli", "worker", "worker_http"}
)
HTTP_MODULES = frozenset(
    {
        "admission",
        "allowed",
        "clients",
        "deps",
        "dispatch",
        "edge",
        "front",
        "middleware",
        "openapi",
        "protocols",
        "web",
        # A domain's FastAPI dependencies and routes, beside its ``routes`` modules:
        "oauth.bearer",
        "partners.auth",
        "receipts.dry_run",
        "receipts.verification",
        "users.sessions",
    }
)
DOMAINS = frozenset(unit for layer in LAYERS for unit in layer) - {"entry", "http", "core"}


def unit_of(module: str) -> str:
    """The unit of ``kuitti.<name>``: its domain package, except that a domain's command line
    (``cli``) is an entry point and its routes are the HTTP layer; a top-level module is an entry
    point, the HTTP layer or the core."""
    name = module.removeprefix("kuitti.")
    package, _, rest = name.partition(".")
    if name in ENTRY_MODULES or rest == "cli":
        return "entry"
    if name in HTTP_MODULES or rest == "routes":
        return "http"
    return package if package in DOMAINS else "core"


LAYER_OF = {unit: depth for depth, layer in enumerate(LAYERS) for unit in layer}


def unit_edges() -> dict[tuple[str, str], set[str]]:
    """(importer's unit, imported unit) -> the module imports behind it, between two units."""
    edges: dict[tuple[str, str], set[str]] = {}
    for found in imports():
        pair = (unit_of(found.importer), unit_of(found.imported))
        if pair[0] != pair[1]:
            edges.setdefault(pair, set()).add(f"{found.importer} -> {found.imported}")
    return edges


def test_every_domain_package_has_a_layer() -> None:
    packages = {name.split(".")[1] for name in MODULES if name.count(".") >= 1}
    domain_packages = {
        p for p in packages if MODULES.get(f"kuitti.{p}", Path()).name == "__init__.py"
    }
    assert domain_packages - DOMAINS <= {"models"}  # the tables are the core's


def test_no_import_runs_up_the_layers() -> None:
    upward = sorted(
        edge
        for (importer, imported), found in unit_edges().items()
        if LAYER_OF[imported] < LAYER_OF[importer]
        for edge in found
    )
    assert upward == []


def test_no_cycle_between_units() -> None:
    edges: dict[str, set[str]] = {}
    for importer, imported in unit_edges():
        edges.setdefault(importer, set()).add(imported)
    assert cycles(edges) == []
