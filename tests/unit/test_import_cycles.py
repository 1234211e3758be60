"""No import cycle inside `dataloader`: a cycle means two modules are one idea split badly (or
one idea in the wrong layer), and it is what makes the engine hard to change. Top-level imports
and those under `if TYPE_CHECKING:` both count; imports inside functions are deferred on purpose
and do not."""

from __future__ import annotations

import ast
from pathlib import Path

import dataloader

PACKAGE_ROOT = Path(dataloader.__file__).parent
PACKAGE = "dataloader"


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _module_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Imports executed when the module loads, plus those under `if TYPE_CHECKING:`."""
    found: list[ast.Import | ast.ImportFrom] = []

    def walk(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                found.append(node)
            elif isinstance(node, ast.If):
                walk(node.body)
                walk(node.orelse)
            elif isinstance(node, ast.Try):
                walk(node.body)
                for handler in node.handlers:
                    walk(handler.body)
                walk(node.orelse)
                walk(node.finalbody)

    walk(tree.body)
    return found


def _resolve(module: str, is_package: bool, node: ast.Import | ast.ImportFrom, known: set[str]) -> set[str]:
    """The `dataloader` modules an import statement loads (the deepest known module of each name)."""
    targets: list[str] = []
    if isinstance(node, ast.Import):
        targets = [alias.name for alias in node.names]
    else:
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        targets = [f"{prefix}.{alias.name}" for alias in node.names] + [prefix]
    resolved: set[str] = set()
    for target in targets:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target.startswith(PACKAGE) and target != module:
            resolved.add(target)
    return resolved


def import_graph(root: Path = PACKAGE_ROOT) -> dict[str, set[str]]:
    files = {_module_name(p, root): p for p in root.rglob("*.py")}
    known = set(files)
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        edges: set[str] = set()
        for node in _module_level_imports(tree):
            edges |= _resolve(module, path.name == "__init__.py", node, known)
        # Importing a.b.c runs a/__init__ and a/b/__init__ first: those are not edges of ours to
        # report, a package's own __init__ importing its submodules is the normal shape.
        graph[module] = {e for e in edges if not module.startswith(e + ".")}
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def test_dataloader_has_no_import_cycle() -> None:
    graph = import_graph()
    assert "dataloader.workers.queue_worker" in graph, "the walk did not find the package's modules"
    cycles = find_cycles(graph)
    assert not cycles, "import cycles (modules that import each other, directly or not): " + "; ".join(
        " <-> ".join(c) for c in cycles)


def test_the_walk_sees_a_cycle_through_type_checking_imports(tmp_path: Path) -> None:
    """The guard can fail: a cycle closed only by a TYPE_CHECKING import is found."""
    pkg = tmp_path / "dataloader"
    (pkg / "workers").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "workers" / "__init__.py").write_text("")
    (pkg / "workers" / "a.py").write_text("from dataloader.workers.b import B\n")
    (pkg / "workers" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dataloader.workers.a import A\n")
    (pkg / "workers" / "c.py").write_text("def f():\n    from dataloader.workers.a import A\n")
    (pkg / "workers" / "d.py").write_text("from . import c\nfrom .c import f\n")
    graph = import_graph(pkg)
    assert graph["dataloader.workers.d"] == {"dataloader.workers.c"}
    assert graph["dataloader.workers.c"] == set()  # a deferred import is not an edge
    assert find_cycles(graph) == [["dataloader.workers.a", "dataloader.workers.b"]]
