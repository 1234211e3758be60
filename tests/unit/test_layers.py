"""The layout is the architecture (docs/architecture.md, shared/DESIGN.md "Layers"): every room of
the package sits on a layer, and an import may point only to its own layer or one below. Rooms on
one layer may use each other, but never in a ring. Imports inside functions count: a deferred
import is still a dependency, only a later one."""

from __future__ import annotations

from pathlib import Path

from tests.support.import_graph import PACKAGE, PACKAGE_ROOT, find_cycles, import_graph

# Lowest first. A new folder or root module must be placed here before anything may import it.
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    # tracing: like metrics, a leaf every layer may report to (it imports only OpenTelemetry, lazily)
    ("model", frozenset({"model", "exceptions", "base", "config", "metrics", "logger", "heap", "version",
                         "tracing", "auth_throttle", "machine"})),
    ("storage", frozenset({"storage"})),
    ("duty framework", frozenset({"maintenance"})),
    ("engine", frozenset({"workers"})),
    ("capabilities", frozenset({"jobs", "operations", "retention", "processes", "schedules", "observers", "flow",
                                "health", "workflows", "users", "tokens", "audit", "encryption"})),
    # node.py builds the workers and duties; managers.py the capabilities' managers App hands out
    ("node", frozenset({"node", "managers"})),
    ("facade", frozenset({"app", "sync"})),
    ("adapters", frozenset({"api", "ui", "cli", "testing", "__main__"})),
    ("public surface", frozenset({PACKAGE})),
)


def room_of(module: str, root: Path = PACKAGE_ROOT) -> str:
    """`dataloader.jobs.reaper` -> `jobs`; a root module is a room of its own; the package is `dataloader`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else PACKAGE


def layer_of(room: str, layers: tuple[tuple[str, frozenset[str]], ...] = LAYERS) -> int:
    for rank, (_, rooms) in enumerate(layers):
        if room in rooms:
            return rank
    raise LookupError(room)


def room_graph(graph: dict[str, set[str]]) -> dict[str, dict[str, set[str]]]:
    """room -> room it imports -> the module edges that make the arrow (for the failure message)."""
    rooms: dict[str, dict[str, set[str]]] = {}
    for module, targets in graph.items():
        a = room_of(module)
        rooms.setdefault(a, {})
        for target in targets:
            b = room_of(target)
            if a != b:
                rooms[a].setdefault(b, set()).add(f"{module} -> {target}")
    return rooms


def layer_violations(graph: dict[str, set[str]], layers: tuple[tuple[str, frozenset[str]], ...] = LAYERS
                     ) -> tuple[list[str], list[str], list[str]]:
    """(rooms with no layer, upward imports, rings of rooms)."""
    rooms = room_graph(graph)
    unplaced, upward = [], []
    for a, arrows in sorted(rooms.items()):
        try:
            rank_a = layer_of(a, layers)
        except LookupError:
            unplaced.append(a)
            continue
        for b, edges in sorted(arrows.items()):
            try:
                rank_b = layer_of(b, layers)
            except LookupError:
                unplaced.append(b)
                continue
            if rank_b > rank_a:
                upward.extend(f"{layers[rank_a][0]} -> {layers[rank_b][0]}: {e}" for e in sorted(edges))
    rings = find_cycles({a: set(arrows) for a, arrows in rooms.items()})
    return sorted(set(unplaced)), upward, [" <-> ".join(r) for r in rings]


def test_every_import_points_down_and_no_rooms_form_a_ring() -> None:
    graph = import_graph(deferred=True)
    assert "dataloader.workers.queue_worker" in graph, "the walk did not find the package's modules"
    unplaced, upward, rings = layer_violations(graph)
    assert not unplaced, f"place these rooms on a layer in tests/unit/test_layers.py: {unplaced}"
    assert not upward, "imports that point up a layer:\n" + "\n".join(upward)
    assert not rings, "rooms that import each other: " + "; ".join(rings)


def test_the_check_sees_an_upward_deferred_import_and_a_ring(tmp_path: Path) -> None:
    """The guard can fail: a storage module importing the engine inside a function is upward, and two
    capabilities importing each other are a ring."""
    pkg = tmp_path / PACKAGE
    for folder in ("storage", "workers", "jobs", "processes"):
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "storage" / "repo.py").write_text("def f():\n    from dataloader.workers.loop import run\n")
    (pkg / "workers" / "loop.py").write_text("from dataloader.storage import repo\n")
    (pkg / "jobs" / "a.py").write_text("from dataloader.processes.b import B\n")
    (pkg / "processes" / "b.py").write_text("from dataloader import metrics\nfrom dataloader.jobs.a import A\n")
    graph = import_graph(pkg, deferred=True)
    assert "dataloader.workers.loop" in graph["dataloader.storage.repo"]
    unplaced, upward, rings = layer_violations(graph)
    assert upward == ["storage -> engine: dataloader.storage.repo -> dataloader.workers.loop"]
    assert rings == ["jobs <-> processes", "storage <-> workers"]
    assert unplaced == []  # `from dataloader import metrics` names a module that is not there: the package
    assert not import_graph(pkg)["dataloader.storage.repo"], "without deferred, the import inside f is not seen"


# The facade reaches storage through the database root only (shared/DESIGN.md "Layers": `App` a
# facade, its wiring in the node and database roots).
FACADE = "dataloader.app"
DATABASE_ROOT = "dataloader.storage.database"


def facade_storage_imports(graph: dict[str, set[str]]) -> list[str]:
    """The storage modules app.py imports (deferred and TYPE_CHECKING ones too), the root aside."""
    return sorted(t for t in graph.get(FACADE, set())
                  if room_of(t) == "storage" and t not in (DATABASE_ROOT, "dataloader.storage"))


def test_the_facade_imports_no_storage_module_but_the_database_root() -> None:
    graph = import_graph(deferred=True)
    assert DATABASE_ROOT in graph[FACADE], "the parse did not see app.py's import of the database root"
    assert not facade_storage_imports(graph), (
        "app.py imports storage modules besides storage/database.py: move that wiring into the node root "
        f"(node.py) or the database root: {facade_storage_imports(graph)}")


# A facade, not a second root: its wiring grows in managers.py, node.py and storage/database.py.
# (410: issue 40's `app.keys` is one more capability property, four lines, no wiring.)
FACADE_MAX_LINES = 410


def test_the_facade_stays_a_facade() -> None:
    lines = (PACKAGE_ROOT / "app.py").read_text().count("\n")
    assert lines < FACADE_MAX_LINES, (
        f"app.py has {lines} lines (under {FACADE_MAX_LINES} wanted): App only checks a caller's input and hands "
        "it on; move the wiring into managers.py, the node root (node.py) or the database root")


def test_the_facade_check_sees_a_deferred_storage_import(tmp_path: Path) -> None:
    """The guard can fail: an App that imports a repository inside a method is caught; its import of
    the database root is not."""
    pkg = tmp_path / PACKAGE
    (pkg / "storage").mkdir(parents=True)
    for name in ("__init__.py", "storage/__init__.py", "storage/database.py", "storage/repositories.py"):
        (pkg / name).write_text("")
    (pkg / "app.py").write_text("from dataloader.storage.database import Database\n\n\n"
                                "def f():\n    from dataloader.storage.repositories import JobRepository\n")
    graph = import_graph(pkg, deferred=True)
    assert facade_storage_imports(graph) == ["dataloader.storage.repositories"]
