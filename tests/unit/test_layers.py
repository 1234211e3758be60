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
                         "tracing", "auth_throttle"})),
    ("storage", frozenset({"storage"})),
    ("duty framework", frozenset({"maintenance"})),
    ("engine", frozenset({"workers"})),
    ("capabilities", frozenset({"jobs", "operations", "retention", "processes", "schedules", "observers", "flow",
                                "health", "workflows"})),
    ("node", frozenset({"node"})),
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
